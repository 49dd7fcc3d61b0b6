"""A diagnostic of ``binac-arithmetic``, added after its full run: Bi-NAC against a fixed critic that always
says ``d4`` ("the top digit is wrong"), the one word the trained Bi-NAC critics ended up saying.

``uv run python -m icml_agents_experiments.binac.top_digit [OUT.json]``: the full budget's 5 seeds x 200 steps
for the two arms only (about 8 minutes on 2 cores), the area under the revised-accuracy curve of each and
their paired difference with the nested bootstrap interval of the reproduction. Not part of its criterion.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

from icml_agents_experiments.binac import repro
from icml_tools.claims import nested_bootstrap_interval

ARMS = ("binac", "fixed-top-digit")


def main(out: str | None = None) -> dict:
    torch.set_num_threads(min(2, torch.get_num_threads()))  # 2, or fewer where the process has fewer
    cfg = repro.BUDGETS["full"]
    t0 = time.perf_counter()
    runs = [repro.run_seed(s, cfg["steps"], cfg["eval_every"], arms=ARMS) for s in cfg["seeds"]]
    auc = {a: np.stack([r[a]["revised"].mean(0) for r in runs]) for a in ARMS}  # (seeds, problems)
    diff = auc["binac"] - auc["fixed-top-digit"]
    result = {
        "auc_revised": {a: float(v.mean()) for a, v in auc.items()},
        "final_revised": {a: float(np.mean([r[a]["revised"][-1].mean() for r in runs])) for a in ARMS},
        "final_draft": {a: float(np.mean([r[a]["draft"][-1].mean() for r in runs])) for a in ARMS},
        "binac_minus_fixed_top_digit": {
            "mean": float(diff.mean()),
            "ci95": nested_bootstrap_interval(diff, repro.BOOTSTRAP),
        },
        "seconds": time.perf_counter() - t0,
    }
    print(json.dumps(result, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
