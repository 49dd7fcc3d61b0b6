"""Block LDLQ (QuIP / QTIP) with each block's tiles quantized by the trellis Viterbi.

With ``H = M D M^T``, ``M`` unit block upper triangular and ``D`` block diagonal, the proxy loss is
``tr(dW H dW^T) = sum_k (dW M)_k D_k (dW M)_k^T`` with ``(dW M)_k = dW_k + sum_{j<k} dW_j M_{jk}``. So
column block ``k`` is quantized from the target ``W_k + dW_{<k} M_{<k,k}`` (error feedback of the blocks
already done) and its error ``(dW M)_k`` is what remains. A block is ``T`` columns wide and each of its
rows is one trellis tile (the row-tile layout the fused decode+GEMV kernel reads), so one batched
Viterbi call per block quantizes all its tiles. ``M`` comes from the Cholesky factor of the reversed
matrix: ``H = G G^T`` with ``G`` upper, ``M_{jk} = G_{jk} G_{kk}^{-1}``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def block_ldl(H: torch.Tensor, block: int) -> torch.Tensor:
    """Unit block upper triangular ``M`` with ``H = M D M^T`` (``D`` block diagonal), float64."""
    n = H.shape[0]
    if n % block:
        raise ValueError(f"block={block} must divide the Hessian size {n}")
    Hd = H.double()
    G = torch.linalg.cholesky(Hd.flip(0, 1)).flip(0, 1)  # upper, H = G G^T
    M = torch.empty_like(G)
    for k in range(0, n, block):
        Gkk = G[k : k + block, k : k + block]
        # M[:, k-block] = G[:, k-block] @ inv(Gkk): solve Gkk^T X^T = G^T
        M[:, k : k + block] = torch.linalg.solve_triangular(Gkk.T, G[:, k : k + block].T, upper=False).T
    return M


def ldlq(
    W: torch.Tensor,
    M: torch.Tensor,
    block: int,
    quantize_block: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Quantize ``W (m, n)`` column block by column block with LDL error feedback; ``W (G, m, n)``: ``G``
    independent quantizations of as many matrices (Proteus' candidates), each block in one call.

    ``quantize_block(target (..., m, block) float32) -> (quantized (..., m, block), states)``. Returns the
    quantized matrix (float64, the shape of ``W``) and the list of each block's states.
    """
    n = W.shape[-1]
    Wd = W.double()
    Q = torch.zeros_like(Wd)
    err = torch.zeros_like(Wd)  # dW of the blocks already quantized
    states = []
    for k in range(0, n, block):
        sl = slice(k, k + block)
        # the feedback one matrix at a time: the same products (and roundings) as a single matrix
        feedback = torch.stack([e[:, :k] @ M[:k, sl] for e in err.reshape(-1, *err.shape[-2:])])
        target = Wd[..., sl] + feedback.reshape(Wd[..., sl].shape)  # (..., m, block)
        q, s = quantize_block(target.float())
        Q[..., sl] = q.double()
        err[..., sl] = Wd[..., sl] - Q[..., sl]
        states.append(s)
    return Q, states


def proxy_error(W: torch.Tensor, What: torch.Tensor, H: torch.Tensor) -> float:
    """``tr(dW H dW^T) / tr(W H W^T)``: the relative layer-output error on inputs with second moment ``H``."""
    d = (W - What).double()
    Wd = W.double()
    num = ((d @ H.double()) * d).sum()
    den = ((Wd @ H.double()) * Wd).sum()
    return (num / den).item()
