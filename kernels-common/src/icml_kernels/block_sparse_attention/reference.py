"""Block-sparse attention in pure torch (the ground truth of the Triton kernel) and the checks of its
arguments.

A query block ``i`` (rows ``i*block_size .. (i+1)*block_size - 1``) attends to every key of the key blocks
listed in row ``block_index[..., i, :]``; ``-1`` entries are padding. Query and key blocks have one size, so
with ``N`` tokens there are ``ceil(N / block_size)`` of each, the last one possibly shorter.
"""

from __future__ import annotations

import math
import warnings

import torch

from icml_kernels.fwht.reference import check_finite_tensor, warn_if_overflowed
from icml_kernels.validation import check_finite_float, check_int, check_tensor, values_readable

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
FLOAT_DTYPES = (*KERNEL_DTYPES, torch.float64)
INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)
KERNEL_BLOCK_SIZES = (16, 32, 64, 128)  # the kernel's tile is one block
KERNEL_HEAD_DIMS = (16, 32, 64, 128, 256)  # powers of two: tl.dot tiles of the head dimension
# block_size * D of the kernel's tiles, where its registers hold them without spilling much (measured from
# ptxas on sm_90); float32 runs exact (not tf32) products, which need more registers
KERNEL_MAX_TILE = 128 * 128
KERNEL_MAX_TILE_FLOAT32 = 64 * 64
# the registered op takes block_size as an int64: a larger int made it raise torch's RuntimeError ("Expected a
# value of type 'int' for argument 'block_size'") where the reference ran (any size >= N is one block)
MAX_BLOCK_SIZE = (1 << 63) - 1
MAX_DENSE_BLOCKS = 1 << 14  # dense_block_index: a (2^14)^2 int64 table is 2 GiB


def num_blocks(n: int, block_size: int) -> int:
    """``ceil(n / block_size)``: the number of query (and key) blocks of ``n`` tokens."""
    return -(-n // block_size)


def check_qkv(q: object, k: object, v: object) -> tuple[int, int, int, int]:
    """``(B, H, N, D)`` of valid ``q``, ``k``, ``v``: floating tensors of one dtype, shape and device in the
    SDPA layout, ``N`` and ``D`` at least 1 (metadata only)."""
    tensors = {"q": check_tensor(q, "q", FLOAT_DTYPES)}
    tensors["k"] = check_tensor(k, "k", FLOAT_DTYPES)
    tensors["v"] = check_tensor(v, "v", FLOAT_DTYPES)
    for name, t in tensors.items():
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got shape {tuple(t.shape)}")
    q, k, v = tensors.values()
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if not q.shape == k.shape == v.shape:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors.values())
        raise ValueError(f"q, k and v must have one shape (B, H, N, D), got {shapes}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}")
    batch, heads, n, d = q.shape
    if n < 1 or d < 1:
        raise ValueError(
            f"q, k and v must have N >= 1 tokens and D >= 1 features, got shape {tuple(q.shape)}"
        )
    return batch, heads, n, d


def check_block_index(block_index: object, n_query_blocks: int, lead: tuple[int, ...] | None = None) -> None:
    """A ``block_index`` of a signed integer dtype, ``(..., n_query_blocks, MAXK)`` with up to two leading
    dimensions that broadcast to ``lead`` (``(B, H)``) when given (metadata only)."""
    shape = tuple(check_tensor(block_index, "block_index", INDEX_DTYPES).shape)
    if not 2 <= len(shape) <= 4 or shape[-2] != n_query_blocks:
        raise ValueError(
            f"block_index must have shape (B, H, NQB, MAXK), (H, NQB, MAXK) or (NQB, MAXK) with "
            f"NQB = ceil(N / block_size) = {n_query_blocks}, got {shape}"
        )
    if lead is not None and any(s not in (1, t) for s, t in zip(shape[-3::-1], lead[::-1], strict=False)):
        raise ValueError(f"block_index must broadcast over (B, H) = {lead}, got shape {shape}")


def check_block_index_values(block_index: torch.Tensor, n_key_blocks: int) -> None:
    """Entries in ``[-1, n_key_blocks)``, no key block twice in a row. Reads the data (a host sync on a GPU),
    so only the public functions call it; skipped while ``torch.compile`` traces and for a meta or fake
    ``block_index`` (:func:`~icml_kernels.validation.values_readable`)."""
    if not values_readable(block_index) or block_index.numel() == 0:
        return
    lo, hi = (int(x) for x in torch.aminmax(block_index))
    if lo < -1 or hi >= n_key_blocks:
        raise ValueError(
            f"block_index must hold key block indices in 0..{n_key_blocks - 1} or -1 (padding), "
            f"got values in {lo}..{hi}"
        )
    ordered = block_index.sort(dim=-1).values
    if bool(((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any()):
        raise ValueError("block_index must not list a key block twice in one row")


def check_attention(q, k, v, block_index, block_size, scale) -> tuple[int, float]:
    """All checks of the public functions: ``(D, scale)`` with the default scale filled in. Reads
    ``block_index`` and ``q``, ``k``, ``v`` (NaN and infinite entries refused): a host sync on a GPU."""
    batch, heads, n, d = check_qkv(q, k, v)
    block_size = check_int(block_size, "block_size", minimum=1, maximum=MAX_BLOCK_SIZE)
    scale = 1.0 / math.sqrt(d) if scale is None else check_finite_float(scale, "scale")
    check_block_index(block_index, num_blocks(n, block_size), (batch, heads))
    if block_index.device != q.device:
        raise ValueError(f"block_index must be on the device of q ({q.device}), got {block_index.device}")
    check_block_index_values(block_index, num_blocks(n, block_size))
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_finite_tensor(t, name)
    return d, scale


def warn_if_rows_lost(lse: torch.Tensor, block_index: torch.Tensor, block_size: int, what: str) -> None:
    """A RuntimeWarning when a query row that lists key blocks has an lse of ``-inf``: every one of its
    scores ``q k^T * scale`` overflowed to ``-inf`` (float32 scores of finite inputs, e.g. entries near
    1e20 or a huge ``scale``), so it came out as zeros, like a row that lists no key, where attention over
    its keys is not zero. Reads ``lse`` and ``block_index``; skipped while ``torch.compile`` traces and for
    meta or fake tensors (:func:`~icml_kernels.validation.values_readable`)."""
    if not values_readable(lse, block_index) or lse.numel() == 0:
        return
    listed = (block_index >= 0).any(-1)  # (..., NQB): the query blocks that list a key block
    row_listed = listed[..., torch.arange(lse.shape[-1], device=listed.device) // block_size]  # (..., N)
    lost = int((row_listed & (lse == -math.inf)).sum())
    if lost:
        warnings.warn(
            f"{what} overflowed: every score of {lost} query row(s) that list key blocks is -inf, so "
            "they are zeros (lse -inf) as if they listed no key",
            RuntimeWarning,
            stacklevel=3,
        )


def dense_block_index(n: int, block_size: int = 64) -> torch.Tensor:
    """The ``block_index`` ``(NQB, NKB)`` (int64, on the CPU) that lists every key block for every query
    block: block-sparse attention with it is dense attention. At most ``MAX_DENSE_BLOCKS`` blocks (an
    ``NQB^2`` table)."""
    n = check_int(n, "n", minimum=1)
    blocks = num_blocks(n, check_int(block_size, "block_size", minimum=1))
    if blocks > MAX_DENSE_BLOCKS:
        raise ValueError(
            f"n / block_size must give at most {MAX_DENSE_BLOCKS} blocks for a dense (NQB, NKB) index, "
            f"got {blocks} (n = {n}, block_size = {block_size})"
        )
    return torch.arange(blocks).expand(blocks, blocks).contiguous()


def block_table(block_index: torch.Tensor, n_key_blocks: int) -> torch.Tensor:
    """The boolean table ``(..., NQB, NKB)`` of ``block_index`` ``(..., NQB, MAXK)``: True where a query
    block attends to a key block."""
    columns = torch.where(block_index < 0, n_key_blocks, block_index).long()  # padding -> an extra column
    table = torch.zeros(
        *block_index.shape[:-1], n_key_blocks + 1, dtype=torch.bool, device=block_index.device
    )
    return table.scatter_(-1, columns, True)[..., :n_key_blocks]


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    block_size: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked block-sparse attention: ``(out, lse)`` with ``out`` ``(B, H, N, D)`` in ``q.dtype`` and the
    row log-sum-exp of the scaled scores ``lse`` ``(B, H, N)`` (float32; float64 for float64 input; ``-inf``
    and a zero output row for a query block that lists no key block).

    One query block at a time, with a key mask built from its row of the block table: memory
    ``B*H*block_size*N`` scores, never ``N^2``. Half-precision input is computed in float32. Differentiable.
    """
    batch, heads, n, _ = q.shape
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_blocks = num_blocks(n, block_size)
    table = block_table(block_index, n_blocks)
    table = table.expand(batch, heads, *table.shape[-2:])  # (B, H, NQB, NKB)
    key_block = torch.arange(n, device=q.device) // block_size  # (N,) the block of each key
    qc, kc, vc = (t.to(compute) for t in (q, k, v))
    outs, lses = [], []
    for i in range(n_blocks):
        rows = slice(i * block_size, min(n, (i + 1) * block_size))
        keep = table[:, :, i, key_block]  # (B, H, N): the keys this query block attends to
        s = (qc[:, :, rows] @ kc.transpose(-1, -2)) * scale  # (B, H, m, N)
        s = s.masked_fill(~keep[:, :, None, :], -math.inf)
        lse = torch.logsumexp(s, dim=-1)  # (B, H, m); -inf where no key is kept
        p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])  # all zero in an empty row
        outs.append(p @ vc)  # (B, H, m, D)
        lses.append(lse)
    return torch.cat(outs, dim=2).to(q.dtype), torch.cat(lses, dim=2)


def block_sparse_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    *,
    block_size: int = 64,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The torch reference of :func:`~icml_kernels.block_sparse_attention`, with the same arguments and
    checks (it reads ``block_index``, ``q``, ``k``, ``v`` and the result: a host sync on a GPU); always the
    reference, on any device, differentiable."""
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {return_lse!r}")
    _, scale = check_attention(q, k, v, block_index, block_size, scale)
    out, lse = attention_reference(q, k, v, block_index, block_size, scale)
    warn_if_overflowed(out, "block_sparse_attention_reference (the scores q k^T * scale)")
    warn_if_rows_lost(
        lse, block_index, block_size, "block_sparse_attention_reference (the scores q k^T * scale)"
    )
    return (out, lse) if return_lse else out
