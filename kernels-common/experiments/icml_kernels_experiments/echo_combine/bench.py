"""Echo combination benchmark (``uv run icml-bench --only echo-combine``).

On CUDA, at the size of a video DiT layer (B = 1, H = 8, R = 4 anchor frames, F = 16 key frames, S = 1024
tokens per frame, D = 64, Q = 12 target frames; float16 and bfloat16): the Triton kernel against the torch
reference (the weight-matrix product the autograd path runs). Each is first checked against the float64
reference; a wrong one gets no ratio. ``gbps`` counts the bytes the kernel must move: one ``(S, D)`` tile of
``u`` per term and the output.

Without CUDA: a small size, the reference alone in float32, so that the benchmark runs (and is tested)
anywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from icml_kernels.echo_combine.reference import combine_reference
from icml_kernels.testing import rel_rms_error
from icml_kernels_experiments.timing import time_ms

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6}
CUDA_SHAPE = {"B": 1, "H": 8, "R": 4, "F": 16, "S": 1024, "D": 64, "Q": 12}
CPU_SHAPE = {"B": 1, "H": 2, "R": 2, "F": 4, "S": 64, "D": 32, "Q": 3}


def echo_inputs(shape: dict, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    """Random ``(u, vbar, a, b, anchor, key)``; ``key`` the same-temporal-offset variant (clamped shifts)."""
    B, H, R, F, S, D, Q = (shape[c] for c in "BHRFSDQ")
    u = torch.randn(B, H, R, F, S, D, generator=gen)
    vbar = torch.randn(B, H, F, D, generator=gen)
    a, b = torch.randn(2, H, Q, F, generator=gen) / F
    anchor = torch.randint(0, R, (H, Q), generator=gen)
    key = (torch.arange(F) - torch.randint(-3, 4, (H, Q, 1), generator=gen)).clamp(0, F - 1)
    return tuple(t.to(device) for t in (u.to(dtype), vbar.to(dtype), a, b, anchor, key))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    shape = CUDA_SHAPE if device.type == "cuda" else CPU_SHAPE
    dtypes = (torch.float16, torch.bfloat16) if device.type == "cuda" else (torch.float32,)
    rows: list[dict] = []
    for dtype in dtypes:
        inputs = echo_inputs(shape, dtype, device, gen)
        truth = combine_reference(inputs[0].double(), inputs[1].double(), *inputs[2:])
        impls: dict[str, Callable[[], torch.Tensor]] = {
            "reference": functools.partial(combine_reference, *inputs)
        }
        if device.type == "cuda":
            from icml_kernels.echo_combine.triton_echo_combine import echo_combine_triton

            impls["triton"] = functools.partial(echo_combine_triton, *inputs)
        moved = (
            (shape["F"] + 1)
            * shape["Q"]
            * shape["S"]
            * shape["D"]
            * shape["B"]
            * shape["H"]
            * inputs[0].element_size()
        )
        for name, fn in impls.items():
            err = rel_rms_error(fn(), truth)
            median, p20, p80 = time_ms(fn, device)
            rows.append(
                {
                    "op": "echo-combine",
                    "device": device.type,
                    "dtype": str(dtype).removeprefix("torch."),
                    **shape,
                    "impl": name,
                    "median_ms": round(median, 4),
                    "p20_ms": round(p20, 4),
                    "p80_ms": round(p80, 4),
                    "gbps": round(moved / (median * 1e6), 2),
                    "rel_rms_error": err,
                    "correct": err < TOLERANCE[dtype],
                }
            )
        reference = rows[-len(impls)]
        for row in rows[-len(impls) :]:
            ok = row["correct"] and reference["correct"]
            row["speedup_vs_reference"] = round(reference["median_ms"] / row["median_ms"], 3) if ok else None
    return rows
