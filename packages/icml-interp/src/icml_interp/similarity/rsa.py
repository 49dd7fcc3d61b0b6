"""Representational similarity analysis (Kriegeskorte et al. 2008): correlate two dissimilarity matrices."""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial.distance import pdist
from scipy.stats import rankdata

from icml_interp.similarity._checks import as_pair
from icml_interp.validation import check_choice

METRICS = ("correlation", "euclidean")
METHODS = ("spearman", "pearson")


def _rdm(x: np.ndarray, metric: str, name: str) -> np.ndarray:
    """The upper triangle (``i < j``, row-major) of the representational dissimilarity matrix of ``x``."""
    top = float(np.abs(x).max())
    # scaled by a power of two (exact: equal distances stay tied for spearman), not by max|x| (rounds)
    x = np.ldexp(x, -np.frexp(top)[1]) if top > 0 else x
    if metric == "correlation":
        flat = np.flatnonzero(np.ptp(x, axis=1) == 0)
        if flat.size:
            raise ValueError(
                f"{name} row {int(flat[0])} is constant across features, so its correlation distance is "
                "undefined; use metric='euclidean'"
            )
    return pdist(x, metric)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float(np.clip(a @ b / math.sqrt(float(a @ a) * float(b @ b)), -1.0, 1.0))


def rsa(X, Y, metric: str = "correlation", method: str = "spearman") -> float:
    """RSA of ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)``: the correlation between the upper triangles
    (``i < j``) of their representational dissimilarity matrices, ``RDM_ij = 1 - pearson(x_i, x_j)``
    (``metric="correlation"``, each row needs at least two distinct values) or ``|x_i - x_j|``
    (``"euclidean"``). ``method``: ``"spearman"`` (rank correlation, ties averaged; the usual choice) or
    ``"pearson"``. In ``[-1, 1]``; symmetric; 1 for identical data; ``n >= 3``."""
    metric = check_choice(metric, "metric", METRICS)
    method = check_choice(method, "method", METHODS)
    x, y = as_pair(X, Y, 3, " (an RDM needs at least 3 pairs to correlate)")
    a, b = _rdm(x, metric, "X"), _rdm(y, metric, "Y")
    if method == "spearman":
        a, b = rankdata(a), rankdata(b)
    for name, v in (("X", a), ("Y", b)):
        if np.ptp(v) <= 1e-12 * float(np.abs(v).max()):
            raise ValueError(
                f"{name} has a constant dissimilarity matrix (all pairs equally far): RSA is undefined"
            )
    return _pearson(a, b)
