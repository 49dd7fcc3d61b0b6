"""Benchmark ``patching-scan-smollm2``: wall time of a full layer × position activation-patching scan of
SmolLM2-135M-Instruct on a 12-token prompt (target: under 60 s on 2 CPU cores), after checking that the
machinery is right (patching the whole stream at block 0 gives the corrupt logits exactly).

The 1-minute load average is recorded with each row, since other processes share the cores.
"""

from __future__ import annotations

import os
import time

import torch

from icml_interp.hooks import HookedModel
from icml_interp.patching.activation import activation_patching, run_with_patches
from icml_interp.patching.result import logit_diff

CLEAN = "We know the Eiffel Tower is located in the city of"
CORRUPT = "We know the Colosseum is located in the city of"
TARGET_SECONDS = 60.0


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    """One row per scanned component set: tokens, layers, forward passes, seconds, correctness."""
    from icml_tools.assets import smollm2

    model, tok = smollm2()
    hooked = HookedModel(model)
    clean, corrupt = torch.tensor([tok(CLEAN)["input_ids"]]), torch.tensor([tok(CORRUPT)["input_ids"]])
    _, cache = hooked.run_with_cache(corrupt, ["blocks.0.hook_resid_pre"])
    correct = bool(torch.equal(run_with_patches(hooked, clean, cache), hooked(corrupt)))
    metric = logit_diff(tok(" Paris")["input_ids"][0], tok(" Rome")["input_ids"][0])
    rows = []
    for components in [("resid_pre",)] + ([("resid_pre", "attn_out", "mlp_out")] if budget == "full" else []):
        start = time.perf_counter()
        result = activation_patching(hooked, clean, corrupt, metric, components=components)
        seconds = time.perf_counter() - start
        rows.append(
            {
                "model": "SmolLM2-135M",
                "tokens": clean.shape[1],
                "layers": hooked.n_layers,
                "components": "+".join(components),
                "patched_runs": len(result.rows),
                "seconds": seconds if correct else None,
                "target_seconds": TARGET_SECONDS,
                "within_target": correct and seconds < TARGET_SECONDS * len(components),
                "correct": correct,
                "threads": torch.get_num_threads(),
                "load_1min": os.getloadavg()[0],
            }
        )
    return rows
