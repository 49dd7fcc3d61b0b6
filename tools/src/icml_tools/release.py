"""``icml-release bump <distribution> <major|minor|patch>``: release one distribution, and only that one.

Bumps the static version in the distribution's pyproject.toml (``uv version --package``, which also
re-locks), moves its CHANGELOG's ``## Unreleased`` entries under ``## A.B.C (date)`` and prints the tag
``<distribution>-vA.B.C`` that triggers the release workflow for that distribution alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from icml_tools.workspace import find_root, members, normalize

PARTS = ("major", "minor", "patch")
_UNRELEASED = re.compile(r"^## Unreleased[ \t]*\n", re.MULTILINE)
_NEXT_SECTION = re.compile(r"^## ", re.MULTILINE)


class ReleaseError(RuntimeError):
    pass


def move_unreleased(changelog: str, version: str, day: str) -> str:
    """The changelog text with the Unreleased entries under a new ``## version (day)`` heading."""
    start = _UNRELEASED.search(changelog)
    if start is None:
        raise ReleaseError("the CHANGELOG has no '## Unreleased' section")
    following = _NEXT_SECTION.search(changelog, start.end())
    end = following.start() if following else len(changelog)
    entries = changelog[start.end() : end].strip("\n")
    if not entries.strip():
        raise ReleaseError("the '## Unreleased' section is empty: record the changes before releasing")
    rest = changelog[end:]
    return f"{changelog[: start.start()]}## Unreleased\n\n## {version} ({day})\n\n{entries}\n" + (
        f"\n{rest}" if rest else ""
    )


def _uv(*args: str, cwd: Path) -> str:
    uv = os.environ.get("UV", "uv")  # `uv run` tells its own path here
    proc = subprocess.run([uv, *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReleaseError(f"`uv {' '.join(args)}` failed:\n{proc.stderr.strip()}")
    return proc.stdout


def bump(distribution: str, part: str, root: Path, day: str | None = None) -> str:
    """Bump one distribution; return its release tag."""
    if part not in PARTS:
        raise ReleaseError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    found = members(root)
    name = normalize(distribution)
    published = sorted(n for n, m in found.items() if m.published)
    if name not in published:
        raise ReleaseError(
            f"{distribution!r} is not a published workspace distribution; choose one of {', '.join(published)}"
        )
    changelog_path = root / found[name].path / "CHANGELOG.md"
    if not changelog_path.is_file():
        raise ReleaseError(f"{changelog_path} does not exist")
    dry = json.loads(
        _uv("version", "--package", name, "--bump", part, "--dry-run", "--output-format", "json", cwd=root)
    )
    version = dry["version"]
    # Prepare the new changelog before touching anything, so a bad changelog changes nothing.
    text = move_unreleased(changelog_path.read_text(), version, day or date.today().isoformat())
    fd, tmp = tempfile.mkstemp(prefix=".CHANGELOG.", dir=changelog_path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        _uv("version", "--package", name, "--bump", part, "--no-sync", cwd=root)
        os.replace(tmp, changelog_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return f"{name}-v{version}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icml-release", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bump_parser = sub.add_parser("bump", help="bump one distribution's version and changelog")
    bump_parser.add_argument("distribution", help="e.g. icml-stats")
    bump_parser.add_argument("part", choices=PARTS)
    bump_parser.add_argument(
        "--root", type=Path, default=None, help="workspace root (default: found from cwd)"
    )
    bump_parser.add_argument("--date", default=None, help="release date for the changelog (default today)")
    args = parser.parse_args(argv)
    try:
        tag = bump(args.distribution, args.part, find_root(args.root), args.date)
    except (ReleaseError, FileNotFoundError) as exc:
        print(f"icml-release: {exc}", file=sys.stderr)
        return 1
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
