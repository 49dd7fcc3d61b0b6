"""The paper-scale sweep: 33 rules x k in {1, 2, 3} x {CNN, MLP, transformer}, beyond the reproduction.

    uv run python -m icml_theory_experiments.ca.sweep --out sweep-ca            # everything (hours on 2 cores)
    uv run python -m icml_theory_experiments.ca.sweep --ks 3 --archs mlp --rules 8 --steps 100

Predictors: exact for ``k <= 2`` (the cached spectra of :func:`~icml_theory_experiments.ca.rules.spectral_measures`);
for ``k = 3`` (49 inputs) Monte-Carlo estimates with 95 % intervals (``estimate_low_degree_weight`` and
``estimate_total_influence`` of ``local_map(rule, 3)``). Writes ``rows.json`` after every run (a rerun
with the same ``--out`` skips the runs already there) and ``summary.json``: per (architecture, k) the
Spearman correlations of accuracy with ``W^{<=3}`` and with ``-I``. No verdict: the reproduction
``ca-junta`` holds the criterion.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from icml_theory.boolean import estimate_low_degree_weight, estimate_total_influence
from icml_theory.ca import Rule, local_map
from icml_theory_experiments.ca.learn import ARCHS, Budget, train_and_test
from icml_theory_experiments.ca.repro import spearman
from icml_theory_experiments.ca.rules import SWEEP_RULES, spectral_measures
from icml_tools.progress import status


def predictors(rule: Rule, k: int, mc_samples: int) -> dict:
    """``W^{<=3}`` and the total influence of the ``k``-step map (exact for k <= 2, estimated above)."""
    if k <= 2:
        m, _ = spectral_measures(rule, k)
        return {"W_le_3": m["W_le"][3], "total_influence": m["total_influence"], "exact": True}
    f, n = local_map(rule, k), (2 * k + 1) ** 2
    w = estimate_low_degree_weight(f, n, 3, samples=mc_samples)
    i = estimate_total_influence(f, n, samples=mc_samples // 4)
    return {
        "W_le_3": float(w.value),
        "W_le_3_95": [float(w.low), float(w.high)],
        "total_influence": float(i.value),
        "total_influence_95": [float(i.low), float(i.high)],
        "exact": False,
    }


def summarize(rows: list[dict]) -> list[dict]:
    out = []
    for arch in sorted({r["arch"] for r in rows}):
        for k in sorted({r["k"] for r in rows}):
            sub = [r for r in rows if r["arch"] == arch and r["k"] == k]
            by_rule: dict[str, list[dict]] = {}
            for r in sub:
                by_rule.setdefault(r["rule"], []).append(r)
            if len(by_rule) < 3:
                continue
            acc = [np.mean([r["accuracy"] for r in rs]) for rs in by_rule.values()]
            w = [rs[0]["W_le_3"] for rs in by_rule.values()]
            neg_i = [-rs[0]["total_influence"] for rs in by_rule.values()]
            out.append(
                {
                    "arch": arch,
                    "k": k,
                    "rules": len(by_rule),
                    "rho_W_le_3": spearman(w, acc),
                    "rho_minus_I": spearman(neg_i, acc),
                }
            )
    return out


def _write(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("sweep-ca"))
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3])
    p.add_argument("--archs", nargs="+", default=list(ARCHS), choices=ARCHS)
    p.add_argument("--rules", type=int, default=len(SWEEP_RULES), help="the first N of the 33 sweep rules")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--grids", type=int, default=8, help="states per training step")
    p.add_argument("--mc-samples", type=int, default=40_000, help="points for the k = 3 estimates")
    args = p.parse_args(argv)
    if args.rules < 3 or args.seeds < 1 or args.steps < 1 or args.grids < 1:
        p.error("--rules must be >= 3 and --seeds, --steps, --grids >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "rows.json"
    rows: list[dict] = json.loads(rows_path.read_text()) if rows_path.exists() else []
    done = {(r["rule"], r["k"], r["arch"], r["seed"]) for r in rows}
    rules = SWEEP_RULES[: args.rules]
    for k in args.ks:
        for i, rule in enumerate(rules):
            status(f"k = {k}, rule {i + 1}/{len(rules)}: {rule.name}")
            pred = predictors(rule, k, args.mc_samples)
            for arch in args.archs:
                budget = Budget(steps=args.steps, grids_per_step=args.grids)
                for seed in range(args.seeds):
                    if (rule.name, k, arch, seed) in done:
                        continue
                    acc = train_and_test(rule, k, arch, budget, seed)
                    rows.append(
                        {"rule": rule.name, "k": k, "arch": arch, "seed": seed, "accuracy": acc, **pred}
                    )
                    _write(rows_path, rows)
    summary = summarize(rows)
    _write(args.out / "summary.json", summary)
    for s in summary:
        print(
            f"{s['arch']:12s} k={s['k']} rules={s['rules']}: rho_W {s['rho_W_le_3']:.2f}  rho_-I {s['rho_minus_I']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
