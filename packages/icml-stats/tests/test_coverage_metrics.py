"""The prior metrics: by-hand values, a brute force for the worst slab, the independence measures."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from icml_stats.coverage import (
    auto_groups,
    coverage_gap,
    equal_opportunity_coverage,
    feature_stratified_coverage,
    hsic,
    pearson_correlation,
    size_stratified_coverage,
    worst_slab_coverage,
)
from icml_stats.coverage.metrics import slab_minima


def test_covgap_and_fsc_by_hand():
    x = np.zeros((10, 1))
    cover = np.array([1, 1, 1, 1, 0, 1, 1, 0, 0, 1])
    groups = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])  # coverage 0.8 and 0.6
    assert coverage_gap(x, cover, 0.9, groups=groups) == pytest.approx((0.1 + 0.3) / 2)
    assert coverage_gap(x, cover, 0.9, groups=[0, 1, 1, 1, 1, 1, 1, 1, 1, 1], weighted=True) == pytest.approx(
        0.1 * 0.1 + 0.9 * (0.9 - 6 / 9)
    )  # weights 0.1 and 0.9; coverage 1 and 6/9
    assert feature_stratified_coverage(x, cover, groups=groups) == pytest.approx(0.6)


def test_auto_groups():
    v = np.arange(100.0)
    g = auto_groups(v, 10)
    np.testing.assert_array_equal(np.bincount(g), [10] * 10)
    assert np.all(np.diff(g) >= 0)  # equal-frequency bins in order
    np.testing.assert_array_equal(auto_groups([3.0, 1.0, 3.0], 10), [1, 0, 1])  # few distinct values
    rng = np.random.default_rng(0)
    g2 = auto_groups(rng.normal(size=(200, 3)), 4, random_state=0)
    assert set(np.unique(g2)) == {0, 1, 2, 3}


def test_ssc_eoc_by_hand():
    cover = np.array([1, 0, 1, 1, 1, 1])
    sizes = np.array([1, 1, 2, 2, 3, 3])  # coverage by size: 0.5, 1, 1
    assert size_stratified_coverage(cover, sizes, statistic="min") == 0.5
    assert size_stratified_coverage(cover, sizes, confidence_level=0.9) == pytest.approx(
        (0.4 + 0.1 + 0.1) / 3
    )
    y = np.array([0, 0, 0, 1, 1, 1])  # coverage by class: 2/3, 1
    assert equal_opportunity_coverage(y, cover, statistic="min") == pytest.approx(2 / 3)


def test_ssc_from_sets_by_hand():
    y = np.array([0, 0, 0, 1, 1, 1])
    sets = np.array([[1, 0], [0, 1], [1, 0], [0, 1], [0, 1], [1, 1]], bool)  # covers 1, 0, 1, 1, 1, 1
    assert size_stratified_coverage(y=y, y_sets=sets, statistic="min") == pytest.approx(0.8)
    assert pearson_correlation(y=y, y_sets=sets) == pytest.approx(
        np.corrcoef([1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 2])[0, 1]
    )


def _brute_force_min_run(row, need):
    n = row.size
    return min(row[i:j].mean() for i in range(n) for j in range(i + need, n + 1))


def test_slab_search_equals_brute_force_on_a_full_grid():
    rng = np.random.default_rng(1)
    rows = (rng.random((20, 30)) < 0.7).astype(float)
    got = slab_minima(rows, delta=0.2, n_grid=30)  # grid = every position
    want = [_brute_force_min_run(r, 6) for r in rows]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_wsc_finds_a_bad_slab_and_split_is_less_optimistic():
    rng = np.random.default_rng(2)
    n = 4000
    x = rng.uniform(-1, 1, size=(n, 3))
    p = np.where(x[:, 0] + x[:, 1] > 1.0, 0.5, 0.92)  # a diagonal under-covered corner
    cover = (rng.random(n) < p).astype(int)
    wsc = worst_slab_coverage(x, cover, delta=0.1, n_directions=300, random_state=0)
    assert wsc < 0.8
    # under the null, the in-sample minimum is below the truth 0.9; the split version is not biased down
    null_cover = (rng.random(n) < 0.9).astype(int)
    ins = [worst_slab_coverage(x, null_cover, n_directions=200, random_state=s) for s in range(5)]
    out = [worst_slab_coverage(x, null_cover, n_directions=200, split=True, random_state=s) for s in range(5)]
    assert max(ins) < 0.88
    assert np.mean(out) > np.mean(ins) + 0.01


def test_hsic_by_the_trace_formula_and_independence():
    rng = np.random.default_rng(3)
    cover = (rng.random(150) < 0.8).astype(float)
    sizes = rng.uniform(1, 3, 150) + 2 * cover  # dependent
    n = 150
    h = np.eye(n) - 1 / n

    def gram(v):
        d2 = (v[:, None] - v[None, :]) ** 2
        return np.exp(-d2 / np.median(d2[d2 > 0]))

    want = np.trace(gram(cover) @ h @ gram(sizes) @ h) / n**2
    assert hsic(cover, sizes) == pytest.approx(want, rel=1e-10)
    independent = hsic((rng.random(150) < 0.8).astype(float), rng.uniform(1, 3, 150))
    assert independent < want / 5
    assert pearson_correlation(cover, sizes) > 0.5


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interval_widths_equal_up_to_rounding_are_one_size(dtype):
    # split-conformal intervals mu(x) +- q: every width is 2q in exact arithmetic, but upper - lower
    # differs in the last bits; the rounding made spurious size groups (SSC gap 0.0669 instead of 0.0005)
    # and a non-zero Pearson correlation and HSIC for a constant width
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 2000)
    y = 1000.0 + 50.0 * x + rng.standard_normal(2000) * (1 + x)
    mu = 1000.0 + 50.0 * x + 0.3 * rng.standard_normal(2000)
    q = np.quantile(np.abs(y - mu), 0.9)
    bounds = np.stack([mu - q, mu + q], axis=1).astype(dtype)
    widths = (bounds[:, 1] - bounds[:, 0]).astype(float)
    assert np.unique(widths).size > 1  # rounding, not size
    cover = ((bounds[:, 0] <= y) & (y <= bounds[:, 1])).astype(float)
    one = np.full(2000, np.median(widths))
    for statistic in ("gap", "min"):
        assert size_stratified_coverage(y=y, y_intervals=bounds, statistic=statistic) == (
            size_stratified_coverage(cover, one, statistic=statistic)
        )
    assert pearson_correlation(y=y, y_intervals=bounds) == 0.0
    assert hsic(y=y, y_intervals=bounds) == hsic(cover, one)  # -1.7e-15: rounding of a zero
    # widths that truly differ are kept as they are
    real = bounds + np.stack([-x, x], axis=1).astype(dtype)
    real_widths = (real[:, 1] - real[:, 0]).astype(float)
    assert size_stratified_coverage(y=y, y_intervals=real) == size_stratified_coverage(
        ((real[:, 0] <= y) & (y <= real[:, 1])).astype(float), real_widths
    )


def test_bad_metric_input():
    with pytest.raises(ValueError, match="delta == 0, must be > 0"):
        worst_slab_coverage(np.zeros((4, 1)), np.ones(4), delta=0)
    with pytest.raises(ValueError, match="groups must have shape"):
        coverage_gap(np.zeros((4, 1)), np.ones(4), groups=[0, 1])
    with pytest.raises(ValueError, match="needs sizes"):
        size_stratified_coverage(np.ones(4))
    with pytest.raises(ValueError, match="statistic must be"):
        size_stratified_coverage(np.ones(4), np.ones(4), statistic="max")
    with pytest.raises(ValueError, match="n_groups == "):
        auto_groups(np.zeros(4), 0)


# ----------------------------------------------------------------------------------------- ties
def _brute_force_wsc_1d(x, cover, delta):
    """The smallest coverage over all intervals [a, b] of x values holding >= ceil(delta n) points."""
    need = max(1, int(np.ceil(delta * x.size)))
    values = np.unique(x)
    return min(
        cover[(lo <= x) & (x <= hi)].mean()
        for i, lo in enumerate(values)
        for hi in values[i:]
        if np.count_nonzero((lo <= x) & (x <= hi)) >= need
    )


def test_wsc_with_tied_projections_is_the_true_worst_slab():
    cover = np.r_[np.zeros(20), np.ones(180)]  # every slab of constant x holds all 200 points
    assert worst_slab_coverage(np.zeros((200, 1)), cover, delta=0.1, random_state=0) == pytest.approx(0.9)
    # a binary feature: the slabs are {x = 0}, {x = 1} and both, each covered 0.9 (contiguous runs of the
    # sorted rows could hold only the 10 misses of a group)
    x = np.r_[np.zeros(100), np.ones(100)]
    cover = np.ones(200)
    cover[[*range(10), *range(100, 110)]] = 0
    assert worst_slab_coverage(x, cover, delta=0.1, random_state=0) == pytest.approx(0.9)
    # split: the slab chosen on one half is a whole group, so on the other half it holds only that group
    group_cover = np.r_[np.ones(100), np.zeros(100)]
    assert worst_slab_coverage(x, group_cover, delta=0.1, split=True, random_state=0) == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_wsc_equals_brute_force_over_all_slabs_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 60))
    x = rng.integers(0, 6, n).astype(float)  # 6 values: heavy ties
    cover = (rng.random(n) < 0.3 + 0.1 * x).astype(float)
    for delta in (0.05, 0.2, 0.5):
        # 1-D: the directions are +-1, every slab an interval of x; the grid holds every position
        got = worst_slab_coverage(x, cover, delta=delta, n_directions=4, n_grid=n, random_state=seed)
        assert got == pytest.approx(_brute_force_wsc_1d(x, cover, delta), abs=1e-12)


def test_slab_minima_with_ties_equals_brute_force_over_value_intervals():
    rng = np.random.default_rng(7)
    proj = np.sort(rng.integers(0, 8, size=(25, 30)), axis=1).astype(float)  # tied projections per row
    rows = (rng.random((25, 30)) < 0.7).astype(float)
    got = slab_minima(rows, delta=0.2, n_grid=30, sorted_proj=proj)
    want = [_brute_force_wsc_1d(p, r, 0.2) for p, r in zip(proj, rows, strict=True)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    best, lo, hi = slab_minima(rows, delta=0.2, n_grid=30, sorted_proj=proj, return_slab=True)
    for p, r, b, i, j in zip(proj, rows, best, lo, hi, strict=True):
        assert (i == 0 or p[i - 1] < p[i]) and (j == 30 or p[j - 1] < p[j])  # whole tie blocks only
        assert r[i:j].mean() == pytest.approx(b)


def test_wsc_with_duplicate_rows_reports_a_union_of_whole_ties():
    rng = np.random.default_rng(3)
    points = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    which = rng.integers(0, 4, 120)
    x = points[which]  # 4 distinct rows, each repeated about 30 times
    cover = (rng.random(120) < np.array([0.6, 0.8, 0.9, 1.0])[which]).astype(float)
    # every slab holds whole groups of equal rows: its coverage is that of a union of groups
    unions = [
        cover[np.isin(which, members)].mean()
        for mask in range(1, 16)
        for members in [[k for k in range(4) if mask >> k & 1]]
        if np.isin(which, members).sum() >= 12
    ]
    for seed in range(3):
        got = worst_slab_coverage(x, cover, delta=0.1, n_directions=50, random_state=seed)
        assert np.min(np.abs(np.array(unions) - got)) < 1e-12


# ----------------------------------------------------------------------------- automatic groups
def test_auto_groups_keep_ties_in_one_bin_and_ignore_row_order():
    x = np.r_[np.zeros(900), np.arange(1.0, 101.0)]  # 101 distinct values, 900 ties at 0
    g = auto_groups(x, 10)
    assert np.unique(g[:900]).size == 1 and not np.isin(g[900:], g[0]).any()
    np.testing.assert_array_equal(np.unique(g), np.arange(g.max() + 1))  # labels 0 .. k - 1, all used
    p = np.random.default_rng(0).permutation(1000)
    np.testing.assert_array_equal(auto_groups(x[p], 10), g[p])


def test_k_means_groups_ignore_row_order():
    # several columns: k-means groups. Clustering the rows as given, these data in their own order and
    # in the 3 orders below gave FSC 0.731, 0.735, 0.702, 0.755 and CovGap 0.066, 0.048, 0.058, 0.063
    # (random_state=0 throughout); the labels now follow the rows exactly (all 0.761 and 0.0645)
    rng = np.random.default_rng(0)
    n = 500
    x = rng.normal(size=(n, 3))
    x[:50] = x[50:100]  # repeated rows too
    cover = (rng.random(n) < np.where(x[:, 0] > 1, 0.7, 0.92)).astype(float)
    with threadpool_limits(1):  # k-means' OpenMP threads on a loaded machine: 2 s a call, 0.01 s with one
        g = auto_groups(x, 10, random_state=0)
        np.testing.assert_array_equal(np.unique(g), np.arange(10))
        fsc, gap = (
            feature_stratified_coverage(x, cover, random_state=0),
            coverage_gap(x, cover, random_state=0),
        )
        for seed in range(3):
            p = np.random.default_rng(seed).permutation(n)
            np.testing.assert_array_equal(auto_groups(x[p], 10, random_state=0), g[p])
            assert feature_stratified_coverage(x[p], cover[p], random_state=0) == fsc
            assert coverage_gap(x[p], cover[p], random_state=0) == gap


def test_group_metrics_do_not_depend_on_row_order_with_heavy_ties():
    rng = np.random.default_rng(0)
    n = 1000
    x = np.r_[np.zeros(600), rng.integers(1, 40, 400)].astype(float)  # > 10 distinct values, many ties
    cover = (rng.random(n) < np.where(x == 0, 0.8, 0.95)).astype(float)
    sizes = np.r_[np.full(500, 2.0), rng.integers(3, 30, 500)].astype(float)
    metrics = {
        "FSC": lambda i: feature_stratified_coverage(x[i], cover[i]),
        "CovGap": lambda i: coverage_gap(x[i], cover[i], 0.9),
        "EOC": lambda i: equal_opportunity_coverage(x[i], cover[i]),
        "SSC": lambda i: size_stratified_coverage(cover[i], sizes[i]),
        "SSC min": lambda i: size_stratified_coverage(cover[i], sizes[i], statistic="min"),
    }
    for name, metric in metrics.items():
        want = metric(np.arange(n))
        for seed in range(3):
            got = metric(np.random.default_rng(seed).permutation(n))
            assert got == pytest.approx(want, abs=1e-12), name
    assert feature_stratified_coverage(x, cover) == pytest.approx(cover[:600].mean())  # the x = 0 group


def test_group_metrics_on_the_reported_example():
    x = np.r_[np.zeros(900), np.arange(1.0, 101.0)]
    cover = np.ones(1000)
    cover[:90] = 0  # x = 0: coverage 0.9; the others 1
    p = np.random.default_rng(0).permutation(1000)
    for i in (np.arange(1000), p):
        assert feature_stratified_coverage(x[i], cover[i]) == pytest.approx(0.9)
        assert coverage_gap(x[i], cover[i], 0.9) == pytest.approx((0.0 + 0.1) / 2)


# ----------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("flag", ["False", "no", 0, 1.0, None])
def test_flags_must_be_bools(flag):
    x, cover = np.arange(20.0), np.ones(20)
    with pytest.raises(TypeError, match="split must be True or False"):
        worst_slab_coverage(x, cover, split=flag)
    with pytest.raises(TypeError, match="weighted must be True or False"):
        coverage_gap(x, cover, 0.9, groups=np.arange(20) % 2, weighted=flag)
    with pytest.raises(TypeError, match="weighted must be True or False"):
        size_stratified_coverage(cover, x, weighted=flag)
    with pytest.raises(TypeError, match="weighted must be True or False"):
        equal_opportunity_coverage(x, cover, weighted=flag)
    assert coverage_gap(x, cover, 0.9, groups=np.arange(20) % 2, weighted=np.True_) == pytest.approx(0.1)


def test_group_labels_must_be_sortable_and_not_nan():
    x, cover = np.zeros(4), np.array([1, 0, 1, 1])
    with pytest.raises(TypeError, match="groups must hold labels of one sortable kind"):
        coverage_gap(x, cover, 0.9, groups=np.array([None, "a", None, "a"], dtype=object))
    with pytest.raises(TypeError, match="groups must"):
        feature_stratified_coverage(x, cover, groups=np.array([1, "a", 2, None], dtype=object))
    for nan_groups in (
        [np.nan, 1.0, np.nan, 1.0],
        np.array([np.nan, 1.0, 2.0, 1.0], dtype=object),
        np.array(["2020-01-01", "NaT", "2020-01-01", "NaT"], dtype="datetime64[D]"),
    ):
        with pytest.raises(ValueError, match="groups must not contain NaN"):
            coverage_gap(x, cover, 0.9, groups=nan_groups)
        with pytest.raises(ValueError, match="groups must not contain NaN"):
            feature_stratified_coverage(x, cover, groups=nan_groups)
    assert feature_stratified_coverage(x, cover, groups=["a", "b", "a", "b"]) == pytest.approx(0.5)
