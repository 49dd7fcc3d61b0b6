"""FWHT benchmark (``uv run icml-bench --only fwht``).

For each shape: the Triton kernel (CUDA only), the torch reference and a dense ``x @ H`` product (the
baseline a user would write), timed by median over repeats (``triton.testing.do_bench`` on CUDA).
Each implementation is first checked against a float64 reference on the benchmark input; a wrong one gets
no speed-up (``speedup_vs_dense`` empty, ``correct`` False).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

# the unchecked transform: the public fwht_reference also reads x and the result, which is not the transform
from icml_kernels.fwht.reference import hadamard_matrix
from icml_kernels.fwht.reference import reference_transform as fwht_reference
from icml_kernels.testing import rel_rms_error
from icml_kernels_experiments.timing import time_ms

TOLERANCE = 1e-5  # float32 relative RMS error against the float64 reference


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows_list = [4096] if budget == "quick" else [1024, 16384]
    sizes = [256, 1024, 4096] if budget == "quick" else [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out: list[dict] = []
    for rows in rows_list:
        for n in sizes:
            x = torch.randn(rows, n, generator=gen).to(device)
            scale = 1 / math.sqrt(n)
            truth = fwht_reference(x.double(), scale)
            h = hadamard_matrix(n, dtype=torch.float32).to(device) * scale
            impls: dict[str, Callable[[], torch.Tensor]] = {
                "reference": functools.partial(fwht_reference, x, scale),
                "dense-matmul": functools.partial(torch.matmul, x, h),
            }
            if device.type == "cuda":
                from icml_kernels.fwht.triton_fwht import fwht_triton

                impls["triton"] = functools.partial(fwht_triton, x, scale)
            timings = {}
            for name, fn in impls.items():
                err = rel_rms_error(fn(), truth)
                median, p20, p80 = time_ms(fn, device)
                timings[name] = median
                out.append(
                    {
                        "op": "fwht",
                        "device": device.type,
                        "dtype": "float32",
                        "rows": rows,
                        "n": n,
                        "impl": name,
                        "median_ms": round(median, 5),
                        "p20_ms": round(p20, 5),
                        "p80_ms": round(p80, 5),
                        "gbps": round(2 * x.numel() * 4 / (median * 1e6), 2),
                        "rel_rms_error": err,
                        "correct": err < TOLERANCE,
                    }
                )
            for row in out[-len(impls) :]:
                row["speedup_vs_dense"] = (  # from the unrounded medians: dense against itself is 1.0
                    round(timings["dense-matmul"] / timings[row["impl"]], 3) if row["correct"] else None
                )
    return out
