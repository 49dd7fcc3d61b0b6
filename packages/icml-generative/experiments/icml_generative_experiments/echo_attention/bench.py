"""Benchmark ``echo-attention-step``: wall time of one denoiser call (one sampler step) of a Wan video
transformer with dense attention and with EchoAttention routes at attention-FLOP budgets.

The transformer has random weights (time does not depend on them) and a Wan 2.1-1.3B-like attention width
on CUDA (12 heads x 128, bfloat16, 16 frames of 32 x 32 tokens = 16,384 tokens; 2 blocks), a small one on
CPU (float32). Routes: every head sparse (density filling the budget), every head echo (anchor stride 4),
and half the heads of each block echo, half sparse (density filling the budget). Each row: median seconds
over repeats after a warm-up call, the ratio to dense measured in the same run, the routes' attention-FLOP
fraction, and the relative error of the output against dense (random weights: a check that the routes
ran, not a quality measure).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from icml_generative.echo_attention import EchoPolicy, VideoLayout, apply_echo_attention

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"frames": 8, "side": 4, "heads": 2, "head_dim": 16, "repeats": 3},
    "full": {"frames": 8, "side": 16, "heads": 4, "head_dim": 32, "repeats": 5},
}
CUDA = {"frames": 16, "side": 32, "heads": 12, "head_dim": 128, "repeats": 10}
LAYERS, BLOCK_SIZE, STRIDE, BUDGET = 2, 64, 4, 0.25


def _time(fn, repeats: int, cuda: bool) -> float:
    times = []
    for r in range(repeats + 1):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        if r:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    from diffusers import WanTransformer3DModel

    cuda = torch.cuda.is_available()
    cfg = dict(CUDA) if cuda and budget == "full" else dict(BUDGETS[budget])
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    torch.manual_seed(seed)
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=cfg["heads"],
        attention_head_dim=cfg["head_dim"],
        in_channels=4,
        out_channels=4,
        text_dim=32,
        freq_dim=32,
        ffn_dim=4 * cfg["heads"] * cfg["head_dim"],
        num_layers=LAYERS,
    ).eval()
    model = model.to(device=device, dtype=dtype)
    side = cfg["side"]
    layout = VideoLayout(cfg["frames"], side * side)
    g = torch.Generator().manual_seed(seed)
    inputs = {
        "hidden_states": torch.randn(1, 4, cfg["frames"], 2 * side, 2 * side, generator=g).to(device, dtype),
        "timestep": torch.tensor([500.0], device=device),
        "encoder_hidden_states": torch.randn(1, 8, 32, generator=g).to(device, dtype),
    }
    block = min(BLOCK_SIZE, side * side)
    policy = EchoPolicy(
        LAYERS,
        cfg["heads"],
        cfg["head_dim"],
        layout,
        anchor_stride=STRIDE,
        block_size=block,
        neighbor_frames=0,
    )
    policy.to(device)
    apply_echo_attention(model, policy)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    half = ["echo"] * (cfg["heads"] // 2) + ["sparse"] * (cfg["heads"] - cfg["heads"] // 2)
    cases = {
        "dense": [["dense"] * cfg["heads"]] * LAYERS,
        f"sparse, {BUDGET:.0%} budget": [["sparse"] * cfg["heads"]] * LAYERS,
        f"echo, anchor stride {STRIDE}": [["echo"] * cfg["heads"]] * LAYERS,
        f"half echo, half sparse, {BUDGET:.0%} budget": [half] * LAYERS,
    }
    rows = []
    base: float | None = None
    reference = torch.zeros(())
    with torch.no_grad():
        for name, routes in cases.items():
            policy.set_routes(routes)
            if "sparse" in name:
                policy.fit_density(BUDGET)
            out = model(**inputs, return_dict=False)[0].float()
            seconds = _time(lambda: model(**inputs, return_dict=False), cfg["repeats"], cuda)
            if base is None:
                base, reference = seconds, out
            rows.append(
                {
                    "case": f"{name}: {LAYERS} Wan blocks, {cfg['heads']}x{cfg['head_dim']} heads, {layout.frames} frames x "
                    f"{layout.tokens_per_frame} tokens ({layout.num_tokens}), {str(dtype).removeprefix('torch.')}, {device}",
                    "median_seconds": seconds,
                    "ratio to dense (medians)": seconds / base,
                    "attention_flops_fraction": policy.flops()["fraction"],
                    "rel_error_vs_dense": float((out - reference).norm() / reference.norm()),
                    "repeats": cfg["repeats"],
                    "torch_threads": torch.get_num_threads(),
                    "load_average_1min": load,
                }
            )
    return rows
