"""Benchmark ``sae-train``: tokens per second of TopK SAE training on the CPU at d_in = 576 (SmolLM2's width),
16x expansion (d_sae = 9216), k = 32, batch 4096, through :func:`~icml_interp.sae.train.train_sae` (the
timed part excludes initialization: ``TrainLog.tokens_per_second`` times the steps only).

Data: Gaussian tokens (the speed does not depend on their content). The torch thread count and the 1-minute
load average are recorded with each row, since other processes share the cores.
"""

from __future__ import annotations

import os

import torch

from icml_interp.sae.config import SAEConfig
from icml_interp.sae.train import train_sae

D_IN, EXPANSION, K, BATCH = 576, 16, 32, 4096
STEPS = {"quick": 6, "full": 30}


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    """One row per architecture timed (topk; full adds batchtopk and a no-AuxK topk run)."""
    gen = torch.Generator().manual_seed(seed)
    acts = torch.randn(BATCH * 4, D_IN, generator=gen)
    variants = [("topk", 1 / 32)] + ([("batchtopk", 1 / 32), ("topk", 0.0)] if budget == "full" else [])
    rows = []
    for arch, aux in variants:
        cfg = SAEConfig(
            d_in=D_IN,
            d_sae=D_IN * EXPANSION,
            architecture=arch,
            k=K,
            batch_size=BATCH,
            total_tokens=BATCH * STEPS[budget],
            aux_coefficient=aux,
            dead_steps=2,
            seed=seed,
        )
        load_before = os.getloadavg()[0]
        _, log = train_sae(acts, cfg, progress=False)
        rows.append(
            {
                "architecture": arch,
                "auxk": aux > 0,
                "d_in": D_IN,
                "d_sae": cfg.d_sae,
                "k": K,
                "batch_size": BATCH,
                "steps": cfg.steps,
                "seconds": log.seconds,
                "tokens_per_second": log.tokens_per_second,
                "threads": torch.get_num_threads(),
                "load_1min_before": load_before,
                "load_1min_after": os.getloadavg()[0],
            }
        )
    return rows
