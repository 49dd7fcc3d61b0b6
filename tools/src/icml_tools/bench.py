"""``icml-bench``: run the benchmarks that packages register and write their results as CSV and JSON.

A benchmark is ``run(budget: "quick" | "full", seed: int) -> list[dict]`` registered under the
entry-point group ``icml.benchmarks``; each row is a flat dict of JSON scalars (shape, implementation,
median time, ratio to the baseline measured in the same run, correctness). Benchmarks check correctness
before timing and leave the speed-up empty when their op is wrong.
Results go to ``<out>/<timestamp>/<name>.csv`` and ``results.json``; exit code 1 when one raised.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from icml_tools.protocol import check_run_args
from icml_tools.repro import add_common_args, discover, list_registered, new_report_folder, pick

GROUP = "icml.benchmarks"


def _device_description() -> str:
    import torch

    if torch.cuda.is_available():
        return f"CUDA {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads), torch {torch.__version__}"


def write_rows(rows: list[dict], path: Path) -> None:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def call_benchmark(fn, budget: str, seed: int) -> list[dict]:
    """Run one benchmark function under the protocol: checked arguments in, checked rows out."""
    check_run_args(budget, seed)
    rows = fn(budget=budget, seed=seed)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"a benchmark must return a list of dicts, got {type(rows).__name__}")
    return rows


def run_benchmark(name: str, budget: str = "quick", seed: int = 0) -> list[dict]:
    """The checked rows of the benchmark registered as ``name``, run as ``icml-bench --only name`` runs it."""
    registered = discover(GROUP)
    if name not in registered:
        raise ValueError(f"no benchmark is registered as {name!r}; registered: {', '.join(registered)}")
    return call_benchmark(registered[name].load(), budget, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icml-bench", description=__doc__.split("\n\n")[0])
    add_common_args(parser, out="bench-results")
    args = parser.parse_args(argv)
    try:
        check_run_args(args.budget, args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    registered = discover(GROUP)
    if args.list:
        list_registered(registered)
        return 0
    names = pick(registered, args.only, "icml-bench")
    if names is None:
        return 2
    now = datetime.now(timezone.utc)
    folder = new_report_folder(args.out, now)
    folder.mkdir(parents=True)
    meta = {"budget": args.budget, "seed": args.seed, "started": now.isoformat(timespec="seconds"),
            "device": _device_description(), "python": platform.python_version()}
    results, failed = {}, False
    for name in names:
        start = time.perf_counter()
        try:
            rows = call_benchmark(registered[name].load(), args.budget, args.seed)
        except Exception:
            failed = True
            results[name] = {"error": traceback.format_exc(), "seconds": time.perf_counter() - start}
            print(f"{name} raised:\n{results[name]['error']}", file=sys.stderr)
            continue
        write_rows(rows, folder / f"{name}.csv")
        results[name] = {"rows": rows, "seconds": time.perf_counter() - start}
        print(f"== {name} ({results[name]['seconds']:.1f} s)")
        for row in rows:
            print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
    (folder / "results.json").write_text(json.dumps({"meta": meta, "benchmarks": results}, indent=2))
    print(f"\nresults: {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
