"""Benchmark ``star-vae-step``: wall time of one STAR-VAE training step (forward, L1 + multi-resolution STFT +
STAR loss, backward, Adam) with one bidirectional Mamba block per side against the same VAE without it, on
a batch of 16 testbed clips (0.64 s at 16 kHz); for the library's default width and the reproduction's.
The Mamba rows run each scan (``sequential``: the step-by-step loop ``scan="auto"`` takes on CPU;
``parallel``: the prefix scan it takes on GPUs). Medians over repeats after one warm-up step; the ratio
with / without Mamba comes from the same run. torch at its default thread count.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from icml_generative.star import STARVAE, STARLoss
from icml_generative_experiments.star import testbed as tb

BUDGETS: dict[str, dict[str, Any]] = {"quick": {"repeats": 3}, "full": {"repeats": 10}}
WIDTHS = {"library default (base 16)": {}, "reproduction (base 8)": dict(tb.VAE_CONFIG)}


def step_seconds(model: STARVAE, audio: torch.Tensor, repeats: int) -> float:
    loss_fn = STARLoss(model.config.latent_channels)
    opt = torch.optim.Adam(model.parameters(), 1e-4)
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        out = model(audio, generator=torch.Generator().manual_seed(r))
        loss = tb.reconstruction_loss(out.sample, audio) + loss_fn(out.latent_dist)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if r:  # the first step warms up allocators and kernels
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    audio = tb.clips("train", seed, 16)
    rows = []
    for label, config in WIDTHS.items():
        torch.manual_seed(seed)
        plain = STARVAE(**{**config, "mamba_layers": 0})
        base = step_seconds(plain, audio, cfg["repeats"])
        rows.append(_row(label, "no Mamba", plain, base, base, cfg, load))
        for scan in ("sequential", "parallel"):
            torch.manual_seed(seed)
            model = STARVAE(**{**config, "mamba_layers": 1})
            for module in model.modules():
                if hasattr(module, "scan"):
                    module.scan = scan
            t = step_seconds(model, audio, cfg["repeats"])
            rows.append(_row(label, f"1 BiMamba per side, {scan} scan", model, t, base, cfg, load))
    return rows


def _row(
    label: str, variant: str, model: STARVAE, seconds: float, base: float, cfg: dict, load: float
) -> dict:
    return {
        "case": f"{label}: {variant}, batch 16 x 10240 samples",
        "parameters": sum(p.numel() for p in model.parameters()),
        "median_step_seconds": seconds,
        "ratio to no Mamba (medians)": seconds / base,
        "repeats": cfg["repeats"],
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": load,
    }
