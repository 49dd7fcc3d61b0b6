"""Lloyd–Max: never worse than its RTN start, monotone, and the known 4-level Gaussian optimum."""

import math
import warnings
from itertools import pairwise

import numpy as np
import pytest
import torch

from icml_compress.baselines import GAUSSIAN_LLOYD_MAX_MSE, lloyd_max, rtn_quantize


def gaussian_lloyd_max(levels: int, iters: int = 500) -> tuple[np.ndarray, float]:
    """Lloyd iterations on the N(0, 1) density itself: cell centroids in closed form, no sampling."""
    pdf = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2)))  # noqa: E731
    y = np.linspace(-1.5, 1.5, levels)
    for _ in range(iters):
        edges = [-math.inf, *((y[:-1] + y[1:]) / 2), math.inf]
        mass = [cdf(b) - cdf(a) for a, b in pairwise(edges)]
        y = np.array(
            [(pdf(a) - pdf(b)) / p for (a, b), p in zip(pairwise(edges), mass, strict=True)]
        )  # E[X | cell]
    # with centroid levels, E[(X - Q(X))^2] = E[X^2] - sum_i P_i y_i^2
    return y, 1.0 - float(np.dot(mass, y**2))


def test_gaussian_four_level_constant():
    levels, mse = gaussian_lloyd_max(4)
    assert mse == pytest.approx(GAUSSIAN_LLOYD_MAX_MSE, abs=5e-5)  # Max (1960): 0.1175
    np.testing.assert_allclose(levels, [-1.510, -0.4528, 0.4528, 1.510], atol=5e-4)
    assert gaussian_lloyd_max(2)[1] == pytest.approx(1 - 2 / math.pi, abs=1e-9)  # levels ±sqrt(2/pi)


def test_lloyd_max_on_gaussian_samples_reaches_the_constant():
    x = torch.randn(1, 50_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    result = lloyd_max(x, levels=4, iters=60)
    assert result.mse[-1].item() == pytest.approx(GAUSSIAN_LLOYD_MAX_MSE, abs=3e-3)
    np.testing.assert_allclose(result.levels[0].numpy(), [-1.510, -0.4528, 0.4528, 1.510], atol=0.03)


def test_mse_is_monotone_and_starts_at_rtn():
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(1)) ** 3  # heavy tails: RTN is poor
    groups = w.reshape(32, 2, 128)
    result = lloyd_max(groups, levels=4, iters=30)
    assert result.mse.shape == (31, 32, 2)
    rtn = rtn_quantize(w, bits=2, group_size=128).dequantized.reshape(32, 2, 128)
    torch.testing.assert_close(result.mse[0], (rtn - groups).pow(2).mean(-1), rtol=1e-5, atol=0)
    steps = result.mse[1:] - result.mse[:-1]
    assert torch.all(steps <= 1e-7 * result.mse[:-1])  # non-increasing up to float32 rounding
    assert result.mse[-1].sum() < 0.5 * result.mse[0].sum()
    torch.testing.assert_close(result.mse[-1], (result.dequantized - groups).pow(2).mean(-1))


def test_dequantized_values_are_levels_and_nearest():
    x = torch.randn(3, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    result = lloyd_max(x, levels=3, iters=10)
    assert torch.all(result.levels[:, 1:] >= result.levels[:, :-1])
    distance = (x.unsqueeze(-1) - result.levels.unsqueeze(-2)).abs()  # (3, 50, 3)
    nearest = result.levels.gather(-1, distance.argmin(-1))
    torch.testing.assert_close(result.dequantized, nearest, rtol=0, atol=0)


def test_custom_init_and_fixed_point():
    x = torch.tensor([[0.0, 0.0, 1.0, 1.0, 5.0]])
    result = lloyd_max(x, levels=2, iters=5, init=torch.tensor([[0.0, 5.0]]))
    assert result.levels.tolist() == [[0.5, 5.0]]  # 1.0 joins the low cell, whose centroid is 0.5
    assert result.mse[-1].item() == pytest.approx(4 * 0.25 / 5)


def test_bad_input():
    with pytest.raises(TypeError, match=r"x.*floating"):
        lloyd_max(torch.arange(8), levels=2)
    with pytest.raises(ValueError, match=r"x.*finite"):
        lloyd_max(torch.tensor([0.0, float("nan")]), levels=2)
    with pytest.raises(ValueError, match="levels"):
        lloyd_max(torch.randn(8), levels=0)
    with pytest.raises(ValueError, match="iters"):
        lloyd_max(torch.randn(8), levels=2, iters=-1)
    with pytest.raises(ValueError, match="init must have shape"):
        lloyd_max(torch.randn(2, 8), levels=2, init=torch.zeros(2, 3))


@pytest.mark.parametrize(
    ("dtype", "big"), [(torch.bfloat16, 3e38), (torch.float32, 3e38), (torch.float64, 1.7e308)]
)
def test_values_near_the_largest_float(dtype, big):
    # the RTN grid's step (max - min) / 3 and the cells' sums overflow the compute dtype: the fit runs on
    # x / 2^k (exact) and is scaled back. Before, the step was inf (inf * 0 = NaN), every value dequantized
    # to 2.49e37 (bfloat16) and the levels were [2.49e37, inf, inf, inf]
    x = torch.tensor([-big, -big / 3, big / 3, big], dtype=dtype)
    with pytest.warns(RuntimeWarning, match="mse holds infinite entries"):  # RTN's error squared: inf
        result = lloyd_max(x, levels=4, iters=3)
    assert torch.equal(result.dequantized, x)  # four values, four levels: each its own level
    assert torch.equal(result.levels, x)
    assert result.mse[-1].item() == 0.0 and not bool(torch.isnan(result.mse).any())
    # 50 copies each of two values: the cells' sums (50 x 2e38) overflow float32 unscaled; before, the
    # levels became [inf, inf] and every value dequantized to inf
    two = torch.tensor([big / 3] * 50 + [big / 3 * 2] * 50, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the rounded means' error squared may overflow
        result = lloyd_max(two, levels=2, iters=3)
    assert bool(torch.isfinite(result.levels).all())
    # measured largest relative error: 1.01e-7 (float32 mean of 50 copies), 0 (bfloat16, float64); margin 10x
    torch.testing.assert_close(result.dequantized, two, rtol=1e-6, atol=0)


def test_rows_away_from_the_largest_float_are_not_rescaled():
    # a row near the largest float is fitted on x / 2^k; the other rows are computed exactly as unscaled
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(3))
    huge = x.clone()
    huge[0, :2] = torch.tensor([-3e38, 3e38])
    with pytest.warns(RuntimeWarning, match="mse holds infinite entries"):
        result = lloyd_max(huge, levels=4, iters=5)
    alone = lloyd_max(x[1:], levels=4, iters=5)
    assert torch.equal(result.levels[1:], alone.levels)
    assert torch.equal(result.dequantized[1:], alone.dequantized)
    assert torch.equal(result.mse[:, 1:], alone.mse)
    assert bool(torch.isfinite(result.levels).all())
