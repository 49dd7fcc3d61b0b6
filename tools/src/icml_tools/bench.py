"""``icml-bench``: run the benchmarks that packages register and write their results as CSV and JSON.

A benchmark is ``run(budget: "quick" | "full", seed: int) -> list[dict]`` registered under the
entry-point group ``icml.benchmarks``; each row is a flat dict of JSON scalars (shape, implementation,
median time, ratio to the baseline measured in the same run, correctness). Benchmarks check correctness
before timing and leave the speed-up empty when their op is wrong.
Results go to ``<out>/<timestamp>/<name>.csv`` and ``results.json``; exit code 1 when one raised, 2 for a bad
command line (an unknown ``--only`` name included).
"""

from __future__ import annotations

import csv
import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from icml_tools import runner
from icml_tools.protocol import check_run_args
from icml_tools.repro import discover

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
    return call_benchmark(runner.registered_entry(discover(GROUP), name, "benchmark").load(), budget, seed)


def main(argv: list[str] | None = None) -> int:
    args = runner.parse_run_args("icml-bench", __doc__, "bench-results", argv)
    registered = discover(GROUP)
    names = runner.select(registered, args, "icml-bench")
    if isinstance(names, int):
        return names
    now = datetime.now(timezone.utc)
    folder = runner.new_report_folder(args.out, now)
    folder.mkdir(parents=True)
    meta = {**runner.run_meta(args, now), "device": _device_description()}
    results: dict[str, dict[str, Any]] = {}
    failed = False
    for name in names:
        rows, seconds, error = runner.timed_call(
            lambda ep: call_benchmark(ep.load(), args.budget, args.seed), registered[name]
        )
        if rows is None:
            failed = True
            results[name] = {"error": error, "seconds": seconds}
            print(f"{name} raised:\n{error}", file=sys.stderr)
            continue
        write_rows(rows, folder / f"{name}.csv")
        results[name] = {"rows": rows, "seconds": seconds}
        print(f"== {name} ({seconds:.1f} s)")
        for row in rows:
            print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
    (folder / "results.json").write_text(json.dumps({"meta": meta, "benchmarks": results}, indent=2))
    print(f"\nresults: {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
