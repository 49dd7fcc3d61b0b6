"""The public echo combination entry point, its dispatch and its ``torch.library`` registration."""

from __future__ import annotations

import torch

from icml_kernels._dispatch import select_impl
from icml_kernels.echo_combine.reference import (
    KERNEL_DTYPES,
    KERNEL_MAX_D,
    check_echo,
    check_echo_values,
    combine_reference,
)
from icml_kernels.fwht.reference import warn_if_overflowed


def _kernel_reason(u: torch.Tensor) -> str | None:
    if u.dtype not in KERNEL_DTYPES:
        return f"the kernel does not take {u.dtype}"
    if u.shape[-1] > KERNEL_MAX_D:
        return f"the kernel takes a feature dimension D up to {KERNEL_MAX_D}, got {u.shape[-1]}"
    return None


@torch.library.custom_op("icml_kernels::echo_combine", mutates_args=(), device_types=("cpu", "cuda"))
def echo_combine_op(
    u: torch.Tensor,
    vbar: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    anchor: torch.Tensor,
    key: torch.Tensor,
) -> torch.Tensor:
    """``torch.ops.icml_kernels.echo_combine(u, vbar, a, b, anchor, key)``; forward only (no autograd)."""
    check_echo(u, vbar, a, b, anchor, key)
    if select_impl("echo_combine", u.device, kernel_reason=_kernel_reason(u)) == "triton":
        from icml_kernels.echo_combine.triton_echo_combine import echo_combine_triton

        return echo_combine_triton(u, vbar, a, b, anchor, key)
    return combine_reference(u, vbar, a, b, anchor, key)


@echo_combine_op.register_fake
def _echo_combine_fake(u, vbar, a, b, anchor, key):
    batch, heads, _, _, rows, d, n_targets = check_echo(u, vbar, a, b, anchor, key)
    return u.new_empty(batch, heads, n_targets, rows, d)


def echo_combine(
    u: torch.Tensor,
    vbar: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    anchor: torch.Tensor,
    key: torch.Tensor,
) -> torch.Tensor:
    """Combine anchor frames' partial attention outputs into target frames' outputs (EchoAttention).

    ``out[b, h, q, s] = sum_j a[h, q, j] * u[b, h, anchor[h, q], key[h, q, j], s] + b[h, q, j] * vbar[b, h, j]``

    Args:
        u (torch.Tensor): ``(B, H, R, F, S, D)`` partial outputs ``P_rj V_j`` of the ``S`` query rows of
            each of ``R`` anchor frames against each of ``F`` key frames; float16, bfloat16, float32
            (float64 runs the reference).
        vbar (torch.Tensor): ``(B, H, F, D)`` mean value vector of each key frame, ``u``'s dtype.
        a, b (torch.Tensor): ``(H, Q, F)`` floating coefficients of the ``Q`` target frames.
        anchor (torch.Tensor): ``(H, Q)`` integers in ``0..R-1``: the anchor frame each target copies.
        key (torch.Tensor): ``(H, Q, F)`` integers in ``0..F-1``: which of the anchor's partial outputs
            term ``j`` uses (``key[h, q, j] = j`` pairs equal key frames; a shifted, clamped index pairs
            equal temporal offsets).

    Returns:
        ``(B, H, Q, S, D)`` in ``u``'s dtype, accumulated in float32 (float64 for float64). The Triton
        kernel on CUDA, the torch reference elsewhere (``ICML_KERNELS_IMPL=torch|triton`` forces one).
        Differentiable in ``u``, ``vbar``, ``a``, ``b``: the kernel is forward only, so when autograd is on
        and one of them requires grad the torch reference runs instead, whatever ``ICML_KERNELS_IMPL`` says.

    Raises ValueError/TypeError naming the argument for a wrong type, dtype, shape or device, an index out
    of range, or NaN or infinite entries of ``u``, ``vbar``, ``a``, ``b``; warns (RuntimeWarning) when the
    result overflows. These checks read the data (a host sync on a GPU);
    ``torch.ops.icml_kernels.echo_combine`` (:func:`echo_combine_op`) checks types, shapes and dtypes only.
    """
    check_echo(u, vbar, a, b, anchor, key)
    check_echo_values(u, vbar, a, b, anchor, key)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (u, vbar, a, b)):
        out = combine_reference(u, vbar, a, b, anchor, key)
    else:
        out = echo_combine_op(u, vbar, a, b, anchor, key)
    return warn_if_overflowed(out, "echo_combine")
