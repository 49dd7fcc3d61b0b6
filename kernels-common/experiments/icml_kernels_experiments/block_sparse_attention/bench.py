"""Block-sparse attention benchmark (``uv run icml-bench --only block-sparse-attention``).

On CUDA, for N = 8192, 16384, 32768 tokens (B = 1, H = 8, D = 64, blocks of 64, float16 and bfloat16) and
block densities 0.1, 0.25, 0.5, 1.0 (each query block keeps its diagonal key block and each other one with
probability ``density``): the Triton kernel, ``flex_attention`` with the same block mask (compiled, with
forward tiles that divide the blocks; the mask is built once, outside the timing; a failure is recorded in
``error``) and dense
``scaled_dot_product_attention``, the baseline whose work the sparsity saves. Each is first checked against
the float64 torch reference on head 0 (SDPA against the reference with every block listed); a wrong one
gets no ratio. ``tflops`` counts the work each does: ``4 * D`` flops per kept (query, key) pair, every pair
for SDPA.

Without CUDA: one small configuration, the torch reference and SDPA in float32 on the CPU, so that the
benchmark runs (and is tested) anywhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from icml_kernels.block_sparse_attention import block_mask_from_index, dense_block_index
from icml_kernels.block_sparse_attention.flex import flex_kernel_options
from icml_kernels.block_sparse_attention.reference import attention_reference, num_blocks
from icml_kernels.testing import rel_rms_error
from icml_kernels_experiments.timing import time_ms

TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}
DENSITIES = (0.1, 0.25, 0.5, 1.0)
CUDA_SIZES = {"quick": [8192, 16384, 32768], "full": [8192, 16384, 32768, 65536]}
HEADS, D, BLOCK_SIZE = 8, 64, 64
CPU_N, CPU_HEADS, CPU_DENSITIES = 512, 2, (0.25, 1.0)


def random_block_index(heads: int, n_blocks: int, density: float, gen: torch.Generator) -> torch.Tensor:
    """``(1, heads, NQB, MAXK)`` int32: the diagonal key block and each other one with probability
    ``density``, listed first in ascending order, then ``-1``."""
    keep = (torch.rand(1, heads, n_blocks, n_blocks, generator=gen) < density) | torch.eye(
        n_blocks, dtype=torch.bool
    )
    order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)
    index = torch.where(keep.gather(-1, order), order, -1)
    return index[..., : int(keep.sum(-1).max())].to(torch.int32)


def kept_pairs(index: torch.Tensor, n: int, block_size: int) -> int:
    """The number of (query, key) pairs a block index keeps (the last block may be short)."""
    blocks = num_blocks(n, block_size)
    sizes = torch.full((blocks + 1,), block_size, dtype=torch.float64)
    sizes[blocks - 1], sizes[blocks] = n - block_size * (blocks - 1), 0.0  # slot `blocks`: the padding
    listed = torch.where(index < 0, blocks, index.long())
    return int((sizes[listed].sum(-1) * sizes[:blocks]).sum())


def _triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor, scale: float
) -> torch.Tensor:
    from icml_kernels.block_sparse_attention.triton_block_sparse import block_sparse_attention_triton

    return block_sparse_attention_triton(q, k, v, index, BLOCK_SIZE, scale)[0]


def _reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor, scale: float
) -> torch.Tensor:
    return attention_reference(q, k, v, index, BLOCK_SIZE, scale)[0]


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    rows: list[dict] = []
    if device.type == "cpu":
        return _run_size(CPU_N, CPU_HEADS, torch.float32, CPU_DENSITIES, device, gen)
    for n in CUDA_SIZES[budget]:
        for dtype in (torch.float16, torch.bfloat16):
            rows += _run_size(n, HEADS, dtype, DENSITIES, device, gen)
            torch.cuda.empty_cache()
    return rows


def _run_size(
    n: int,
    heads: int,
    dtype: torch.dtype,
    densities: tuple[float, ...],
    device: torch.device,
    gen: torch.Generator,
) -> list[dict]:
    q, k, v = (torch.randn(1, heads, n, D, generator=gen).to(device, dtype) for _ in range(3))
    scale = 1 / math.sqrt(D)
    q0, k0, v0 = (t[:, :1].double() for t in (q, k, v))  # head 0: the slice checked against the truth
    dtype_name = str(dtype).removeprefix("torch.")
    base = {"op": "block-sparse-attention", "device": device.type, "dtype": dtype_name, "batch": 1}
    base |= {"heads": heads, "n": n, "d": D, "block_size": BLOCK_SIZE}

    def measure(name: str, fn: Callable[[], torch.Tensor], truth: torch.Tensor, pairs: int, **extra) -> dict:
        row = {**base, **extra, "impl": name}
        try:
            err = rel_rms_error(fn()[:, :1], truth)
            median, p20, p80 = time_ms(fn, device)
        except Exception as exc:  # flex_attention may not compile for this shape, dtype or torch
            return {**row, "error": f"{type(exc).__name__}: {exc}"[:500], "correct": False}
        return {
            **row,
            "median_ms": round(median, 4),
            "p20_ms": round(p20, 4),
            "p80_ms": round(p80, 4),
            "tflops": round(4 * D * pairs / (median * 1e9), 2),
            "rel_rms_error": err,
            "correct": err < TOLERANCE[dtype],
        }

    dense_truth = _reference(q0, k0, v0, dense_block_index(n, BLOCK_SIZE).to(device), scale)
    sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention, q, k, v, scale=scale)
    baseline = measure("sdpa", sdpa, dense_truth, heads * n * n, density=1.0, kept_fraction=1.0)
    rows = [baseline]
    if device.type == "cuda":
        from torch.nn.attention.flex_attention import flex_attention

        flex = torch.compile(flex_attention, dynamic=False)
    for density in densities:
        index = random_block_index(heads, num_blocks(n, BLOCK_SIZE), density, gen).to(device)
        truth = _reference(q0, k0, v0, index[:, :1], scale)
        pairs = kept_pairs(index, n, BLOCK_SIZE)
        extra = {"density": density, "kept_fraction": round(pairs / (heads * n * n), 4)}
        impls: dict[str, Callable[[], torch.Tensor]] = {}
        if device.type == "cuda":
            impls["triton"] = functools.partial(_triton, q, k, v, index, scale)
            mask = block_mask_from_index(index, n, BLOCK_SIZE)  # built once, as a model builds it per step
            options = flex_kernel_options(BLOCK_SIZE)
            impls["flex"] = functools.partial(
                flex, q, k, v, block_mask=mask, scale=scale, kernel_options=options
            )
        else:
            impls["reference"] = functools.partial(_reference, q, k, v, index, scale)
        rows += [measure(name, fn, truth, pairs, **extra) for name, fn in impls.items()]
    base_ms = baseline["median_ms"] if baseline["correct"] else None
    for row in rows:
        row["speedup_vs_sdpa"] = round(base_ms / row["median_ms"], 3) if base_ms and row["correct"] else None
    return rows
