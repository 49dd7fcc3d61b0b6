"""Centred kernel alignment (CKA) and HSIC: linear and RBF, biased and debiased.

Conventions (``n`` samples, rows; features in columns; every computation in float64):

- ``H = I - 11^T / n`` centres. The biased HSIC is Gretton et al.'s ``tr(K H L H) / (n - 1)^2``.
- The debiased (unbiased) HSIC is Song et al. (2012), eq. 5: with ``K~``, ``L~`` the Gram matrices with
  their diagonals set to 0,
  ``HSIC_u = [tr(K~ L~) + (1^T K~ 1)(1^T L~ 1) / ((n-1)(n-2)) - 2 (1^T K~ L~ 1) / (n-2)] / (n (n-3))``,
  an unbiased estimate of the population HSIC; it needs ``n >= 4`` and can be negative.
- ``CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` (Kornblith et al. 2019); debiased CKA puts
  ``HSIC_u`` in all three places. Debiased HSIC is an inner product of *U-centred* Gram matrices
  (Szekely & Rizzo 2014), so debiased CKA stays in ``[-1, 1]``.

Biased CKA is inflated when the number of features is comparable to or larger than ``n`` (two independent
random representations score far above 0); prefer ``debiased=True`` there and compare with the chance level
of :func:`~icml_interp.similarity.permutation_baseline`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial.distance import pdist, squareform

from icml_interp.similarity._checks import as_matrix, as_pair, gram_pair, unit_scale
from icml_interp.similarity._hsic import (
    DEBIASED_MIN,
    WHY_DEBIASED,
    cka_of_grams,
    linear_cka_checked,
    song_hsic,
)
from icml_interp.validation import check_bool, check_number


def gram_linear(X) -> np.ndarray:
    """The linear-kernel Gram matrix ``K = X X^T`` ``(n, n)`` of ``X`` ``(n_samples, n_features)``
    (uncentred: :func:`cka` and :func:`hsic` centre it)."""
    x, top = unit_scale(as_matrix(X, "X"))
    with np.errstate(over="ignore"):
        gram = (x @ x.T) * top * top
    if not np.isfinite(gram).all():
        raise ValueError("X is too large: its Gram matrix overflows float64; rescale X")
    return gram


def gram_rbf(X, sigma: float | None = None, fraction: float = 1.0) -> np.ndarray:
    """The RBF Gram matrix ``K_ij = exp(-|x_i - x_j|^2 / (2 sigma^2))`` ``(n, n)`` of ``X`` ``(n_samples,
    n_features)``.

    ``sigma=None`` uses the median heuristic ``sigma = fraction * sqrt(median |x_i - x_j|^2)``, the median
    taken over the pairs ``i < j`` of distinct rows (pairs at distance 0 are left out); Kornblith et al. use
    ``fraction`` (their ``threshold``) in ``{0.2, 0.4, 0.8}``. A number ``sigma`` is used as given and
    ``fraction`` is ignored.
    """
    sigma, fraction = _bandwidth(sigma, fraction)
    return _rbf(as_matrix(X, "X"), sigma, fraction, "X")


def _bandwidth(sigma, fraction) -> tuple[float | None, float]:
    if sigma is not None:
        sigma = check_number(sigma, "sigma", minimum=0.0, open_min=True)
    return sigma, check_number(fraction, "fraction", minimum=0.0, open_min=True)


def _rbf(x: np.ndarray, sigma: float | None, fraction: float, name: str) -> np.ndarray:
    x, top = unit_scale(x)
    dist = squareform(pdist(x, "euclidean")) if len(x) > 1 else np.zeros((1, 1))  # in units of max|x|
    if sigma is None:
        positive = dist[np.triu_indices(len(x), 1)]
        positive = positive[positive > 0]
        if positive.size == 0:
            raise ValueError(
                f"{name}: all rows are identical, so the median heuristic has no distance; pass sigma"
            )
        bandwidth = fraction * math.sqrt(float(np.median(positive**2)))
    else:
        bandwidth = sigma / top
    if not bandwidth > 0:  # a sigma far below the spacing of the rows: no two rows are similar
        return np.eye(len(x))
    with np.errstate(over="ignore"):
        z = dist / bandwidth
        return np.exp(-0.5 * z * z)


def hsic(K, L, debiased: bool = False) -> float:
    """HSIC of two Gram matrices ``K``, ``L`` ``(n, n)`` of the same samples.

    ``debiased=False``: ``tr(K H L H) / (n - 1)^2`` (Gretton et al. 2005, biased by ``O(1/n)``);
    ``debiased=True``: Song et al.'s (2012) unbiased estimator (module docstring), ``n >= 4``, possibly
    negative. Both are bilinear: ``hsic(a K, b L) = a b hsic(K, L)``.
    """
    debiased = check_bool(debiased, "debiased")
    k, l_ = gram_pair(K, L, DEBIASED_MIN if debiased else 2, WHY_DEBIASED if debiased else "")
    k, top_k = unit_scale(k)
    l_, top_l = unit_scale(l_)
    n = len(k)
    if debiased:
        value = song_hsic(k, l_)
    else:
        kc = k - k.mean(0) - k.mean(1)[:, None] + k.mean()
        value = float(np.sum(kc * l_)) / (n - 1) ** 2
    with np.errstate(over="ignore"):
        value = value * top_k * top_l
    if not math.isfinite(value):
        raise ValueError("K and L are too large: their HSIC overflows float64; rescale them")
    return value


def cka(K, L, debiased: bool = False) -> float:
    """CKA of two Gram matrices ``K``, ``L`` ``(n, n)`` of the same samples:
    ``HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` with the biased or (``debiased=True``, ``n >= 4``) Song
    et al.'s unbiased HSIC. Invariant to scaling either matrix; 1 for ``K = L``."""
    debiased = check_bool(debiased, "debiased")
    k, l_ = gram_pair(K, L, DEBIASED_MIN if debiased else 2, WHY_DEBIASED if debiased else "")
    return cka_of_grams(unit_scale(k)[0], unit_scale(l_)[0], debiased, ("K", "L"))


def linear_cka(X, Y, debiased: bool = False) -> float:
    """Linear CKA of two representations ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)`` of the same ``n`` samples.

    Biased (default): after centring the columns, ``|X^T Y|_F^2 / (|X^T X|_F |Y^T Y|_F)`` (Kornblith et
    al. 2019), equal to :func:`cka` of :func:`gram_linear`; in ``[0, 1]``. ``debiased=True``: Song et
    al.'s unbiased HSIC in place of the biased one (Nguyen et al. 2021's debiased CKA), ``n >= 4``, near
    0 for independent representations even when ``d >> n``. Invariant to orthogonal maps and isotropic
    scaling of either argument and to translations; symmetric.
    """
    debiased = check_bool(debiased, "debiased")
    x, y = as_pair(X, Y, DEBIASED_MIN if debiased else 2, WHY_DEBIASED if debiased else "")
    return linear_cka_checked(x, y, debiased, ("X", "Y"))


def rbf_cka(X, Y, sigma: float | None = None, fraction: float = 1.0, debiased: bool = False) -> float:
    """CKA of the RBF Gram matrices of ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)``: :func:`cka` of
    :func:`gram_rbf` ``(X, sigma, fraction)`` and ``(Y, sigma, fraction)``. With ``sigma=None`` each
    representation gets its own median-heuristic bandwidth (``fraction`` times the root median squared
    distance), which makes the value invariant to isotropic scaling; a number ``sigma`` is shared by both."""
    debiased = check_bool(debiased, "debiased")
    x, y = as_pair(X, Y, DEBIASED_MIN if debiased else 2, WHY_DEBIASED if debiased else "")
    sigma, fraction = _bandwidth(sigma, fraction)
    k, l_ = _rbf(x, sigma, fraction, "X"), _rbf(y, sigma, fraction, "Y")
    try:
        return cka_of_grams(k, l_, debiased, ("X", "Y"))
    except ValueError as err:  # an RBF Gram matrix of all ones: the bandwidth dwarfs every distance
        given = f"sigma = {sigma:g}" if sigma is not None else f"fraction = {fraction:g}"
        raise ValueError(f"{err} ({given} may be too large: every pair of rows looks alike)") from None
