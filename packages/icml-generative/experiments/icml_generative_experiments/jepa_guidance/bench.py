"""Benchmark ``jepa-guidance-step``: wall time of one sampler step with JEPA guidance (``top_k`` 3 and 9,
finite-difference or forward-mode JVPs, 2 power iterations, oversample 2) against the same step unguided,
and against the minority-score baseline; with the exact JEPA-score (every singular value) for scale.

Two cases: the digits world's generator (MLP denoiser, 64 features, width 256) with a 64→32 MLP encoder,
batch 64; and 3×32×32 images with a small convolutional denoiser and a convolutional encoder to a 64-d
embedding, batch 16 (the sketch's ``k + 2`` products per sample against the exact score's 64). The guided
step is the guidance (denoiser forward and backward through the score) plus the ordinary step. Medians over
repeats after one warm-up; ratios against the unguided step of the same run. torch at its default threads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from icml_generative.jepa_guidance import JEPAGuidance, MinorityGuidance, jepa_score, mlp_encoder
from icml_generative_experiments.jepa_guidance import testbed as tb

BUDGETS: dict[str, dict[str, Any]] = {"quick": {"repeats": 3}, "full": {"repeats": 10}}


class _ConvDenoiser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(32, 3, 3, padding=1),
        )

    def forward(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        return x - sigma * self.net(x / (1 + sigma**2) ** 0.5)


def _conv_encoder() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 4, stride=2, padding=1),
        nn.SiLU(),
        nn.Conv2d(16, 32, 4, stride=2, padding=1),
        nn.SiLU(),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 64),
    )


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _case(
    label: str, denoiser: nn.Module, encoder: nn.Module, z: torch.Tensor, repeats: int, load: float
) -> list[dict]:
    sigma = 1.0

    def step(guidance: Any = None) -> torch.Tensor:
        v = z
        if guidance is not None:
            v = guidance(v, lambda t: denoiser(t, sigma), 5, 10)
        with torch.no_grad():
            x0 = denoiser(v, sigma)
        return v + (0.8 - sigma) * (v - x0) / sigma

    variants: dict[str, Any] = {
        "unguided": None,
        "JEPA k=3 (finite-difference JVP)": JEPAGuidance(encoder, top_k=3),
        "JEPA k=9 (finite-difference JVP)": JEPAGuidance(encoder, top_k=9),
        "JEPA k=9 (forward-mode JVP)": JEPAGuidance(encoder, top_k=9, jvp="forward"),
        "minority score (1 draw)": MinorityGuidance(lambda t: denoiser(t, 0.5), 1.0, 0.5),
    }
    rows = []
    base = _median_seconds(lambda: step(None), repeats)
    for name, guidance in variants.items():
        t = base if guidance is None else _median_seconds(partial(step, guidance), repeats)
        rows.append(_row(label, name, t, base, repeats, load))
    exact = _median_seconds(lambda: jepa_score(encoder, z), repeats)
    rows.append(_row(label, "exact JEPA-score alone (all singular values)", exact, base, repeats, load))
    return rows


def _row(label: str, variant: str, seconds: float, base: float, repeats: int, load: float) -> dict:
    return {
        "case": f"{label}: {variant}",
        "median_seconds": seconds,
        "ratio to unguided step (medians)": seconds / base,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": load,
    }


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    torch.manual_seed(seed)
    digits = tb.Denoiser(64, 0.75, width=256).eval()
    rows = _case(
        "digits MLP, batch 64", digits, mlp_encoder(64, 32).eval(), torch.randn(64, 64), cfg["repeats"], load
    )
    torch.manual_seed(seed)
    rows += _case(
        "3x32x32 conv, batch 16",
        _ConvDenoiser().eval(),
        _conv_encoder().eval(),
        torch.randn(16, 3, 32, 32),
        cfg["repeats"],
        load,
    )
    return rows
