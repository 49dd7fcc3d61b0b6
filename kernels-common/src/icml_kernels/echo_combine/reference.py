"""The echo combination in pure torch (the ground truth of the Triton kernel) and the checks of its
arguments.

An echo approximates the attention output of a target query frame ``q`` from work done once for anchor
frames: ``u[b, h, r, j]`` is the attention of anchor frame ``r``'s ``S`` query rows restricted to key frame
``j`` (``P_rj V_j``), ``vbar[b, h, j]`` the mean value vector of key frame ``j``, and per target frame a
linear combination over key frames:

    out[b, h, q, s] = sum_j a[h, q, j] * u[b, h, anchor[h, q], key[h, q, j], s] + b[h, q, j] * vbar[b, h, j]
"""

from __future__ import annotations

import torch

from icml_kernels.fwht.reference import check_finite_tensor, warn_if_overflowed
from icml_kernels.validation import check_tensor, values_readable

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
FLOAT_DTYPES = (*KERNEL_DTYPES, torch.float64)
INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
KERNEL_MAX_D = 1 << 14  # the widest feature dimension the kernel takes (a tile row sits in registers)


def _shape_error(name: str, expected: str, got: torch.Tensor) -> ValueError:
    return ValueError(f"{name} must have shape {expected}, got {tuple(got.shape)}")


def check_echo(u, vbar, a, b, anchor, key) -> tuple[int, ...]:
    """``(B, H, R, F, S, D, Q)`` of valid arguments: types, dtypes, shapes and devices (metadata only)."""
    check_tensor(u, "u", FLOAT_DTYPES)
    if u.dim() != 6:
        raise _shape_error("u", "(B, H, R, F, S, D)", u)
    batch, heads, anchors, frames, rows, d = u.shape
    check_tensor(vbar, "vbar", FLOAT_DTYPES)
    if vbar.dtype != u.dtype:
        raise TypeError(f"vbar must have the dtype of u ({u.dtype}), got {vbar.dtype}")
    if vbar.shape != (batch, heads, frames, d):
        raise _shape_error("vbar", f"(B, H, F, D) = {(batch, heads, frames, d)} (from u)", vbar)
    check_tensor(a, "a", FLOAT_DTYPES)
    if a.dim() != 3 or a.shape[0] != heads or a.shape[2] != frames:
        raise _shape_error("a", f"(H, Q, F) with H = {heads}, F = {frames} (from u)", a)
    n_targets = a.shape[1]
    check_tensor(b, "b", FLOAT_DTYPES)
    if b.shape != a.shape:
        raise _shape_error("b", f"(H, Q, F) = {tuple(a.shape)}, the shape of a", b)
    check_tensor(anchor, "anchor", INDEX_DTYPES)
    if anchor.shape != (heads, n_targets):
        raise _shape_error("anchor", f"(H, Q) = {(heads, n_targets)} (from a)", anchor)
    check_tensor(key, "key", INDEX_DTYPES)
    if key.shape != a.shape:
        raise _shape_error("key", f"(H, Q, F) = {tuple(a.shape)}, the shape of a", key)
    for name, t in (("vbar", vbar), ("a", a), ("b", b), ("anchor", anchor), ("key", key)):
        if t.device != u.device:
            raise ValueError(f"{name} must be on the device of u ({u.device}), got {t.device}")
    return batch, heads, anchors, frames, rows, d, n_targets


def check_echo_values(u, vbar, a, b, anchor, key) -> None:
    """``anchor`` in ``[0, R)``, ``key`` in ``[0, F)``, no NaN or infinite entry in ``u``, ``vbar``, ``a``,
    ``b``. Reads the data (a host sync on a GPU), so only the public functions call it; skipped while
    ``torch.compile`` traces and for meta or fake tensors (:func:`~icml_kernels.validation.values_readable`).
    """
    if not values_readable(u, vbar, a, b, anchor, key):
        return
    for name, index, limit in (("anchor", anchor, u.shape[2]), ("key", key, u.shape[3])):
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= limit):
            raise ValueError(f"{name} must hold indices in 0..{limit - 1}, got values outside")
    for name, t in (("u", u), ("vbar", vbar), ("a", a), ("b", b)):
        check_finite_tensor(t, name)


def combine_reference(
    u: torch.Tensor,
    vbar: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    anchor: torch.Tensor,
    key: torch.Tensor,
) -> torch.Tensor:
    """Unchecked echo combination, ``(B, H, Q, S, D)`` in ``u.dtype``, computed in float32 (float64 for
    float64 ``u``). Differentiable in ``u``, ``vbar``, ``a``, ``b``.

    The coefficients of the partial outputs go into one weight per (target, anchor, key frame) pair,
    ``W[h, q, anchor * F + key] += a``, so the sum is a product with ``u`` viewed as ``(B, H, R*F, S, D)``:
    no gathered copy of ``u`` per target frame, and a key frame picked twice (a clamped offset) counts twice.
    """
    heads, n_targets, frames = a.shape
    compute = torch.float64 if u.dtype == torch.float64 else torch.float32
    uc = u.to(compute).flatten(2, 3)  # (B, H, R*F, S, D)
    slot = anchor.long()[..., None] * frames + key.long()  # (H, Q, F): the rows of uc that a weighs
    weight = a.new_zeros(heads, n_targets, uc.shape[2], dtype=compute)  # (H, Q, R*F)
    weight = weight.scatter_add(2, slot, a.to(compute))
    out = torch.einsum("hqm,bhmsd->bhqsd", weight, uc)
    mean = torch.einsum("hqj,bhjd->bhqd", b.to(compute), vbar.to(compute))  # (B, H, Q, D)
    return (out + mean[:, :, :, None, :]).to(u.dtype).contiguous()


def echo_combine_reference(
    u: torch.Tensor,
    vbar: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    anchor: torch.Tensor,
    key: torch.Tensor,
) -> torch.Tensor:
    """The torch reference of :func:`~icml_kernels.echo_combine`, with the same arguments and checks (it
    reads the data: a host sync on a GPU); always the reference, on any device, differentiable in ``u``,
    ``vbar``, ``a`` and ``b``."""
    check_echo(u, vbar, a, b, anchor, key)
    check_echo_values(u, vbar, a, b, anchor, key)
    return warn_if_overflowed(combine_reference(u, vbar, a, b, anchor, key), "echo_combine_reference")
