"""Exact L_p quantities of a function of a few independent discrete variables, by enumeration.

Φ is given as its table over the product space (``values[x_1, ..., x_m]``) and each X_i by its probability
vector; everything is computed exactly (float64), which is how the bounds of
:mod:`icml_theory.stability.concentration` are checked on small cases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icml_theory.validation import as_array, check_int, check_real

__all__ = ["ExactMoments", "exact_moments"]

MAX_CELLS = 1 << 22  # the table and one replaced copy per coordinate stay well inside memory


@dataclass(frozen=True)
class ExactMoments:
    """``centered`` = ‖Z − EZ‖_p, ``differences[i]`` = c_i = ‖Φ(X) − Φ(X^{(i)})‖_p, ``mean`` = EZ."""

    p: float
    mean: float
    centered: float
    differences: np.ndarray


def _marginals(marginals, shape: tuple[int, ...]) -> list[np.ndarray]:
    if not isinstance(marginals, list | tuple):
        raise TypeError(f"marginals must be a list of probability vectors, got {type(marginals).__name__}")
    if len(marginals) != len(shape):
        raise ValueError(
            f"marginals must hold one probability vector per axis of values ({len(shape)}), got {len(marginals)}"
        )
    out = []
    for i, (m, k) in enumerate(zip(marginals, shape, strict=True)):
        v = as_array(m, f"marginals[{i}]", "[0, 1]", "probabilities").reshape(-1)
        if v.size != k:
            raise ValueError(f"marginals[{i}] must have {k} entries (values.shape[{i}]), got {v.size}")
        if abs(float(v.sum()) - 1) > 1e-9:
            raise ValueError(f"marginals[{i}] must sum to 1, got {float(v.sum())!r}")
        out.append(v / v.sum())  # exactly a distribution (the sum is checked to 1e-9 above)
    return out


def exact_moments(values, marginals, p) -> ExactMoments:
    """‖Z − EZ‖_p and every c_i of Z = Φ(X) for independent X_i ~ ``marginals[i]``, Φ = ``values``
    (an m-dimensional table, one axis per variable; at most 2^22 cells), p >= 1."""
    v = as_array(values, "values", "(-inf, inf)", "finite function values")
    if v.ndim == 0 or v.size == 0:
        raise ValueError(f"values must be a non-empty table with one axis per variable, got shape {v.shape}")
    check_int(v.size, "values.size", 1, MAX_CELLS)
    p = check_real(p, "p", "[1, inf)")
    probs = _marginals(marginals, v.shape)
    weight = np.ones(v.shape)
    for i, m in enumerate(probs):
        weight = weight * m.reshape([-1 if j == i else 1 for j in range(v.ndim)])
    # centred about one of the values first: the mean of v - shift is exact where v is constant and the
    # centred values keep their digits where v is large next to its spread (1e16 + {0, 2}: 1, not sqrt 2)
    shift = float(v.flat[0])
    offset = float(np.sum(weight * (v - shift)))
    mean = shift + offset
    centered = _weighted_norm((v - shift) - offset, weight, p)
    diffs = np.empty(v.ndim)
    for i, m in enumerate(probs):
        # Φ(x) − Φ(x with x_i -> y): a new last axis for y, weighted by P(x) P_i(y)
        moved = np.moveaxis(v, i, -1)  # (..., k_i): axis i last
        w = np.moveaxis(weight, i, -1)
        gap = moved[..., :, None] - moved[..., None, :]  # (..., x_i, y)
        diffs[i] = _weighted_norm(gap, w[..., :, None] * m[None, :], p)
    return ExactMoments(p=p, mean=mean, centered=centered, differences=diffs)


def _weighted_norm(values: np.ndarray, weight: np.ndarray, p: float) -> float:
    """(Σ weight |v|^p)^(1/p), scaled by max |v| so that no order over- or underflows."""
    a = np.abs(values)
    top = float(a.max())
    if top == 0:
        return 0.0
    return top * float(np.sum(weight * (a / top) ** p)) ** (1 / p)
