"""Benchmark ``amnet-enhance-time``: wall time per frame of :func:`~icml_generative.amnet.enhance` for each
input combination (RGB, RGB+E, RGB+IR, RGB+E+IR) against the RGB-only model of equal parameter count (the
reproduction's baseline), on clips of ``FRAMES`` frames at the reproduction's size (48 × 48) and at
128 × 128. The models are untrained (time does not depend on the weights); inputs are random tensors of the
right shapes. Medians over repeats after one warm-up call; ratios from the same run. torch at its default
thread count.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from icml_generative.amnet import AMNet, enhance
from icml_generative_experiments.amnet.repro import COMBOS, WIDTH, parameters, rgb_only_width

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"repeats": 3, "sizes": (48,)},
    "full": {"repeats": 10, "sizes": (48, 128)},
}
FRAMES = 16


def seconds_per_frame(model: AMNet, inputs: dict[str, Any], repeats: int) -> float:
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        enhance(model, **inputs, progress=False)
        if r:  # the first call warms up allocators
            times.append(time.perf_counter() - start)
    return float(np.median(times)) / FRAMES


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    torch.manual_seed(seed)
    amnet = AMNet(width=WIDTH)
    rgb_only = AMNet(modalities=(), width=rgb_only_width(parameters(amnet)))
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for size in cfg["sizes"]:
        clip = {
            "frames": 0.05 * torch.rand(FRAMES, 3, size, size, generator=gen),
            "events": torch.randn(FRAMES, amnet.event_bins, size, size, generator=gen),
            "infrared": torch.rand(FRAMES, 1, size, size, generator=gen),
        }
        base = seconds_per_frame(rgb_only, {"frames": clip["frames"]}, cfg["repeats"])
        rows.append(_row(size, "RGB-only model", rgb_only, base, base, cfg, load))
        for label, combo in COMBOS.items():
            inputs = {"frames": clip["frames"], **{m: clip[m] for m in combo}}
            t = seconds_per_frame(amnet, inputs, cfg["repeats"])
            rows.append(_row(size, f"AMNet, {label}", amnet, t, base, cfg, load))
    return rows


def _row(size: int, variant: str, model: AMNet, seconds: float, base: float, cfg: dict, load: float) -> dict:
    return {
        "case": f"{variant}, {FRAMES} frames of {size} x {size}, batch 16 windows",
        "parameters": parameters(model),
        "median_seconds_per_frame": seconds,
        "ratio to RGB-only model (medians)": seconds / base,
        "repeats": cfg["repeats"],
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": load,
    }
