"""The public block-sparse attention entry point, its dispatch and its ``torch.library`` registration."""

from __future__ import annotations

import torch

from icml_kernels._dispatch import select_impl
from icml_kernels.block_sparse_attention.reference import (
    KERNEL_BLOCK_SIZES,
    KERNEL_DTYPES,
    KERNEL_HEAD_DIMS,
    KERNEL_MAX_TILE,
    KERNEL_MAX_TILE_FLOAT32,
    attention_reference,
    check_attention,
    check_block_index,
    check_qkv,
    num_blocks,
    warn_if_rows_lost,
)
from icml_kernels.fwht.reference import warn_if_overflowed
from icml_kernels.validation import check_int


def _check(q, k, v, block_index, block_size) -> None:
    """The registered op's checks: types, shapes and dtypes, never the data."""
    batch, heads, n, _ = check_qkv(q, k, v)
    block_size = check_int(block_size, "block_size", minimum=1)
    check_block_index(block_index, num_blocks(n, block_size), (batch, heads))


def _kernel_reason(q: torch.Tensor, block_size: int) -> str | None:
    if q.dtype not in KERNEL_DTYPES:
        return f"the kernel does not take {q.dtype}"
    if block_size not in KERNEL_BLOCK_SIZES:
        return f"the kernel takes block_size in {KERNEL_BLOCK_SIZES}, got {block_size}"
    if q.shape[-1] not in KERNEL_HEAD_DIMS:
        return f"the kernel takes a head dimension D in {KERNEL_HEAD_DIMS}, got {q.shape[-1]}"
    most = KERNEL_MAX_TILE_FLOAT32 if q.dtype == torch.float32 else KERNEL_MAX_TILE
    if block_size * q.shape[-1] > most or (q.dtype == torch.float32 and block_size > 64):
        return (
            f"the kernel takes block_size * D <= {most} in {q.dtype} (and block_size <= 64 in float32), "
            f"got block_size {block_size}, D {q.shape[-1]}"
        )
    return None


@torch.library.custom_op(
    "icml_kernels::block_sparse_attention", mutates_args=(), device_types=("cpu", "cuda")
)
def block_sparse_attention_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    block_size: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.ops.icml_kernels.block_sparse_attention(q, k, v, block_index, block_size, scale)``: ``(out,
    lse)``; forward only (no autograd)."""
    _check(q, k, v, block_index, block_size)
    impl = select_impl("block_sparse_attention", q.device, kernel_reason=_kernel_reason(q, block_size))
    if impl == "triton":
        from icml_kernels.block_sparse_attention.triton_block_sparse import block_sparse_attention_triton

        return block_sparse_attention_triton(q, k, v, block_index, block_size, scale)
    return attention_reference(q, k, v, block_index, block_size, scale)


@block_sparse_attention_op.register_fake
def _block_sparse_attention_fake(q, k, v, block_index, block_size, scale):
    _check(q, k, v, block_index, block_size)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(
        q.shape[:3], dtype=lse_dtype
    )


def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    *,
    block_size: int = 64,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention restricted to listed key blocks: ``softmax(q k^T * scale) v`` where query block ``i``
    sees exactly the keys of the key blocks in ``block_index[..., i, :]`` (no causal mask).

    Args:
        q, k, v (torch.Tensor): ``(B, H, N, D)`` (the layout of ``scaled_dot_product_attention``), one
            floating dtype (float16, bfloat16, float32; float64 runs the reference).
        block_index (torch.Tensor): signed integers ``(B, H, NQB, MAXK)``, ``(H, NQB, MAXK)`` or
            ``(NQB, MAXK)`` (broadcast over the leading dimensions), ``NQB = ceil(N / block_size)``: the
            key blocks each query block attends to, each at most once, padded with ``-1`` anywhere in the
            row. Block ``j`` holds tokens ``j*block_size .. (j+1)*block_size - 1``; the last may be shorter.
        block_size (int): tokens per query and key block. Default 64.
        scale (float, Optional): multiplies the scores. Default ``1/sqrt(D)``.
        return_lse (bool): also return the row log-sum-exp of the scaled scores, ``(B, H, N)`` float32
            (float64 for float64 input), for merging with other partial attentions; ``-inf`` on rows
            that see no key.

    Returns:
        ``(B, H, N, D)`` in ``q``'s dtype (and the log-sum-exp); a query block that lists no key block
        gives zeros. With every block listed (:func:`dense_block_index`) it is dense attention. On CUDA
        the Triton kernel runs when it takes the input (float16, bfloat16, float32; ``block_size`` 16, 32,
        64 or 128; ``D`` a power of two in 16..256; ``block_size * D`` at most 128 * 128, and in float32,
        whose products are exact, at most 64 * 64 with ``block_size`` at most 64), else the torch
        reference (``ICML_KERNELS_IMPL=torch|triton`` forces one).

    The kernel is forward only: when autograd is on and ``q``, ``k`` or ``v`` requires grad, the torch
    reference runs instead, whatever ``ICML_KERNELS_IMPL`` says (differentiable; memory
    ``B*H*block_size*N`` scores per query block).

    Raises ValueError/TypeError naming the argument for a wrong type, dtype, shape or device, an index
    outside ``-1..NKB-1`` or listed twice in a row, NaN or infinite entries of ``q``, ``k``, ``v``, a
    ``block_size`` below 1 or above ``2**63 - 1`` or a non-finite ``scale``; warns (RuntimeWarning) when
    the scores overflow: a NaN or infinite output, or a row that lists key blocks but whose every score is
    ``-inf`` (zeros and an lse of ``-inf``, as a row that lists none).
    These checks read ``block_index``, ``q``, ``k``, ``v`` and the result (a host sync on a GPU);
    ``torch.ops.icml_kernels.block_sparse_attention`` (:func:`block_sparse_attention_op`, which returns
    ``(out, lse)`` and takes ``block_size`` and ``scale`` positionally) checks types, shapes and dtypes
    only.
    """
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {return_lse!r}")
    _, scale = check_attention(q, k, v, block_index, block_size, scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = attention_reference(q, k, v, block_index, block_size, scale)
    else:
        out, lse = block_sparse_attention_op(q, k, v, block_index, block_size, scale)
    warn_if_overflowed(out, "block_sparse_attention (the scores q k^T * scale)")
    warn_if_rows_lost(lse, block_index, block_size, "block_sparse_attention (the scores q k^T * scale)")
    return (out, lse) if return_lse else out
