"""Reading the uv workspace: its root, its members, their versions and their dependencies on each other."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class Member:
    name: str  # distribution name, e.g. "icml-stats"
    path: Path  # folder relative to the workspace root, e.g. packages/icml-stats
    version: str
    dependencies: frozenset[str] = field(default_factory=frozenset)  # normalized names of all requirements
    published: bool = True  # False for members marked "Private :: Do Not Upload"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` whose pyproject.toml declares ``[tool.uv.workspace]``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "workspace" in tomllib.loads(pyproject.read_text()).get("tool", {}).get(
            "uv", {}
        ):
            return folder
    raise FileNotFoundError(
        f"no uv workspace root (pyproject.toml with [tool.uv.workspace]) at or above {here}"
    )


def members(root: Path) -> dict[str, Member]:
    """Every workspace member by distribution name, expanded from the root's ``members`` globs."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    excluded = {p.resolve() for pattern in config.get("exclude", []) for p in root.glob(pattern)}
    found: dict[str, Member] = {}
    for pattern in config["members"]:
        for folder in sorted(root.glob(pattern)):
            pyproject = folder / "pyproject.toml"
            if folder.resolve() in excluded or not pyproject.is_file():
                continue
            project = tomllib.loads(pyproject.read_text())["project"]
            requirements = list(project.get("dependencies", []))
            for extra in project.get("optional-dependencies", {}).values():
                requirements += extra
            deps = frozenset(normalize(m.group(1)) for r in requirements if (m := _NAME.match(r)))
            private = "Private :: Do Not Upload" in project.get("classifiers", [])
            name = normalize(project["name"])
            found[name] = Member(name, folder.relative_to(root), project["version"], deps, not private)
    return found


def dependants(all_members: dict[str, Member], names: set[str]) -> set[str]:
    """``names`` plus every member that depends on one of them, directly or transitively."""
    selected = set(names)
    grew = True
    while grew:
        grew = False
        for member in all_members.values():
            if member.name not in selected and member.dependencies & selected:
                selected.add(member.name)
                grew = True
    return selected
