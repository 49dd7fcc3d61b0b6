"""Triton kernel of block-sparse attention: a flash-attention forward pass that visits only the listed key
blocks.

One program per (query block, batch x head). It holds its ``BLOCK`` query rows, walks the key blocks of its
row of the block index (compacted on the host side beforehand: listed blocks first, in ascending order,
and a count per row, so the loop has no branch) and keeps the online-softmax state in float32: the running
row maximum ``m``, the running sum ``l`` of ``exp(s - m)`` and the unnormalized output. Scores are kept in
base 2 (``scale * log2(e)`` folded into one multiplier), so the exponentials are ``exp2``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from icml_kernels.block_sparse_attention.reference import num_blocks


@triton.jit
def block_sparse_attention_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    index_ptr,
    count_ptr,
    out_ptr,
    lse_ptr,
    n_tokens,
    n_heads,
    index_stride_b,
    index_stride_h,
    index_stride_q,
    count_stride_b,
    count_stride_h,
    scale_log2,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    base = bh.to(tl.int64) * n_tokens * D  # q, k, v, out are contiguous (B, H, N, D)
    rows = qb * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    cols = tl.arange(0, BLOCK)  # [BLOCK] key offsets within a block
    feats = tl.arange(0, D)  # [D]
    row_ok = rows < n_tokens
    q = tl.load(q_ptr + base + rows[:, None] * D + feats[None, :], mask=row_ok[:, None], other=0.0)

    m = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK], dtype=tl.float32)  # noqa: E741
    acc = tl.zeros([BLOCK, D], dtype=tl.float32)
    index_row = index_ptr + b * index_stride_b + h * index_stride_h + qb * index_stride_q
    count = tl.load(count_ptr + b * count_stride_b + h * count_stride_h + qb)
    for j in range(0, count):
        keys = tl.load(index_row + j) * BLOCK + cols  # [BLOCK]
        key_ok = keys < n_tokens  # only the last block is ragged; a listed block has at least one key
        offs = base + keys[:, None] * D + feats[None, :]  # [BLOCK, D]
        k = tl.load(k_ptr + offs, mask=key_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * scale_log2  # [BLOCK, BLOCK]
        s = tl.where(key_ok[None, :], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: each listed block has a key
        alpha = tl.exp2(m - m_new)  # rescales the old state; 0 on the first block (m = -inf)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)  # noqa: E741
        v = tl.load(v_ptr + offs, mask=key_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)
        m = m_new

    seen = l > 0  # False on a row with no key block: output zeros, lse -inf
    out = acc / tl.where(seen, l, 1.0)[:, None]
    out_offs = base + rows[:, None] * D + feats[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    lse = tl.where(seen, (m + tl.log2(tl.where(seen, l, 1.0))) * 0.6931471805599453, -float("inf"))
    tl.store(lse_ptr + bh.to(tl.int64) * n_tokens + rows, lse, mask=row_ok)


def compact_block_index(block_index: torch.Tensor, n_key_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index, count)``: each row's listed key blocks first, in ascending order (int32), and their number
    (int32, the shape of ``block_index`` less its last dimension)."""
    padded = torch.where(block_index < 0, n_key_blocks, block_index.long())  # padding sorts last
    if padded.shape[-1] == 0:  # no column at all: one padding column, so the kernel gets a real pointer
        padded = torch.nn.functional.pad(padded, (0, 1), value=n_key_blocks)
    index = padded.sort(dim=-1).values.to(torch.int32)
    return index, (block_index >= 0).sum(-1, dtype=torch.int32)


def block_sparse_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    block_size: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of :func:`~icml_kernels.block_sparse_attention.reference.attention_reference` for
    float16, bfloat16 or float32 ``q``, ``k``, ``v``, a ``block_size`` and a head dimension of
    :data:`~icml_kernels.block_sparse_attention.reference.KERNEL_BLOCK_SIZES` and ``KERNEL_HEAD_DIMS``
    within ``KERNEL_MAX_TILE`` (``KERNEL_MAX_TILE_FLOAT32``)."""
    batch, heads, n, d = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, n, dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    n_blocks = num_blocks(n, block_size)
    index, count = compact_block_index(block_index, n_blocks)
    while index.dim() < 4:  # broadcast over the missing leading dimensions: stride 0
        index, count = index[None], count[None]
    index = index.expand(batch, heads, *index.shape[-2:])
    count = count.expand(batch, heads, n_blocks)
    # ptxas on sm_90: with 4 warps these tiles spill registers (float32 runs exact, register-hungry products)
    wide = block_size == 128 or block_size * d >= (2048 if q.dtype == torch.float32 else 8192)
    grid = (n_blocks, batch * heads)
    block_sparse_attention_fwd_kernel[grid](
        q,
        k,
        v,
        index,
        count,
        out,
        lse,
        n,
        heads,
        *index.stride()[:3],
        *count.stride()[:2],
        scale * math.log2(math.e),
        BLOCK=block_size,
        D=d,
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=8 if wide else 4,
        num_stages=2
        if block_size * d * q.element_size() <= 16 * 1024
        else 1,  # k, v buffers in shared memory
    )
    return out, lse
