"""The one input contract of every coverage metric: features, a cover vector (or the raw prediction it
comes from) and a target coverage.

A prediction is given either as a cover vector ``cover`` (bool or 0/1, ``cover[i] = 1{y_i in C(x_i)}``)
or raw: ``y`` with ``y_intervals`` (``(n, 2)`` or MAPIE's ``(n, 2, 1)``, closed intervals) or ``y`` with
``y_sets`` (``(n, n_classes)`` or MAPIE's ``(n, n_classes, 1)`` booleans, ``y`` the column index of
the true class). The target coverage ``t`` is a constant ``1 - alpha`` or one value per sample, ``t(x_i)``.
"""

from __future__ import annotations

import numbers

import numpy as np


def as_features(x, name: str = "x") -> np.ndarray:
    """``x`` as a finite float array ``(n, d)``; a 1-D array is one feature."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a numeric array (n_samples, n_features), got {type(x).__name__}") from None
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty array (n_samples, n_features), got shape {a.shape}")
    if np.isnan(a).any():
        raise ValueError(f"{name} must not contain NaN")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite, got infinite entries")
    return a


def as_cover(cover, n: int | None = None, name: str = "cover") -> np.ndarray:
    """A cover vector as float 0/1 ``(n,)``; raises on NaN, non-binary values or a wrong length."""
    try:
        a = np.asarray(cover, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a bool or 0/1 array, got {type(cover).__name__}") from None
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    if np.isnan(a).any():
        raise ValueError(f"{name} must not contain NaN")
    if not np.isin(a, (0.0, 1.0)).all():
        bad = a[~np.isin(a, (0.0, 1.0))][0]
        raise ValueError(f"{name} must be binary (bool or 0/1), got the value {bad!r}")
    if n is not None and a.size != n:
        raise ValueError(f"{name} must have one entry per row of x ({n}), got {a.size}")
    return a


def as_target(confidence_level, n: int, name: str = "confidence_level") -> np.ndarray:
    """The target coverage ``t`` as ``(n,)`` values in the open interval (0, 1)."""
    if isinstance(confidence_level, bool):
        raise TypeError(f"{name} must be a number or an array of numbers in (0, 1), got a bool")
    if isinstance(confidence_level, numbers.Real):
        t = np.full(n, float(confidence_level))
    else:
        try:
            t = np.asarray(confidence_level, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be a number or an array of numbers in (0, 1), got {type(confidence_level).__name__}"
            ) from None
        if t.ndim == 0:
            t = np.full(n, float(t))
        elif t.shape != (n,):
            raise ValueError(f"{name} must be a number or have shape ({n},) (one target per sample), got {t.shape}")
    if np.isnan(t).any():
        raise ValueError(f"{name} must not contain NaN")
    if not ((t > 0) & (t < 1)).all():
        raise ValueError(f"{name} must lie in the open interval (0, 1), got values in [{t.min()}, {t.max()}]")
    return t


def _single_level(a: np.ndarray, name: str, layout: str) -> np.ndarray:
    if a.ndim == 3:
        if a.shape[2] != 1:
            raise ValueError(
                f"{name} holds {a.shape[2]} confidence levels ({layout}, k); pass one level, e.g. {name}[:, :, 0]"
            )
        a = a[:, :, 0]
    return a


def cover_from_prediction(n: int, cover=None, y=None, y_intervals=None, y_sets=None) -> np.ndarray:
    """The cover vector ``(n,)`` from exactly one of ``cover``, ``(y, y_intervals)`` or ``(y, y_sets)``."""
    given = [name for name, v in (("cover", cover), ("y_intervals", y_intervals), ("y_sets", y_sets)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            "pass exactly one of cover, (y, y_intervals) or (y, y_sets); "
            f"got {', '.join(given) if given else 'none of them'}"
        )
    if cover is not None:
        if y is not None:
            raise ValueError("y is only used with y_intervals or y_sets, not with cover")
        return as_cover(cover, n)
    if y is None:
        raise ValueError(f"{given[0]} needs the true outcomes y")
    if y_intervals is not None:
        yv = _as_outcomes(y, n)
        bounds = _single_level(np.asarray(y_intervals, dtype=float), "y_intervals", "n, 2")
        if bounds.shape != (n, 2):
            raise ValueError(f"y_intervals must have shape ({n}, 2) or ({n}, 2, 1), got {np.shape(y_intervals)}")
        if np.isnan(bounds).any():
            raise ValueError("y_intervals must not contain NaN")
        if np.any(bounds[:, 0] > bounds[:, 1]):
            raise ValueError("y_intervals must have lower <= upper in every row")
        return ((bounds[:, 0] <= yv) & (yv <= bounds[:, 1])).astype(float)
    sets = _as_sets(y_sets, n)
    labels = _as_labels(y, n, sets.shape[1])
    return sets[np.arange(n), labels].astype(float)


def set_sizes(n: int, sizes=None, y_intervals=None, y_sets=None) -> np.ndarray | None:
    """Sizes ``(n,)``: ``sizes`` if given, else interval widths or set cardinalities; None when unknown."""
    if sizes is not None:
        s = np.asarray(sizes, dtype=float)
        if s.shape != (n,):
            raise ValueError(f"sizes must have shape ({n},), got {s.shape}")
        if np.isnan(s).any():
            raise ValueError("sizes must not contain NaN")
        return s
    if y_intervals is not None:
        bounds = _single_level(np.asarray(y_intervals, dtype=float), "y_intervals", "n, 2")
        return bounds[:, 1] - bounds[:, 0]
    if y_sets is not None:
        return _as_sets(y_sets, n).sum(axis=1).astype(float)
    return None


def _as_outcomes(y, n: int) -> np.ndarray:
    a = np.asarray(y, dtype=float)
    if a.shape != (n,):
        raise ValueError(f"y must have shape ({n},) (one outcome per row of x), got {a.shape}")
    if np.isnan(a).any():
        raise ValueError("y must not contain NaN")
    return a


def _as_sets(y_sets, n: int) -> np.ndarray:
    a = _single_level(np.asarray(y_sets), "y_sets", "n, n_classes")
    if a.ndim != 2 or a.shape[0] != n:
        raise ValueError(f"y_sets must have shape ({n}, n_classes) or ({n}, n_classes, 1), got {np.shape(y_sets)}")
    if a.dtype != bool:
        if not np.isin(a, (0, 1)).all():
            raise ValueError("y_sets must be booleans (or 0/1): membership of each class in each set")
        a = a.astype(bool)
    return a


def _as_labels(y, n: int, n_classes: int) -> np.ndarray:
    a = np.asarray(y)
    if a.shape != (n,):
        raise ValueError(f"y must have shape ({n},) (one label per row of x), got {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        af = a.astype(float)
        if np.isnan(af).any() or not np.all(af == np.round(af)):
            raise ValueError("y must hold integer class indices (the columns of y_sets) when y_sets is given")
        a = af.astype(int)
    if a.min() < 0 or a.max() >= n_classes:
        raise ValueError(f"y must hold class indices in [0, {n_classes}) (the columns of y_sets), got {a.min()}..{a.max()}")
    return a
