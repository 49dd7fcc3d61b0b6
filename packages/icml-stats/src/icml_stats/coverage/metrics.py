"""The conditional-coverage metrics ERT is compared with, under the same input contract.

* CovGap (Ding et al., 2023): mean over groups of ``|coverage_g - t|``; weighted by group size on request.
* FSC, feature-stratified coverage: the smallest coverage over groups of the features.
* SSC, size-stratified coverage (Angelopoulos et al., 2021): coverage gap (or minimum) over set-size groups.
* EOC, equal opportunity of coverage (Wang et al., 2023): coverage gap over groups of the true outcome.
* WSC, worst-slab coverage (Cauchois et al., 2021): the smallest coverage over slabs
  ``{a <= v.x <= b}`` holding at least a fraction ``delta`` of the points, over random directions ``v``;
  ``split=True`` picks the slab on one half and measures it on the other (Romano et al., 2020).
* Pearson correlation and HSIC between cover and set size (Feldman et al., 2021).

Our own choices, where the papers leave room: automatic groups are up to ``n_groups`` equal-frequency
bins of a 1-D variable (or its distinct values when there are few) and k-means clusters of a
multi-dimensional one; WSC standardises the features, then searches slab boundaries on a grid of
``n_grid + 1`` quantiles of each projection; HSIC uses Gaussian kernels with the median-distance
bandwidth and the biased estimator ``trace(KHLH) / n^2`` on at most ``max_samples`` points.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from icml_stats.validation import (
    as_samples,
    as_target,
    check_choice,
    check_int,
    check_real,
    check_shape,
    cover_from_prediction,
    set_sizes,
)


def auto_groups(values, n_groups: int = 10, random_state=None) -> np.ndarray:
    """Integer group labels ``(n,)``: distinct values when at most ``n_groups``, else equal-frequency bins
    (1-D) or k-means clusters (several columns)."""
    n_groups = check_int(n_groups, "n_groups", 1)
    v = as_samples(values, "values")
    distinct, labels = np.unique(v, axis=0, return_inverse=True)
    if distinct.shape[0] <= n_groups:
        return labels.reshape(-1)
    if v.shape[1] == 1:
        ranks = np.argsort(np.argsort(v[:, 0], kind="stable"), kind="stable")
        return (ranks * n_groups // v.shape[0]).astype(int)
    return KMeans(n_clusters=n_groups, n_init=3, random_state=random_state).fit_predict(v)


def group_coverage(groups, cover) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(labels, coverage per group, size per group)`` for group labels ``(n,)``."""
    g = check_shape(np.asarray(groups), "groups", cover.shape, " (one label per sample)")
    labels, inverse = np.unique(g, return_inverse=True)
    inverse = inverse.reshape(-1)
    size = np.bincount(inverse, minlength=labels.size)
    return labels, np.bincount(inverse, weights=cover, minlength=labels.size) / size, size


def coverage_gap(
    x,
    cover=None,
    confidence_level=0.9,
    *,
    y=None,
    y_intervals=None,
    y_sets=None,
    groups=None,
    weighted=False,
    n_groups=10,
    random_state=None,
) -> float:
    """CovGap: mean over groups of ``|coverage_g - t|`` (``weighted=True``: weighted by group size).

    ``groups`` are user labels ``(n,)``; by default :func:`auto_groups` of ``x``. A non-constant target
    is averaged within each group.
    """
    x, z, t = _inputs(x, cover, confidence_level, y, y_intervals, y_sets)
    g = auto_groups(x, n_groups, random_state) if groups is None else groups
    _, cov, size = group_coverage(g, z)
    _, t_group, _ = group_coverage(g, t)
    gap = np.abs(cov - t_group)
    return float(np.sum(size * gap) / size.sum()) if weighted else float(gap.mean())


def feature_stratified_coverage(
    x, cover=None, *, y=None, y_intervals=None, y_sets=None, groups=None, n_groups=10, random_state=None
) -> float:
    """FSC: the smallest coverage over groups of the features (user ``groups`` or :func:`auto_groups` of ``x``)."""
    x, z, _ = _inputs(x, cover, 0.5, y, y_intervals, y_sets)
    g = auto_groups(x, n_groups, random_state) if groups is None else groups
    return float(group_coverage(g, z)[1].min())


def size_stratified_coverage(
    cover=None,
    sizes=None,
    *,
    y=None,
    y_intervals=None,
    y_sets=None,
    confidence_level=0.9,
    n_groups=10,
    statistic="gap",
    weighted=False,
) -> float:
    """SSC: coverage over groups of set sizes (interval widths or set cardinalities, or ``sizes``).

    ``statistic="gap"`` returns CovGap over the size groups, ``"min"`` the smallest group coverage.
    """
    z, s = _covers_and_sizes("size_stratified_coverage", cover, sizes, y, y_intervals, y_sets)
    return _group_statistic(
        auto_groups(s, n_groups), z, as_target(confidence_level, z.size), statistic, weighted
    )


def equal_opportunity_coverage(
    y,
    cover=None,
    *,
    y_intervals=None,
    y_sets=None,
    confidence_level=0.9,
    n_groups=10,
    statistic="gap",
    weighted=False,
) -> float:
    """EOC: coverage over groups of the true outcome ``y`` (classes, or equal-frequency bins of a real y).

    ``statistic="gap"`` returns CovGap over those groups, ``"min"`` the smallest group coverage.
    """
    yv = np.asarray(y, dtype=float)
    n = yv.shape[0] if yv.ndim >= 1 else 0
    z = cover_from_prediction(n, cover, None if cover is not None else y, y_intervals, y_sets)
    return _group_statistic(auto_groups(yv, n_groups), z, as_target(confidence_level, n), statistic, weighted)


def worst_slab_coverage(
    x,
    cover=None,
    *,
    y=None,
    y_intervals=None,
    y_sets=None,
    delta=0.1,
    n_directions=1000,
    n_grid=50,
    split=False,
    random_state=None,
) -> float:
    """WSC: the smallest coverage over slabs ``{a <= v.x <= b}`` with at least ``delta n`` points.

    ``split=False`` is the in-sample version (optimistically low: it picks the worst slab on the same
    points it reports). ``split=True`` picks direction and slab on a random half and returns the
    coverage of that slab on the other half, an unbiased estimate of the chosen slab's coverage.
    """
    x, z, _ = _inputs(x, cover, 0.5, y, y_intervals, y_sets)
    delta = check_real(delta, "delta", "(0, 1]")
    n_directions = check_int(n_directions, "n_directions", 1)
    n_grid = check_int(n_grid, "n_grid", 1)
    rng = np.random.default_rng(random_state)
    xs = (x - x.mean(axis=0)) / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    directions = rng.standard_normal((n_directions, x.shape[1]))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    if not split:
        order = np.argsort(xs @ directions.T, axis=0).T  # (M, n) sample order along each direction
        return float(slab_minima(z[order], delta, n_grid).min())
    half = rng.permutation(x.shape[0])
    a, b = half[: x.shape[0] // 2], half[x.shape[0] // 2 :]
    if a.size == 0 or b.size == 0:
        raise ValueError("worst_slab_coverage(split=True) needs at least 2 samples")
    proj_a = xs[a] @ directions.T  # (n_a, M)
    order = np.argsort(proj_a, axis=0).T  # (M, n_a)
    best, lo, hi = slab_minima(z[a][order], delta, n_grid, return_slab=True)
    m = int(np.argmin(best))
    sorted_proj = proj_a[order[m], m]
    low, high = sorted_proj[lo[m]], sorted_proj[hi[m] - 1]
    proj_b = xs[b] @ directions[m]
    inside = (low <= proj_b) & (proj_b <= high)
    if not inside.any():
        return float("nan")
    return float(z[b][inside].mean())


def slab_minima(sorted_cover, delta: float, n_grid: int, return_slab: bool = False):
    """Smallest mean of a contiguous run of ``sorted_cover`` rows ``(M, n)`` holding >= ``delta n`` entries,
    with run boundaries on a grid of ``n_grid + 1`` evenly spaced positions (plus ``ceil(delta n)`` offsets)."""
    m_dirs, n = sorted_cover.shape
    need = max(1, int(np.ceil(delta * n)))
    csum = np.concatenate([np.zeros((m_dirs, 1)), np.cumsum(sorted_cover, axis=1)], axis=1)  # (M, n + 1)
    starts = np.unique(np.linspace(0, n - need, n_grid + 1).round().astype(int))
    ends = np.unique(np.concatenate([starts + need, np.linspace(need, n, n_grid + 1).round().astype(int)]))
    ends = ends[ends <= n]
    length = ends[None, :] - starts[:, None]  # (S, E)
    valid = length >= need
    means = (csum[:, ends][:, None, :] - csum[:, starts][:, :, None]) / np.where(
        valid, length, 1
    )  # (M, S, E)
    means = np.where(valid[None], means, np.inf)
    flat = means.reshape(m_dirs, -1)
    arg = flat.argmin(axis=1)
    best = flat[np.arange(m_dirs), arg]
    if not return_slab:
        return best
    si, ei = np.unravel_index(arg, length.shape)
    return best, starts[si], ends[ei]


def pearson_correlation(cover=None, sizes=None, *, y=None, y_intervals=None, y_sets=None) -> float:
    """Pearson correlation between cover and set size (0 for a constant input)."""
    z, s = _covers_and_sizes("pearson_correlation", cover, sizes, y, y_intervals, y_sets)
    if z.std() == 0 or s.std() == 0:
        return 0.0
    return float(np.corrcoef(z, s)[0, 1])


def hsic(
    cover=None, sizes=None, *, y=None, y_intervals=None, y_sets=None, max_samples=2000, random_state=None
) -> float:
    """HSIC between cover and set size, Gaussian kernels with median-distance bandwidths (0 when independent)."""
    z, s = _covers_and_sizes("hsic", cover, sizes, y, y_intervals, y_sets)
    max_samples = check_int(max_samples, "max_samples", 2)
    if z.size > max_samples:
        keep = np.random.default_rng(random_state).choice(z.size, max_samples, replace=False)
        z, s = z[keep], s[keep]
    k, l_ = _gaussian_gram(z), _gaussian_gram(s)
    kc = k - k.mean(axis=0) - k.mean(axis=1, keepdims=True) + k.mean()  # H K H
    return float(np.sum(kc * l_) / z.size**2)


def _gaussian_gram(v: np.ndarray) -> np.ndarray:
    d2 = (v[:, None] - v[None, :]) ** 2
    positive = d2[d2 > 0]
    if positive.size == 0:
        return np.ones_like(d2)
    return np.exp(-d2 / np.median(positive))


def _group_statistic(groups, z, t, statistic, weighted) -> float:
    check_choice(statistic, "statistic", ("gap", "min"))
    _, cov, size = group_coverage(groups, z)
    if statistic == "min":
        return float(cov.min())
    gap = np.abs(cov - group_coverage(groups, t)[1])
    return float(np.sum(size * gap) / size.sum()) if weighted else float(gap.mean())


def _inputs(x, cover, confidence_level, y, y_intervals, y_sets):
    x = as_samples(x)
    z = cover_from_prediction(x.shape[0], cover, y, y_intervals, y_sets)
    return x, z, as_target(confidence_level, x.shape[0])


def _covers_and_sizes(metric: str, cover, sizes, y, y_intervals, y_sets) -> tuple[np.ndarray, np.ndarray]:
    """Covers and set sizes ``(n,)`` each, for the metrics of cover against size (``n`` from ``cover`` or ``y``)."""
    ref = cover if cover is not None else y
    if ref is None:
        raise ValueError("pass cover, or y with y_intervals or y_sets")
    n = int(np.shape(ref)[0]) if np.ndim(ref) >= 1 else 0
    z = cover_from_prediction(n, cover, y, y_intervals, y_sets)
    s = set_sizes(n, sizes, y_intervals, y_sets)
    if s is None:
        raise ValueError(f"{metric} needs sizes, y_intervals or y_sets")
    return z, s
