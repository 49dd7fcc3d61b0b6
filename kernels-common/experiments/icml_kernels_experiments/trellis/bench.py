"""Trellis decode benchmark (``uv run icml-bench --only trellis-decode``).

For a random packed weight ``(m, n)`` at K = 2, L = 16, T = 256 (``mulbal``, V = 1, and ``hyb``, V = 2):
the fused decode + matrix-vector product for one input row (Triton on CUDA; the torch reference
elsewhere) against ``torch.nn.functional.linear`` with a dense weight of the same shape (float16 on CUDA,
float32 on CPU). Effective bandwidth = bytes of packed weights read per second. Each implementation is
first checked against the float64 product with the decoded weight; a wrong one gets no ratio.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from icml_kernels.testing import rel_rms_error
from icml_kernels.trellis.format import hyb_table_bits
from icml_kernels.trellis.op import check_params, check_trellis, trellis_gemv_op
from icml_kernels.trellis.reference import decode_reference
from icml_kernels.trellis.testing import random_packed
from icml_kernels_experiments.timing import time_ms

TOLERANCE = {torch.float16: 2e-3, torch.float32: 1e-5}
SHAPES = {"quick": [(4096, 4096)], "full": [(4096, 4096), (8192, 8192), (28672, 8192), (8192, 28672)]}
CPU_SHAPES = [(1024, 1024)]  # the reference decodes the whole weight: keep the CPU run small
L, K, T = 16, 2, 256


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(seed)
    rows: list[dict] = []
    shapes = SHAPES[budget] if device.type == "cuda" else CPU_SHAPES
    for m, n in shapes:
        packed = random_packed(m, n // T, K * T // 32, seed=seed).to(device)
        x = torch.randn(1, n, generator=gen).to(device=device, dtype=dtype)
        cases: list[tuple[str, int, dict[str, Any]]] = [
            ("mulbal", 1, {"mulbal": (627361847, 0, 8), "alpha": 0.01, "beta": 0.0}),
            (
                "hyb",
                2,
                {
                    "table": torch.randn(1 << hyb_table_bits(L), 2, generator=gen).to(device),
                    "alpha": 1.0,
                    "beta": 0.0,
                },
            ),
        ]
        for code, V, params in cases:
            w = decode_reference(packed, code, L, K, V, T, **params).reshape(m, n)  # (m, n) float32
            truth = x.double() @ w.double().T
            dense = w.to(dtype)
            # the registered op, as ProteusLinear's forward runs it (the public trellis_gemv also reads x and
            # the result for NaN and overflow: a host sync that a timing of the kernel must leave out)
            args = check_params(
                check_trellis(code, L, K, V, T),
                code,
                params.get("alpha", 1.0),
                params.get("beta", 0.0),
                params.get("mulbal"),
                params.get("table"),
                device,
            )
            impls: dict[str, Callable[[], torch.Tensor]] = {
                "fused-gemv": functools.partial(trellis_gemv_op, x, packed, code, L, K, V, T, *args),
                "dense-linear": functools.partial(torch.nn.functional.linear, x, dense),
            }
            times = {}
            for name, fn in impls.items():
                err = rel_rms_error(fn().double(), truth)
                ms = time_ms(fn, device, min_samples=3, max_samples=50)[0]
                times[name] = ms
                rows.append(
                    {
                        "op": "trellis-gemv",
                        "device": device.type,
                        "code": code,
                        "L": L,
                        "K": K,
                        "V": V,
                        "m": m,
                        "n": n,
                        "impl": name,
                        "x_dtype": str(dtype).removeprefix("torch."),
                        "median_ms": round(ms, 4),
                        "rel_rms_error": err,
                        "correct": err < TOLERANCE[dtype],
                        "packed_gbps": round(packed.numel() * 4 / (ms * 1e6), 2),
                        "dense_weight_gbps": round(dense.numel() * dense.element_size() / (ms * 1e6), 2),
                    }
                )
            for row in rows[-len(impls) :]:
                row["speedup_vs_dense"] = (  # from the unrounded medians: dense against itself is 1.0
                    round(times["dense-linear"] / times[row["impl"]], 3) if row["correct"] else None
                )
    return rows
