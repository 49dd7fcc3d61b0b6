"""Nearest-neighbour similarity: mutual-kNN (Huh et al. 2024) and CKNNA, CKA restricted to mutual
neighbours."""

from __future__ import annotations

import math

import numpy as np

from icml_interp.similarity._checks import as_pair, unit_scale
from icml_interp.similarity._hsic import DEBIASED_MIN, song_hsic


def _unit_rows(x: np.ndarray, name: str) -> np.ndarray:
    """Rows scaled to unit L2 norm (cosine geometry); a zero row has no direction: ``ValueError``."""
    x = unit_scale(x)[0]
    norms = np.linalg.norm(x, axis=1)
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise ValueError(f"{name} row {int(zero[0])} is zero, so its cosine similarities are undefined")
    return x / norms[:, None]


def _check_k(k, n: int, minimum: int = 1) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {k!r}")
    if not minimum <= k <= n - 1:
        raise ValueError(
            f"k must be an int in [{minimum}, n - 1] = [{minimum}, {n - 1}] (neighbours other than "
            f"the sample itself among n = {n}), got {k}"
        )
    return k


def _knn_mask(sim: np.ndarray, k: int) -> np.ndarray:
    """``mask[i, j]``: ``j`` is one of the ``k`` most similar samples to ``i``, ``i`` itself excluded (ties
    broken by numpy's partition order)."""
    s = sim.copy()
    np.fill_diagonal(s, -np.inf)
    idx = np.argpartition(-s, k - 1, axis=1)[:, :k]
    mask = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(mask, idx, True, axis=1)
    return mask


def mutual_knn(X, Y, k: int = 10) -> float:
    """Mutual k-nearest-neighbour alignment of ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)`` (Huh et al. 2024):
    ``mean_i |N_X(i) & N_Y(i)| / k``, where ``N_X(i)`` holds the ``k`` samples of highest cosine similarity
    to sample ``i`` in ``X`` (``i`` excluded), ``1 <= k <= n - 1``.

    1 when the neighbourhoods agree; ``k / (n - 1)`` in expectation for independent representations (the
    chance level). Invariant to orthogonal maps and scaling of either argument (not to translations:
    cosine similarity is about the origin); symmetric.
    """
    x, y = as_pair(X, Y)
    k = _check_k(k, len(x))
    xu, yu = _unit_rows(x, "X"), _unit_rows(y, "Y")
    both = _knn_mask(xu @ xu.T, k) & _knn_mask(yu @ yu.T, k)
    return float(both.sum(1).mean() / k)


def cknna(X, Y, k: int = 10) -> float:
    """CKNNA of ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)`` (Huh et al. 2024): CKA restricted to mutual
    nearest neighbours, as platonic-rep's ``AlignmentMetrics.cknna`` (its default ``unbiased=True``)
    computes it on the L2-normalised rows its pipeline feeds every metric.

    With ``K = X^ X^T``, ``L = Y^ Y^T`` the cosine Gram matrices (rows ``X^`` of unit norm, no centring),
    ``M_K`` the kNN mask of ``K`` (``M_K[i, j] = 1`` iff ``j`` is among the ``k`` most similar to ``i``,
    ``i`` excluded), ``M = M_K * M_L``:
    ``CKNNA = HSIC_u(M o K, M o L) / sqrt(HSIC_u(M_K o K, M_K o K) HSIC_u(M_L o L, M_L o L))`` with Song et
    al.'s unbiased HSIC taken literally on the (asymmetric) masked matrices, ``tr(A~ B~)`` and
    ``1^T A~ B~ 1``. The masks are asymmetric, so ``1^T A~ B~ 1 != 1^T B~ A~ 1`` and swapping ``X`` and
    ``Y`` changes the value slightly (by about 1e-4 relative on random data; we keep platonic-rep's
    formula so that values compare with published ones). ``2 <= k <= n - 1``, ``n >= 4``; 1 for identical
    neighbourhoods and kernels; not clipped, as platonic-rep's is not.
    """
    x, y = as_pair(X, Y, DEBIASED_MIN, " (the unbiased HSIC divides by n - 3)")
    k = _check_k(k, len(x), minimum=2)
    xu, yu = _unit_rows(x, "X"), _unit_rows(y, "Y")
    gram_x, gram_y = xu @ xu.T, yu @ yu.T
    mask_x, mask_y = _knn_mask(gram_x, k), _knn_mask(gram_y, k)
    both = mask_x & mask_y
    self_x = song_hsic(gram_x * mask_x, gram_x * mask_x)
    self_y = song_hsic(gram_y * mask_y, gram_y * mask_y)
    for name, h in (("X", self_x), ("Y", self_y)):
        if not h > 0:
            raise ValueError(
                f"{name} leaves CKNNA undefined: the HSIC of its kNN-restricted kernel with itself is "
                f"{h:.3g} (not positive); use a larger k"
            )
    return song_hsic(gram_x * both, gram_y * both) / math.sqrt(self_x * self_y)
