"""The Python examples of the READMEs and docs pages, as CI runs them.

Every ```` ```python ```` block of a README or docs page is a complete program unless the line before its
fence is a marker:

- ``<!-- fragment -->``: a piece of a program (names it uses are the reader's); compiled, not run.
- ``<!-- slow -->``: a complete program that takes more than ~15 s (a longer timeout).
- ``<!-- heavy -->``: a complete program that takes minutes (a real model quantized or trained); run in the
  heavy tier (``uv run pytest -m heavy``), which CI does not run.
- ``<!-- gpu -->``: a complete program that needs CUDA; run where there is a GPU, skipped elsewhere.
- ``<!-- run-by: PATH -->``: a complete program that needs a fixture (a local server, a trained model);
  the test file ``PATH`` (relative to the page's package) runs it and must name the page.

Complete blocks run in the slow tier (``tools/tests/test_docs_blocks.py``), each as its own ``python`` process in an empty working directory, so it can neither
lean on another block's names nor leave files behind.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

MARKERS = ("fragment", "slow", "heavy", "gpu", "run-by")
_FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*(fragment|slow|heavy|gpu|run-by)(?::\s*(\S+))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path  # relative to the workspace root
    index: int  # 0-based among the page's python blocks
    line: int  # 1-based line of the opening fence
    code: str
    marker: str | None  # one of MARKERS or None (a complete, quick program)
    argument: str | None = None  # the PATH of a run-by marker

    @property
    def id(self) -> str:
        return f"{self.page.as_posix()}[{self.index}]"


def pages(root: Path) -> list[Path]:
    """The workspace's READMEs and docs pages, relative to ``root``, sorted."""
    found = [root / "README.md"]
    for top in ("packages", "kernels-common", "tools", "tests-integration"):
        base = root / top
        if not base.is_dir():
            continue
        for pattern in ("README.md", "*/README.md", "docs/*.md", "*/docs/*.md"):
            found.extend(base.glob(pattern))
    return sorted({p.relative_to(root) for p in found if p.is_file()})


def blocks(root: Path, page: Path) -> list[Block]:
    """The python blocks of ``page`` (relative to ``root``) with their markers.

    Raises ``ValueError`` naming the page and line for a marker that is not one of :data:`MARKERS` or a
    ``run-by`` without its path.
    """
    text = (root / page).read_text(encoding="utf-8")
    out = []
    for index, match in enumerate(_FENCE.finditer(text)):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = argument = None
        if before.startswith("<!--"):
            found = _MARKER.fullmatch(before)
            if found is None:
                raise ValueError(
                    f"{page}:{line - 1}: unknown docs marker {before!r}; expected one of "
                    + ", ".join(f"<!-- {m} -->" for m in MARKERS[:4])
                    + " or <!-- run-by: PATH -->"
                )
            marker, argument = found.group(1), found.group(2)
            if (marker == "run-by") != (argument is not None):
                raise ValueError(
                    f"{page}:{line - 1}: <!-- run-by: PATH --> needs exactly a path, got {before!r}"
                )
        out.append(Block(page, index, line, textwrap.dedent(match.group(2)), marker, argument))
    return out


def collect(root: Path) -> list[Block]:
    """Every python block of every page under ``root``."""
    return [b for page in pages(root) for b in blocks(root, page)]
