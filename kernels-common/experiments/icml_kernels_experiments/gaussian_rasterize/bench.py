"""Gaussian rasterization benchmark (``uv run icml-bench --only gaussian-rasterize``).

On CUDA, at the sizes of a Gaussian-splatting render (256 x 256 with 1,000 and 4,000 Gaussians, 512 x 512
with 10,000; C = 3, float32, standard deviations of 0.5 to 6 pixels, opacities in [0.05, 1]): the Triton
kernel (including its per-tile lists) against the torch reference (the tiled, culled, differentiable
renderer that runs on the CPU and under autograd). Each is first checked against the float64 reference; a
wrong one gets no ratio. ``mpix_per_s``: output pixels per second.

Without CUDA: a small size (64 x 64, 500 Gaussians), the reference alone, so that the benchmark runs (and
is tested) anywhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from icml_kernels.gaussian_rasterize.reference import rasterize_reference
from icml_kernels.testing import rel_rms_error
from icml_kernels_experiments.timing import time_ms

# float32 against float64: a Gaussian within rounding of alpha = 1/255 at a pixel may count in one only
TOLERANCE = 1e-4
CUDA_CASES = ((256, 256, 1000), (256, 256, 4000), (512, 512, 10000))  # (width, height, N)
CPU_CASES = ((64, 64, 500),)
CHANNELS = 3


def scene(width: int, height: int, n: int, device: torch.device, gen: torch.Generator) -> tuple:
    """Random ``(means2d, conics, colors, opacities, background)`` in float32: means over the image and a
    margin around it, rotated covariances of standard deviations 0.5..6 pixels."""
    means = torch.rand(n, 2, generator=gen) * torch.tensor([width + 20.0, height + 20.0]) - 10
    std = torch.rand(n, 2, generator=gen) * 5.5 + 0.5
    angle = torch.rand(n, generator=gen) * math.pi
    cos, sin = angle.cos(), angle.sin()
    rot = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    inv = torch.linalg.inv(rot @ torch.diag_embed(std**2) @ rot.transpose(-1, -2))
    conics = torch.stack([inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 1]], -1)
    opacities = torch.rand(n, generator=gen) * 0.95 + 0.05
    colors = torch.rand(n, CHANNELS, generator=gen)
    background = torch.rand(CHANNELS, generator=gen)
    return tuple(t.to(device) for t in (means, conics, colors, opacities, background))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    cases = CUDA_CASES if device.type == "cuda" else CPU_CASES
    rows: list[dict] = []
    for width, height, n in cases:
        means, conics, colors, opacities, background = scene(width, height, n, device, gen)
        truth = rasterize_reference(
            means.double(),
            conics.double(),
            colors.double(),
            opacities.double(),
            width,
            height,
            background.double(),
        )
        tensors = (means, conics, colors, opacities)
        impls: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]] = {
            "reference": functools.partial(
                rasterize_reference, *tensors, width=width, height=height, background=background
            )
        }
        if device.type == "cuda":
            from icml_kernels.gaussian_rasterize.triton_gaussian_rasterize import gaussian_rasterize_triton

            impls["triton"] = functools.partial(
                gaussian_rasterize_triton,
                *tensors,
                width=width,
                height=height,
                background=background,
                tile_size=16,
            )
        for name, fn in impls.items():
            image, alpha = fn()
            err = max(rel_rms_error(image, truth[0]), rel_rms_error(alpha, truth[1]))
            median, p20, p80 = time_ms(fn, device)
            rows.append(
                {
                    "op": "gaussian-rasterize",
                    "device": device.type,
                    "dtype": "float32",
                    "width": width,
                    "height": height,
                    "N": n,
                    "C": CHANNELS,
                    "impl": name,
                    "median_ms": round(median, 4),
                    "p20_ms": round(p20, 4),
                    "p80_ms": round(p80, 4),
                    # three significant digits: two decimals gave 0.0 for a CPU reference slower than 410 ms
                    "mpix_per_s": float(f"{width * height / (median * 1e3):.3g}"),
                    "rel_rms_error": err,
                    "correct": err <= TOLERANCE,
                }
            )
        reference = rows[-len(impls)]
        for row in rows[-len(impls) :]:
            ok = row["correct"] and reference["correct"]
            row["speedup_vs_reference"] = round(reference["median_ms"] / row["median_ms"], 3) if ok else None
    return rows
