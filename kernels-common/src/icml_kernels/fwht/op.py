"""The public FWHT entry point, its input checks and its ``torch.library`` registration."""

from __future__ import annotations

import math
from typing import Any

import torch

from icml_kernels._dispatch import select_impl
from icml_kernels.fwht.reference import (
    FLOAT_DTYPES,
    KERNEL_DTYPES,
    check_finite_tensor,
    reference_transform,
    warn_if_overflowed,
)
from icml_kernels.validation import check_finite_float, check_power_of_two, check_tensor


def _check(x: Any) -> int:
    """The length ``n`` of the transformed (last) dimension of a valid input."""
    check_tensor(x, "x", FLOAT_DTYPES)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; the transform runs along the last one")
    return check_power_of_two(x.shape[-1], "x.shape[-1]")


def _run(x: torch.Tensor, scale: float) -> torch.Tensor:
    _check(x)
    reason = None if x.dtype in KERNEL_DTYPES else f"the kernel does not take {x.dtype}"
    if select_impl("fwht", x.device, kernel_reason=reason) == "triton":
        from icml_kernels.fwht.triton_fwht import fwht_triton

        return fwht_triton(x, scale)
    return reference_transform(x, scale)


@torch.library.custom_op("icml_kernels::fwht", mutates_args=(), device_types=("cpu", "cuda"))
def fwht_op(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``torch.ops.icml_kernels.fwht(x, scale)``: ``scale * x @ H_n`` along the last dimension."""
    return _run(x, scale)


@fwht_op.register_fake
def _fwht_fake(x: torch.Tensor, scale: float) -> torch.Tensor:
    _check(x)
    # the real op returns a contiguous tensor whatever the layout of x (a transposed view included); a fake
    # with x's strides made torch.compile's inductor fail its stride assertion
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    ctx.scale = inputs[1]


def _backward(ctx, grad: torch.Tensor):
    # H_n is symmetric, so the vector-Jacobian product is the same transform of the gradient.
    return fwht_op(grad.contiguous(), ctx.scale), None


fwht_op.register_autograd(_backward, setup_context=_setup_context)


def fwht(x: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """Fast Walsh–Hadamard transform along the last dimension.

    Args:
        x (torch.Tensor): floating tensor (float16, bfloat16, float32 or float64) whose last dimension
            ``n`` is a power of two.
        scale (float, Optional): multiplies the result. Default: ``1/sqrt(n)``, the orthonormal
            transform, which is its own inverse (``fwht(fwht(x)) == x``) and preserves norms.

    Returns:
        ``scale * x @ H_n`` with ``H_n`` the Sylvester–Hadamard matrix, same shape and dtype as ``x``.
        Differentiable. Runs the Triton kernel on CUDA and the torch reference on CPU
        (``ICML_KERNELS_IMPL=torch|triton`` forces one).

    Raises ValueError/TypeError naming the argument for a non-tensor, another dtype, a last dimension
    that is not a power of two, NaN or infinite entries of ``x`` or a non-finite ``scale``; warns
    (RuntimeWarning) when the result overflows ``x.dtype``. These checks read ``x`` and the result (a host
    sync on a GPU); ``torch.ops.icml_kernels.fwht`` (:func:`fwht_op`) checks shapes and dtypes only.
    """
    n = _check(x)
    scale = 1.0 / math.sqrt(n) if scale is None else check_finite_float(scale, "scale")
    check_finite_tensor(x, "x")
    return warn_if_overflowed(fwht_op(x, scale), "fwht of x (times scale)")
