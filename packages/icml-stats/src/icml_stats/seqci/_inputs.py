"""Input checks shared by the sequential tests: samples as finite 2-D float arrays, levels in (0, 1)."""

from __future__ import annotations

import numbers

import numpy as np


def as_samples(x, name: str, n: int | None = None) -> np.ndarray:
    """``x`` as a finite float array ``(n, d)``; a 1-D array is one variable observed ``n`` times."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a numeric array (n_samples,) or (n_samples, n_features), got {type(x).__name__}"
        ) from None
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(
            f"{name} must be a non-empty array (n_samples,) or (n_samples, n_features), got shape {a.shape}"
        )
    if np.isnan(a).any():
        raise ValueError(f"{name} must not contain NaN")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite, got infinite entries")
    if n is not None and a.shape[0] != n:
        raise ValueError(
            f"{name} must have one row per sample ({n}, like the first argument), got {a.shape[0]}"
        )
    return a


def as_triple(a, b, c) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three sample arrays of equal length (rows are matched samples); ``c=None`` is not accepted here."""
    a = as_samples(a, "a")
    return a, as_samples(b, "b", a.shape[0]), as_samples(c, "c", a.shape[0])


def check_fixed_dims(x: np.ndarray, expected: int | None, name: str) -> None:
    """A later batch must have the same number of columns as the first one."""
    if expected is not None and x.shape[1] != expected:
        raise ValueError(f"{name} must have {expected} columns like the earlier batches, got {x.shape[1]}")


def check_alpha(alpha, name: str = "alpha") -> float:
    """A significance level in the open interval (0, 1)."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"{name} must be a number in (0, 1), got {alpha!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {alpha!r}")
    return float(alpha)


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """An int ``>= minimum`` (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_positive(value, name: str, allow_none: bool = False) -> float | None:
    """A finite number > 0 (or None when allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_choice(value, name: str, choices: tuple) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value
