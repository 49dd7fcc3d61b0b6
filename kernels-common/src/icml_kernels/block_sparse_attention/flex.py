"""Block-sparse attention through PyTorch's ``flex_attention``: the block index as a ``BlockMask``.

The mask is built from the block index directly (``BlockMask.from_kv_blocks``), not by evaluating a
``mask_mod`` at every (query, key) pair as ``create_block_mask`` does: that materializes ``B*H*N^2``
elements (8.6 G at 32k tokens and 8 heads). The ``mask_mod`` it carries reads the same boolean block table,
so the two agree (tested), and flex applies it inside the one partial key block there may be (a ragged
last block); every other listed block is a full block, which flex runs unmasked.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from icml_kernels.block_sparse_attention.reference import (
    attention_reference,
    block_table,
    check_attention,
    check_block_index,
    check_block_index_values,
    num_blocks,
    warn_if_rows_lost,
)
from icml_kernels.fwht.reference import warn_if_overflowed
from icml_kernels.validation import check_int

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask, FlexKernelOptions

# torch.nn.attention.flex_attention is imported where it is used: importing it takes ~0.3 s, which every
# `import icml_kernels` would otherwise pay


def _as_blocks(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(count, indices)`` of a boolean block table ``(B, H, NQB, NKB)``: the True columns of each row
    first, in ascending order (int32, as ``BlockMask`` stores them)."""
    order = torch.argsort(table.to(torch.int8), dim=-1, descending=True, stable=True)
    return table.sum(-1, dtype=torch.int32), order.to(torch.int32)


def _block_mask(block_index: torch.Tensor, n: int, block_size: int) -> BlockMask:
    from torch.nn.attention.flex_attention import BlockMask

    table = block_table(block_index, num_blocks(n, block_size))
    while table.dim() < 4:
        table = table[None]
    tb, th = int(table.shape[0] > 1), int(table.shape[1] > 1)  # 0: one entry serves every batch (head)

    def mask_mod(b, h, q_idx, kv_idx):
        return table[b * tb, h * th, q_idx // block_size, kv_idx // block_size]

    full = table.clone()
    if n % block_size:  # the ragged last key block: partial, so the mask_mod (and the length) cut it
        full[..., -1] = False
    return BlockMask.from_kv_blocks(
        *_as_blocks(table & ~full),
        *_as_blocks(full),
        BLOCK_SIZE=block_size,
        mask_mod=mask_mod,
        seq_lengths=(n, n),
    )


def block_mask_from_index(block_index: torch.Tensor, n: int, block_size: int = 64) -> BlockMask:
    """The ``flex_attention`` ``BlockMask`` of a ``block_index`` ``(B, H, NQB, MAXK)``, ``(H, NQB, MAXK)``
    or ``(NQB, MAXK)`` (the argument of :func:`~icml_kernels.block_sparse_attention`) for ``n`` query and key
    tokens in blocks of ``block_size``, on ``block_index``'s device. The block index is checked as there
    (read: a host sync on a GPU)."""
    n = check_int(n, "n", minimum=1)
    block_size = check_int(block_size, "block_size", minimum=1)
    blocks = num_blocks(n, block_size)
    check_block_index(block_index, blocks)
    check_block_index_values(block_index, blocks)
    return _block_mask(block_index, n, block_size)


def flex_kernel_options(block_size: int) -> FlexKernelOptions | None:
    """Forward tiles of the compiled flex kernel that divide ``block_size`` (a power of two from 16): flex's
    default tile (128 query rows on some GPUs) must divide the block mask's blocks, and older torch releases
    do not shrink it to fit. None for other sizes (flex's defaults, which may refuse them)."""
    if block_size < 16 or block_size & (block_size - 1):
        return None
    return {"BLOCK_M": min(block_size, 128), "BLOCK_N": min(block_size, 64)}


@functools.cache
def _flex(compiled: bool) -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def block_sparse_attention_flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    *,
    block_size: int = 64,
    scale: float | None = None,
) -> torch.Tensor:
    """:func:`~icml_kernels.block_sparse_attention` computed by ``flex_attention`` with
    :func:`block_mask_from_index` (compiled on CUDA, with forward tiles that divide ``block_size``; on the
    CPU the eager implementation, which materializes the scores). Same arguments and checks. Gradients
    are flex's own backward pass, where the installed torch compiles it for this block size. On meta
    tensors, which ``flex_attention`` refuses, the torch reference gives the (meta) result."""
    _, scale = check_attention(q, k, v, block_index, block_size, scale)
    if q.is_meta:
        return attention_reference(q, k, v, block_index, block_size, scale)[0]
    mask = _block_mask(block_index, q.shape[2], block_size)
    compiled = q.device.type == "cuda"
    options = flex_kernel_options(block_size) if compiled else None
    # the lse too: a row whose every score overflowed to -inf comes out as zeros (warned below)
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # torch before 2.9: return_lse (deprecated since)
        out, lse = _flex(compiled)(
            q, k, v, block_mask=mask, scale=scale, kernel_options=options, return_lse=True
        )
    else:
        out, aux = _flex(compiled)(
            q, k, v, block_mask=mask, scale=scale, kernel_options=options, return_aux=AuxRequest(lse=True)
        )
        lse = aux.lse
    what = "block_sparse_attention_flex (the scores q k^T * scale)"
    warn_if_rows_lost(lse, block_index, block_size, what)
    return warn_if_overflowed(out, what)
