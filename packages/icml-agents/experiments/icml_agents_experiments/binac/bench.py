"""Benchmark ``binac-step-time``: wall time per training step of Bi-NAC against GRPO on the actor alone, at the
same verifier calls per step, on the ``binac-arithmetic`` testbed (tiny Llamas and the reproduction's loop
settings; a 100-step warm-up instead of 300, since the time of a step does not depend on it).

Per method: a fresh trainer from the same warm start, a few steps to warm up, then the median over the timed
steps. Methods: GRPO alone (20 drafts per prompt, the wide actor), Bi-NAC in-context, Bi-NAC after adaptation
(the look-ahead copy, its extra revisions and verifier calls), and a fixed scripted critic (the oracle: the
loop's cost without a critic network). On a GPU (``device="cuda"``) the models are moved there first.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from icml_agents_experiments.binac import arithmetic as A
from icml_agents_experiments.binac import repro

BUDGETS: dict[str, dict[str, Any]] = {"quick": {"warm": 2, "timed": 5}, "full": {"warm": 3, "timed": 20}}
METHODS = {
    "grpo": "grpo",
    "binac (in-context)": "binac",
    "binac (after adaptation)": "binac-lookahead",
    "fixed scripted critic": "oracle",
}


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    torch.set_num_threads(min(2, torch.get_num_threads()))  # 2, or fewer where the process has fewer
    device = "cuda" if torch.cuda.is_available() else "cpu"
    actor = A.actor_policy(A.tiny_llama(hidden=repro.HIDDEN, seed=seed)).to(device)
    wide = A.actor_policy(A.tiny_llama(hidden=repro.WIDE, seed=seed)).to(device)
    critic = A.critic_policy(A.tiny_llama(hidden=repro.HIDDEN, seed=seed + 1)).to(device)
    A.warm_up(actor, 100, seed=seed)
    A.warm_up(wide, 100, seed=seed)
    times: dict[str, list[float]] = {}
    calls: dict[str, float] = {}
    for name, arm in METHODS.items():
        trainer = repro.make_arm(arm, actor, wide, critic, seed)
        data = np.random.default_rng(seed)
        times[name] = []
        for i in range(cfg["warm"] + cfg["timed"]):
            problems = A.one_carry_problems(repro.PROMPTS_PER_STEP, data)
            prompts, refs = [A.prompt_tokens(c) for c in problems], [A.answer_tokens(c) for c in problems]
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            trainer.step(prompts, refs)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= cfg["warm"]:
                times[name].append(time.perf_counter() - start)
        calls[name] = trainer.ledger.calls / (cfg["warm"] + cfg["timed"])
    base = statistics.median(times["grpo"])
    return [
        {
            "method": name,
            "device": device,
            "ms_per_step": round(statistics.median(t) * 1e3, 1),
            "to_grpo": round(statistics.median(t) / base, 2),
            "verifier_calls_per_step": calls[name],
            "steps_timed": len(t),
        }
        for name, t in times.items()
    ]
