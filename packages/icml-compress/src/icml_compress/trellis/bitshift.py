"""The bitshift trellis (QTIP, Tseng et al., 2024) as the quantizer sees it: transitions and bitstreams on top
of the packed format of the kernels.

The parameters (``L``, ``K``, ``V``, ``T``, their ranges), tail-biting paths and the packing into 32-bit
words are the kernels' :class:`icml_kernels.trellis.TrellisFormat` (one description, beside the decoders
that read it); :class:`BitshiftTrellis` inherits them, ``pack`` and ``unpack`` included, and adds what only
the encoder needs.

A state is ``L`` bits. Each step emits ``V`` weights from the current state and then shifts ``K*V`` new
bits in from the right: ``next = ((s << K*V) & (2^L - 1)) | new``. So ``s`` has the ``2^(K*V)``
successors ``((s << KV) & mask) | j`` and the ``2^(K*V)`` predecessors ``(s >> KV) | (j << (L - KV))``;
two consecutive states overlap in ``L - K*V`` bits. A tile of ``T`` weights is ``T/V`` steps.

Bitstreams: the *free-start* stream of a state sequence is the first state's ``L`` bits followed by the
``K*V`` new bits of every later step (``L + (T/V - 1)*K*V`` bits). A *tail-biting* sequence additionally
has ``s_0 >> KV == s_last & (2^(L-KV) - 1)``; its stream drops the first state's top ``L - KV`` bits,
which reappear as the last state's low bits, and reads cyclically: exactly ``K*T`` bits per tile (what
``pack`` stores).
"""

from __future__ import annotations

import torch

from icml_kernels.trellis.format import TrellisFormat, to_bits


class BitshiftTrellis(TrellisFormat):
    """A bitshift trellis: ``L`` state bits (8..16), ``K`` bits per weight (1..4), ``V`` weights per step
    (1 or 2) and tiles of ``T`` weights (a multiple of ``V``, at most 65536, default 256). ``K*V`` must be
    smaller than ``L`` so that consecutive states overlap. Everything of :class:`TrellisFormat` (validation,
    ``pack``/``unpack``, tail-biting paths) plus transitions and bitstreams."""

    def successors(self, states: torch.Tensor) -> torch.Tensor:
        """``(..., 2^KV)`` next states of each state, new bits ``j = 0 .. 2^KV - 1``."""
        j = torch.arange(1 << self.kv, device=states.device)
        return ((states.to(torch.int64).unsqueeze(-1) << self.kv) & (self.n_states - 1)) | j

    def predecessors(self, states: torch.Tensor) -> torch.Tensor:
        """``(..., 2^KV)`` states that lead to each state, dropped top bits ``j = 0 .. 2^KV - 1``."""
        j = torch.arange(1 << self.kv, device=states.device)
        return (states.to(torch.int64).unsqueeze(-1) >> self.kv) | (j << self.overlap_bits)

    def free_start_bits(self, states: torch.Tensor) -> torch.Tensor:
        """uint8 bits ``(..., L + (steps-1)*KV)`` of a path: the first state, then each step's new bits."""
        s = self.check_states(states)
        first = to_bits(s[..., 0], self.L)
        new = to_bits(s[..., 1:] & ((1 << self.kv) - 1), self.kv).flatten(-2)
        return torch.cat((first, new), dim=-1)

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
