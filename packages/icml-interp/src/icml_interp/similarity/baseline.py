"""The chance level of a similarity metric: its null distribution when the samples are paired at random."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from icml_interp.similarity._checks import as_pair, metric_value
from icml_interp.validation import check_int, check_number

MAX_PERMUTATIONS = 1_000_000


@dataclass(frozen=True)
class PermutationBaseline:
    """A metric's observed value against its permutation null (``null``: one value per permutation)."""

    observed: float
    null_mean: float
    null_std: float
    levels: tuple[float, ...]  # the quantile levels of null_quantiles
    null_quantiles: np.ndarray
    p_value: float  # (1 + #{null >= observed}) / (1 + n_permutations)
    null: np.ndarray

    def row(self) -> dict:
        """A flat, JSON-able summary: ``observed``, ``null_mean``, ``null_std``, ``null_q<level>`` for each
        level, ``p_value``, ``n_permutations``."""
        quantiles = {
            f"null_q{level:g}": float(q) for level, q in zip(self.levels, self.null_quantiles, strict=True)
        }
        return {
            "observed": self.observed,
            "null_mean": self.null_mean,
            "null_std": self.null_std,
            **quantiles,
            "p_value": self.p_value,
            "n_permutations": len(self.null),
        }


def permutation_baseline(
    metric: Callable,
    X,
    Y,
    n_permutations: int = 100,
    seed: int = 0,
    quantiles: tuple[float, ...] = (0.05, 0.5, 0.95),
) -> PermutationBaseline:
    """The chance level of ``metric(X, Y)``: its values with the rows of ``Y`` shuffled (``n_permutations``
    random permutations from ``numpy.random.default_rng(seed)``), which keeps each representation's own
    geometry and destroys their pairing.

    ``metric`` is any ``f(X, Y) -> float`` (e.g. :func:`linear_cka`, or
    ``functools.partial(mutual_knn, k=5)``); it receives float64 numpy arrays. The p-value is one-sided,
    ``(1 + #{null >= observed}) / (1 + n_permutations)`` (the add-one rule of Phipson & Smyth 2010, never 0).
    ``quantiles``: the levels of :attr:`PermutationBaseline.null_quantiles`.
    """
    if not callable(metric):
        raise TypeError(f"metric must be a callable f(X, Y) -> float, got {type(metric).__name__}")
    x, y = as_pair(X, Y)
    n_permutations = check_int(n_permutations, "n_permutations", minimum=1, maximum=MAX_PERMUTATIONS)
    seed = check_int(seed, "seed", minimum=0)
    if isinstance(quantiles, (str, bytes)) or not isinstance(quantiles, (tuple, list)) or not quantiles:
        raise TypeError(f"quantiles must be a non-empty tuple of levels in [0, 1], got {quantiles!r}")
    levels = tuple(check_number(q, "quantiles", minimum=0.0, maximum=1.0) for q in quantiles)
    rng = np.random.default_rng(seed)
    observed = metric_value(metric, x, y)
    null = np.array([metric_value(metric, x, y[rng.permutation(len(y))]) for _ in range(n_permutations)])
    return PermutationBaseline(
        observed=observed,
        null_mean=float(null.mean()),
        null_std=float(null.std(ddof=1)) if n_permutations > 1 else 0.0,
        levels=levels,
        null_quantiles=np.quantile(null, levels),
        p_value=float((1 + np.sum(null >= observed)) / (1 + n_permutations)),
        null=null,
    )
