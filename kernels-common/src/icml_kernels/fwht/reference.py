"""Pure-torch fast Walsh–Hadamard transform: the ground truth the Triton kernel is tested against."""

from __future__ import annotations

import functools
import warnings

import torch

from icml_kernels.validation import (
    check_finite_float,
    check_power_of_two,
    check_tensor,
    lacks_values,
    values_readable,
)

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
FLOAT_DTYPES = (*KERNEL_DTYPES, torch.float64)
BLOCK_BITS = 5  # index bits per dense block: H_32 products
MAX_MATRIX = 1 << 15  # the largest explicit Hadamard matrix (8 GiB in float64); fwht transforms longer rows
MATRIX_DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
)


def check_finite_tensor(x: torch.Tensor, name: str) -> None:
    """No NaN or infinite entry in ``x`` (reads the data: a host sync on a GPU, so only the public entry
    points call it; the registered ops, which the quantized layers' forward passes run, do not). Skipped
    while ``torch.compile`` traces (a data-dependent branch would break the graph) and for a meta or fake
    ``x`` (:func:`~icml_kernels.validation.values_readable`)."""
    if not values_readable(x):
        return
    if x.numel() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")


def warn_if_overflowed(y: torch.Tensor, what: str) -> torch.Tensor:
    """``y``, with a RuntimeWarning when finite inputs gave a NaN or infinite entry (an overflow); skipped
    while ``torch.compile`` traces and for a meta or fake ``y``."""
    if not values_readable(y):
        return y
    if y.numel() and not bool(torch.isfinite(y).all()):
        warnings.warn(
            f"{what} overflowed {y.dtype}: the result holds infinite entries", RuntimeWarning, stacklevel=3
        )
    return y


def fwht_reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * x @ H_n`` along the last dimension of a floating ``x`` (float16, bfloat16, float32 or
    float64) whose last dimension ``n`` is a power of two; the checked entry point of
    :func:`reference_transform` (see there). Raises ValueError/TypeError naming the argument for a bad
    ``x`` (type, dtype, shape, NaN or infinite entries) or ``scale`` (not a finite number); warns
    (RuntimeWarning) when the result overflows ``x.dtype``."""
    check_tensor(x, "x", FLOAT_DTYPES)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; the transform runs along the last one")
    check_power_of_two(x.shape[-1], "x.shape[-1]")
    scale = check_finite_float(scale, "scale")
    check_finite_tensor(x, "x")
    return warn_if_overflowed(reference_transform(x, scale), "fwht_reference of x (times scale)")


def reference_transform(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * x @ H_n`` along the last dimension, with ``H_n`` the Sylvester–Hadamard matrix.

    ``n = x.shape[-1]`` must be a power of two. Half-precision inputs are transformed in float32 and the
    result is cast back, like the kernel does.

    ``H_{2^m}`` is the Kronecker product of ``m`` copies of ``H_2``, so it factors into blocks
    ``H_{2^m} = H_{2^s1} ⊗ ... ⊗ H_{2^sj}`` (``s1 + ... + sj = m``, each at most :data:`BLOCK_BITS`). Each
    block transforms its own group of index bits by a small dense product with the explicit Hadamard matrix
    ``H_{2^s}``: ``2^s n`` multiply-adds per row and block, ``n log2 n * 2^s / s`` in all, which BLAS runs
    several times faster than ``log2 n`` memory-bound butterfly passes (at ``n = 2^25``: 0.8 s instead of
    5.0 s on 2 cores, float64).
    """
    n = x.shape[-1]
    bits = n.bit_length() - 1
    compute = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    y = x.reshape(-1, n).to(compute)  # (rows, n)
    rows, done = y.shape[0], 0
    while done < bits:
        s = min(BLOCK_BITS, bits - done)
        # (2^s, 2^s), symmetric, on the input's device; built afresh for a meta or fake x (under
        # FakeTensorMode or a non-strict torch.export the matrix is fake: cached, later real calls got it)
        h = (
            _hadamard_on(1 << s, compute, y.device)
            if not lacks_values(x)
            else hadamard_matrix(1 << s, compute).to(y.device)
        )
        if done == 0:  # the lowest bits: one (rows * n / 2^s, 2^s) @ H product
            y = y.view(-1, 1 << s) @ h
        else:  # index = high * 2^(done+s) + mid * 2^done + low: transform the mid bits (axis -2)
            y = torch.matmul(h, y.view(rows * (n >> (done + s)), 1 << s, 1 << done))
        done += s
    # contiguous like the kernel's output and the registered op's fake (n = 1 skips every product above, and
    # the product with scale would keep the layout of a transposed x)
    return (y.reshape(x.shape) * scale).to(x.dtype).contiguous()


@functools.lru_cache(maxsize=32)
def _hadamard_on(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """:func:`hadamard_matrix` in ``dtype`` on ``device``, kept there (float64 on CUDA runs this reference:
    until 2026-12-04 it multiplied by a CPU matrix and failed)."""
    return hadamard_matrix(n, dtype).to(device)


def hadamard_matrix(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The unnormalized Sylvester–Hadamard matrix of size ``n`` (a power of two, at most 2^15: an explicit
    matrix; :func:`~icml_kernels.fwht` transforms longer rows), built by Kronecker products, in ``dtype``
    (a floating, complex or signed integer dtype: the entries are +-1)."""
    check_power_of_two(n, "n")
    if n > MAX_MATRIX:
        raise ValueError(f"n must be at most {MAX_MATRIX} for an explicit n x n matrix (use fwht), got {n}")
    if not isinstance(dtype, torch.dtype) or dtype not in MATRIX_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in MATRIX_DTYPES)
        raise TypeError(f"dtype must be a torch.dtype that holds -1 ({names}), got {dtype!r}")
    h = torch.ones(1, 1, dtype=dtype)
    base = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=dtype)
    while h.shape[0] < n:
        h = torch.kron(base, h)
    return h
