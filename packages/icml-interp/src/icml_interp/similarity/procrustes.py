"""Orthogonal Procrustes alignment of two representations of the same samples."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icml_interp.similarity._checks import as_pair, centred, unit_scale
from icml_interp.validation import check_bool


@dataclass(frozen=True)
class ProcrustesResult:
    """What :func:`procrustes` found: the map ``R`` ``(d_x, d_y)``, the residual ``|X~ R - Y~|_F`` and the
    similarity ``|X~^T Y~|_* / (|X~|_F |Y~|_F)`` of the prepared (centred, normalised) data."""

    R: np.ndarray  # (d_x, d_y); orthogonal when d_x == d_y
    residual: float
    similarity: float


def procrustes(X, Y, center: bool = True, normalize: bool = True) -> ProcrustesResult:
    """Orthogonal Procrustes: the ``R`` minimising ``|X~ R - Y~|_F`` over ``R^T R = I`` (``X`` ``(n, d_x)``,
    ``Y`` ``(n, d_y)`` of the same samples), ``R = U V^T`` from the SVD ``X~^T Y~ = U S V^T`` (Schoenemann
    1966).

    ``X~``, ``Y~``: the inputs with their column means subtracted (``center``) and divided by their
    Frobenius norms (``normalize``). ``similarity = |X~^T Y~|_* / (|X~|_F |Y~|_F)`` (the nuclear norm, the
    sum of ``S``) is in ``[0, 1]``, symmetric, 1 exactly when ``Y~`` is an orthogonal map of ``X~`` up to
    scale, and invariant to orthogonal maps and isotropic scaling of either input (and, with ``center``,
    translations). With ``normalize`` and ``d_x <= d_y``, ``residual^2 = 2 - 2 similarity``.
    When ``d_x != d_y``, ``R`` is ``d_x x d_y`` with orthonormal rows or columns (the smaller width is
    zero-padded, as in generalised shape metrics).
    """
    center, normalize = check_bool(center, "center"), check_bool(normalize, "normalize")
    x, y = as_pair(X, Y)
    what = "the Procrustes similarity"
    prepared = []
    for name, a in (("X", x), ("Y", y)):
        unit, scale = centred(a, name, what) if center else unit_scale(a)
        if not np.any(unit):
            raise ValueError(f"{name} is all zeros: {what} is undefined")
        prepared.append((unit, scale))
    (x, scale_x), (y, scale_y) = prepared
    top = max(scale_x, scale_y)
    x, y = x * (scale_x / top), y * (scale_y / top)  # one common scale: R and the similarity do not change
    norm_x, norm_y = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if normalize:
        x, y, top = x / norm_x, y / norm_y, 1.0
    u, s, vt = np.linalg.svd(x.T @ y, full_matrices=False)
    rotation = u @ vt
    similarity = float(np.clip(s.sum() / (np.linalg.norm(x) * np.linalg.norm(y)), 0.0, 1.0))
    residual = float(np.linalg.norm(x @ rotation - y)) * top
    if not math.isfinite(residual):
        raise ValueError("X and Y are too large: the residual overflows float64; rescale them")
    return ProcrustesResult(R=rotation, residual=residual, similarity=similarity)
