"""The packed bitshift-trellis format, described once: read by the decode kernels here, written by
``icml_compress.trellis.BitshiftTrellis`` (a subclass of :class:`TrellisFormat`).

Parameters (:class:`TrellisFormat`): ``L`` state bits (8..16), ``K`` bits per weight (1..4), ``V`` weights
per state (1 or 2) and tiles of ``T`` weights (a multiple of ``V``, at most 65536); ``K*V < L``, so
consecutive states overlap in ``L - K*V`` bits.

Trellis. Each step emits ``V`` weights from the current state and shifts ``K*V`` new bits in from the
right: ``next = ((s << K*V) & (2^L - 1)) | new``. A tile of ``T`` weights is ``T/V`` steps. A path is
*tail-biting* when its last state overlaps its first as if the tile were a circle:
``s_0 >> K*V == s_last & (2^(L-K*V) - 1)``.

Packing. A tile is the cyclic (tail-biting) bitstream of exactly ``K*T`` bits made of each step's ``K*V``
new bits in order, stored most significant bit first in ``K*T/32`` 32-bit words (``torch.int32`` holding
the bit pattern; ``K*T`` must be a multiple of 32). Step ``t`` (``0 <= t < T/V``) decodes the ``L``-bit
state formed by the stream bits ``[(t+1)*K*V - L, (t+1)*K*V)`` read cyclically, first bit most
significant. :meth:`TrellisFormat.pack` writes it, :meth:`TrellisFormat.unpack` (and
:func:`unpack_states`) reads it. A weight matrix ``(m, n)`` is stored as row tiles ``(m, n/T, K*T/32)``,
tile ``(i, j)`` holding ``W[i, j*T:(j+1)*T]`` (the layout of the fused product).

Codes (state -> value, see :mod:`icml_kernels.trellis.reference`): the computed ``1mad``, ``3inst``,
``mulbal`` (``V = 1``, no table; ``mulbal`` takes ``(a, b, m)``) and the table-based ``hyb`` (``V = 2``,
a ``(2^Q, 2)`` micro-table, ``Q = hyb_table_bits(L)``) and ``lut`` (a ``(2^L, V)`` table, either ``V``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from icml_kernels.validation import check_int, check_tensor

L_RANGE = (8, 16)
K_RANGE = (1, 4)
V_RANGE = (1, 2)
T_RANGE = (1, 1 << 16)
WORD_BITS = 32
MASK32 = 0xFFFFFFFF
COMPUTED_CODES = ("1mad", "3inst", "mulbal")
TABLE_CODES = ("hyb", "lut")
CODES = (*COMPUTED_CODES, *TABLE_CODES)
CODE_V: dict[str, int | None] = {"1mad": 1, "3inst": 1, "mulbal": 1, "hyb": 2, "lut": None}  # None: 1 or 2
MULBAL_RANGES = ((1, MASK32), (0, MASK32), (1, 8))  # a, b (32-bit), m (field bits per byte)
HYB_MAX_BITS = 9  # QTIP's released micro-LUT has 2^9 two-dimensional entries


def hyb_table_bits(L: int) -> int:
    """Index bits ``Q`` of the hyb micro-table at state size ``L``: QTIP's 9, fewer for small ``L`` (the
    index field ``h >> (L-1-Q)`` must skip bit 0 of ``h = (s+1)*s``, which is always 0)."""
    return min(HYB_MAX_BITS, L - 2)


def table_shape_of(code: str, L: int, V: int) -> tuple[int, int] | None:
    """The table a code reads: ``(2^Q, 2)`` for hyb, ``(2^L, V)`` for lut, None for a computed code."""
    if code == "hyb":
        return (1 << hyb_table_bits(L), 2)
    return (1 << L, V) if code == "lut" else None


def check_code(code: Any, V: int) -> str:
    """``code`` is one of :data:`CODES` and gives ``V`` weights per state."""
    if not isinstance(code, str) or code not in CODES:
        raise ValueError(f"code must be one of {CODES}, got {code!r}")
    want = CODE_V[code]
    if want is not None and V != want:
        what = "one value" if want == 1 else "a 2-vector"
        raise ValueError(f"code {code!r} gives {what} per state: V must be {want}, got {V}")
    return code


def check_mulbal(mulbal: Any, name: str = "mulbal") -> tuple[int, int, int]:
    """A mulbal triple ``(a, b, m)``: 32-bit ``a >= 1`` and ``b``, field width ``m`` in 1..8."""
    if not isinstance(mulbal, (tuple, list)) or len(mulbal) != 3:
        raise TypeError(f"{name} must be a tuple (a, b, m) for code 'mulbal', got {mulbal!r}")
    a, b, m = (
        check_int(v, f"{name} {part}", *r) for v, part, r in zip(mulbal, "abm", MULBAL_RANGES, strict=True)
    )
    return a, b, m


def check_code_params(
    code: str, L: int, V: int, *, mulbal: Any = None, table_shape: Any = None, table_name: str = "table"
) -> tuple[int, int, int] | None:
    """The parameters ``code`` needs, and only those: the mulbal triple iff ``code == "mulbal"``, a table of
    the right shape iff the code is table-based. Returns the triple (None for the other codes)."""
    if code == "mulbal":
        triple = check_mulbal(mulbal)
    elif mulbal is not None:
        raise ValueError(f"mulbal parameters only apply to code 'mulbal', not {code!r}")
    else:
        triple = None
    if table_shape is not None and (
        not isinstance(table_shape, tuple | list | torch.Size)
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in table_shape)
    ):
        raise TypeError(f"{table_name} must be a shape (a tuple of ints) or None, got {table_shape!r}")
    expected = table_shape_of(code, L, V)
    if expected is None and table_shape is not None:
        raise ValueError(f"code {code!r} is computed and takes no table ({table_name} must be None)")
    if expected is not None:
        if table_shape is None:
            raise TypeError(f"code {code!r} reads a table of shape {expected}; {table_name} is None")
        if tuple(table_shape) != expected:
            raise ValueError(
                f"{table_name} must have shape {expected} for code {code!r}, got {tuple(table_shape)}"
            )
    return triple


@dataclass(frozen=True)
class TrellisFormat:
    """A bitshift trellis and its packed format (module docstring): ``L`` state bits (8..16), ``K`` bits per
    weight (1..4), ``V`` weights per step (1 or 2), tiles of ``T`` weights (a multiple of ``V``, at most
    65536, default 256); ``K*V < L``. Packing needs ``K*T`` to be a multiple of 32 (:attr:`packable`)."""

    L: int
    K: int = 2
    V: int = 1
    T: int = 256

    def __post_init__(self) -> None:
        check_int(self.L, "L", *L_RANGE)
        check_int(self.K, "K", *K_RANGE)
        check_int(self.V, "V", *V_RANGE)
        check_int(self.T, "T", *T_RANGE)
        if self.K * self.V >= self.L:
            raise ValueError(
                f"K*V must be smaller than L (states must overlap), got K={self.K}, V={self.V}, L={self.L}"
            )
        if self.T % self.V:
            raise ValueError(f"T must be a multiple of V={self.V}, got {self.T}")

    @property
    def kv(self) -> int:
        """New bits per step."""
        return self.K * self.V

    @property
    def n_states(self) -> int:
        return 1 << self.L

    @property
    def steps(self) -> int:
        """Trellis steps per tile (``T / V``)."""
        return self.T // self.V

    @property
    def overlap_bits(self) -> int:
        """Bits shared by consecutive states (``L - K*V``)."""
        return self.L - self.kv

    @property
    def bits_per_tile(self) -> int:
        """Bits of a tail-biting tile: exactly ``K*T``."""
        return self.K * self.T

    @property
    def packable(self) -> bool:
        """Whether a tile fills whole 32-bit words (``K*T`` a multiple of 32)."""
        return self.bits_per_tile % WORD_BITS == 0

    @property
    def words_per_tile(self) -> int:
        """32-bit words of a packed tile, ``K*T/32`` (raises unless :attr:`packable`)."""
        self.check_packable()
        return self.bits_per_tile // WORD_BITS

    def check_packable(self) -> None:
        if not self.packable:
            raise ValueError(
                f"K*T must be a multiple of 32 (whole 32-bit words per tile), got K={self.K}, T={self.T}"
            )

    def check_tail_biting_length(self) -> None:
        """A tail-biting tile must hold at least one whole state: ``K*T >= L``."""
        if self.bits_per_tile < self.L:
            raise ValueError(
                f"tail-biting needs K*T >= L (a tile must hold a whole state), got K*T="
                f"{self.bits_per_tile} < L={self.L}"
            )

    def check_code(
        self, code: Any, *, mulbal: Any = None, table_shape: Any = None, table_name: str = "table"
    ) -> tuple[int, int, int] | None:
        """Validate a code for this format (:func:`check_code`, :func:`check_code_params`); returns the
        mulbal triple or None."""
        check_code(code, self.V)
        return check_code_params(
            code, self.L, self.V, mulbal=mulbal, table_shape=table_shape, table_name=table_name
        )

    # --- paths ---------------------------------------------------------------------------------------
    def is_path(self, states: torch.Tensor) -> torch.Tensor:
        """``(...)`` bool: each consecutive pair of ``states (..., steps)`` is a trellis transition."""
        s = states.to(torch.int64)
        low = (1 << self.overlap_bits) - 1
        return ((s[..., :-1] & low) == (s[..., 1:] >> self.kv)).all(-1)

    def is_tail_biting(self, states: torch.Tensor) -> torch.Tensor:
        """``(...)`` bool: a path whose last state overlaps its first (``s_0 >> KV == s_last & low``)."""
        s = states.to(torch.int64)
        low = (1 << self.overlap_bits) - 1
        return self.is_path(s) & ((s[..., 0] >> self.kv) == (s[..., -1] & low))

    def check_states(self, states: Any) -> torch.Tensor:
        """Integer trellis paths ``(..., steps)`` with states in ``0..2^L - 1``, as int64."""
        if not isinstance(states, torch.Tensor) or states.is_floating_point() or states.is_complex():
            raise TypeError("states must be an integer torch.Tensor")
        if states.dim() == 0 or states.shape[-1] != self.steps:
            raise ValueError(
                f"states must have {self.steps} steps in the last dimension, got {tuple(states.shape)}"
            )
        s = states.to(torch.int64)
        if s.numel() and (s.min() < 0 or s.max() >= self.n_states):
            raise ValueError(f"states must lie in 0..{self.n_states - 1}")
        if not bool(self.is_path(s).all()):
            raise ValueError("states must be trellis paths (each state the previous one shifted by K*V bits)")
        return s

    def tail_biting_bits(self, states: torch.Tensor) -> torch.Tensor:
        """uint8 bits ``(..., K*T)`` of a tail-biting path: each step's ``KV`` low bits, in order."""
        self.check_tail_biting_length()
        s = self.check_states(states)
        if not bool(self.is_tail_biting(s).all()):
            raise ValueError("states must be tail-biting paths (s_0 >> K*V == s_last & (2^(L-K*V) - 1))")
        return to_bits(s & ((1 << self.kv) - 1), self.kv).flatten(-2)

    # --- the packed words ----------------------------------------------------------------------------
    def pack(self, states: torch.Tensor) -> torch.Tensor:
        """Pack tail-biting paths ``(..., steps)`` into int32 words ``(..., K*T/32)``, MSB first."""
        self.check_packable()
        bits = self.tail_biting_bits(states).to(torch.int64)  # (..., K*T)
        shifts = torch.arange(WORD_BITS - 1, -1, -1, device=bits.device)
        words = (bits.unflatten(-1, (-1, WORD_BITS)) << shifts).sum(-1)
        return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)

    def check_packed(self, packed: Any, dims: int | None = None) -> torch.Tensor:
        """int32 words with :attr:`words_per_tile` in the last dimension (and ``dims`` dimensions if given)."""
        check_tensor(packed, "packed", (torch.int32,))
        words = self.words_per_tile
        if packed.dim() == 0 or packed.shape[-1] != words:
            raise ValueError(
                f"packed must hold K*T/32 = {words} words per tile in its last dimension, "
                f"got shape {tuple(packed.shape)}"
            )
        if dims is not None and packed.dim() != dims:
            raise ValueError(f"packed must have shape (m, n/T, {words}), got {tuple(packed.shape)}")
        return packed

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """States ``(..., T/V)`` (int64) of packed tiles ``(..., K*T/32)`` (int32 words)."""
        self.check_packed(packed)
        kv, n_words = self.kv, self.words_per_tile
        words = packed.to(torch.int64) & MASK32  # (..., W) unsigned bit patterns
        t = torch.arange(self.steps, device=packed.device)
        start = ((t + 1) * kv - self.L) % (WORD_BITS * n_words)  # (steps,) first stream bit of each window
        first = start // WORD_BITS
        pair = (words[..., first] << WORD_BITS) | words[..., (first + 1) % n_words]  # (..., steps) 64 bits
        return (pair >> (2 * WORD_BITS - (start % WORD_BITS) - self.L)) & ((1 << self.L) - 1)


def unpack_states(packed: torch.Tensor, L: int, K: int, V: int, T: int) -> torch.Tensor:
    """States ``(..., T/V)`` (int64) of packed tail-biting tiles ``(..., K*T/32)`` (int32 words):
    ``TrellisFormat(L, K, V, T).unpack(packed)``."""
    return TrellisFormat(L, K, V, T).unpack(packed)


def to_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """uint8 bits ``(..., width)`` of non-negative integers, most significant first."""
    shifts = torch.arange(width - 1, -1, -1, device=values.device)
    return ((values.unsqueeze(-1) >> shifts) & 1).to(torch.uint8)
