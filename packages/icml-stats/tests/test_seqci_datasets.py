"""The seeded CI benchmarks: reproducible, with the conditional they claim."""

import numpy as np
import pytest

from icml_stats.seqci import confounded_ci, gaussian_ci, sinusoidal_ci


def test_gaussian_ci_is_seeded_and_has_the_stated_structure():
    d1, d2 = gaussian_ci(5000, 5, 0.5, seed=1), gaussian_ci(5000, 5, 0.5, seed=1)
    np.testing.assert_array_equal(d1.b, d2.b)
    assert not np.array_equal(d1.a, gaussian_ci(5000, 5, 0.5, seed=2).a)
    assert d1.a.shape == (5000, 1) and d1.c.shape == (5000, 5) and len(d1) == 5000
    resid = d1.a - d1.a_mean
    assert (
        resid.std() == pytest.approx(1.0, abs=0.05) and abs(np.corrcoef(resid[:, 0], d1.c[:, 0])[0, 1]) < 0.05
    )
    np.testing.assert_allclose(d1.conditional().mean(d1.c), d1.a_mean)
    # the alternative differs from the null with the same seeds by exactly effect * A
    null = gaussian_ci(5000, 5, 0.0, seed=1)
    g = null.b - (d1.b - 0.5 * d1.a)  # same seed and directions: only the effect differs
    np.testing.assert_allclose(g, 0.0, atol=1e-12)


def test_sinusoidal_ci_null_and_alternative():
    null = sinusoidal_ci(20_000, 2, 0.0, seed=0)
    alt = sinusoidal_ci(20_000, 2, 1.0, freq=0.5, seed=0)
    ea, eb = (null.a - null.a_mean)[:, 0], null.b[:, 0] - np.exp(null.c[:, 0])
    assert abs(np.corrcoef(ea, eb)[0, 1]) < 0.03
    ea, eb = (alt.a - alt.a_mean)[:, 0], alt.b[:, 0] - np.exp(alt.c[:, 0])
    r = np.sin(0.5 * alt.c[:, 0])
    assert np.corrcoef(ea * eb, r)[0, 1] > 0.3  # the residual correlation follows sin(freq * C_k)
    assert null.a_std == 0.1


def test_confounded_ci_is_a_null_with_the_stated_correlation():
    d = confounded_ci(50_000, 5, 1.5, seed=1)
    assert np.corrcoef(d.a[:, 0], d.b[:, 0])[0, 1] == pytest.approx(1.5**2 / (1.5**2 + 1), abs=0.01)
    ra, rb = (d.a - d.a_mean)[:, 0], (d.b - d.a_mean)[:, 0]  # B | C has the same mean as A | C
    assert abs(np.corrcoef(ra, rb)[0, 1]) < 0.02 and ra.std() == pytest.approx(1.0, abs=0.02)
    w = np.linalg.lstsq(d.c, d.a_mean[:, 0], rcond=None)[0]
    assert np.linalg.norm(w) == pytest.approx(1.5, rel=1e-9)  # |w| = strength exactly
    np.testing.assert_array_equal(d.a, confounded_ci(50_000, 5, 1.5, seed=1).a)
    alt = confounded_ci(50_000, 5, 1.5, effect=0.5, seed=1)
    np.testing.assert_allclose(alt.b - 0.5 * alt.a, d.b, atol=1e-12)  # only the effect differs


def test_bad_arguments():
    with pytest.raises(ValueError, match="n == 0, must be >= 1"):
        gaussian_ci(0)
    with pytest.raises(ValueError, match="effect"):
        gaussian_ci(10, effect=float("nan"))
    with pytest.raises(ValueError, match="effect"):
        sinusoidal_ci(10, effect=2.0)
    with pytest.raises(ValueError, match="index_r"):
        sinusoidal_ci(10, d=2, index_r=2)
    with pytest.raises(ValueError, match="strength"):
        confounded_ci(10, strength=-1.0)
