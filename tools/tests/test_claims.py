"""The shared paired-bootstrap interval."""

import numpy as np
import pytest

from icml_tools.claims import paired_bootstrap_interval


def test_interval_brackets_the_mean_and_narrows_with_more_pairs():
    rng = np.random.default_rng(1)
    small, large = rng.normal(0.3, 1.0, 10), rng.normal(0.3, 1.0, 1000)
    lo, hi = paired_bootstrap_interval(small)
    assert lo < small.mean() < hi
    lo2, hi2 = paired_bootstrap_interval(large)
    assert lo2 < large.mean() < hi2 and hi2 - lo2 < (hi - lo) / 3
    assert paired_bootstrap_interval(small) == [lo, hi]  # seeded
    assert paired_bootstrap_interval(np.full(5, 0.25)) == [0.25, 0.25]


def test_interval_matches_the_textbook_percentile_bootstrap():
    d = np.array([0.1, -0.2, 0.4, 0.0, 0.3])
    rng = np.random.default_rng(7)
    means = d[rng.integers(0, 5, (2000, 5))].mean(1)
    expected = [np.percentile(means, 5.0), np.percentile(means, 95.0)]
    assert paired_bootstrap_interval(d, resamples=2000, seed=7, level=0.9) == pytest.approx(expected, abs=0)


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]], [1.0, np.nan]])
def test_bad_differences_are_refused(bad):
    with pytest.raises(ValueError, match="diff"):
        paired_bootstrap_interval(bad)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap_interval([1.0], level=1.0)


def test_nested_interval_resamples_seeds_then_items():
    from icml_tools.claims import nested_bootstrap_interval

    rng = np.random.default_rng(3)
    d = rng.normal(0.2, 1.0, (4, 50))
    lo, hi = nested_bootstrap_interval(d, resamples=500, seed=1)
    assert lo < d.mean() < hi and nested_bootstrap_interval(d, resamples=500, seed=1) == [lo, hi]
    # a textbook two-level resample: seeds with replacement, then items within each drawn seed
    gen = np.random.default_rng(1)
    means = []
    for _ in range(500):
        s = gen.integers(4, size=4)
        i = gen.integers(50, size=(4, 50))
        means.append(d[s[:, None], i].mean())
    assert [lo, hi] == pytest.approx([np.percentile(means, 2.5), np.percentile(means, 97.5)], abs=0)
    # seeds that disagree widen the interval beyond resampling items alone
    shifted = d + np.array([[-1.0], [1.0], [-1.0], [1.0]])
    lo2, hi2 = nested_bootstrap_interval(shifted, resamples=500, seed=1)
    assert hi2 - lo2 > 2 * (hi - lo)
    assert nested_bootstrap_interval(np.full((2, 3), 0.5)) == [0.5, 0.5]
    for bad in ([1.0, 2.0], [[np.nan]], np.zeros((0, 3))):
        with pytest.raises(ValueError, match="diff"):
            nested_bootstrap_interval(bad)
