"""Trellis quantization of one layer and Proteus' per-layer choice from the vetted MUL-BAL pool.

:func:`trellis_quantize` runs block LDLQ (:mod:`.ldlq`) with the Viterbi of part 1 on rotated, scaled
weights. :func:`select_candidate` quantizes the same fixed random subsample of rows with each pool member
and keeps the one with the lowest Hessian proxy error ``tr(dW H dW^T) / tr(W H W^T)`` (the rows of the
subsample are quantized exactly as they would be in the full matrix: LDLQ acts on rows independently).
The choice rule and the subsample are our design (the Proteus paper text was not available).
"""

from __future__ import annotations

import torch

from icml_compress.proteus.codes import TrellisCode, make_code
from icml_compress.proteus.pool import MULBAL_POOL
from icml_compress.quantize.ldlq import ldlq, proxy_error
from icml_compress.trellis import BitshiftTrellis, quantize_tiles


def trellis_quantize(Wn: torch.Tensor, M: torch.Tensor, code: TrellisCode, trellis: BitshiftTrellis):
    """Quantize ``Wn (m, n)`` (rotated, scaled to the code's RMS) with LDLQ; ``M`` from :func:`block_ldl`.
    Runs on the device of ``Wn`` (``M`` there too).

    Returns ``(W_hat (m, n) float64, packed (m, n/T, K*T/32) int32)``.
    """
    What, states = _ldlq_codes(Wn, M, code.values().unsqueeze(0), trellis)
    packed = torch.stack([trellis.pack(s[0]) for s in states], dim=1)  # (m, n/T, words)
    return What[0], packed


def _ldlq_codes(Wn: torch.Tensor, M: torch.Tensor, values: torch.Tensor, trellis: BitshiftTrellis):
    """LDLQ of ``Wn (m, n)`` with each of the codes ``values (G, 2^L, V)`` at once (one grouped Viterbi per
    column block): ``(W_hat (G, m, n) float64, [states (G, m, T/V) per block])``. The decoded weights are
    the code values of the states (what ``TrellisCode.decode`` computes, looked up)."""
    G, m = values.shape[0], Wn.shape[0]
    values = values.to(Wn.device)
    rows = torch.arange(G, device=Wn.device).view(G, 1, 1)

    def quantize_block(target: torch.Tensor):
        states = quantize_tiles(target, values, trellis)  # (G, m, T/V)
        return values[rows, states].reshape(G, m, trellis.T), states

    return ldlq(Wn.expand(G, *Wn.shape), M, trellis.T, quantize_block)


def pool_code(index: int, L: int) -> TrellisCode:
    """Member ``index`` of the vetted pool as a unit-variance code at ``L`` (its affine Gaussianizer)."""
    return make_code("mulbal", L, 1, mulbal=MULBAL_POOL[index])


def select_candidate(
    Wn: torch.Tensor,
    Hr: torch.Tensor,
    M: torch.Tensor,
    trellis: BitshiftTrellis,
    n_candidates: int,
    rows: int,
    generator: torch.Generator,
) -> tuple[int, list[float]]:
    """Index of the pool member with the lowest proxy error on a row subsample, and every member's error.
    The candidates are quantized together (one grouped Viterbi per column block, on the device of ``Wn``);
    the row subsample is drawn on the CPU by ``generator``, so it is the same on every device."""
    n_candidates = min(n_candidates, len(MULBAL_POOL))
    idx = torch.randperm(Wn.shape[0], generator=generator)[: min(rows, Wn.shape[0])]
    sub = Wn[idx.to(Wn.device)]
    values = torch.stack([pool_code(i, trellis.L).values() for i in range(n_candidates)])
    What, _ = _ldlq_codes(sub, M, values, trellis)
    errors = [proxy_error(sub, What[i], Hr) for i in range(n_candidates)]
    return min(range(n_candidates), key=errors.__getitem__), errors
