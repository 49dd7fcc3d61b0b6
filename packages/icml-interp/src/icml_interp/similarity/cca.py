"""Canonical-correlation similarity: SVCCA (Raghu et al. 2017) and PWCCA (Morcos et al. 2018).

The canonical correlations of two centred representations are the singular values of ``U_X^T U_Y``, where
``U_X`` is an orthonormal basis of the column space of ``X`` (its left singular vectors). They do not change
under any invertible linear map of either representation, so both metrics are 1 for ``Y = X A`` with ``A``
invertible. When ``dim X + dim Y >= n`` the two subspaces of the ``(n - 1)``-dimensional space of centred
columns must intersect and some correlations are 1 whatever the data: a warning says so.
"""

from __future__ import annotations

import warnings

import numpy as np

from icml_interp.similarity._checks import as_pair, centred


def _basis(x: np.ndarray, name: str, keep) -> np.ndarray:
    """An orthonormal basis ``(n, k)`` of the top-``k`` principal directions of ``x`` (centred): ``keep`` an
    int (``k = min(keep, rank)``) or a fraction of variance (the fewest leading directions whose share of
    the variance reaches it; 1.0 keeps the numerical rank)."""
    x = centred(x, name, "CCA")[0]
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    rank = int((s > s[0] * max(x.shape) * np.finfo(float).eps).sum())
    if isinstance(keep, int):
        k = min(keep, rank)
    else:
        share = np.cumsum(s[:rank] ** 2) / np.sum(s[:rank] ** 2)
        k = min(int(np.searchsorted(share, keep - 1e-12)) + 1, rank)
    return u[:, :k]


def _check_keep(keep):
    if isinstance(keep, bool) or not isinstance(keep, (int, float)):
        raise TypeError(
            f"keep must be an int (directions) or a float in (0, 1] (share of variance), got {keep!r}"
        )
    if isinstance(keep, int) and keep < 1:
        raise ValueError(f"keep must be a positive int (directions kept), got {keep}")
    if isinstance(keep, float) and not 0 < keep <= 1:
        raise ValueError(f"keep must be a share of variance in (0, 1], got {keep!r}")
    return keep


def _canonical(ux: np.ndarray, uy: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The canonical correlations (descending) and the matching left singular vectors of ``ux^T uy``."""
    if ux.shape[1] + uy.shape[1] >= n:
        warnings.warn(
            f"CCA of {ux.shape[1]} and {uy.shape[1]} directions on n = {n} samples: at least "
            f"{ux.shape[1] + uy.shape[1] - n + 1} canonical correlations are 1 whatever the data; use more "
            "samples or keep fewer directions",
            UserWarning,
            stacklevel=3,
        )
    p, rho, _ = np.linalg.svd(ux.T @ uy, full_matrices=False)
    return np.clip(rho, 0.0, 1.0), p


def svcca(X, Y, keep: int | float = 0.99) -> float:
    """SVCCA of ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)`` (Raghu et al. 2017): centre the columns, keep
    each representation's leading singular directions (``keep``: an int number of directions, or a float
    share of variance, default 99%; ``keep=1`` keeps one direction, ``keep=1.0`` all), then the mean of
    the ``min(k_x, k_y)`` canonical correlations between the kept subspaces. In ``[0, 1]``; symmetric;
    invariant to invertible linear maps of either argument when every direction is kept (``keep=1.0`` or
    an int at least the rank)."""
    x, y = as_pair(X, Y)
    keep = _check_keep(keep)
    ux, uy = _basis(x, "X", keep), _basis(y, "Y", keep)
    rho, _ = _canonical(ux, uy, len(x))
    return float(rho.mean())


def pwcca(X, Y) -> float:
    """Projection-weighted CCA of ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)`` (Morcos et al. 2018).

    With the columns centred and the ``m = min(rank X, rank Y)`` canonical correlations ``rho_i`` and
    canonical variates ``h_i`` of ``X`` (unit vectors in sample space), the weight of direction ``i`` is
    ``alpha_i = sum_j |<h_i, x_j>|`` over the columns ``x_j`` of ``X`` (how much of ``X`` it accounts for),
    normalised to sum to 1, and ``PWCCA = sum_i alpha_i rho_i``. The weights come from ``X``, so it is not
    symmetric (Morcos et al. weight by the first argument). In ``[0, 1]``; invariant to invertible linear
    maps of ``Y``, and of ``X`` up to the weights."""
    x, y = as_pair(X, Y)
    xc = centred(x, "X", "CCA")[0]
    ux, uy = _basis(x, "X", 1.0), _basis(y, "Y", 1.0)
    rho, p = _canonical(ux, uy, len(x))
    h = ux @ p[:, : len(rho)]  # canonical variates of X, (n, m) orthonormal columns
    alpha = np.abs(h.T @ xc).sum(1)
    return float(alpha @ rho / alpha.sum())
