"""Vet the MUL-BAL candidates offline and write the results table (``docs/mulbal_vetting.csv``).

    uv run python -m icml_compress_experiments.proteus.vet_mulbal

Prints the pool (the best candidates that pass) in the form committed in
``src/icml_compress/proteus/pool.py``; the library test ``tests/test_proteus.py`` checks that the two agree.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from icml_compress.proteus.vetting import VET_LS, vet_all

OUT = Path(__file__).resolve().parents[3] / "docs" / "mulbal_vetting.csv"
COLUMNS = (
    "skew",
    "excess_kurtosis",
    "successor_spread",
    "set_distortion",
    "corr_successors",
    "corr_merging",
    "corr_lag1",
    "tv_joint",
    "tv_copula",
    "passed",
)


def main() -> None:
    start = time.perf_counter()
    results, pool = vet_all()
    with OUT.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["rank", "a", "b", "m", "score", "passed", *(f"{col}@L{L}" for L in VET_LS for col in COLUMNS)]
        )
        for rank, r in enumerate(results):
            per_l = [r["per_L"][L][col] for L in VET_LS for col in COLUMNS]
            writer.writerow(
                [
                    rank,
                    r["a"],
                    r["b"],
                    r["m"],
                    f"{r['score']:.5f}",
                    r["passed"],
                    *(f"{v:.5f}" if isinstance(v, float) else v for v in per_l),
                ]
            )
    passed = sum(r["passed"] for r in results)
    print(f"{len(results)} candidates, {passed} pass, {time.perf_counter() - start:.0f} s -> {OUT}")
    print("MULBAL_POOL = (")
    for c in pool:
        print(f"    MulBal({c.a}, {c.b}, {c.m}),")
    print(")")


if __name__ == "__main__":
    main()
