"""Input validation for every module of icml-stats (and its experiments).

Conventions: a value of the wrong type raises ``TypeError``, a value of the right type outside its domain
``ValueError``; every message names the argument and says what was expected. Intervals are written as
they read in the messages, e.g. ``"(0, 1]"``, with ``inf`` for an unbounded end (an open ``inf`` end
excludes infinity). Shapes are tuples of exact lengths (ints) and free lengths >= 1 (names; a name used
twice means equal lengths).

The second half is the one input contract of the coverage metrics: a prediction is given either as a
cover vector ``cover`` (bool or 0/1, ``cover[i] = 1{y_i in C(x_i)}``) or raw: ``y`` with ``y_intervals``
(``(n, 2)`` or MAPIE's ``(n, 2, 1)``, closed intervals) or ``y`` with ``y_sets`` (``(n, n_classes)`` or
MAPIE's ``(n, n_classes, 1)`` booleans, ``y`` the column index of the true class). The target coverage
``t`` is a constant ``1 - alpha`` or one value per sample, ``t(x_i)``.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from sklearn.base import is_classifier
from sklearn.utils.validation import check_scalar, validate_data

FINITE = "(-inf, inf)"
EXTENDED = "[-inf, inf]"  # every number but NaN


def _inside(value: Any, interval: str) -> Any:
    """Elementwise ``value in interval`` (False for NaN) for a float or an array."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    above = (value > low) | ((value == low) & (interval[0] == "["))
    return above & ((value < high) | ((value == high) & (interval[-1] == "]")))


# how an interval's brackets read in scikit-learn's check_scalar
_BOUNDARIES = {("[", "]"): "both", ("[", ")"): "left", ("(", "]"): "right", ("(", ")"): "neither"}


def check_int(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (bools refused) in ``[minimum, maximum]`` (either end optional), by scikit-learn's
    ``check_scalar``, so the messages read like scikit-learn's own parameter checks."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an instance of int, not bool.")
    return int(check_scalar(value, name, numbers.Integral, min_val=minimum, max_val=maximum))


def check_real(value, name: str, interval: str = FINITE) -> float:
    """A real number (bools and NaN refused) inside ``interval``, e.g. ``"(0, 1)"``, by scikit-learn's
    ``check_scalar``; the default is any finite number."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an instance of float, not bool.")
    if isinstance(value, numbers.Real) and value != value:  # NaN
        raise ValueError(f"{name} must be a number in {interval}, got NaN")
    low, high = (float(end) for end in interval[1:-1].split(","))
    boundaries = _BOUNDARIES[interval[0], interval[-1]]
    return float(
        check_scalar(value, name, numbers.Real, min_val=low, max_val=high, include_boundaries=boundaries)
    )


def check_choice(value, name: str, choices: tuple):
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_bool(value, name: str) -> bool:
    """A flag: ``True`` or ``False`` (numpy bools too; 0/1 and other truthy values refused)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def as_confidence_levels(confidence_level, name: str = "confidence_level") -> tuple[float, ...]:
    """MAPIE v1's ``confidence_level``: a number in the open interval (0, 1) or a non-empty list of them,
    as a tuple of floats (one per level, in the order given)."""
    if isinstance(confidence_level, np.ndarray) and confidence_level.ndim == 0:
        confidence_level = confidence_level.item()
    if isinstance(confidence_level, numbers.Real):  # bools and NaN are refused by check_real
        return (check_real(confidence_level, name, "(0, 1)"),)
    if isinstance(confidence_level, str | bytes | dict) or not hasattr(confidence_level, "__iter__"):
        raise TypeError(
            f"{name} must be a number in (0, 1) or a list of such numbers, got {confidence_level!r}"
        )
    levels = list(confidence_level)
    if not levels:
        raise ValueError(f"{name} must hold at least one confidence level, got an empty list")
    return tuple(check_real(level, f"{name}[{i}]", "(0, 1)") for i, level in enumerate(levels))


def check_classifier(classifier, name: str = "classifier"):
    """A scikit-learn classifier instance with ``fit`` and ``predict_proba`` (it is cloned and fitted)."""
    if isinstance(classifier, type) or not (
        hasattr(classifier, "fit") and hasattr(classifier, "predict_proba") and is_classifier(classifier)
    ):
        raise TypeError(
            f"{name} must be a scikit-learn classifier instance with predict_proba, got {classifier!r}"
        )
    return classifier


def check_regressor(estimator, name: str = "estimator"):
    """A scikit-learn estimator instance with ``fit``, ``predict`` and ``get_params`` (it is cloned and fitted)."""
    if isinstance(estimator, type) or not all(
        hasattr(estimator, attr) for attr in ("fit", "predict", "get_params")
    ):
        raise TypeError(
            f"{name} must be a scikit-learn regressor instance with fit and predict, got {estimator!r}"
        )
    return estimator


def validate_features(estimator, X, **kwargs) -> np.ndarray:
    """``X`` by scikit-learn's ``validate_data`` (float), its refusals naming ``X``."""
    try:
        return validate_data(estimator, X, dtype=float, **kwargs)
    except (TypeError, ValueError) as err:
        if "X" in str(err).split():
            raise
        kind = TypeError if isinstance(err, TypeError) else ValueError
        raise kind(f"X (the features) is not valid: {err}") from err


@contextmanager
def keep_state_on_failure(estimator) -> Iterator[None]:
    """Run a ``fit`` body; if it raises, put every attribute of ``estimator`` back as it was, so that a
    refused refit leaves the earlier model whole (as scikit-learn's ``LinearRegression`` keeps its model
    when a refit is refused) rather than half-replaced (``n_features_in_`` of the new ``X`` beside the old
    model, or a reset estimator that ``check_is_fitted`` passes but cannot predict)."""
    saved = dict(vars(estimator))
    try:
        yield
    except BaseException:
        vars(estimator).clear()
        vars(estimator).update(saved)
        raise


def check_cv(cv, n: int, name: str = "cv"):
    """Cross-validation folds: an int in [2, n] (bools refused) or a splitter object with ``split``."""
    if isinstance(cv, numbers.Integral):
        return check_int(cv, name, 2, n)
    if isinstance(cv, str | bytes | type) or not hasattr(cv, "split"):
        raise TypeError(f"{name} must be an int >= 2 or a scikit-learn splitter with split(), got {cv!r}")
    return cv


_SEED = "None, an int in [0, 2**32 - 1] or a numpy random Generator"


def as_rng(random_state, name: str = "random_state") -> np.random.Generator:
    """``numpy.random.default_rng(random_state)``, refusing what it cannot seed with a message naming ``name``."""
    try:
        return np.random.default_rng(random_state)
    except TypeError:
        raise TypeError(f"{name} must be {_SEED}, got {random_state!r}") from None
    except ValueError:
        raise ValueError(f"{name} must be {_SEED}, got {random_state!r}") from None


def check_seed(random_state, name: str = "random_state"):
    """A seed scikit-learn accepts (None, an int in [0, 2**32 - 1] or a ``RandomState``), returned as given."""
    if isinstance(random_state, bool) or not (
        random_state is None
        or isinstance(random_state, np.random.RandomState)
        or (isinstance(random_state, numbers.Integral) and 0 <= int(random_state) < 2**32)
    ):
        raise (ValueError if isinstance(random_state, numbers.Integral) else TypeError)(
            f"{name} must be None, an int in [0, 2**32 - 1] or a numpy RandomState, got {random_state!r}"
        )
    return random_state


def check_shape(a: np.ndarray, name: str, shape: tuple[int | str, ...], hint: str = "") -> np.ndarray:
    """``a`` itself if its shape matches ``shape`` (see the module doc); ``hint`` follows the expected shape."""
    sizes: dict[str, int] = {}
    ok = a.ndim == len(shape) and all(
        n == s if isinstance(s, int) else n >= 1 and sizes.setdefault(s, n) == n
        for n, s in zip(a.shape, shape, strict=True)
    )
    if not ok:
        expected = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {expected}{hint}, got {a.shape}")
    return a


def _kind(values) -> str:
    try:
        return "complex values" if np.iscomplexobj(values) else type(values).__name__
    except (TypeError, ValueError):  # ragged or unconvertible
        return type(values).__name__


def as_array(
    values, name: str, shape: tuple[int | str, ...] | None = None, *, interval: str = FINITE, hint: str = ""
) -> np.ndarray:
    """``values`` as a float array of ``shape`` (any when None) without NaN, every entry inside ``interval``."""
    try:
        if np.iscomplexobj(values):  # a float cast would drop the imaginary part with only a warning
            raise TypeError
        a = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers, got {_kind(values)}") from None
    if shape is not None:
        check_shape(a, name, shape, hint)
    if np.isnan(a).any():
        raise ValueError(f"{name} must not contain NaN")
    if not _inside(a, interval).all():
        if interval == FINITE:
            raise ValueError(f"{name} must be finite, got infinite entries")
        raise ValueError(f"{name} must lie in {interval}, got values in [{a.min()}, {a.max()}]")
    return a


def as_samples(x, name: str = "x", n: int | None = None) -> np.ndarray:
    """``x`` as a finite float array ``(n_samples, n_features)``; a 1-D array is one feature."""
    a = as_array(x, name)
    a = check_shape(
        a[:, None] if a.ndim == 1 else a, name, ("n_samples", "n_features"), " (a 1-D array is one feature)"
    )
    if n is not None and a.shape[0] != n:
        raise ValueError(
            f"{name} must have one row per sample ({n}, like the first argument), got {a.shape[0]}"
        )
    return a


def as_matched_samples(**arrays) -> tuple[np.ndarray, ...]:
    """Several :func:`as_samples` arrays whose rows are matched samples (the first fixes their number)."""
    out: list[np.ndarray] = []
    for name, x in arrays.items():
        out.append(as_samples(x, name, out[0].shape[0] if out else None))
    return tuple(out)


def as_batch(columns: tuple[int, ...] | None, **arrays) -> tuple[tuple[np.ndarray, ...], tuple[int, ...]]:
    """One batch of a stream: :func:`as_matched_samples`, with the column counts of the first batch
    (``columns``; None: this is the first). Returns the arrays and their column counts."""
    xs = as_matched_samples(**arrays)
    found = tuple(x.shape[1] for x in xs)
    for name, got, expected in zip(arrays, found, columns or found, strict=True):
        if got != expected:
            raise ValueError(f"{name} must have {expected} columns like the earlier batches, got {got}")
    return xs, found


def as_labels(y, name: str, n: int, n_classes: int | None = None) -> np.ndarray:
    """Integer class indices ``(n,)`` in ``[0, n_classes)`` (integral floats accepted)."""
    a = check_shape(np.asarray(y), name, (n,), " (one label per sample)")
    expected = (
        f"{name} must hold integer class indices in [0, {'n_classes' if n_classes is None else n_classes})"
    )
    if not np.issubdtype(a.dtype, np.integer):
        af = np.asarray(a, dtype=float)
        if np.isnan(af).any() or not np.all(af == np.round(af)):
            raise ValueError(expected)
        a = af.astype(int)
    if a.min() < 0 or (n_classes is not None and a.max() >= n_classes):
        raise ValueError(f"{expected}, got {a.min()}..{a.max()}")
    return a


def as_intervals(intervals, name: str, n: int, alternative: str = "") -> np.ndarray:
    """Closed intervals ``(n, 2)``: ``[lower, upper]`` per row, ``lower <= upper`` (infinite ends allowed);
    ``alternative`` follows the expected shape in the error message (another accepted layout)."""
    bounds = as_array(
        intervals, name, (n, 2), interval=EXTENDED, hint=f" (one [lower, upper] per sample){alternative}"
    )
    if np.any(bounds[:, 0] > bounds[:, 1]):
        raise ValueError(f"{name} must have lower <= upper in every row")
    return bounds


def as_split(X_fit, y_fit, X_calib, y_calib, X_test, *, labels: bool = False):
    """The fit, calibration and test parts of a split-conformal predictor: finite features ``(n_part, d)``
    with the columns of ``X_fit``, and one finite target (``labels``: one class index) per row."""
    X_fit = as_array(X_fit, "X_fit", ("n_fit", "n_features"))
    X_calib = as_array(X_calib, "X_calib", ("n_calib", X_fit.shape[1]))
    X_test = as_array(X_test, "X_test", ("n_test", X_fit.shape[1]))
    ys = [
        as_labels(y, name, X.shape[0])
        if labels
        else as_array(y, name, (X.shape[0],), hint=f" (one per row of X_{part})")
        for y, name, X, part in ((y_fit, "y_fit", X_fit, "fit"), (y_calib, "y_calib", X_calib, "calib"))
    ]
    return X_fit, ys[0], X_calib, ys[1], X_test


# --------------------------------------------------------------------------- the coverage input contract
def as_cover(cover, n: int | None = None, name: str = "cover") -> np.ndarray:
    """A cover vector as float 0/1 ``(n,)``; raises on NaN, non-binary values or a wrong length."""
    a = as_array(
        cover, name, ("n",) if n is None else (n,), interval=EXTENDED, hint=" (one entry per row of x)"
    )
    if not np.isin(a, (0.0, 1.0)).all():
        raise ValueError(
            f"{name} must be binary (bool or 0/1), got the value {a[~np.isin(a, (0.0, 1.0))][0]!r}"
        )
    return a


def as_target(confidence_level, n: int, name: str = "confidence_level") -> np.ndarray:
    """The target coverage ``t`` as ``(n,)`` values in the open interval (0, 1), from a number or ``(n,)`` values."""
    if isinstance(confidence_level, bool):
        raise TypeError(f"{name} must be a number or an array of numbers in (0, 1), got a bool")
    t = as_array(confidence_level, name, interval="(0, 1)")
    return (
        np.full(n, float(t))
        if t.ndim == 0
        else check_shape(t, name, (n,), " (one target per sample, or a number)")
    )


def _single_level(values, name: str, layout: str) -> np.ndarray:
    """MAPIE's ``(n, ., 1)`` layout (one confidence level) as ``(n, .)``."""
    a = np.asarray(values)
    if a.ndim == 3:
        if a.shape[2] != 1:
            raise ValueError(
                f"{name} holds {a.shape[2]} confidence levels ({layout}, k); pass one level, e.g. {name}[:, :, 0]"
            )
        a = a[:, :, 0]
    return a


def _as_sets(y_sets, n: int) -> np.ndarray:
    a = check_shape(
        _single_level(y_sets, "y_sets", "n, n_classes"),
        "y_sets",
        (n, "n_classes"),
        f" or ({n}, n_classes, 1)",
    )
    if a.dtype != bool:
        if not np.isin(a, (0, 1)).all():
            raise ValueError("y_sets must be booleans (or 0/1): membership of each class in each set")
        a = a.astype(bool)
    return a


def cover_from_prediction(n: int, cover=None, y=None, y_intervals=None, y_sets=None) -> np.ndarray:
    """The cover vector ``(n,)`` from exactly one of ``cover``, ``(y, y_intervals)`` or ``(y, y_sets)``."""
    given = [
        name
        for name, v in (("cover", cover), ("y_intervals", y_intervals), ("y_sets", y_sets))
        if v is not None
    ]
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
        yv = as_array(y, "y", (n,), interval=EXTENDED, hint=" (one outcome per row of x)")
        bounds = as_intervals(_single_level(y_intervals, "y_intervals", "n, 2"), "y_intervals", n)
        return ((bounds[:, 0] <= yv) & (yv <= bounds[:, 1])).astype(float)
    sets = _as_sets(y_sets, n)
    return sets[np.arange(n), as_labels(y, "y", n, sets.shape[1])].astype(float)


def _largest_finite(a: np.ndarray) -> float:
    return float(np.abs(a[np.isfinite(a)]).max(initial=0.0))


def _merge_rounding(widths: np.ndarray, tol: float) -> np.ndarray:
    """``widths`` with each run of finite values within ``tol`` of the next (sorted) set to the run's median."""
    finite = np.flatnonzero(np.isfinite(widths))
    if finite.size < 2 or not tol > 0:
        return widths
    order = finite[np.argsort(widths[finite], kind="stable")]
    v = widths[order]
    run = np.concatenate([[0], np.cumsum(np.diff(v) > tol)])  # run number of each sorted width
    first = np.searchsorted(run, run, side="left")
    last = np.searchsorted(run, run, side="right") - 1
    out = widths.copy()
    out[order] = v[(first + last) // 2]
    return out


def set_sizes(n: int, sizes=None, y_intervals=None, y_sets=None) -> np.ndarray | None:
    """Sizes ``(n,)``: ``sizes`` if given, else interval widths or set cardinalities; None when unknown.

    Interval widths that differ by less than ``1e-9`` of the largest finite bound (or 8 units of roundoff
    of lower-precision bounds) are rounding, not size: e.g. split-conformal ``mu(x) +- q``, all ``2 q`` in
    exact arithmetic, whose widths ``upper - lower`` differ in the last bits. Each run of such widths
    (sorted, successive differences within that tolerance) takes the run's median width."""
    if sizes is not None:
        return as_array(sizes, "sizes", (n,), interval=EXTENDED)
    if y_intervals is not None:
        given = _single_level(y_intervals, "y_intervals", "n, 2")
        bounds = np.asarray(given, dtype=float)
        rel = max(1e-9, 8 * float(np.finfo(given.dtype).eps)) if given.dtype.kind == "f" else 1e-9
        return _merge_rounding(bounds[:, 1] - bounds[:, 0], rel * _largest_finite(bounds))
    if y_sets is not None:
        return _as_sets(y_sets, n).sum(axis=1).astype(float)
    return None
