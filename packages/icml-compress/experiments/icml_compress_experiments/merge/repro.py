"""Reproduction ``speechcombine-synthetic``: does ``θ_cpt + λ (θ_instruct − θ_base)`` give a model continually
pre-trained on a new modality (units) the instruction following of the text instruct model, without any
instruction tuning in that modality?

Testbed: :mod:`.testbed` (4 models per seed, trained here). Protocol and criteria, fixed in
``packages/icml-compress/docs/merge.md`` before the first run of the combined model:

- Headroom, per seed, measured first: CPT alone and instruct alone (its vocabulary extended by the unit rows,
  initialized at random: it never saw units) answer at most 20 % of the unit-space instructions; the oracle
  (the CPT model fine-tuned on unit-space instructions) at least 70 %.
- At λ = 1 (the paper's "directly combine"), paired per (seed, item), 10,000 paired-bootstrap resamples:
  combined − CPT and combined − instruct, unit space, each ≥ 20 points with the 95 % interval's lower end
  above 0; text space, combined − instruct with the interval's lower end above −5 points.
- The λ sweep (0, 0.25, 0.5, 0.75, 1, 1.25, 1.5) is reported, not used to pick λ.

Budgets: quick = seed 0, 50 items per task; full = seeds 0-2, 100 items per task (the same training steps).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch

from icml_compress.merge import combine
from icml_compress_experiments.merge import testbed as tb
from icml_tools.progress import status

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"seeds": (0,), "per_task": 50},
    "full": {"seeds": (0, 1, 2), "per_task": 100},
}
STEPS = tb.Steps(base=300, instruct=1000, cpt=600, oracle=1000)
LAMBDAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
HEADROOM_MAX, ORACLE_MIN = 0.20, 0.70
GAIN_MIN, TEXT_MARGIN = 0.20, -0.05
BOOTSTRAP = 10_000


def paired_interval(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict:
    """Mean of ``a - b`` (per item) and its 95 % paired-bootstrap percentile interval."""
    d = np.asarray(a, float) - np.asarray(b, float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(BOOTSTRAP, d.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(d.mean()), "lo": float(lo), "hi": float(hi), "n": int(d.size)}


def instruct_with_units(instruct, seed: int):
    """The instruct model with the unit rows appended at random (it never saw units)."""
    out = copy.deepcopy(instruct)
    torch.manual_seed(seed * 10 + 5)
    out.resize_token_embeddings(tb.UNIT_VOCAB, mean_resizing=False)
    return out


def run(budget: str = "quick", seed: int = 0) -> dict:
    cfg = BUDGETS[budget]
    seeds = tuple(s + seed for s in cfg["seeds"])
    start = time.perf_counter()
    scores: dict[str, list[np.ndarray]] = {}
    headroom = []
    for s in seeds:
        status(f"seed {s}: training base, instruct, CPT and oracle")
        m = tb.build(s, STEPS)
        items = tb.test_items(s, cfg["per_task"])
        units = m["modality"]
        row = {
            "cpt": tb.score(m["cpt"], items, units),
            "instruct": tb.score(instruct_with_units(m["instruct"], s), items, units),
            "oracle": tb.score(m["oracle"], items, units),
            "instruct (text)": tb.score(m["instruct"], items, None),
        }
        headroom.append({"seed": s, **{k: float(v.mean()) for k, v in row.items()}})
        for lam in LAMBDAS:
            merged = combine(m["cpt"], m["instruct"], m["base"], lam=lam)
            row[f"combined λ={lam:g}"] = tb.score(merged, items, units)
            row[f"combined λ={lam:g} (text)"] = tb.score(merged, items, None)
        for k, v in row.items():
            scores.setdefault(k, []).append(v)
    acc = {k: np.concatenate(v) for k, v in scores.items()}
    comb, comb_text = acc["combined λ=1"], acc["combined λ=1 (text)"]
    vs_cpt = paired_interval(comb, acc["cpt"], 1)
    vs_inst = paired_interval(comb, acc["instruct"], 2)
    text = paired_interval(comb_text, acc["instruct (text)"], 3)
    has_headroom = all(
        h["cpt"] <= HEADROOM_MAX and h["instruct"] <= HEADROOM_MAX and h["oracle"] >= ORACLE_MIN
        for h in headroom
    )
    checks = {
        "headroom: CPT and instruct <= 20 %, oracle >= 70 % on unit-space instructions (every seed)": has_headroom,
        "combined - CPT >= 20 points, 95 % interval above 0": vs_cpt["mean"] >= GAIN_MIN and vs_cpt["lo"] > 0,
        "combined - instruct >= 20 points, 95 % interval above 0": vs_inst["mean"] >= GAIN_MIN
        and vs_inst["lo"] > 0,
        "text space: combined - instruct interval above -5 points": text["lo"] > TEXT_MARGIN,
    }
    rows = [
        {
            "model": k,
            "accuracy": round(float(v.mean()), 4),
            **{f"seed {s}": round(float(x.mean()), 4) for s, x in zip(seeds, scores[k], strict=True)},
        }
        for k, v in acc.items()
    ]
    sweep = {lam: float(acc[f"combined λ={lam:g}"].mean()) for lam in LAMBDAS}
    sweep_text = {lam: float(acc[f"combined λ={lam:g} (text)"].mean()) for lam in LAMBDAS}
    return {
        "system": "speechcombine-synthetic",
        "claim": (
            "Combining a model continually pre-trained on a new modality with the instruct - base weight "
            "difference of its text model (theta_cpt + lambda (theta_instruct - theta_base)) transfers "
            "instruction following to the new modality without instruction tuning, keeping the text ability."
        ),
        "metric": "exact-match accuracy on instructions given in the unit (speech-like) token space, lambda = 1; "
        "baseline = the better of CPT alone and instruct alone",
        "ours": float(comb.mean()),
        "baseline": float(max(acc["cpt"].mean(), acc["instruct"].mean())),
        "criterion": "; ".join(checks) + " (all)",
        "passed": all(checks.values()),
        "rows": rows,
        "figures": [
            {
                "name": "speechcombine_lambda_sweep",
                "title": f"lambda sweep, {len(seeds)} seed(s) (reported, not used to pick lambda)",
                "xlabel": "lambda",
                "ylabel": "exact-match accuracy",
                "x": list(LAMBDAS),
                "series": {
                    "combined, unit space": list(sweep.values()),
                    "combined, text space": list(sweep_text.values()),
                    "oracle, unit space": [float(acc["oracle"].mean())] * len(LAMBDAS),
                    "instruct, text space": [float(acc["instruct (text)"].mean())] * len(LAMBDAS),
                },
                "kind": "line",
            }
        ],
        "notes": (
            f"budget={budget}, seeds {list(seeds)}, {cfg['per_task']} items per task x 4 tasks per seed; "
            f"training steps {STEPS}; headroom per seed: {headroom}; paired differences at lambda = 1 (mean, 95 % "
            f"bootstrap interval): combined - CPT {vs_cpt}, combined - instruct {vs_inst}, text space combined - "
            f"instruct {text}; lambda sweep (unit space): {sweep}; (text space): {sweep_text}; checks: {checks}; "
            f"{time.perf_counter() - start:.0f} s"
        ),
    }


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    args = parser.parse_args()
    print(json.dumps(run(args.budget), indent=1, default=str))
