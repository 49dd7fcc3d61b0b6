from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icml_tools.release import ReleaseError, bump, move_unreleased
from icml_tools.workspace import find_root, members

ROOT = find_root()

CHANGELOG = """# Changelog: x

## Unreleased

### Added
- a thing

## 0.1.0 (2026-01-01)

- first
"""


def test_move_unreleased_keeps_history_and_leaves_an_empty_unreleased():
    new = move_unreleased(CHANGELOG, "0.2.0", "2026-11-29")
    assert new == (
        "# Changelog: x\n\n## Unreleased\n\n## 0.2.0 (2026-11-29)\n\n### Added\n- a thing\n\n"
        "## 0.1.0 (2026-01-01)\n\n- first\n"
    )


def test_move_unreleased_refuses_empty_or_missing_sections():
    with pytest.raises(ReleaseError, match="empty"):
        move_unreleased("# C\n\n## Unreleased\n\n## 0.1.0\n- x\n", "0.2.0", "d")
    with pytest.raises(ReleaseError, match="no '## Unreleased'"):
        move_unreleased("# C\n", "0.2.0", "d")


def _copy_workspace(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".venv", "__pycache__", "reports", "bench-results", ".git", "*.egg-info")
    for item in ["pyproject.toml", "uv.lock"]:
        shutil.copy2(ROOT / item, dest / item)
    for member in members(ROOT).values():
        shutil.copytree(ROOT / member.path, dest / member.path, ignore=ignore, dirs_exist_ok=True)
    return dest


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name in ("pyproject.toml", "CHANGELOG.md", "uv.lock")
    }


def test_bump_changes_only_that_distribution(tmp_path):
    ws = _copy_workspace(tmp_path)
    before = _snapshot(ws)
    tag = bump("icml-stats", "minor", ws, day="2026-11-29")
    after = _snapshot(ws)
    assert tag == "icml-stats-v0.2.0"
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"packages/icml-stats/pyproject.toml", "packages/icml-stats/CHANGELOG.md", "uv.lock"}
    versions = {n: m.version for n, m in members(ws).items()}
    assert versions.pop("icml-stats") == "0.2.0"
    assert versions == {n: m.version for n, m in members(ROOT).items() if n != "icml-stats"}
    assert "## Unreleased\n\n## 0.2.0 (2026-11-29)\n" in after["packages/icml-stats/CHANGELOG.md"]
    # the lock changes in the icml-stats entry only: one version line
    diff = [
        (a, b)
        for a, b in zip(before["uv.lock"].splitlines(), after["uv.lock"].splitlines(), strict=True)
        if a != b
    ]
    assert diff == [('version = "0.1.0"', 'version = "0.2.0"')]
    assert subprocess.run(["uv", "lock", "--check"], cwd=ws, capture_output=True).returncode == 0


def test_bad_requests_change_nothing(tmp_path):
    ws = _copy_workspace(tmp_path)
    before = _snapshot(ws)
    with pytest.raises(ReleaseError, match="not a published workspace distribution"):
        bump("icml-tools", "patch", ws)
    with pytest.raises(ReleaseError, match="part must be"):
        bump("icml-stats", "huge", ws)
    (ws / "packages/icml-stats/CHANGELOG.md").write_text("# C\n\n## Unreleased\n\n")
    before["packages/icml-stats/CHANGELOG.md"] = "# C\n\n## Unreleased\n\n"
    with pytest.raises(ReleaseError, match="empty"):
        bump("icml-stats", "patch", ws)
    assert _snapshot(ws) == before


def test_cli_prints_the_tag(tmp_path):
    ws = _copy_workspace(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "icml_tools.release", "bump", "icml-theory", "patch", "--root", str(ws)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "icml-theory-v0.1.1"
