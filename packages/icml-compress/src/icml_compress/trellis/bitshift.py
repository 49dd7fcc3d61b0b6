"""The bitshift trellis (QTIP, Tseng et al., 2024): states, transitions, bitstreams and packing.

A state is ``L`` bits. Each step emits ``V`` weights from the current state and then shifts ``K*V`` new
bits in from the right: ``next = ((s << K*V) & (2^L - 1)) | new``. So ``s`` has the ``2^(K*V)``
successors ``((s << KV) & mask) | j`` and the ``2^(K*V)`` predecessors ``(s >> KV) | (j << (L - KV))``;
two consecutive states overlap in ``L - K*V`` bits. A tile of ``T`` weights is ``T/V`` steps.

Bitstreams: the *free-start* stream of a state sequence is the first state's ``L`` bits followed by the
``K*V`` new bits of every later step (``L + (T/V - 1)*K*V`` bits). A *tail-biting* sequence additionally
has ``s_0 >> KV == s_last & (2^(L-KV) - 1)``; its stream drops the first state's top ``L - KV`` bits,
which reappear as the last state's low bits, and reads cyclically: exactly ``K*T`` bits per tile. Packed
tiles store the tail-biting stream in 32-bit words, most significant bit first (the format
:mod:`icml_kernels.trellis` decodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icml_compress.baselines._checks import check_int
from icml_kernels.trellis.reference import unpack_states

MAX_T = 1 << 16


@dataclass(frozen=True)
class BitshiftTrellis:
    """A bitshift trellis: ``L`` state bits (8..16), ``K`` bits per weight (1..4), ``V`` weights per step
    (1 or 2) and tiles of ``T`` weights (a multiple of ``V``, at most 65536, default 256). ``K*V`` must be
    smaller than ``L`` so that consecutive states overlap."""

    L: int
    K: int = 2
    V: int = 1
    T: int = 256

    def __post_init__(self) -> None:
        check_int(self.L, "L", 8, 16)
        check_int(self.K, "K", 1, 4)
        check_int(self.V, "V", 1, 2)
        check_int(self.T, "T", 1, MAX_T)
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
    def words_per_tile(self) -> int:
        """32-bit words of a packed tile (needs ``K*T`` to be a multiple of 32)."""
        self._check_packable()
        return self.bits_per_tile // 32

    def successors(self, states: torch.Tensor) -> torch.Tensor:
        """``(..., 2^KV)`` next states of each state, new bits ``j = 0 .. 2^KV - 1``."""
        j = torch.arange(1 << self.kv, device=states.device)
        return ((states.to(torch.int64).unsqueeze(-1) << self.kv) & (self.n_states - 1)) | j

    def predecessors(self, states: torch.Tensor) -> torch.Tensor:
        """``(..., 2^KV)`` states that lead to each state, dropped top bits ``j = 0 .. 2^KV - 1``."""
        j = torch.arange(1 << self.kv, device=states.device)
        return (states.to(torch.int64).unsqueeze(-1) >> self.kv) | (j << self.overlap_bits)

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

    def free_start_bits(self, states: torch.Tensor) -> torch.Tensor:
        """uint8 bits ``(..., L + (steps-1)*KV)`` of a path: the first state, then each step's new bits."""
        s = self._check_states(states)
        first = _to_bits(s[..., 0], self.L)
        new = _to_bits(s[..., 1:] & ((1 << self.kv) - 1), self.kv).flatten(-2)
        return torch.cat((first, new), dim=-1)

    def tail_biting_bits(self, states: torch.Tensor) -> torch.Tensor:
        """uint8 bits ``(..., K*T)`` of a tail-biting path: each step's ``KV`` low bits, in order."""
        self.check_tail_biting_length()
        s = self._check_states(states)
        if not bool(self.is_tail_biting(s).all()):
            raise ValueError("states must be tail-biting paths (s_0 >> K*V == s_last & (2^(L-K*V) - 1))")
        return _to_bits(s & ((1 << self.kv) - 1), self.kv).flatten(-2)

    def states_from_bits(self, bits: torch.Tensor, *, tail_biting: bool) -> torch.Tensor:
        """States ``(..., steps)`` read back from a free-start or a tail-biting bitstream."""
        length = self.bits_per_tile if tail_biting else self.L + (self.steps - 1) * self.kv
        if bits.shape[-1] != length:
            kind = "tail-biting" if tail_biting else "free-start"
            raise ValueError(f"a {kind} stream of this trellis has {length} bits, got {bits.shape[-1]}")
        if tail_biting:
            self.check_tail_biting_length()
        b = bits.to(torch.int64)
        if tail_biting:  # the window of step t ends at bit (t+1)*KV; the first one wraps round the end
            b = torch.cat((b[..., -self.overlap_bits :], b), dim=-1)
        ends = self.L + self.kv * torch.arange(self.steps, device=bits.device)  # (steps,)
        idx = ends[:, None] - self.L + torch.arange(self.L, device=bits.device)  # (steps, L)
        weights = 1 << torch.arange(self.L - 1, -1, -1, device=bits.device)
        return (b[..., idx] * weights).sum(-1)

    def pack(self, states: torch.Tensor) -> torch.Tensor:
        """Pack tail-biting paths ``(..., steps)`` into int32 words ``(..., K*T/32)``, MSB first."""
        self._check_packable()
        bits = self.tail_biting_bits(states).to(torch.int64)  # (..., K*T)
        words = (bits.unflatten(-1, (-1, 32)) << torch.arange(31, -1, -1, device=bits.device)).sum(-1)
        return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """States ``(..., steps)`` (int64) of packed tiles ``(..., K*T/32)``."""
        self._check_packable()
        if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
            raise TypeError(
                f"packed must be an int32 torch.Tensor, got {getattr(packed, 'dtype', type(packed))}"
            )
        if packed.dim() == 0 or packed.shape[-1] != self.words_per_tile:
            shape = tuple(packed.shape)
            raise ValueError(
                f"packed must have {self.words_per_tile} words per tile (K*T/32) in its last "
                f"dimension, got shape {shape}"
            )
        return unpack_states(packed, self.L, self.K, self.V, self.T)

    def check_tail_biting_length(self) -> None:
        """A tail-biting tile must hold at least one whole state: ``K*T >= L``."""
        if self.bits_per_tile < self.L:
            raise ValueError(
                f"tail-biting needs K*T >= L (a tile must hold a whole state), got K*T="
                f"{self.bits_per_tile} < L={self.L}"
            )

    def _check_packable(self) -> None:
        if self.bits_per_tile % 32:
            raise ValueError(
                f"packing needs K*T to be a multiple of 32 (whole words per tile), got {self.bits_per_tile}"
            )

    def _check_states(self, states: torch.Tensor) -> torch.Tensor:
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


def _to_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """uint8 bits ``(..., width)`` of non-negative integers, most significant first."""
    shifts = torch.arange(width - 1, -1, -1, device=values.device)
    return ((values.unsqueeze(-1) >> shifts) & 1).to(torch.uint8)
