"""Benchmark ``dlmr-decode``: decoding time per answer with memories against the base, on the testbed's
12-step chains and a tiny Mistral with the testbed's sizes (random weights: the cost of building and inserting
memories does not depend on what was learned).

Every arm runs the same free-running chains through :func:`icml_agents_experiments.dlmr.train.rollout`:
the base (nothing inserted), the visual memory, the reasoning memory and both at every boundary (4 tokens
each), and a router choosing at every boundary (random weights: about uniform over its actions). Median over
the timed repeats after a warm-up; ``to_base`` is the ratio of time per answer to the base's, measured in the
same run. CPU only: the testbed's model is far too small for a GPU to say anything.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from icml_agents_experiments.dlmr.tasks import make_chain
from icml_agents_experiments.dlmr.train import Sizes, build_base, build_memories, rollout

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"warm": 1, "timed": 3, "batches": (1, 16)},
    "full": {"warm": 2, "timed": 10, "batches": (1, 16, 64)},
}
LENGTH = 12


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    torch.set_num_threads(min(2, torch.get_num_threads()))  # 2, or fewer where the process has fewer
    sizes = Sizes()
    base = build_base(sizes, seed).eval()
    visual, reasoning, router = build_memories(base, sizes, seed)
    top = max(sizes.memory_sizes)
    arms: dict[str, dict[str, Any]] = {
        "base": {"action": "base"},
        "visual memory": {"visual": visual, "action": ("visual", top)},
        "reasoning memory": {"reasoning": reasoning, "action": ("reasoning", top)},
        "both memories": {"visual": visual, "reasoning": reasoning, "action": ("both", top)},
        "router (dlmr)": {"visual": visual, "reasoning": reasoning, "router": router},
    }
    rng = np.random.default_rng(seed)
    rows = []
    for batch in cfg["batches"]:
        chains = [make_chain(LENGTH, rng) for _ in range(batch)]
        times: dict[str, list[float]] = {}
        tokens: dict[str, float] = {}
        for name, kw in arms.items():
            times[name] = []
            for i in range(cfg["warm"] + cfg["timed"]):
                start = time.perf_counter()
                with torch.no_grad():
                    r = rollout(base, chains, **kw)
                if i >= cfg["warm"]:
                    times[name].append((time.perf_counter() - start) / batch)
            tokens[name] = float(r.tokens.sum(dim=1).float().mean())
        ref = statistics.median(times["base"])
        for name, t in times.items():
            rows.append(
                {
                    "method": name,
                    "device": "cpu",
                    "batch": batch,
                    "chain_steps": LENGTH,
                    "ms_per_answer": round(1000 * statistics.median(t), 3),
                    "to_base": round(statistics.median(t) / ref, 3),
                    "inserted_tokens_per_answer": tokens[name],
                    "repeats_timed": len(t),
                }
            )
    return rows
