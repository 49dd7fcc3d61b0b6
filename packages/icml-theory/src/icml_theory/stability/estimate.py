"""Replace-one L_p stability of an algorithm on a data distribution, estimated by resampling.

c_p = ‖Φ(S) − Φ(S^{(i)})‖_p, where S holds n independent draws and S^{(i)} has draw i replaced by a fresh
one, is estimated from B independent pairs (S_b, S_b^{(i_b)}): ĉ_p = (mean_b |D_b|^p)^{1/p},
D_b = Φ(S_b) − Φ(S_b^{(i_b)}). The mean of |D|^p is a mean of B independent values; its confidence interval
is a Student t interval on the log scale of that mean (delta method), mapped by x ↦ x^{1/p} (the map is
increasing, so the coverage carries over). Coordinates are drawn uniformly (one number for an algorithm
that treats its samples alike, ``coordinate=None``) or fixed (``coordinate=i``, for one c_i).

``phi`` maps a dataset, an array of shape ``(n, *row)``, to a number; with ``batched=True`` it maps a
stack ``(B, n, *row)`` to ``(B,)`` in one call (a closed-form ridge fit, say), which is how the estimator
gets its speed: all 2B datasets go through ``phi`` at once, in chunks of ``chunk`` datasets.
``sample(rng, size)`` draws ``size`` independent rows, an array of shape ``(size, *row)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from icml_theory.validation import as_array, check_int, check_real

__all__ = [
    "StabilityEstimate",
    "replace_one_differences",
    "replace_one_stability",
    "stability_from_differences",
]


@dataclass(frozen=True)
class StabilityEstimate:
    """ĉ_p with its ``confidence`` interval [``low``, ``high``] from ``n_pairs`` replace-one pairs."""

    p: float
    value: float
    low: float
    high: float
    confidence: float
    n_pairs: int


def as_generator(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        return np.random.default_rng(seed)
    raise TypeError(f"seed must be None, an int >= 0 or a numpy Generator, got {seed!r}")


def draw_rows(sample: Callable, rng: np.random.Generator, size: int) -> np.ndarray:
    rows = np.asarray(sample(rng, size))
    if rows.ndim == 0 or rows.shape[0] != size:
        raise ValueError(f"sample(rng, {size}) must return an array of {size} rows, got shape {rows.shape}")
    if rows.dtype.kind in "fc" and not np.isfinite(rows).all():
        raise ValueError("sample returned NaN or inf")
    return rows


def replace_one_differences(
    phi: Callable,
    sample: Callable,
    n,
    n_pairs,
    *,
    coordinate=None,
    batched: bool = False,
    chunk=256,
    seed=None,
) -> np.ndarray:
    """The B = ``n_pairs`` differences D_b = Φ(S_b) − Φ(S_b^{(i_b)}) (module docstring), float64 ``(B,)``."""
    if not callable(phi):
        raise TypeError(f"phi must be a callable of a dataset, got {type(phi).__name__}")
    if not callable(sample):
        raise TypeError(f"sample must be a callable (rng, size) -> rows, got {type(sample).__name__}")
    n = check_int(n, "n", 1)
    n_pairs = check_int(n_pairs, "n_pairs", 1)
    chunk = check_int(chunk, "chunk", 1)
    if not isinstance(batched, bool):
        raise TypeError(f"batched must be a bool, got {type(batched).__name__}")
    if coordinate is not None:
        coordinate = check_int(coordinate, "coordinate", 0, n - 1)
    rng = as_generator(seed)
    out = np.empty(n_pairs)
    for start in range(0, n_pairs, chunk):
        b = min(chunk, n_pairs - start)
        rows = draw_rows(sample, rng, b * n)
        data = rows.reshape(b, n, *rows.shape[1:])
        fresh = draw_rows(sample, rng, b)
        where = np.full(b, coordinate) if coordinate is not None else rng.integers(0, n, size=b)
        replaced = data.copy()
        replaced[np.arange(b), where] = fresh
        if batched:
            both = np.asarray(phi(np.concatenate([data, replaced])), dtype=np.float64)
            if both.shape != (2 * b,):
                raise ValueError(
                    f"a batched phi must map (B, n, ...) to (B,), got shape {both.shape} for B = {2 * b}"
                )
            d = both[:b] - both[b:]
        else:
            d = np.array([float(phi(s)) - float(phi(r)) for s, r in zip(data, replaced, strict=True)])
        if not np.isfinite(d).all():
            raise ValueError("phi returned NaN or inf on a sampled dataset")
        out[start : start + b] = d
    return out


def replace_one_stability(
    phi: Callable,
    sample: Callable,
    n,
    *,
    p=2.0,
    n_pairs=1000,
    confidence=0.95,
    coordinate=None,
    batched: bool = False,
    chunk=256,
    seed=None,
) -> StabilityEstimate:
    """Estimate c_p = ‖Φ(S) − Φ(S^{(i)})‖_p with a ``confidence`` interval (module docstring).

    >>> est = replace_one_stability(lambda s: s.mean(), lambda rng, k: rng.normal(size=k), 50, seed=0)
    >>> round(est.value * 50, 1)  # sqrt(2) for the mean of 50 standard normals
    1.4
    """
    p = check_real(p, "p", "[1, inf)")
    confidence = check_real(confidence, "confidence", "(0, 1)")
    d = replace_one_differences(
        phi, sample, n, n_pairs, coordinate=coordinate, batched=batched, chunk=chunk, seed=seed
    )
    return norm_estimate(np.abs(d), p, confidence)


def lp_norm(values: np.ndarray, p: float, axis=None) -> np.ndarray | float:
    """(mean |v|^p)^(1/p), scaled by the largest |v| so that no order over- or underflows."""
    a = np.abs(values)
    top = a.max(axis=axis, keepdims=True)
    safe = np.where(top > 0, top, 1.0)
    out = np.squeeze(safe * np.mean((a / safe) ** p, axis=axis, keepdims=True) ** (1 / p), axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def stability_from_differences(differences, p=2.0, confidence=0.95) -> StabilityEstimate:
    """ĉ_p and its interval (module docstring) from replace-one differences already drawn, e.g. by
    :func:`replace_one_differences`, so one set of pairs serves several orders."""
    d = as_array(differences, "differences", "(-inf, inf)", "finite differences").reshape(-1)
    if d.size == 0:
        raise ValueError("differences must be non-empty")
    return norm_estimate(
        np.abs(d), check_real(p, "p", "[1, inf)"), check_real(confidence, "confidence", "(0, 1)")
    )


def norm_estimate(abs_d: np.ndarray, p: float, confidence: float) -> StabilityEstimate:
    """The estimate of ||D||_p from |D| (module docstring), scaled by max |D| against over- and underflow."""
    b = abs_d.size
    top = float(abs_d.max())
    powers = (abs_d / top) ** p if top > 0 else np.zeros(b)
    mean = float(powers.mean())
    if b < 2 or mean == 0.0:
        low = high = mean
    else:
        # t interval for log(mean): se(log m) = sd / (sqrt(B) m)
        se = float(powers.std(ddof=1)) / (math.sqrt(b) * mean)
        half = float(stats.t.ppf(0.5 + confidence / 2, b - 1)) * se
        low, high = mean * math.exp(-half), mean * math.exp(half)
    root = lambda x: top * x ** (1 / p)  # noqa: E731
    return StabilityEstimate(
        p=p, value=root(mean), low=root(low), high=root(high), confidence=confidence, n_pairs=b
    )
