"""Benchmark ``crh-steered-generation``: wall time of greedy generation from SmolLM2-135M-Instruct with a
steering vector added (prefill only, CRH's setting, and at every position) against the same generation
without it, medians of interleaved repeats, and the ratio to the unsteered median measured in the same run.

Before timing, the run checks that scale 0 reproduces the unsteered tokens exactly.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import torch

from icml_interp.hooks import HookedModel
from icml_interp.steering import generate_steered

BUDGETS = {
    "quick": {"prompts": 4, "tokens": 16, "repeats": 3},
    "full": {"prompts": 16, "tokens": 32, "repeats": 7},
}
LAYER = 15


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    from icml_interp_experiments.crh.concepts import QUESTIONS, chat
    from icml_tools.assets import smollm2

    cfg = BUDGETS[budget]
    model, tok = smollm2()
    hooked = HookedModel(model)
    prompts = [tok(chat(q))["input_ids"] for q in QUESTIONS[: cfg["prompts"]]]
    v = torch.nn.functional.normalize(
        torch.randn(hooked.d_model, generator=torch.Generator().manual_seed(seed)), dim=0
    )
    kw: dict[str, Any] = {
        "max_new_tokens": cfg["tokens"],
        "pad_token_id": tok.pad_token_id or 0,
        "batch_size": len(prompts),
    }
    plain = generate_steered(hooked, prompts, v, LAYER, 0.0, **kw)
    with torch.no_grad():
        ref = [hooked.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               max_new_tokens=cfg["tokens"], do_sample=False, pad_token_id=kw["pad_token_id"])
               for p in prompts]  # fmt: skip
    correct = all(
        a.tolist() == r[0, len(p) :].tolist()[: len(a)] for a, r, p in zip(plain, ref, prompts, strict=True)
    )
    arms = {
        "unsteered": (0.0, "prefill"),
        "steered, prefill": (8.0, "prefill"),
        "steered, all positions": (8.0, "all"),
    }
    times: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(cfg["repeats"]):
        for arm, (scale, positions) in arms.items():  # interleaved: drifts in machine load hit every arm
            start = time.perf_counter()
            generate_steered(hooked, prompts, v, LAYER, scale, positions=positions, **kw)
            times[arm].append(time.perf_counter() - start)
    base = statistics.median(times["unsteered"])
    return [
        {
            "model": "SmolLM2-135M-Instruct",
            "arm": arm,
            "prompts": len(prompts),
            "new_tokens": cfg["tokens"],
            "median_seconds": statistics.median(ts),
            "ratio_to_unsteered": statistics.median(ts) / base,
            "repeats": cfg["repeats"],
            "scale0_matches_plain_generate": correct,
            "threads": torch.get_num_threads(),
            "load_1min": os.getloadavg()[0],
        }
        for arm, ts in times.items()
    ]
