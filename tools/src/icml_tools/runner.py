"""What ``icml-repro`` and ``icml-bench`` share: looking up registered entry points, the common command line
(``--list``, ``--only``, ``--quick``/``--full``, ``--seed``, ``--out``, with budget and seed checked by
:func:`icml_tools.protocol.check_run_args`), timed calls that report what they raise, and the timestamped
output folder."""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from icml_tools.protocol import check_run_args

T = TypeVar("T")


def registered_entry(registered: dict, name: str, kind: str) -> Any:
    """The entry point registered as ``name``, or ``ValueError`` naming the registered ones."""
    if name not in registered:
        raise ValueError(f"no {kind} is registered as {name!r}; registered: {', '.join(registered)}")
    return registered[name]


def distribution(ep: Any) -> str:
    """The name of the distribution that registered ``ep`` ("?" when unknown)."""
    return ep.dist.name if getattr(ep, "dist", None) is not None else "?"


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def parse_run_args(
    prog: str, doc: str | None, out: str, argv: list[str] | None, repro: bool = False
) -> argparse.Namespace:
    """Parse the runners' common options (and ``--timeout``, ``--resume`` when ``repro``); a bad budget, seed
    or timeout, or an ``--only`` without a name, exits with status 2, like any bad option. ``args.only`` comes
    back as one list of names (repeated and comma-separated ``--only`` joined)."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list what is registered and exit")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this one, or every one of this package (icml-stats); repeat or comma-separate for several",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--quick",
        dest="budget",
        action="store_const",
        const="quick",
        help="small budget, about 2 minutes per system on 2 CPU cores (default)",
    )
    budget.add_argument("--full", dest="budget", action="store_const", const="full", help="the full budget")
    parser.set_defaults(budget="quick")
    seeds = parser.add_mutually_exclusive_group() if repro else parser
    seeds.add_argument("--seed", type=int, default=0, help="seed passed to each one (default 0)")
    parser.add_argument("--out", type=Path, default=Path(out), help=f"output folder (default ./{out})")
    if repro:
        seeds.add_argument(
            "--seeds",
            type=_seed_list,
            default=None,
            metavar="SEEDS",
            help="a seed sweep: run each one with every seed of SEEDS (0-4, or 0,3,7)",
        )
        parser.add_argument(
            "--backend",
            choices=("serial", "ray"),
            default="serial",
            help="serial: one after the other here (default); ray: as Ray tasks, in parallel",
        )
        parser.add_argument(
            "--ray-address",
            default=None,
            metavar="ADDRESS",
            help="with --backend ray: the cluster (auto, HOST:PORT or ray://HOST:PORT); default a local Ray",
        )
        parser.add_argument(
            "--cpus-per-task",
            type=_positive_int,
            default=None,
            metavar="N",
            help="with --backend ray: CPUs (and torch threads) per reproduction; default the threads torch "
            "starts with here, as the serial runner's reproductions get",
        )
        parser.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=None,
            metavar="SECONDS",
            help="stop a reproduction that runs longer and report it as timed out (default: no limit)",
        )
        parser.add_argument(
            "--resume",
            type=Path,
            default=None,
            metavar="REPORT_DIR",
            help="continue the run reported in REPORT_DIR: skip what it holds, add the rest to it; its --only "
            "and --timeout hold unless given here (then they replace the report's)",
        )
    args = parser.parse_args(argv)
    # --only a,b --only c: one list of names; given, it must name something (--only "" is not "all")
    only = [n.strip() for arg in args.only for n in arg.split(",") if n.strip()]
    if args.only and not only:
        parser.error(f"--only needs at least one name, got {', '.join(map(repr, args.only))}")
    args.only = only
    if repro:
        if args.backend != "ray" and (args.ray_address is not None or args.cpus_per_task is not None):
            parser.error("--ray-address and --cpus-per-task go with --backend ray")
        args.seeds = args.seeds or [args.seed]
        args.seed = args.seeds[0]
    try:
        for seed in getattr(args, "seeds", [args.seed]):
            check_run_args(args.budget, seed)
    except ValueError as exc:
        parser.error(str(exc))
    return args


MAX_SEEDS = 1000  # seeds in one sweep


def _seed_list(text: str) -> list[int]:
    """``0-4`` (inclusive) or ``0,3,7`` as a list of distinct seeds, in order."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            first, last = int(low), int(high) if dash else int(low)
            if last < first:
                raise ValueError
            if len(seeds) + last - first + 1 > MAX_SEEDS:  # checked before the range is built
                raise argparse.ArgumentTypeError(f"at most {MAX_SEEDS} seeds, got more in {text!r}")
            seeds += [s for s in range(first, last + 1) if s not in seeds]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be seeds >= 0 as A-B (A <= B) or A,B,C, got {text!r}"
        ) from None
    return seeds


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or value > 4096:
        raise argparse.ArgumentTypeError(f"must be an int in 1..4096, got {text!r}")
    return value


def package(ep: Any) -> str:
    """The published distribution whose experiments registered ``ep`` (``icml-stats`` for
    ``icml-stats-experiments``)."""
    return distribution(ep).removesuffix("-experiments")


def select(registered: dict, args: argparse.Namespace, prog: str) -> list[str] | int:
    """The names to run (``args.only`` as :func:`parse_run_args` leaves it: registered names or package names,
    all when empty), or the exit code when there is nothing to run: 0 after printing the ``--list``, 2 after
    reporting unknown ``--only`` names."""
    if args.list:
        for name, ep in registered.items():
            print(f"{name:24s} {distribution(ep):28s} {ep.value}")
        return 0
    wanted: list[str] = []
    unknown = []
    for item in args.only:
        members = [item] if item in registered else [n for n, ep in registered.items() if item == package(ep)]
        if not members:
            unknown.append(item)
        wanted += [n for n in members if n not in wanted]
    if unknown:
        packages = sorted({package(ep) for ep in registered.values()})
        print(
            f"{prog}: unknown name(s) {', '.join(unknown)}; registered: {', '.join(registered)}; "
            f"packages: {', '.join(packages)}",
            file=sys.stderr,
        )
        return 2
    return wanted or list(registered)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file beside it, then a rename), so a run
    stopped at any moment leaves the previous version or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def timed_call(fn: Callable[..., T], *args: Any) -> tuple[T | None, float, str | None]:
    """``fn(*args)``'s value, the seconds it took and, when it raised, its traceback (the value is then None)."""
    start = time.perf_counter()
    try:
        value = fn(*args)
    except Exception:
        return None, time.perf_counter() - start, traceback.format_exc()
    return value, time.perf_counter() - start, None


def git_commit() -> str | None:
    """The checked-out commit (with ``+dirty`` when the tree has changes), or None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def run_meta(args: argparse.Namespace, now: datetime) -> dict[str, Any]:
    """The run's budget, seed, start time, Python version, CPU count and commit, for the reports."""
    return {
        "budget": args.budget,
        "seed": args.seed,
        **({"seeds": args.seeds, "backend": args.backend} if hasattr(args, "seeds") else {}),
        "started": now.isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "commit": git_commit(),
    }


def new_report_folder(out: Path, now: datetime) -> Path:
    """``out/<YYYYmmdd-HHMMSS>``, with ``-1``, ``-2``, ... appended when that folder exists already."""
    base = out / now.strftime("%Y%m%d-%H%M%S")
    folder, k = base, 1
    while folder.exists():
        folder, k = Path(f"{base}-{k}"), k + 1
    return folder
