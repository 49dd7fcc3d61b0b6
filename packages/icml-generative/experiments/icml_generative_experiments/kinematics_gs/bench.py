"""Benchmark ``kinematics-gs-render``: wall time of :func:`~icml_generative.kinematics_gs.rasterization`
(forward, and forward + backward) against the independent per-pixel reference
:func:`~icml_generative.kinematics_gs.naive_rasterization` on the same scenes; on CUDA (when present) also
the renderer with the Triton tile kernel against the same renderer forced to the torch path
(``ICML_KERNELS_IMPL=torch``). Random scenes of ``n`` Gaussians in front of one camera. Medians over
repeats after one warm-up call; ratios from the same run. torch at its default thread count.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from icml_generative.kinematics_gs import (
    intrinsics,
    look_at,
    naive_rasterization,
    quat_scale_to_covar,
    rasterization,
)

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"repeats": 3, "cpu": ((16, 32), (64, 48)), "naive_max": 32, "cuda": ((2000, 256),)},
    "full": {
        "repeats": 10,
        "cpu": ((16, 32), (64, 48), (256, 64)),
        "naive_max": 48,
        "cuda": ((2000, 256), (10000, 512)),
    },
}


def median_seconds(fn: Callable[[], Any], repeats: int, sync: bool = False) -> float:
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        if r:  # the first call warms up allocators (and compiles the kernel)
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def scene(n: int, size: int, seed: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 3, generator=gen) * torch.tensor([2.0, 2.0, 1.0]) - torch.tensor([1.0, 1.0, 0.0])
    q = torch.randn(n, 4, generator=gen)
    out = {
        "means": means,
        "quats": q / q.norm(dim=-1, keepdim=True),
        "scales": torch.rand(n, 3, generator=gen) * 0.08 + 0.02,
        "opacities": torch.rand(n, generator=gen) * 0.9 + 0.05,
        "colors": torch.rand(n, 3, generator=gen),
        "viewmats": look_at((0.0, 0.0, -3.0), (0.0, 0.0, 0.5)).float()[None],
        "Ks": intrinsics(size, size, 50.0).float()[None],
    }
    return {k: v.to(device) for k, v in out.items()}


def render(s: dict[str, torch.Tensor], size: int) -> torch.Tensor:
    return rasterization(
        s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], s["viewmats"], s["Ks"], size, size
    )[0]


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    for n, size in cfg["cpu"]:
        s = scene(n, size, seed)
        grads = {
            k: v.clone().requires_grad_(k in ("means", "scales", "colors", "opacities")) for k, v in s.items()
        }

        def backward(g: dict[str, torch.Tensor] = grads, size: int = size) -> None:
            render(g, size).sum().backward()

        t_fwd = median_seconds(functools.partial(render, s, size), cfg["repeats"])
        t_bwd = median_seconds(backward, cfg["repeats"])
        row: dict[str, Any] = {
            "case": f"CPU, {n} Gaussians, {size} x {size}",
            "forward_median_seconds": t_fwd,
            "forward_backward_median_seconds": t_bwd,
            "repeats": cfg["repeats"],
            "torch_threads": torch.get_num_threads(),
            "load_average_1min": load,
        }
        if size <= cfg["naive_max"]:
            covars = quat_scale_to_covar(s["quats"], s["scales"])
            naive = functools.partial(
                naive_rasterization,
                s["means"], covars, s["opacities"], s["colors"], s["viewmats"][0], s["Ks"][0], size, size,
            )  # fmt: skip
            t_naive = median_seconds(naive, max(1, cfg["repeats"] // 3))
            row["naive_median_seconds"] = t_naive
            row["speed-up over the per-pixel reference (medians)"] = t_naive / t_fwd
        rows.append(row)
    if torch.cuda.is_available():
        for n, size in cfg["cuda"]:
            s = scene(n, size, seed, "cuda")
            t_kernel = median_seconds(functools.partial(render, s, size), cfg["repeats"], sync=True)
            previous = os.environ.get("ICML_KERNELS_IMPL")
            os.environ["ICML_KERNELS_IMPL"] = "torch"
            try:
                t_torch = median_seconds(functools.partial(render, s, size), cfg["repeats"], sync=True)
            finally:
                if previous is None:
                    os.environ.pop("ICML_KERNELS_IMPL")
                else:
                    os.environ["ICML_KERNELS_IMPL"] = previous
            rows.append(
                {
                    "case": f"CUDA ({torch.cuda.get_device_name()}), {n} Gaussians, {size} x {size}, forward",
                    "triton_median_seconds": t_kernel,
                    "torch_median_seconds": t_torch,
                    "speed-up of the Triton kernel (medians)": t_torch / t_kernel,
                    "repeats": cfg["repeats"],
                }
            )
    return rows
