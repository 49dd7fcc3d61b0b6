"""Fourier coefficients of Boolean functions: brute force, Parseval, O'Donnell's closed form for Maj_n."""

import itertools
import math
from itertools import pairwise

import numpy as np
import pytest
import torch

from icml_theory.boolean import (
    fourier_coefficients,
    majority,
    majority_coefficient,
    majority_spectrum,
    spectral_weights,
    subset_sizes,
)


def brute_force_coefficients(values: np.ndarray) -> np.ndarray:
    """f^(S) = E_x[f(x) prod_{i in S} x_i] straight from the definition, x_i = -1 where bit i is set."""
    size = len(values)
    n = size.bit_length() - 1
    points = [[-1 if (j >> i) & 1 else 1 for i in range(n)] for j in range(size)]
    out = np.zeros(size)
    for s in range(size):
        members = [i for i in range(n) if (s >> i) & 1]
        out[s] = np.mean([values[j] * math.prod(points[j][i] for i in members) for j in range(size)])
    return out


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5])
def test_coefficients_match_the_definition(n):
    values = np.random.default_rng(n).normal(size=1 << n)
    got = fourier_coefficients(values)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), brute_force_coefficients(values), rtol=0, atol=1e-14)


def test_coefficients_reconstruct_the_function():
    values = torch.randn(3, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(1))  # batch of 3
    coeffs = fourier_coefficients(values)
    n = 6
    x = torch.tensor(
        [[-1.0 if (j >> i) & 1 else 1.0 for i in range(n)] for j in range(64)], dtype=torch.float64
    )
    chi = torch.stack([x[:, [i for i in range(n) if (s >> i) & 1]].prod(dim=1) for s in range(64)], dim=1)
    torch.testing.assert_close(coeffs @ chi.T, values, rtol=0, atol=1e-12)  # f = sum_S f^(S) chi_S


def test_parseval():
    values = torch.randn(2, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    weights = spectral_weights(fourier_coefficients(values))  # (2, 9)
    assert weights.shape == (2, 9)
    torch.testing.assert_close(weights.sum(-1), values.pow(2).mean(-1), rtol=1e-13, atol=0)


def test_majority_3_by_hand():
    # Maj_3 = (x1 + x2 + x3)/2 - x1 x2 x3 / 2; index order S = {}, {1}, {2}, {1,2}, {3}, ...
    expected = torch.tensor([0, 0.5, 0.5, 0, 0.5, 0, 0, -0.5], dtype=torch.float64)
    assert torch.equal(fourier_coefficients(majority(3)), expected)
    assert spectral_weights(expected).tolist() == [0.0, 0.75, 0.0, 0.25]


def test_majority_truth_table():
    for n in (1, 3, 5):
        table = majority(n)
        for j, x in enumerate(itertools.product([1, -1], repeat=n)):
            point = x[::-1]  # itertools varies the last entry fastest; bit 0 is coordinate 0
            assert table[j].item() == (1.0 if sum(point) > 0 else -1.0)


@pytest.mark.parametrize("n", [3, 5])
def test_closed_form_matches_brute_force(n):
    brute = brute_force_coefficients(majority(n).numpy())
    levels = subset_sizes(n).numpy()
    for s, level in enumerate(levels):
        assert brute[s] == pytest.approx(majority_coefficient(n, int(level)), abs=1e-15)


@pytest.mark.parametrize("n", [7, 9, 11])
def test_closed_form_matches_fwht(n):
    assert torch.equal(fourier_coefficients(majority(n)), majority_spectrum(n))


def test_level_one_weight_decreases_to_two_over_pi():
    w1 = [n * majority_coefficient(n, 1) ** 2 for n in range(1, 30, 2)]
    assert w1[0] == 1.0 and w1[1] == 0.75
    assert all(a > b > 2 / math.pi for a, b in pairwise(w1))
    assert w1[-1] - 2 / math.pi < 0.012  # ~ (2/pi) / (2n): Stirling's correction at n = 29


def test_subset_sizes():
    assert subset_sizes(3).tolist() == [0, 1, 1, 2, 1, 2, 2, 3]
    assert subset_sizes(0).tolist() == [0]


@pytest.mark.parametrize(
    "bad, error, match",
    [
        ([1.0, 2.0, 3.0], ValueError, "values.*power of two"),
        (np.zeros(6), ValueError, "values.*power of two"),
        ([1.0, float("nan")], ValueError, "values.*finite"),
        ([float("inf"), 0.0], ValueError, "values.*finite"),
        (np.array([True, False]), TypeError, r"values.*real"),
        (3.0, ValueError, "values.*dimension"),
    ],
)
def test_bad_values(bad, error, match):
    with pytest.raises(error, match=match):
        fourier_coefficients(bad)


def test_bad_coeffs_and_sizes():
    with pytest.raises(ValueError, match=r"coeffs.*power of two"):
        spectral_weights(torch.zeros(12))
    with pytest.raises(ValueError, match="n must be an odd"):
        majority(4)
    with pytest.raises(ValueError, match="n must be an odd"):
        majority(0)
    with pytest.raises(ValueError, match="k must be"):
        majority_coefficient(5, 6)
