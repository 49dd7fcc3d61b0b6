"""The workspace's layout holds: libraries never reach into experiments or tools, every experiments module
imports, and no module imports another module's private names."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

from icml_tools.workspace import find_root, members

ROOT = find_root()
MEMBERS = members(ROOT)
PUBLISHED = [m for m in MEMBERS.values() if m.published]
EXPERIMENTS = [m for m in MEMBERS.values() if m.name.endswith("-experiments")]


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "tests" not in p.relative_to(folder).parts)


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` for every import statement (relative imports resolved to absolute)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def module_name(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    start = next(i for i, part in enumerate(parts) if part.startswith("icml_"))
    return ".".join(parts[start:]).removesuffix(".__init__")


@pytest.mark.parametrize("member", PUBLISHED, ids=lambda m: m.name)
def test_libraries_import_neither_experiments_nor_tools(member):
    for path in python_files(ROOT / member.path / "src"):
        for module, _ in imports(path):
            top = module.split(".")[0]
            assert top != "icml_tools" and not top.endswith("_experiments"), f"{path} imports {module}"


@pytest.mark.parametrize("member", [*PUBLISHED, *EXPERIMENTS, MEMBERS["icml-tools"]], ids=lambda m: m.name)
def test_no_module_imports_another_modules_private_names(member):
    folder = ROOT / member.path / ("src" if (ROOT / member.path / "src").is_dir() else "")
    if member.name.endswith("-experiments"):
        folder = ROOT / member.path
    for path in python_files(folder):
        own = module_name(path)
        for module, names in imports(path):
            if not module.startswith("icml_") or module == own:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{path} imports private names {private} from {module}"
            # a private module (pkg._mod) is private to its package: only modules inside pkg import it
            parts = module.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:i])
                    assert own == owner or own.startswith(owner + "."), (
                        f"{path} imports {module}, private to {owner}"
                    )


@pytest.mark.parametrize("member", EXPERIMENTS, ids=lambda m: m.name)
def test_every_experiments_module_imports(member):
    package = member.name.replace("-", "_")
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        importlib.import_module(info.name)
