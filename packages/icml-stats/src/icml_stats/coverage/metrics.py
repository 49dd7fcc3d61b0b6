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
bins of a 1-D variable (or its distinct values when there are few; tied values share a bin, so heavy
ties give fewer, larger bins) and k-means clusters of a multi-dimensional one; WSC standardises the
features, then searches slab boundaries on a grid of ``n_grid + 1`` quantiles of each projection, each
moved outwards to where the projection changes (a slab holds all the points tied at its ends); HSIC
uses Gaussian kernels with the median-distance bandwidth and the biased estimator ``trace(KHLH) / n^2``
on at most ``max_samples`` points.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import KMeans

from icml_stats.validation import (
    as_array,
    as_rng,
    as_samples,
    as_target,
    check_bool,
    check_choice,
    check_int,
    check_real,
    check_seed,
    check_shape,
    cover_from_prediction,
    set_sizes,
)

MAX_DIRECTIONS = 1_000_000  # WSC's random directions: far beyond where more of them change the minimum
DIRECTION_CHUNK = 256  # directions scored at once, so memory stays O(chunk n_grid^2) for any n_directions


def auto_groups(values, n_groups: int = 10, random_state=None) -> np.ndarray:
    """Integer group labels ``(n,)``: distinct values when at most ``n_groups``, else equal-frequency bins
    (1-D; tied values share a bin, so there may be fewer than ``n_groups``) or k-means clusters (several
    columns). Labels are ``0 .. k - 1``, every one used, and do not depend on the order of the rows."""
    n_groups = check_int(n_groups, "n_groups", 1)
    check_seed(random_state)
    v = as_samples(values, "values")
    distinct, labels = np.unique(v, axis=0, return_inverse=True)
    if distinct.shape[0] <= n_groups:
        return labels.reshape(-1)
    if v.shape[1] == 1:
        # bin edges at the sorted values of ranks ceil(k n / n_groups): without ties, rank r is in bin
        # floor(r n_groups / n); binning the values (not the ranks) keeps tied values in one bin
        s = np.sort(v[:, 0])
        edges = s[-(-np.arange(1, n_groups) * s.size // n_groups)]
        bins = np.searchsorted(edges, v[:, 0], side="right")
        return np.unique(bins, return_inverse=True)[1].reshape(-1).astype(int)  # bins emptied by ties dropped
    # k-means on the rows in lexicographic order: its initialisation draws rows by position, so on the
    # rows as given the clusters (and every group metric) changed with the row order of the same data
    order = np.lexsort(v.T[::-1])
    labels = np.empty(v.shape[0], dtype=int)
    labels[order] = KMeans(n_clusters=n_groups, n_init=3, random_state=random_state).fit_predict(v[order])
    return labels


def group_coverage(groups, cover) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(labels, coverage per group, size per group)`` for group labels ``(n,)`` (sortable, no NaN)."""
    g = check_shape(np.asarray(groups), "groups", cover.shape, " (one label per sample)")
    try:
        labels, inverse = np.unique(g, return_inverse=True)
    except TypeError:  # labels numpy cannot sort, e.g. None among strings
        raise TypeError(
            "groups must hold labels of one sortable kind (numbers or strings), "
            f"got a mix of {sorted({type(v).__name__ for v in g.reshape(-1).tolist()})}"
        ) from None
    if _has_nan(labels):
        raise ValueError("groups must not contain NaN (a missing label); give every sample a group")
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
    weighted = check_bool(weighted, "weighted")
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
    # group the dense ranks of the sizes: the same groups, and unbounded intervals (inf) are the largest
    ranks = np.unique(s, return_inverse=True)[1].reshape(-1).astype(float)
    return _group_statistic(
        auto_groups(ranks, n_groups), z, as_target(confidence_level, z.size), statistic, weighted
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
    yv = as_array(y, "y", ("n",), hint=" (one outcome per sample)")
    n = yv.shape[0]
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
    n_directions = check_int(n_directions, "n_directions", 1, MAX_DIRECTIONS)
    n_grid = check_int(n_grid, "n_grid", 1)
    split = check_bool(split, "split")
    rng = as_rng(random_state)
    xs = (x - x.mean(axis=0)) / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    directions = rng.standard_normal((n_directions, x.shape[1]))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    chunks = [directions[i : i + DIRECTION_CHUNK] for i in range(0, n_directions, DIRECTION_CHUNK)]
    if not split:
        rep = _tie_representatives(xs)
        sorted_runs = (_sorted_along(xs, z, v, rep) for v in chunks)  # covers, projections: (chunk, n)
        return float(min(slab_minima(sz, delta, n_grid, sorted_proj=sp).min() for sz, sp in sorted_runs))
    half = rng.permutation(x.shape[0])
    a, b = half[: x.shape[0] // 2], half[x.shape[0] // 2 :]
    if a.size == 0 or b.size == 0:
        raise ValueError("worst_slab_coverage(split=True) needs at least 2 samples")
    best_parts, low_parts, high_parts = [], [], []
    rep = _tie_representatives(xs[a])
    for v in chunks:
        sorted_z, sorted_proj = _sorted_along(xs[a], z[a], v, rep)
        best, lo, hi = slab_minima(sorted_z, delta, n_grid, sorted_proj=sorted_proj, return_slab=True)
        rows = np.arange(v.shape[0])
        best_parts.append(best)
        low_parts.append(sorted_proj[rows, lo])  # the slab's ends: its first and last projection values
        high_parts.append(sorted_proj[rows, hi - 1])
    m = int(np.argmin(np.concatenate(best_parts)))
    low, high = np.concatenate(low_parts)[m], np.concatenate(high_parts)[m]
    proj_b = xs[b] @ directions[m]
    inside = (low <= proj_b) & (proj_b <= high)
    if not inside.any():
        warnings.warn(
            "worst_slab_coverage(split=True): no held-out point falls in the slab chosen on the other half, "
            "so its coverage is undefined (NaN); use more samples or a larger delta",
            UserWarning,
            stacklevel=2,
        )
        return float("nan")
    return float(z[b][inside].mean())


def _sorted_along(
    xs: np.ndarray, z: np.ndarray, v: np.ndarray, representative: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Covers and projections ``(M, n)`` each, sorted along each direction of ``v`` ``(M, d)``.

    Equal rows of ``xs`` get the very same projection (that of their first occurrence, ``representative``
    from :func:`_tie_representatives`), so a tie in ``x`` is a tie in every projection whatever the
    rounding of the matrix product."""
    proj = np.ascontiguousarray((xs @ v.T).T)  # (M, n)
    if representative is not None:
        proj = proj[:, representative]
    order = np.argsort(proj, axis=1)  # sample order along each direction
    return z[order], np.take_along_axis(proj, order, axis=1)


def _tie_representatives(xs: np.ndarray) -> np.ndarray | None:
    """For each row, the index of the first row equal to it; None when the rows are distinct or 1-D
    (one multiplication per projection: equal values already project equally)."""
    if xs.shape[1] == 1:
        return None
    _, first, inverse = np.unique(xs, axis=0, return_index=True, return_inverse=True)
    representative = first[inverse.reshape(-1)]
    return representative if np.any(representative != np.arange(xs.shape[0])) else None


def slab_minima(sorted_cover, delta: float, n_grid: int, *, sorted_proj=None, return_slab: bool = False):
    """Smallest mean of a contiguous run of ``sorted_cover`` rows ``(M, n)`` holding >= ``delta n`` entries,
    with run boundaries on a grid of ``n_grid + 1`` evenly spaced positions (plus ``ceil(delta n)`` offsets).

    ``sorted_proj`` ``(M, n)``, the sorted projections the rows were ordered by, makes the runs slabs
    ``{a <= v.x <= b}``: a run then starts and ends only where the projection changes (or at 0 and ``n``),
    each grid start moved down and each grid end up to the nearest such place, so tied points are never
    split. Without it every position is a boundary (projections without ties). ``return_slab=True`` also
    returns each row's run ``[start, end)``."""
    m_dirs, n = sorted_cover.shape
    need = max(1, int(np.ceil(delta * n)))
    n_grid = min(n_grid, max(n - need, 1))  # a finer grid already holds every position: same boundaries
    csum = np.concatenate([np.zeros((m_dirs, 1)), np.cumsum(sorted_cover, axis=1)], axis=1)  # (M, n + 1)
    starts = np.unique(np.linspace(0, n - need, n_grid + 1).round().astype(int))[None, :]  # (1, S)
    ends = np.unique(np.concatenate([starts[0] + need, np.linspace(need, n, n_grid + 1).round().astype(int)]))
    ends = ends[ends <= n][None, :]  # (1, E)
    if sorted_proj is not None:
        sorted_proj = check_shape(np.asarray(sorted_proj), "sorted_proj", sorted_cover.shape)
        changes = sorted_proj[:, 1:] != sorted_proj[:, :-1]  # (M, n - 1)
        tied = ~changes.all(axis=1)
        if tied.any():  # rows without ties keep the grid as it is
            boundary = np.ones((int(tied.sum()), n + 1), dtype=bool)  # may a run start or end here?
            boundary[:, 1:n] = changes[tied]
            position = np.arange(n + 1)
            down = np.maximum.accumulate(np.where(boundary, position, 0), axis=1)  # last boundary <= p
            up = np.minimum.accumulate(np.where(boundary, position, n)[:, ::-1], axis=1)  # reversed:
            up = up[:, ::-1]  # first boundary >= p
            starts, ends = np.repeat(starts, m_dirs, axis=0), np.repeat(ends, m_dirs, axis=0)  # (M, .)
            starts[tied] = np.take_along_axis(down, starts[tied], axis=1)
            ends[tied] = np.take_along_axis(up, ends[tied], axis=1)
    rows = np.arange(m_dirs)[:, None]
    length = ends[:, None, :] - starts[:, :, None]  # (1 or M, S, E)
    valid = length >= need
    means = (csum[rows, ends][:, None, :] - csum[rows, starts][:, :, None]) / np.where(valid, length, 1)
    means = np.where(valid, means, np.inf)  # (M, S, E)
    flat = means.reshape(m_dirs, -1)
    arg = flat.argmin(axis=1)
    best = flat[np.arange(m_dirs), arg]
    if not return_slab:
        return best
    si, ei = np.unravel_index(arg, means.shape[1:])
    first = np.broadcast_to(starts, (m_dirs, starts.shape[1]))[np.arange(m_dirs), si]
    return best, first, np.broadcast_to(ends, (m_dirs, ends.shape[1]))[np.arange(m_dirs), ei]


def pearson_correlation(cover=None, sizes=None, *, y=None, y_intervals=None, y_sets=None) -> float:
    """Pearson correlation between cover and set size (0 for a constant input)."""
    z, s = _covers_and_sizes("pearson_correlation", cover, sizes, y, y_intervals, y_sets)
    if not _finite_sizes("pearson_correlation", s):
        return float("nan")
    s = s / max(float(np.abs(s).max()), np.finfo(float).tiny)  # scale-free; huge sizes would overflow std
    if z.std() == 0 or s.std() == 0:
        return 0.0
    return float(np.corrcoef(z, s)[0, 1])


def hsic(
    cover=None, sizes=None, *, y=None, y_intervals=None, y_sets=None, max_samples=2000, random_state=None
) -> float:
    """HSIC between cover and set size, Gaussian kernels with median-distance bandwidths (0 when independent)."""
    z, s = _covers_and_sizes("hsic", cover, sizes, y, y_intervals, y_sets)
    if not _finite_sizes("hsic", s):
        return float("nan")
    s = s / max(float(np.abs(s).max()), np.finfo(float).tiny)  # the median bandwidth makes HSIC scale-free
    max_samples = check_int(max_samples, "max_samples", 2)
    rng = as_rng(random_state)
    if z.size > max_samples:
        keep = rng.choice(z.size, max_samples, replace=False)
        z, s = z[keep], s[keep]
    k, l_ = _gaussian_gram(z), _gaussian_gram(s)
    kc = k - k.mean(axis=0) - k.mean(axis=1, keepdims=True) + k.mean()  # H K H
    return float(np.sum(kc * l_) / z.size**2)


def _has_nan(labels: np.ndarray) -> bool:
    """Whether distinct labels hold NaN (or NaT): float, complex, datetime or Python float labels."""
    if labels.dtype.kind in "fc":
        return bool(np.isnan(labels).any())
    if labels.dtype.kind in "mM":
        return bool(np.isnat(labels).any())
    if labels.dtype.kind == "O":
        return any(isinstance(v, float | complex | np.inexact) and v != v for v in labels.tolist())
    return False


def _finite_sizes(metric: str, s: np.ndarray) -> bool:
    """Whether every set size is finite; warns (the metric is then NaN) if not, e.g. an unbounded interval."""
    if np.isfinite(s).all():
        return True
    warnings.warn(
        f"{metric}: some set sizes are infinite (unbounded intervals), so the metric is undefined (NaN)",
        UserWarning,
        stacklevel=3,
    )
    return False


def _gaussian_gram(v: np.ndarray) -> np.ndarray:
    d2 = (v[:, None] - v[None, :]) ** 2
    positive = d2[d2 > 0]
    if positive.size == 0:
        return np.ones_like(d2)
    return np.exp(-d2 / np.median(positive))


def _group_statistic(groups, z, t, statistic, weighted) -> float:
    check_choice(statistic, "statistic", ("gap", "min"))
    weighted = check_bool(weighted, "weighted")
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
