"""``changed-packages``: which distributions a change must test.

Maps the files of a git diff to workspace members (the innermost member holding a file; an experiments
member counts as the distribution whose folder holds it), then adds every member that depends on a
selected one (a change in kernels-common selects all its dependants). An experiments member selected that
way stands for the distribution whose folder holds it: a change in icml-interp also selects icml-agents and
icml-theory, whose experiments depend on icml-interp. A change to shared files (the root pyproject.toml,
uv.lock, the root conftest.py that every test run loads, tools/, tests-integration/, CI files) selects every
distribution; documentation outside the members selects none. Prints one name per line, or ``--format json``
for a CI matrix.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path, PurePosixPath

from icml_tools.workspace import Member, dependants, find_root, members

# files every distribution's test run reads: a change to one selects every distribution
SHARED = ("pyproject.toml", "uv.lock", "conftest.py", ".ci/", ".github/", "tools/", "tests-integration/")


def owner(found: dict[str, Member], name: str) -> str | None:
    """The published distribution a member's tests run with: itself, or the innermost published member whose
    folder holds it (an experiments member); None for an unpublished member outside every package."""
    member = found[name]
    if member.published:
        return name
    holders = [
        m
        for m in found.values()
        if m.published and member.path.is_relative_to(m.path) and m.path != member.path
    ]
    return max(holders, key=lambda m: len(m.path.parts)).name if holders else None


def select(files: list[str], root: Path) -> list[dict]:
    """Published distributions to test for the changed ``files`` (paths relative to the root)."""
    found = members(root)
    published = {n for n, m in found.items() if m.published}
    touched: set[str] = set()  # members whose library changed: their dependants are tested too
    experiments: set[str] = set()  # distributions whose experiments changed: tested alone
    for file in files:
        path = PurePosixPath(file)
        if any(file == s or (s.endswith("/") and file.startswith(s)) for s in SHARED):
            touched |= set(found)
            continue
        holders = [m for m in found.values() if path.is_relative_to(PurePosixPath(m.path.as_posix()))]
        if not holders:
            continue
        innermost = max(holders, key=lambda m: len(m.path.parts))
        owners = [m for m in holders if m.published]
        if innermost.published:
            touched.add(innermost.name)
        elif owners:  # an experiments member: tested with the distribution whose folder holds it
            experiments.add(max(owners, key=lambda m: len(m.path.parts)).name)
        else:  # an unpublished member outside every package (the tools): every package's tests use it
            touched |= published
    # an experiments member that depends on a touched library (icml-theory's experiments use icml-interp)
    # is tested with its own distribution, so map every selected member to its owner before keeping the
    # published ones
    owners_of_selected = {owner(found, n) for n in dependants(found, touched)}
    chosen = sorted(({n for n in owners_of_selected if n is not None} | experiments) & published)
    return [{"name": n, "path": found[n].path.as_posix()} for n in chosen]


def git_changed_files(base: str, root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...HEAD"], cwd=root, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"git diff against {base!r} failed: {out.stderr.strip()}")
    return [line for line in out.stdout.splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="changed-packages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="origin/main", help="git ref to diff against (default origin/main)")
    parser.add_argument(
        "--files", nargs="*", default=None, help="use these changed paths instead of git diff"
    )
    parser.add_argument("--format", choices=("lines", "json"), default="lines")
    args = parser.parse_args(argv)
    root = find_root()
    try:
        files = args.files if args.files is not None else git_changed_files(args.base, root)
    except RuntimeError as exc:
        print(f"changed-packages: {exc}", file=sys.stderr)
        return 1
    chosen = select(files, root)
    if args.format == "json":
        print(json.dumps(chosen))
    else:
        print("\n".join(c["name"] for c in chosen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
