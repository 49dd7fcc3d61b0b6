"""Every Python block of every README and docs page runs as written, or says why not (``icml_tools.docblocks``).

Every block compiles here (the fast tier). The complete ones run in the slow tier, each in its own process
(about 45 programs, 8-10 minutes on 2 cores: too long for the fast tier), ``<!-- slow -->`` ones with a longer
timeout; ``<!-- heavy -->`` ones in the heavy tier; ``<!-- gpu -->`` ones where CUDA is; fragments and
``<!-- run-by: PATH -->`` blocks only compile, and PATH must exist and name the page.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icml_tools.docblocks import Block, blocks, collect, pages
from icml_tools.workspace import find_root

ROOT = find_root(Path(__file__).parent)
BLOCKS = collect(ROOT)
TIMEOUT_S = {None: 120, "slow": 600, "heavy": 3600, "gpu": 600}
TIER = {"heavy": [pytest.mark.heavy], "gpu": [pytest.mark.gpu, pytest.mark.slow]}  # the rest: slow


def _param(block: Block):
    return pytest.param(block, id=block.id, marks=TIER.get(block.marker or "", [pytest.mark.slow]))


def test_the_pages_are_found():
    found = {p.as_posix() for p in pages(ROOT)}
    assert {"README.md", "packages/icml-compress/README.md", "packages/icml-stats/docs/desi.md"} <= found
    assert len(BLOCKS) >= 40  # about 45 blocks on 2026-12-03; a collector that finds none must fail


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_every_block_compiles(block):
    compile(block.code, block.id, "exec")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker == "run-by"], ids=lambda b: b.id)
def test_run_by_names_a_test_that_names_the_page(block):
    package = ROOT / block.page.parts[0] / block.page.parts[1] if block.page.parts[0] == "packages" else ROOT
    test = package / str(block.argument)
    assert test.is_file(), f"{block.id}: run-by {block.argument} is not a file under {package}"
    assert block.page.name in test.read_text(), f"{test} does not name {block.page.name}"


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.marker in (None, "slow", "heavy", "gpu")])
def test_complete_block_runs(block, tmp_path):
    if block.marker == "gpu":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("needs CUDA")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "error::DeprecationWarning:__main__"}
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S[block.marker],
    )
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    assert done.returncode == 0, (
        f"{block.id} (line {block.line}) failed; mark it if it is a fragment:\n{tail}"
    )


def _page(tmp_path: Path, text: str) -> Path:
    (tmp_path / "doc.md").write_text(text)
    return Path("doc.md")


def test_markers_are_read(tmp_path):
    text = (
        "```python\nprint(1)\n```\n\n<!-- fragment -->\n```python\nmodel(x)\n```\n"
        "<!-- slow -->\n```python\nprint(2)\n```\n<!-- run-by: tests/test_x.py -->\n```python\nprint(3)\n```\n"
        "```bash\nls\n```\n- item\n\n  <!-- gpu -->\n  ```python\n  if x:\n      y()\n  ```\n"
    )
    found = blocks(tmp_path, _page(tmp_path, text))
    assert [(b.marker, b.argument, b.line) for b in found] == [
        (None, None, 1),
        ("fragment", None, 6),
        ("slow", None, 10),
        ("run-by", "tests/test_x.py", 14),
        ("gpu", None, 23),
    ]
    assert found[4].code == "if x:\n    y()\n"
    assert found[1].code == "model(x)\n" and found[0].id == "doc.md[0]"


@pytest.mark.parametrize(
    "marker, match",
    [("<!-- fragmnet -->", "unknown docs marker"), ("<!-- run-by -->", "needs exactly a path")],
)
def test_bad_markers_name_the_page_and_line(tmp_path, marker, match):
    page = _page(tmp_path, f"text\n{marker}\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match=rf"doc.md:2: .*{match}"):
        blocks(tmp_path, page)
