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
