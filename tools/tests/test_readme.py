"""``icml-readme-table``: the README's reproduction table comes from a report and lists every registered one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from icml_tools import readme, repro

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from repro_fakes import registry as fake_registry  # noqa: E402


@pytest.fixture
def report(monkeypatch, tmp_path):
    """A report of "a" and "b"; three are registered ("c" is not in the report)."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    ran = fake_registry({"a": "passing", "b": "failing"})
    monkeypatch.setattr(repro, "discover", lambda group=repro.GROUP: ran)
    assert repro.main(["--out", str(tmp_path / "reports")]) == 0
    monkeypatch.setattr(readme, "discover", lambda: fake_registry({"a": "passing", "b": "failing", "c": "x"}))
    (folder,) = (tmp_path / "reports").iterdir()
    return folder


def test_the_table_is_generated_between_the_markers(report, tmp_path, capsys):
    path = tmp_path / "README.md"
    path.write_text(f"# title\n\nbefore\n{readme.START}\nold table\n{readme.END}\nafter\n")
    assert readme.main([str(report), "--readme", str(path), "--check"]) == 1
    assert readme.main([str(report), "--readme", str(path)]) == 0
    text = path.read_text()
    assert text.startswith("# title\n\nbefore\n") and text.endswith(f"{readme.END}\nafter\n")
    assert "old table" not in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0] for row in rows] == ["| `a`", "| `b`", "| `c`"]
    assert "| pass |" in rows[0] and "| fail |" in rows[1] and "(not in this report)" in rows[2]
    assert "| icml-fake |" in rows[0] and "| 0.1 | 0.2 |" in rows[0]
    assert "`uv run icml-repro --quick` (seed 0), started " in text and "commit `" in text
    assert readme.main([str(report), "--readme", str(path), "--check"]) == 0


def test_bad_input(report, tmp_path, capsys):
    path = tmp_path / "README.md"
    path.write_text("no markers\n")
    assert readme.main([str(report), "--readme", str(path)]) == 2
    assert "no <!-- repro-table:start -->" in capsys.readouterr().err
    assert path.read_text() == "no markers\n"
    assert readme.main([str(tmp_path / "nowhere"), "--readme", str(path)]) == 2
    with pytest.raises(FileNotFoundError, match="no report under"):
        readme.newest_report(tmp_path / "empty")


def test_a_seed_sweep_report_is_refused(monkeypatch, tmp_path, capsys):
    # one row per reproduction cannot show a sweep: it showed the last seed's numbers under "(seed 0)"
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    ran = fake_registry({"a": "passing"})
    monkeypatch.setattr(repro, "discover", lambda group=repro.GROUP: ran)
    monkeypatch.setattr(readme, "discover", lambda: ran)
    assert repro.main(["--seeds", "0-1", "--out", str(tmp_path / "reports")]) == 0
    (sweep,) = (tmp_path / "reports").iterdir()
    path = tmp_path / "README.md"
    path.write_text(f"{readme.START}\nold table\n{readme.END}\n")
    assert readme.main([str(sweep), "--readme", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{sweep} holds the report of a seed sweep (seeds 0, 1)" in err and "REPORT_DIR" in err
    assert path.read_text() == f"{readme.START}\nold table\n{readme.END}\n"
    # a single seed other than 0 is one run: its table says which seed
    assert repro.main(["--seeds", "1", "--out", str(tmp_path / "one")]) == 0
    (one,) = (tmp_path / "one").iterdir()
    assert readme.main([str(one), "--readme", str(path)]) == 0
    text = path.read_text()
    assert "(seed 1)" in text and "| 0.1 | 1.2 |" in text  # passing's baseline is 0.2 + seed
