"""Triton kernel of the echo combination.

One program per (tile of ``BLOCK_S`` query rows, target frame, batch x head): it loops over the ``F`` key
frames, adds ``a * u`` tiles of its anchor frame (the key frame each term names) and ``b * vbar`` rows in
float32, and writes its tile once. Memory bound: every term reads one ``(BLOCK_S, D)`` tile of ``u``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TILE_ELEMENTS = 4096  # elements of u a program holds per key frame


@triton.jit
def echo_combine_kernel(
    u_ptr,
    vbar_ptr,
    a_ptr,
    b_ptr,
    anchor_ptr,
    key_ptr,
    out_ptr,
    n_heads,
    n_targets,
    n_anchors,
    n_frames,
    S,
    D,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    tile = tl.program_id(0)
    q = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    hq = (bh % n_heads) * n_targets + q  # row of anchor (H, Q) and of a, b, key (H, Q, F)
    rows = tile * BLOCK_S + tl.arange(0, BLOCK_S)  # [BLOCK_S]
    feats = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    mask = (rows < S)[:, None] & (feats < D)[None, :]
    offs = rows[:, None] * D + feats[None, :]  # [BLOCK_S, BLOCK_D] within one (S, D) slice
    anchor = tl.load(anchor_ptr + hq).to(tl.int64)
    u_frames = u_ptr + (bh * n_anchors + anchor) * n_frames * S * D  # u[b, h, anchor]: (F, S, D)

    acc = tl.zeros([BLOCK_S, BLOCK_D], dtype=tl.float32)
    mean = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j in range(0, n_frames):
        key = tl.load(key_ptr + hq * n_frames + j).to(tl.int64)
        a = tl.load(a_ptr + hq * n_frames + j)
        b = tl.load(b_ptr + hq * n_frames + j)
        part = tl.load(u_frames + key * S * D + offs, mask=mask, other=0.0).to(tl.float32)
        acc += a * part
        vbar = tl.load(vbar_ptr + (bh * n_frames + j) * D + feats, mask=feats < D, other=0.0).to(tl.float32)
        mean += b * vbar
    out = acc + mean[None, :]
    tl.store(out_ptr + (bh * n_targets + q) * S * D + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def echo_combine_triton(
    u: torch.Tensor,
    vbar: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    anchor: torch.Tensor,
    key: torch.Tensor,
) -> torch.Tensor:
    """:func:`~icml_kernels.echo_combine.reference.combine_reference` for float16, bfloat16 or float32 ``u``
    and ``vbar`` (``a``, ``b`` are read as float32)."""
    batch, heads, anchors, frames, rows, d = u.shape
    n_targets = a.shape[1]
    out = u.new_empty(batch, heads, n_targets, rows, d)
    if out.numel() == 0:
        return out
    block_d = triton.next_power_of_2(d)
    block_s = max(1, min(TILE_ELEMENTS // block_d, triton.next_power_of_2(rows)))
    grid = (triton.cdiv(rows, block_s), n_targets, batch * heads)
    echo_combine_kernel[grid](
        u.contiguous(),
        vbar.contiguous(),
        a.to(torch.float32).contiguous(),
        b.to(torch.float32).contiguous(),
        anchor.to(torch.int32).contiguous(),
        key.to(torch.int32).contiguous(),
        out,
        heads,
        n_targets,
        anchors,
        frames,
        rows,
        d,
        BLOCK_S=block_s,
        BLOCK_D=block_d,
        num_warps=4 if block_s * block_d <= 2048 else 8,
    )
    return out
