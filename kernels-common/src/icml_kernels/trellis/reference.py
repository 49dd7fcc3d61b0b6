"""Pure-torch decode of packed bitshift-trellis tiles: the ground truth the Triton kernels are tested against.

The packed format (tiles, states, bit order) is described once, in :mod:`icml_kernels.trellis.format`
(:class:`~icml_kernels.trellis.format.TrellisFormat`, whose ``unpack`` this module reads states with).

Codes (state -> value, then a per-layer affine ``alpha * raw + beta``):

- ``1mad`` (QTIP): ``x = s*34038481 + 76625530 mod 2^32``, raw = the sum of the four bytes of ``x`` - 510.
- ``3inst`` (QTIP): ``x = s*89226354 + 64248484 mod 2^32``, ``r = (x & 0x8FFF8FFF) ^ 996162400``,
  raw = fp16(r >> 16) + fp16(r & 0xFFFF) added in float32 (exact; QTIP adds in fp16).
- ``mulbal`` (Proteus' generator, our design, see :func:`mulbal_raw`): ``x = s*a + b mod 2^32``; raw =
  ``f0 - f1 + f2 - f3`` with ``f_i`` the top ``m`` bits of byte ``i`` of ``x``. No table.
- ``hyb`` (QTIP's ``quantlut_sym``, V = 2): ``h = (s+1)*s mod 2^32``, 2-vector ``tlut[(h >> (L-1-Q)) &
  (2^Q-1)]`` with the first coordinate's sign flipped by bit ``L-1`` of ``h``; ``tlut`` is a ``(2^Q, 2)``
  micro-table (``Q = hyb_table_bits(L)``).
- ``lut``: ``table[s]``, a full ``(2^L, V)`` table (the lookup baseline).

The fused product ``gemv_reference`` uses the row-tile layout: a weight matrix ``(m, n)`` is stored as
``(m, n/T, K*T/32)`` words, tile ``(i, j)`` holding ``W[i, j*T:(j+1)*T]``.
"""

from __future__ import annotations

import torch

from icml_kernels.trellis.format import (
    CODES,
    COMPUTED_CODES,
    HYB_MAX_BITS,
    MASK32,
    TABLE_CODES,
    check_code,
    check_code_params,
    hyb_table_bits,
    unpack_states,
)

ONEMAD_A, ONEMAD_B = 34038481, 76625530
THREEINST_A, THREEINST_B = 89226354, 64248484
THREEINST_MASK, THREEINST_XOR = 0x8FFF8FFF, 996162400
# the format's names, importable from here as before
__all__ = [
    "CODES",
    "COMPUTED_CODES",
    "HYB_MAX_BITS",
    "MASK32",
    "ONEMAD_A",
    "ONEMAD_B",
    "TABLE_CODES",
    "THREEINST_A",
    "THREEINST_B",
    "THREEINST_MASK",
    "THREEINST_XOR",
    "code_values",
    "decode_reference",
    "gemv_reference",
    "hyb_lookup",
    "hyb_table_bits",
    "mulbal_raw",
    "onemad_raw",
    "threeinst_raw",
    "unpack_states",
]


def onemad_raw(states: torch.Tensor) -> torch.Tensor:
    """QTIP's 1MAD integer before scaling: byte sum of ``s*34038481 + 76625530`` minus 510 (int64)."""
    x = (states.to(torch.int64) * ONEMAD_A + ONEMAD_B) & MASK32
    return (x & 255) + ((x >> 8) & 255) + ((x >> 16) & 255) + ((x >> 24) & 255) - 510


def threeinst_raw(states: torch.Tensor) -> torch.Tensor:
    """QTIP's 3INST value before scaling: the sum (in float32) of two fp16 numbers built from mixed bits."""
    x = (states.to(torch.int64) * THREEINST_A + THREEINST_B) & MASK32
    r = (x & THREEINST_MASK) ^ THREEINST_XOR
    hi = (r >> 16).to(torch.int16).view(torch.float16).float()  # int64 -> int16 wraps: keeps the bit pattern
    lo = (r & 0xFFFF).to(torch.int16).view(torch.float16).float()
    return hi + lo


def mulbal_raw(states: torch.Tensor, a: int, b: int, m: int) -> torch.Tensor:
    """The MUL-BAL integer before the affine Gaussianizer (our design; int64 in ``[-2(2^m-1), 2(2^m-1)]``).

    MUL: one multiply-add ``x = s*a + b mod 2^32`` mixes the state's bits upwards. Mask: keep the top
    ``m`` bits of each byte (the best-mixed bits of each byte, since carries only move up). BAL: the
    balanced sum ``f0 - f1 + f2 - f3`` of the four fields, symmetric about zero by construction.
    """
    x = (states.to(torch.int64) * a + b) & MASK32
    shift, field = 8 - m, (1 << m) - 1
    f = [(x >> (8 * i + shift)) & field for i in range(4)]
    return f[0] - f[1] + f[2] - f[3]


def hyb_lookup(states: torch.Tensor, table: torch.Tensor, L: int) -> torch.Tensor:
    """QTIP's hybrid code: ``(..., 2)`` points of the micro-table ``(2^Q, 2)`` with a sign bit."""
    q = table.shape[0].bit_length() - 1
    h = ((states.to(torch.int64) + 1) * states) & MASK32
    idx = (h >> (L - 1 - q)) & ((1 << q) - 1)
    sign = 1.0 - 2.0 * ((h >> (L - 1)) & 1).to(table.dtype)
    out = table[idx]  # (..., 2)
    return torch.stack((out[..., 0] * sign, out[..., 1]), dim=-1)


def code_values(
    states: torch.Tensor,
    code: str,
    L: int,
    V: int,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    mulbal: tuple[int, int, int] | None = None,
    table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decoded float32 values ``(..., V)`` of ``states (...)``: ``alpha * raw(state) + beta``.

    ``mulbal`` is ``(a, b, m)`` for the mulbal code; ``table`` is the ``(2^Q, 2)`` micro-table of hyb or
    the ``(2^L, V)`` table of lut. Both are float32. Each code takes its own parameters and no other
    (checked, without reading tensor data).
    """
    check_code(code, V)
    triple = check_code_params(code, L, V, mulbal=mulbal, table_shape=None if table is None else table.shape)
    if triple is not None:
        raw = mulbal_raw(states, *triple).float().unsqueeze(-1)
    elif table is not None:
        t = table.float()
        raw = (
            hyb_lookup(states, t, L) if code == "hyb" else t[states.to(torch.int64)].reshape(*states.shape, V)
        )
    elif code == "1mad":
        raw = onemad_raw(states).float().unsqueeze(-1)
    else:  # 3inst
        raw = threeinst_raw(states).unsqueeze(-1)
    return raw * alpha + beta


def decode_reference(
    packed: torch.Tensor, code: str, L: int, K: int, V: int, T: int, **params
) -> torch.Tensor:
    """Weights ``(..., T)`` float32 of packed tiles ``(..., K*T/32)`` (``params``: see :func:`code_values`),
    contiguous (like the kernel's output and the registered op's fake) whatever the layout of ``packed``."""
    states = unpack_states(packed, L, K, V, T)  # (..., T/V); a transposed packed gives permuted strides
    return code_values(states, code, L, V, **params).reshape(*states.shape[:-1], T).contiguous()


def gemv_reference(
    x: torch.Tensor, packed: torch.Tensor, code: str, L: int, K: int, V: int, T: int, **params
) -> torch.Tensor:
    """``x @ W_hat.T`` (shape ``(..., m)``) for ``x (..., n)`` and packed row tiles ``(m, n/T, K*T/32)``:
    float32, float64 for a float64 ``x`` (the float32 weights are exact in float64)."""
    m, tiles = packed.shape[0], packed.shape[1]
    w = decode_reference(packed, code, L, K, V, T, **params).reshape(m, tiles * T)  # (m, n)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.to(compute) @ w.to(compute).T
