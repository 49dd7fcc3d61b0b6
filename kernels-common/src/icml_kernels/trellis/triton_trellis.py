"""Triton kernels decoding packed bitshift-trellis tiles, alone and fused into a batch-1 product.

Each program decodes whole tiles: the state of step ``t`` is the ``L``-bit window of the tile's cyclic
bitstream ending at bit ``(t+1)*K*V``, read from the two 32-bit words it straddles (see
:mod:`icml_kernels.trellis.format` for the format). The computed codes (``1mad``, ``3inst``,
``mulbal``) turn the state into a value with integer instructions and one multiply-add (the affine pair);
their kernels take no table argument at all. ``hyb`` and ``lut`` use the ``*_table_kernel`` variants.

Integer mixing is done in int64 (``s * a + b`` is below 2^48, then masked to 32 bits), which is exact on
every backend, including the interpreter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from icml_kernels.trellis.format import CODES, TABLE_CODES, WORD_BITS, hyb_table_bits
from icml_kernels.trellis.reference import (
    ONEMAD_A,
    ONEMAD_B,
    THREEINST_A,
    THREEINST_B,
    THREEINST_MASK,
    THREEINST_XOR,
)

_ONEMAD_A, _ONEMAD_B = tl.constexpr(ONEMAD_A), tl.constexpr(ONEMAD_B)
_THREEINST_A, _THREEINST_B = tl.constexpr(THREEINST_A), tl.constexpr(THREEINST_B)
_THREEINST_MASK, _THREEINST_XOR = tl.constexpr(THREEINST_MASK), tl.constexpr(THREEINST_XOR)
CODE_IDS = {name: i for i, name in enumerate(CODES)}  # 1mad 0, 3inst 1, mulbal 2, hyb 3, lut 4
BLOCK_TILES = 4  # tiles per program in the decode kernel
BLOCK_ROWS = 16  # rows per program in the fused product


@triton.jit
def _window_states(packed_ptr, tile_word0, t, L: tl.constexpr, KV: tl.constexpr, N_WORDS: tl.constexpr, mask):
    """States ``[tiles, steps]`` of tiles whose first word is at ``tile_word0 [tiles]``, steps ``t [steps]``."""
    n_bits: tl.constexpr = 32 * N_WORDS
    start = ((t + 1) * KV - L + n_bits) % n_bits  # [steps] first bit of each state's window
    first = start // 32
    second = (first + 1) % N_WORDS
    w0 = (
        tl.load(packed_ptr + tile_word0[:, None] + first[None, :], mask=mask, other=0).to(tl.int64)
        & 0xFFFFFFFF
    )
    w1 = (
        tl.load(packed_ptr + tile_word0[:, None] + second[None, :], mask=mask, other=0).to(tl.int64)
        & 0xFFFFFFFF
    )
    pair = (w0 << 32) | w1  # [tiles, steps] 64 consecutive stream bits
    shift = 64 - (start % 32) - L
    return (pair >> shift[None, :]) & ((1 << L) - 1)


@triton.jit
def _computed_raw(s, a, b, CODE: tl.constexpr, M: tl.constexpr):
    """float32 raw value of int64 states ``s`` for the computed codes (no memory access)."""
    if CODE == 0:  # 1mad
        x = (s * _ONEMAD_A + _ONEMAD_B) & 0xFFFFFFFF
        y = (x & 255) + ((x >> 8) & 255) + ((x >> 16) & 255) + ((x >> 24) & 255) - 510
        return y.to(tl.float32)
    elif CODE == 1:  # 3inst
        x = (s * _THREEINST_A + _THREEINST_B) & 0xFFFFFFFF
        r = (x & _THREEINST_MASK) ^ _THREEINST_XOR
        hi = (r >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        lo = (r & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        return hi + lo
    else:  # mulbal: multiply, mask the top M bits of each byte, balanced sum f0 - f1 + f2 - f3
        x = (s * a + b) & 0xFFFFFFFF
        field: tl.constexpr = (1 << M) - 1
        sh: tl.constexpr = 8 - M
        y = (
            ((x >> sh) & field)
            - ((x >> (8 + sh)) & field)
            + ((x >> (16 + sh)) & field)
            - ((x >> (24 + sh)) & field)
        )
        return y.to(tl.float32)


@triton.jit
def _table_raw(
    s, table_ptr, v: tl.constexpr, CODE: tl.constexpr, L: tl.constexpr, Q: tl.constexpr, V: tl.constexpr, mask
):
    """float32 raw coordinate ``v`` of states ``s`` for the table codes (hyb, lut)."""
    if CODE == 3:  # hyb: micro-table (2^Q, 2) indexed by a hash, sign bit on coordinate 0
        h = ((s + 1) * s) & 0xFFFFFFFF
        idx = (h >> (L - 1 - Q)) & ((1 << Q) - 1)
        val = tl.load(table_ptr + idx * 2 + v, mask=mask, other=0.0).to(tl.float32)
        if v == 0:
            val = val * (1.0 - 2.0 * ((h >> (L - 1)) & 1).to(tl.float32))
        return val
    else:  # lut: full table (2^L, V)
        return tl.load(table_ptr + s * V + v, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def trellis_decode_kernel(
    packed_ptr,
    out_ptr,
    n_tiles,
    a,
    b,
    alpha,
    beta,
    CODE: tl.constexpr,
    M: tl.constexpr,
    L: tl.constexpr,
    KV: tl.constexpr,
    V: tl.constexpr,
    N_WORDS: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_P2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Computed codes: ``out[tile, t*V + v] = alpha * raw(state) + beta``. No table argument."""
    tiles = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)  # [BLOCK]
    t = tl.arange(0, STEPS_P2)  # [STEPS_P2]
    mask = (tiles < n_tiles)[:, None] & (t < STEPS)[None, :]
    s = _window_states(packed_ptr, tiles * N_WORDS, t, L, KV, N_WORDS, mask)
    val = _computed_raw(s, a, b, CODE, M) * alpha + beta
    tl.store(out_ptr + tiles[:, None] * (STEPS * V) + t[None, :] * V, val, mask=mask)


@triton.jit
def trellis_decode_table_kernel(
    packed_ptr,
    table_ptr,
    out_ptr,
    n_tiles,
    alpha,
    beta,
    CODE: tl.constexpr,
    L: tl.constexpr,
    Q: tl.constexpr,
    KV: tl.constexpr,
    V: tl.constexpr,
    N_WORDS: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_P2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Table codes (hyb, lut): as :func:`trellis_decode_kernel` with a table load per value."""
    tiles = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    t = tl.arange(0, STEPS_P2)
    mask = (tiles < n_tiles)[:, None] & (t < STEPS)[None, :]
    s = _window_states(packed_ptr, tiles * N_WORDS, t, L, KV, N_WORDS, mask)
    for v in tl.static_range(V):
        val = _table_raw(s, table_ptr, v, CODE, L, Q, V, mask) * alpha + beta
        tl.store(out_ptr + tiles[:, None] * (STEPS * V) + t[None, :] * V + v, val, mask=mask)


@triton.jit
def trellis_gemv_kernel(
    x_ptr,
    packed_ptr,
    y_ptr,
    m,
    n,
    tiles_per_row,
    a,
    b,
    alpha,
    beta,
    CODE: tl.constexpr,
    M: tl.constexpr,
    L: tl.constexpr,
    KV: tl.constexpr,
    V: tl.constexpr,
    N_WORDS: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """Computed codes (``V`` is 1): ``y[batch, i] = sum_k x[batch, k] * W_hat[i, k]`` from packed row tiles. No table."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)  # [BLOCK_M]
    batch = tl.program_id(1).to(tl.int64)
    t = tl.arange(0, STEPS_P2)
    mask = (rows < m)[:, None] & (t < STEPS)[None, :]
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for j in range(tiles_per_row):
        s = _window_states(packed_ptr, (rows * tiles_per_row + j) * N_WORDS, t, L, KV, N_WORDS, mask)
        w = _computed_raw(s, a, b, CODE, M) * alpha + beta  # [BLOCK_M, STEPS_P2]
        xv = tl.load(x_ptr + batch * n + j * STEPS + t, mask=t < STEPS, other=0.0).to(tl.float32)
        acc += tl.sum(tl.where(mask, w * xv[None, :], 0.0), axis=1)
    tl.store(y_ptr + batch * m + rows, acc.to(y_ptr.dtype.element_ty), mask=rows < m)


@triton.jit
def trellis_gemv_table_kernel(
    x_ptr,
    packed_ptr,
    table_ptr,
    y_ptr,
    m,
    n,
    tiles_per_row,
    alpha,
    beta,
    CODE: tl.constexpr,
    L: tl.constexpr,
    Q: tl.constexpr,
    KV: tl.constexpr,
    V: tl.constexpr,
    N_WORDS: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """Table codes (hyb, lut): as :func:`trellis_gemv_kernel`, ``V`` values per state."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    batch = tl.program_id(1).to(tl.int64)
    t = tl.arange(0, STEPS_P2)
    mask = (rows < m)[:, None] & (t < STEPS)[None, :]
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for j in range(tiles_per_row):
        s = _window_states(packed_ptr, (rows * tiles_per_row + j) * N_WORDS, t, L, KV, N_WORDS, mask)
        for v in tl.static_range(V):
            w = _table_raw(s, table_ptr, v, CODE, L, Q, V, mask) * alpha + beta
            xv = tl.load(x_ptr + batch * n + j * STEPS * V + t * V + v, mask=t < STEPS, other=0.0).to(
                tl.float32
            )
            acc += tl.sum(tl.where(mask, w * xv[None, :], 0.0), axis=1)
    tl.store(y_ptr + batch * m + rows, acc.to(y_ptr.dtype.element_ty), mask=rows < m)


def _launch_args(
    code: str,
    L: int,
    K: int,
    V: int,
    T: int,
    alpha: float,
    beta: float,
    mulbal: tuple[int, int, int] | None,
    table: torch.Tensor | None,
) -> dict:
    """The keyword arguments every kernel launch shares: the trellis shape and the code's parameters (a
    table pointer for the table codes, the mulbal triple as ``a, b, M`` for the computed ones)."""
    steps = T // V
    args: dict = {
        "alpha": alpha,
        "beta": beta,
        "CODE": CODE_IDS[code],
        "L": L,
        "KV": K * V,
        "V": V,
        "N_WORDS": K * T // WORD_BITS,
        "STEPS": steps,
        "STEPS_P2": triton.next_power_of_2(steps),
    }
    if code in TABLE_CODES:
        assert table is not None  # checked by the public ops
        args.update(table_ptr=table.float().contiguous(), Q=hyb_table_bits(L) if code == "hyb" else L)
    else:
        a, b, m = mulbal if mulbal is not None else (1, 0, 8)
        args.update(a=a, b=b, M=m)
    return args


def decode_triton(
    packed: torch.Tensor,
    code: str,
    L: int,
    K: int,
    V: int,
    T: int,
    *,
    alpha: float,
    beta: float,
    mulbal: tuple[int, int, int] | None = None,
    table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weights ``(..., T)`` float32 of packed tiles ``(..., K*T/32)`` int32 (checked by the caller)."""
    flat = packed.reshape(-1, packed.shape[-1]).contiguous()  # (tiles, words)
    n_tiles = flat.shape[0]
    out = torch.empty(n_tiles, T, dtype=torch.float32, device=packed.device)
    if n_tiles:
        kernel = trellis_decode_table_kernel if code in TABLE_CODES else trellis_decode_kernel
        kernel[(triton.cdiv(n_tiles, BLOCK_TILES),)](
            packed_ptr=flat,
            out_ptr=out,
            n_tiles=n_tiles,
            BLOCK=BLOCK_TILES,
            **_launch_args(code, L, K, V, T, alpha, beta, mulbal, table),
        )
    return out.reshape(*packed.shape[:-1], T)


def gemv_triton(
    x: torch.Tensor,
    packed: torch.Tensor,
    code: str,
    L: int,
    K: int,
    V: int,
    T: int,
    *,
    alpha: float,
    beta: float,
    mulbal: tuple[int, int, int] | None = None,
    table: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ W_hat.T`` for ``x (..., n)`` and packed row tiles ``(m, n/T, K*T/32)``; result in ``x.dtype``."""
    m, tiles_per_row = packed.shape[0], packed.shape[1]
    n = tiles_per_row * T
    x2 = x.reshape(-1, n).contiguous()  # (batch, n)
    y = torch.empty(x2.shape[0], m, dtype=x.dtype, device=x.device)
    if x2.shape[0] and m:
        kernel = trellis_gemv_table_kernel if code in TABLE_CODES else trellis_gemv_kernel
        kernel[(triton.cdiv(m, BLOCK_ROWS), x2.shape[0])](
            x_ptr=x2,
            packed_ptr=packed.contiguous(),
            y_ptr=y,
            m=m,
            n=n,
            tiles_per_row=tiles_per_row,
            BLOCK_M=BLOCK_ROWS,
            **_launch_args(code, L, K, V, T, alpha, beta, mulbal, table),
        )
    return y.reshape(*x.shape[:-1], m)
