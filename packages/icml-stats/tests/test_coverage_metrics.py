"""The prior metrics: by-hand values, a brute force for the worst slab, the independence measures."""

import numpy as np
import pytest

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
