"""Benchmark ``viewmask-sampling``: wall time to generate the three target views of a batch of condition
images with ViewMask (:func:`~icml_generative.viewmask.generate_views`: tokenize, 12 unmasking steps,
decode) against the continuous baseline (:class:`~icml_generative_experiments.viewmask.flow.PixelFlow`, 12
Euler steps) at equal function evaluations, both of the reproduction's size (width 64, 3 layers, 32 x 32
views). The models are untrained (time does not depend on the weights). Medians over repeats after one
warm-up call; the ratio is from the same run. torch at its default thread count.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from icml_generative.viewmask import LFQTokenizer, MultiViewTransformer, generate_views
from icml_generative_experiments.viewmask.flow import PixelFlow
from icml_generative_experiments.viewmask.repro import CELL, MODEL, SAMPLE_STEPS, SIZE, TOKENIZER

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"repeats": 3, "batches": (1, 32)},
    "full": {"repeats": 10, "batches": (1, 32, 128)},
}


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        fn()
        if r:  # the first call warms up allocators
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    torch.manual_seed(seed)
    tok = LFQTokenizer(SIZE, 3, TOKENIZER["bits"], TOKENIZER["downsample"], TOKENIZER["width"]).eval()
    viewmask = MultiViewTransformer(tok.codebook_size, tok.grid, 4, **MODEL).eval()
    flow = PixelFlow(SIZE, 3, CELL, 4, **MODEL).eval()
    rows = []
    for batch in cfg["batches"]:
        images = torch.rand(batch, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
        gen = torch.Generator().manual_seed(seed)

        def sample_viewmask(images: torch.Tensor = images, gen: torch.Generator = gen) -> Any:
            return generate_views(tok, viewmask, images, steps=SAMPLE_STEPS, generator=gen)

        def sample_flow(images: torch.Tensor = images, gen: torch.Generator = gen) -> Any:
            return flow.sample(images, SAMPLE_STEPS, generator=gen)

        t_vm = median_seconds(sample_viewmask, cfg["repeats"])
        t_flow = median_seconds(sample_flow, cfg["repeats"])
        for name, model, t in (("ViewMask", viewmask, t_vm), ("continuous flow", flow, t_flow)):
            rows.append(
                {
                    "case": f"{name}, batch {batch}, {SAMPLE_STEPS} model evaluations, 3 target views of {SIZE} x {SIZE}",
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "median_seconds": t,
                    "ratio to continuous flow (medians)": t / t_flow,
                    "repeats": cfg["repeats"],
                    "torch_threads": torch.get_num_threads(),
                    "load_average_1min": load,
                }
            )
    return rows
