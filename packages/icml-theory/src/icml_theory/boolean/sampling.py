"""Monte-Carlo estimates, with confidence intervals, for functions with too many inputs for a truth table.

A function is a callable ``f(x)`` taking a float tensor ``x`` of shape ``(m, n)`` with entries ±1 (the
convention of :mod:`icml_theory.boolean.fourier`: ``-1`` is a set bit) and returning ``m`` real values.
Points are drawn uniformly from {-1, 1}^n; every estimate is unbiased and comes with a two-sided interval
at ``level``:

- coefficients ``f̂(S) = E[f(x) chi_S(x)]``, influences ``Inf_i = E[((f(x) - f(x^{⊕i})) / 2)^2]`` and the
  total influence ``I = sum_i Inf_i``: sample means of i.i.d. terms, normal (CLT) intervals;
- the low-degree weight ``W^{<=d} = sum_{|S| <= d} f̂(S)^2 = E_{x, y}[f(x) f(y) K_d(x ⊙ y)]`` with ``x, y``
  independent and ``K_d(z) = sum_{|S| <= d} chi_S(z)`` (a sum of Krawtchouk polynomials, a function of the
  number of -1 entries of ``z`` only): a U-statistic over all pairs of each of ``batches`` independent
  batches, with a Student-t interval over the batch estimates. This costs ``m^2 n`` per batch instead of
  one estimate per coefficient (about 20,000 of them for ``d = 3`` at 49 inputs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from scipy import stats

from icml_theory.boolean.fourier import as_truth_table
from icml_theory.validation import check_int, check_real, check_seed

BooleanFunction = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo estimate: ``value`` with the interval ``[low, high]`` at ``level`` (tensors of one
    shape, float64) and its standard error; ``samples`` counts the points drawn (function evaluations are
    a multiple of it)."""

    value: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    stderr: torch.Tensor
    level: float
    samples: int

    def covers(self, truth) -> torch.Tensor:
        """Elementwise ``low <= truth <= high`` (a bool tensor)."""
        t = torch.as_tensor(truth, dtype=torch.float64, device=self.low.device)
        return (self.low <= t) & (t <= self.high)


def truth_table_function(values) -> BooleanFunction:
    """The callable of a truth table ``(2^n,)`` (for testing estimates against exact values)."""
    table = as_truth_table(values, "values")
    if table.dim() != 1:
        raise ValueError(f"values must be one truth table of shape (2^n,), got {tuple(table.shape)}")
    n = table.shape[0].bit_length() - 1
    weights = 2 ** torch.arange(n)

    def f(x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != n:
            raise ValueError(f"x must be a tensor of (m, {n}) ±1 points, got {_shape_of(x)}")
        if not bool(((x == 1) | (x == -1)).all()):
            raise ValueError("x must hold ±1 entries only")
        return table[((x < 0).long() * weights).sum(-1)]

    return f


def _shape_of(x) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def _points(n: int, m: int, gen: torch.Generator) -> torch.Tensor:
    """``m`` uniform points of {-1, 1}^n as float64 ``(m, n)``."""
    return 1.0 - 2.0 * torch.randint(0, 2, (m, n), generator=gen).to(torch.float64)


def _evaluate(f: BooleanFunction, x: torch.Tensor) -> torch.Tensor:
    """``f(x)`` checked: ``m`` finite real values, as float64."""
    y = f(x)
    try:
        y = y if isinstance(y, torch.Tensor) else torch.as_tensor(y)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"f must return a tensor of real values, got {type(y).__name__}") from None
    if y.is_complex():
        raise TypeError(f"f must return real values, got {y.dtype}")
    y = y.reshape(-1)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"f must return one value per point ({x.shape[0]}), got shape {tuple(y.shape)}")
    y = y.to(x.device, torch.float64)  # on the points' device (CPU) whatever device f computes on
    if not torch.isfinite(y).all():
        raise ValueError("f returned NaN or infinite values")
    return y


def _check_common(f, n, samples, level, seed) -> tuple[int, int, float, torch.Generator]:
    if not callable(f):
        raise TypeError(f"f must be a callable of (m, n) ±1 points, got {type(f).__name__}")
    n = check_int(n, "n", 1, 62)
    samples = check_int(samples, "samples", 2)
    level = check_real(level, "level", "(0, 1)")
    return n, samples, level, torch.Generator().manual_seed(check_seed(seed))


def _mean_estimate(terms: torch.Tensor, level: float) -> Estimate:
    """Normal interval for the column means of i.i.d. rows ``terms`` ``(m, ...)``."""
    m = terms.shape[0]
    value = terms.mean(0)
    stderr = terms.std(0, correction=1) / math.sqrt(m)
    z = float(stats.norm.ppf(0.5 + level / 2))
    return _checked(Estimate(value, value - z * stderr, value + z * stderr, stderr, level, m))


def _checked(estimate: Estimate) -> Estimate:
    """``estimate``, with a ``RuntimeWarning`` when huge (finite) values of ``f`` overflowed it."""
    if not all(bool(torch.isfinite(t).all()) for t in (estimate.value, estimate.low, estimate.high)):
        warnings.warn(
            "the estimate overflowed float64 (inf or NaN): f's values are too large",
            RuntimeWarning,
            stacklevel=3,
        )
    return estimate


def _batched(f: BooleanFunction, n: int, samples: int, batch_size: int, gen, fn) -> torch.Tensor:
    """Concatenate ``fn(x, f(x))`` over batches of at most ``batch_size`` uniform points."""
    out, left = [], samples
    while left:
        m = min(batch_size, left)
        x = _points(n, m, gen)
        out.append(fn(x, _evaluate(f, x)))
        left -= m
    return torch.cat(out)


def estimate_coefficients(
    f: BooleanFunction,
    n: int,
    subsets: Iterable[Iterable[int]],
    *,
    samples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    batch_size: int = 65_536,
) -> Estimate:
    """Estimate ``f̂(S)`` for each ``S`` in ``subsets`` (each an iterable of variable indices in ``[0, n)``).

    Returns an :class:`Estimate` of shape ``(len(subsets),)``.
    """
    n, samples, level, gen = _check_common(f, n, samples, level, seed)
    batch_size = check_int(batch_size, "batch_size", 1)
    if isinstance(subsets, str | bytes) or not isinstance(subsets, Iterable):
        raise TypeError(
            f"subsets must be a collection of subsets (iterables of variable indices), got {subsets!r}"
        )
    masks = []
    for s in subsets:
        if isinstance(s, str | bytes) or not isinstance(s, Iterable):
            raise TypeError(
                f"subsets entries must be iterables of variable indices in [0, {n - 1}], got {s!r}"
            )
        members = sorted({check_int(i, "subsets entries", 0, n - 1) for i in s})
        masks.append(
            torch.zeros(n, dtype=torch.bool).index_fill_(0, torch.tensor(members, dtype=torch.long), True)
        )
    if not masks:
        raise ValueError("subsets must name at least one subset of the variables")
    member = torch.stack(masks).to(torch.float64)  # (k, n)

    def terms(x, y):  # chi_S(x) = (-1)^{#(-1 entries of x in S)}
        minus = (x < 0).to(torch.float64) @ member.T  # (m, k)
        return y[:, None] * (1.0 - 2.0 * torch.remainder(minus, 2))

    return _mean_estimate(_batched(f, n, samples, batch_size, gen, terms), level)


def _flip_estimate(f, n, samples, level, seed, batch_size, total: bool) -> Estimate:
    """Sample means of ``((f(x) - f(x^{⊕i})) / 2)^2``: per coordinate ``i`` (the influences), or summed over
    ``i`` per point (the total influence, whose per-point sums are i.i.d. too)."""
    n, samples, level, gen = _check_common(f, n, samples, level, seed)
    batch_size = check_int(batch_size, "batch_size", 1)

    def terms(x, y):  # (m, n), or (m,) when total
        cols = []
        for i in range(n):
            flipped = x.clone()
            flipped[:, i] = -flipped[:, i]
            cols.append(((y - _evaluate(f, flipped)) / 2) ** 2)
        out = torch.stack(cols, dim=1)
        return out.sum(1) if total else out

    return _mean_estimate(_batched(f, n, samples, batch_size, gen, terms), level)


def estimate_influences(
    f: BooleanFunction,
    n: int,
    *,
    samples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    batch_size: int = 16_384,
) -> Estimate:
    """Estimate every ``Inf_i[f]`` from ``samples`` points and their ``n`` one-bit flips (``(n + 1)
    samples`` evaluations). Returns an :class:`Estimate` of shape ``(n,)``."""
    return _flip_estimate(f, n, samples, level, seed, batch_size, total=False)


def estimate_total_influence(
    f: BooleanFunction,
    n: int,
    *,
    samples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    batch_size: int = 16_384,
) -> Estimate:
    """Estimate the total influence (average sensitivity) ``I[f]``; a scalar :class:`Estimate`."""
    return _flip_estimate(f, n, samples, level, seed, batch_size, total=True)


def krawtchouk_kernel(n: int, degree: int) -> torch.Tensor:
    """``K_d(h) = sum_{k <= d} sum_j (-1)^j C(h, j) C(n - h, k - j)`` for ``h = 0..n``: the value of
    ``sum_{|S| <= d} chi_S(z)`` at any ``z`` with ``h`` entries equal to -1 (exact integers, as float64);
    ``n`` at most 62, like the estimators that use it."""
    n, d = check_int(n, "n", 1), check_int(degree, "degree", 0)
    if n > 62:  # O(n^3) big-integer terms: a huge n would run for ever
        raise ValueError(f"n must be at most 62, like the estimators that use the kernel, got {n}")
    values = [
        sum(
            (-1) ** j * math.comb(h, j) * math.comb(n - h, k - j)
            for k in range(min(d, n) + 1)
            for j in range(k + 1)
        )
        for h in range(n + 1)
    ]
    return torch.tensor(values, dtype=torch.float64)


def estimate_low_degree_weight(
    f: BooleanFunction,
    n: int,
    degree: int,
    *,
    samples: int = 20_000,
    batches: int = 20,
    level: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """Estimate ``W^{<=d}[f]`` by a pairwise U-statistic in each of ``batches`` batches of
    ``samples / batches`` points (see the module docstring); a scalar :class:`Estimate`, t-interval over
    batches."""
    n, samples, level, gen = _check_common(f, n, samples, level, seed)
    batches = check_int(batches, "batches", 2)
    size = samples // batches
    if size < 2:
        raise ValueError(f"samples must give each of the {batches} batches at least 2 points, got {samples}")
    kernel = krawtchouk_kernel(n, degree)  # (n + 1,)
    estimates = []
    for _ in range(batches):
        x = _points(n, size, gen)  # (m, n)
        y = _evaluate(f, x)
        agree = x @ x.T  # (m, m): n - 2 h
        h = ((n - agree) / 2).round().long()
        pair = y[:, None] * y[None, :] * kernel[h]
        estimates.append((pair.sum() - pair.diagonal().sum()) / (size * (size - 1)))
    est = torch.stack(estimates)  # (batches,)
    value = est.mean()
    stderr = est.std(correction=1) / math.sqrt(batches)
    t = float(stats.t.ppf(0.5 + level / 2, batches - 1))
    return _checked(Estimate(value, value - t * stderr, value + t * stderr, stderr, level, size * batches))
