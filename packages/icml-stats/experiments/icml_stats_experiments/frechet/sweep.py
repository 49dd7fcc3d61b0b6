"""The larger DeSI study, a script rather than a registered reproduction (it exceeds the 30-minute
budget): the Wasserstein and SPD simulations at p in {5, 20}, 50 repetitions each (seeds 0-49), n = 500,
the same three methods and statistics as ``desi-simulations`` (no verdict: reported as measured).

    uv run python -m icml_stats_experiments.frechet.sweep [--reps 50] [--p 5 20] [--out desi_sweep.json]

About 2 x 2 x 50 DeSI fits; on 2 cores expect one to two hours.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from icml_stats_experiments.frechet.repro import map_repetitions, summarize


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--p", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--simulations", nargs="+", default=["wasserstein", "spd"])
    parser.add_argument("--out", default="desi_sweep.json")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    jobs = [(name, args.n, p, r) for name in args.simulations for p in args.p for r in range(args.reps)]
    rows = map_repetitions(jobs, min(2, os.cpu_count() or 1))
    result = {
        "settings": vars(args),
        "seconds": time.perf_counter() - start,
        "summaries": {
            f"{name}, p = {p}": summarize([r for r in rows if r["simulation"] == name and r["p"] == p])
            for name in args.simulations
            for p in args.p
        },
        "rows": rows,
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps(result["summaries"], indent=1))
    return result


if __name__ == "__main__":
    main()
