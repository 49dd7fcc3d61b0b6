"""The usage examples of docs/backends.md run as they are written (the HTTP one against the local stub)."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "backends.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_one_example_per_backend_and_feature():
    assert len(BLOCKS) == 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, stub_server, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", stub_server.url)
    monkeypatch.setenv("ICML_MODEL", "tiny")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    exec(compile(BLOCKS[index], f"{DOC.name}[{index}]", "exec"), {"__name__": "__docs__"})
    printed = capsys.readouterr().out
    expected = {
        0: ["Paris.", "['5', '4', '4']", "stop", "5 What is the capital of France?"],
        1: ["Paris", "True"],
        2: ["Completion("],
        3: ["2 2"],
        4: ["{'city': 'Paris'}", "2"],
    }[index]
    for text in expected:
        assert text in printed
