"""Benchmark ``markov-logging``: training steps per second of the ``markov-stages`` model with full logging
(held-out loss and per-head attention mass per lag every ``log_every`` steps, read through
``blocks.0.attn.hook_pattern``) against without (training loss only), on the same chain, model and seeds.

Medians of ``repeats`` timed runs of ``steps`` steps each (a fresh model per run); the ratio is
with / without, so 1.0 means logging is free.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from icml_theory.markov import AttentionOnlyTransformer, MixtureOfLagsChain, train
from icml_theory_experiments.markov.repro import CHAIN, MODEL, TRAIN

BUDGET: dict[str, dict[str, Any]] = {
    "quick": {"steps": 200, "repeats": 3, "heads": (3,)},
    "full": {"steps": 1000, "repeats": 5, "heads": (1, 3)},
}


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGET[budget]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        chain = MixtureOfLagsChain(**CHAIN, seed=seed)
        eval_data = chain.sample(TRAIN["n_eval"], MODEL["context"] + 1, seed)
        rows = []
        for heads in cfg["heads"]:
            rates: dict[bool, float] = {}
            for full in (False, True):
                times = []
                for r in range(cfg["repeats"]):
                    model = AttentionOnlyTransformer(chain.n_states, heads=heads, seed=seed + r, **MODEL)
                    log = train(
                        model, chain, cfg["steps"], seed=seed + r, full_logging=full,
                        eval_data=eval_data if full else None, **TRAIN,
                    )  # fmt: skip
                    times.append(log.seconds / cfg["steps"])
                rates[full] = float(np.median(times))
            rows.append(
                {
                    "heads": heads,
                    "device": "cpu",
                    "log every": TRAIN["log_every"],
                    "eval sequences": TRAIN["n_eval"],
                    "steps per s, training loss only": round(1.0 / rates[False], 1),
                    "steps per s, full logging": round(1.0 / rates[True], 1),
                    "with / without logging (time per step)": round(rates[True] / rates[False], 3),
                    "median_ms_per_step": round(1e3 * rates[True], 3),
                }
            )
        return rows
    finally:
        torch.set_num_threads(threads)
