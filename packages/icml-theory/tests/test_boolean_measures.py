"""Influences, low-degree and junta weights against closed forms and brute force; the float32 spectrum;
Monte-Carlo estimators and the coverage of their confidence intervals; input checks."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_theory.boolean import (
    Estimate,
    best_junta,
    estimate_coefficients,
    estimate_influences,
    estimate_low_degree_weight,
    estimate_total_influence,
    flip_influences,
    fourier_coefficients,
    influences,
    junta_weights,
    krawtchouk_kernel,
    low_degree_weight,
    majority,
    spectral_weights,
    subset_sizes,
    total_influence,
    truth_table_function,
)


def popcount_parity(v: np.ndarray, n: int) -> np.ndarray:
    """``popcount(v) mod 2`` elementwise for integers below ``2^n``."""
    out = np.zeros_like(v)
    for i in range(n):
        out ^= (v >> i) & 1
    return out


def character_matrix(n: int) -> np.ndarray:
    """``chi[S, j] = (-1)^popcount(S & j)``: character ``S`` at the point of index ``j``, ``(2^n, 2^n)``."""
    idx = np.arange(1 << n)
    return 1.0 - 2.0 * popcount_parity(idx[:, None] & idx[None, :], n)


def direct_coefficients(values) -> np.ndarray:
    """``f^(S) = 2^-n sum_j f(j) chi_S(j)`` as one dense product with the character matrix (no FWHT)."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v).bit_length() - 1
    return character_matrix(n) @ v / len(v)


def subset_lattice(n: int) -> np.ndarray:
    """``M[J, S] = 1`` iff ``S ⊆ J``, ``(2^n, 2^n)``."""
    idx = np.arange(1 << n)
    return ((idx[None, :] & ~idx[:, None]) == 0).astype(np.float64)


def parity_table(n: int) -> torch.Tensor:
    """``x_0 x_1 ... x_{n-1}`` as a ±1 truth table."""
    return 1.0 - 2.0 * (subset_sizes(n) % 2).to(torch.float64)


def points(n: int) -> torch.Tensor:
    """Every point of {-1, 1}^n in truth-table order, ``(2^n, n)`` float64 (bit i set means x_i = -1)."""
    idx = torch.arange(1 << n)
    return 1.0 - 2.0 * ((idx[:, None] >> torch.arange(n)) & 1).to(torch.float64)


# Run torch single-threaded here: every tensor of these tests is small (the largest, a 200 x 200 pair matrix per
# batch of the low-degree estimator), and on 2 busy cores intra-op threading made the 800 estimator calls of the
# coverage test 10-40x slower (0.5 s instead of 15 ms each).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------- closed forms


def test_majority_9_closed_forms():
    c = fourier_coefficients(majority(9))
    inf_one = math.comb(8, 4) / 2**8  # Pr[the other 8 votes tie] = 70/256
    assert influences(c).tolist() == [inf_one] * 9
    assert flip_influences(majority(9)).tolist() == [inf_one] * 9
    assert total_influence(c).item() == 9 * 70 / 256 == 2.4609375  # dyadic: exact in float64
    assert spectral_weights(c)[1].item() == 9 * (70 / 256) ** 2
    assert low_degree_weight(c, 1).item() == pytest.approx(0.6729, abs=1e-4)
    assert low_degree_weight(c, 1).item() == 9 * (70 / 256) ** 2  # W^0 = 0: Maj is odd
    assert low_degree_weight(c, 9).item() == 1.0


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_parity_has_all_weight_on_top(n):
    c = fourier_coefficients(parity_table(n))
    expected = torch.zeros(1 << n, dtype=torch.float64)
    expected[-1] = 1.0
    assert torch.equal(c, expected)
    assert spectral_weights(c).tolist() == [0.0] * n + [1.0]
    assert total_influence(c).item() == n
    assert influences(c).tolist() == [1.0] * n
    assert flip_influences(parity_table(n)).tolist() == [1.0] * n
    assert junta_weights(c).tolist() == [0.0] * n + [1.0]
    assert low_degree_weight(c, n - 1).item() == 0.0
    assert best_junta(c, n) == (1.0, tuple(range(n)))


# --------------------------------------------------------------------------- FWHT against the definition


@pytest.mark.parametrize("n", [1, 3, 6, 10])
@pytest.mark.parametrize("kind", ["real", "boolean"])
def test_fwht_spectrum_equals_direct_sum(n, kind):
    rng = np.random.default_rng(100 + n)
    values = rng.normal(size=1 << n) if kind == "real" else rng.choice([-1.0, 1.0], size=1 << n)
    got = fourier_coefficients(values)
    assert got.dtype == torch.float64 and got.shape == (1 << n,)
    np.testing.assert_allclose(got.numpy(), direct_coefficients(values), rtol=0, atol=1e-13)
    # Parseval: sum_S f^(S)^2 = E[f^2], also level by level
    assert float((got**2).sum()) == pytest.approx(float(np.mean(values**2)), rel=1e-13)
    assert float(spectral_weights(got).sum()) == pytest.approx(float(np.mean(values**2)), rel=1e-13)
    if kind == "boolean":
        assert float((got**2).sum()) == pytest.approx(1.0, abs=1e-13)
        # f^(S) is a multiple of 2^-n, and the FWHT gets it exactly
        np.testing.assert_array_equal(
            got.numpy() * (1 << n), np.round(direct_coefficients(values) * (1 << n))
        )


@pytest.mark.parametrize("n", [0, 1, 4, 9, 12])
def test_float32_spectrum_is_exact_for_boolean_functions(n):
    values = torch.from_numpy(np.random.default_rng(n).choice([-1.0, 1.0], size=1 << n))
    c32 = fourier_coefficients(values, dtype=torch.float32)
    c64 = fourier_coefficients(values)
    assert c32.dtype == torch.float32 and c64.dtype == torch.float64
    assert torch.equal(c32.to(torch.float64), c64)
    assert torch.equal(
        fourier_coefficients(majority(11), dtype=torch.float32).double(), fourier_coefficients(majority(11))
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.complex128])
def test_other_dtypes_are_refused(dtype):
    with pytest.raises(ValueError, match=r"dtype must be torch\.float32 or torch\.float64"):
        fourier_coefficients(majority(3), dtype=dtype)


# --------------------------------------------------------------------------- properties (hypothesis)


def _tables(elements):
    return st.integers(0, 8).flatmap(lambda n: st.lists(elements, min_size=1 << n, max_size=1 << n))


truth_tables = st.one_of(
    _tables(st.sampled_from([-1.0, 1.0])),
    _tables(st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)),
)


@settings(max_examples=50, deadline=None)
@given(truth_tables)
def test_measures_agree_with_brute_force(values):
    v = torch.tensor(values, dtype=torch.float64)
    n = v.shape[0].bit_length() - 1
    c = fourier_coefficients(v)
    mean_square = float((v * v).mean())
    scale = max(mean_square, 1.0)

    inf = influences(c)
    flips = flip_influences(v)
    assert inf.shape == flips.shape == (n,)
    torch.testing.assert_close(inf, flips, rtol=0, atol=1e-12)
    assert float(total_influence(c)) == pytest.approx(float(flips.sum()), rel=0, abs=1e-12 * (n + 1))
    assert float(low_degree_weight(c, n)) == pytest.approx(mean_square, rel=1e-12, abs=1e-300)
    assert float(low_degree_weight(c, n + 3)) == pytest.approx(mean_square, rel=1e-12, abs=1e-300)

    junta = junta_weights(c)  # (n + 1,)
    assert junta.shape == (n + 1,)
    assert bool((junta[1:] >= junta[:-1] - 1e-12 * scale).all())
    assert float(junta[-1]) == pytest.approx(mean_square, rel=1e-12, abs=1e-300)
    # brute force: weight(J) = sum_{S ⊆ J} f^(S)^2 for every J at once
    weight_of = subset_lattice(n) @ (c.numpy() ** 2)  # (2^n,)
    sizes = subset_sizes(n).numpy()
    for k in range(n + 1):
        brute_max = weight_of[sizes == k].max()
        assert float(junta[k]) >= brute_max - 1e-12 * scale  # no k-set beats it...
        assert float(junta[k]) == pytest.approx(
            brute_max, rel=1e-12, abs=1e-12 * scale
        )  # ...and one attains it
        w, chosen = best_junta(c, k)
        assert len(chosen) == k == len(set(chosen)) and list(chosen) == sorted(chosen)
        assert all(0 <= i < n for i in chosen)
        mask = sum(1 << i for i in chosen)
        assert w == pytest.approx(weight_of[mask], rel=1e-12, abs=1e-12 * scale)
        assert w == pytest.approx(brute_max, rel=1e-12, abs=1e-12 * scale)


def test_batched_measures_match_one_at_a_time():
    values = torch.randn(3, 2, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    c = fourier_coefficients(values)
    for fn in (influences, total_influence, junta_weights, lambda t: low_degree_weight(t, 2)):
        batch = fn(c)
        for a in range(3):
            for b in range(2):
                torch.testing.assert_close(batch[a, b], fn(c[a, b]), rtol=0, atol=0)
    torch.testing.assert_close(flip_influences(values)[1, 0], flip_influences(values[1, 0]), rtol=0, atol=0)


# --------------------------------------------------------------------------- planted juntas


def _planted(n: int = 9):
    x = points(n)  # (512, 9)
    maj = torch.sign(x[:, 0] + x[:, 3] + x[:, 7])
    return x[:, 2] * x[:, 5], maj


def test_planted_real_junta_is_found():
    product, maj = _planted()
    c = fourier_coefficients(product + maj)  # E[f^2] = 1 + 1: the two parts are orthogonal
    assert best_junta(c, 5) == (pytest.approx(2.0, abs=1e-14), (0, 2, 3, 5, 7))
    weights = junta_weights(c)
    assert weights[5:].tolist() == pytest.approx([2.0] * 5, abs=1e-14)
    assert float(weights[4]) < 2.0 - 0.2
    # two variables: the product (weight 1) beats two of the majority's (2 * 1/4)
    assert best_junta(c, 2) == (pytest.approx(1.0, abs=1e-14), (2, 5))
    # three: the product plus one majority input (1 + 1/4) beats the whole majority (1)
    w3, j3 = best_junta(c, 3)
    assert w3 == pytest.approx(1.25, abs=1e-14)
    assert {2, 5} < set(j3) and len(set(j3) & {0, 3, 7}) == 1


def test_planted_boolean_junta_is_found():
    product, maj = _planted()
    c = fourier_coefficients(product * maj)  # ±1, depends on exactly x_0, x_2, x_3, x_5, x_7
    assert best_junta(c, 5) == (pytest.approx(1.0, abs=1e-14), (0, 2, 3, 5, 7))
    assert float(junta_weights(c)[4]) < 1.0 - 0.2
    assert influences(c)[[1, 4, 6, 8]].tolist() == [0.0] * 4


# --------------------------------------------------------------------------- the Krawtchouk kernel


@pytest.mark.parametrize("n", [1, 2, 4, 6])
def test_krawtchouk_kernel_is_the_low_degree_character_sum(n):
    chi = torch.from_numpy(character_matrix(n))  # (S, point)
    sizes = subset_sizes(n)
    minus_ones = subset_sizes(n)  # number of -1 entries of the point of index j
    for d in range(n + 2):
        kernel = krawtchouk_kernel(n, d)
        assert kernel.shape == (n + 1,) and kernel.dtype == torch.float64
        brute = chi[sizes <= d].sum(0)  # (2^n,): sum_{|S| <= d} chi_S(z) at every z
        assert torch.equal(kernel[minus_ones], brute)
    assert krawtchouk_kernel(n, 0).tolist() == [1.0] * (n + 1)
    assert krawtchouk_kernel(n, n).tolist() == [2.0**n] + [0.0] * n  # sum of all characters: 2^n [z = 1]


# --------------------------------------------------------------------------- Monte-Carlo estimates

N_MC = 16
WEIGHTS_MC = torch.linspace(1.0, 2.5, N_MC, dtype=torch.float64)


def _mc_table() -> torch.Tensor:
    """A 16-input Boolean function: sign of a weighted sum of all inputs plus a 3-way product term
    (no ties: the weights are generic)."""
    x = points(N_MC)  # (65536, 16)
    return torch.sign(x @ WEIGHTS_MC + 0.3 + 4.0 * x[:, 1] * x[:, 6] * x[:, 11])


@pytest.fixture(scope="module")
def mc_function():
    table = _mc_table()
    assert bool((table.abs() == 1).all())
    return truth_table_function(table), fourier_coefficients(table)


def test_truth_table_function_evaluates_the_table(mc_function):
    f, _ = mc_function
    table = _mc_table()
    x = points(N_MC)[torch.randperm(1 << N_MC, generator=torch.Generator().manual_seed(0))[:500]]
    idx = ((x < 0).long() << torch.arange(N_MC)).sum(1)
    assert torch.equal(f(x), table[idx])


def test_estimate_shapes_and_values(mc_function):
    f, _ = mc_function
    subsets = [(), (0,), (3, 5), (1, 6, 11), [2, 2, 9]]  # repeated entries count once
    est = estimate_coefficients(f, N_MC, subsets, samples=500, seed=1)
    for e in (est.value, est.low, est.high, est.stderr):
        assert e.shape == (5,) and e.dtype == torch.float64
    assert est.samples == 500 and est.level == 0.95
    assert bool((est.low < est.value).all() and (est.value < est.high).all())
    inf = estimate_influences(f, N_MC, samples=300, level=0.9, seed=2)
    assert inf.value.shape == inf.low.shape == inf.high.shape == inf.stderr.shape == (N_MC,)
    assert inf.level == 0.9 and inf.samples == 300
    tot = estimate_total_influence(f, N_MC, samples=300, seed=2)
    assert tot.value.shape == () and tot.samples == 300
    torch.testing.assert_close(tot.value, inf.value.sum(), rtol=1e-12, atol=0)  # same seed, same points
    low = estimate_low_degree_weight(f, N_MC, 2, samples=410, batches=10, seed=3)
    assert low.value.shape == () and low.samples == 410 // 10 * 10
    # the influence interval of a ±1 function: the terms are 0/1
    assert bool((inf.value >= 0).all() and (inf.value <= 1).all())
    # seeds are reproducible
    again = estimate_coefficients(f, N_MC, subsets, samples=500, seed=1)
    assert torch.equal(again.value, est.value) and torch.equal(again.high, est.high)
    assert not torch.equal(estimate_coefficients(f, N_MC, subsets, samples=500, seed=2).value, est.value)


def test_estimates_batch_size_does_not_change_the_points(mc_function):
    f, _ = mc_function
    a = estimate_influences(f, N_MC, samples=1000, seed=7, batch_size=1000)
    b = estimate_influences(f, N_MC, samples=1000, seed=7, batch_size=128)
    torch.testing.assert_close(a.value, b.value, rtol=0, atol=0)


def test_estimate_covers():
    est = Estimate(
        value=torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64),
        low=torch.tensor([-1.0, 0.5, 1.9], dtype=torch.float64),
        high=torch.tensor([1.0, 1.5, 2.1], dtype=torch.float64),
        stderr=torch.tensor([0.5, 0.25, 0.05], dtype=torch.float64),
        level=0.95,
        samples=10,
    )
    assert est.covers([1.0, 0.4, 2.0]).tolist() == [True, False, True]  # ends included
    assert est.covers(torch.tensor([-1.0, 1.5, 2.2])).tolist() == [True, True, False]
    assert est.covers(0.7).tolist() == [True, True, False]  # broadcasts


def test_exact_truth_is_close_to_long_run_estimates(mc_function):
    # a sanity check of unbiasedness with many samples, far tighter than the coverage test's intervals
    f, c = mc_function
    exact = total_influence(c)
    est = estimate_total_influence(f, N_MC, samples=40_000, seed=11)
    assert abs(float(est.value - exact)) < 4 * float(est.stderr)
    assert float(est.stderr) < 0.02


def _coverage_band(level: float, replicates: int, width: float = 3.0) -> tuple[float, float]:
    se = math.sqrt(level * (1 - level) / replicates)
    return level - width * se, level + width * se


def test_monte_carlo_intervals_cover_at_the_nominal_rate(mc_function):
    f, c = mc_function
    level, reps = 0.95, 200
    exact_total = float(total_influence(c))
    exact_inf = influences(c)  # (16,)
    exact_low = float(low_degree_weight(c, 3))
    subsets = [(), (4,), (1, 6), (0, 15), (1, 6, 11)]
    masks = [sum(1 << i for i in s) for s in subsets]
    exact_coeffs = c[masks]
    # the function is far from degenerate: every estimand is well inside its range
    assert 0.08 < float(exact_inf.min()) and float(exact_inf.max()) < 0.6
    assert 0.3 < exact_low < 0.95
    assert float(exact_coeffs.abs().max()) > 0.3  # the ±1 terms f chi_S have variance near 1 for any S

    hits_total, hits_inf, hits_low, hits_coef = [], [], [], []
    for seed in range(reps):
        hits_total.append(
            bool(estimate_total_influence(f, N_MC, samples=1000, level=level, seed=seed).covers(exact_total))
        )
        hits_inf.append(estimate_influences(f, N_MC, samples=1000, level=level, seed=seed).covers(exact_inf))
        est = estimate_low_degree_weight(f, N_MC, 3, samples=4000, batches=20, level=level, seed=seed)
        hits_low.append(bool(est.covers(exact_low)))
        hits_coef.append(
            estimate_coefficients(f, N_MC, subsets, samples=1000, level=level, seed=seed).covers(exact_coeffs)
        )

    low, high = _coverage_band(level, reps)  # [0.904, 0.996]
    assert low <= np.mean(hits_total) <= high, np.mean(hits_total)
    assert low <= np.mean(hits_low) <= high, np.mean(hits_low)
    # Influences: the 16 indicators of one replicate share its points, so they are correlated and pooling
    # them as 3200 independent draws would understate the spread. Their per-variable coverages averaged over
    # the 16 variables have a standard deviation at most that of one variable's coverage (the sd of a mean of
    # correlated variables is at most the mean of their sds), so the single-variable band is valid for the
    # average without widening. Each variable on its own gets a 4-se band (16 checks: Bonferroni-style).
    per_variable = torch.stack(hits_inf).double().mean(0)  # (16,)
    assert low <= float(per_variable.mean()) <= high, per_variable
    low4, high4 = _coverage_band(level, reps, width=4.0)
    assert bool(((per_variable >= low4) & (per_variable <= high4)).all()), per_variable
    per_subset = torch.stack(hits_coef).double().mean(0)  # (5,) same argument as the influences
    assert low <= float(per_subset.mean()) <= high, per_subset
    assert bool(((per_subset >= low4) & (per_subset <= high4)).all()), per_subset


def test_low_degree_estimate_is_exact_in_expectation_for_parity_and_dictator():
    # W^{<=d} of a dictator x_0 is 1 for d >= 1; of parity on 5 bits it is 0 below 5: the U-statistic's
    # terms are then not 0 individually, but the estimate concentrates at the truth.
    dictator = truth_table_function(points(5)[:, 0])
    est = estimate_low_degree_weight(dictator, 5, 1, samples=4000, batches=20, seed=0)
    assert est.covers(1.0) and abs(float(est.value) - 1.0) < 0.1
    parity = truth_table_function(parity_table(5))
    est = estimate_low_degree_weight(parity, 5, 2, samples=4000, batches=20, seed=0)
    assert est.covers(0.0) and abs(float(est.value)) < 0.1
    est = estimate_low_degree_weight(parity, 5, 5, samples=4000, batches=20, seed=0)
    assert est.covers(1.0) and abs(float(est.value) - 1.0) < 0.1


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "fn",
    [fourier_coefficients, flip_influences, truth_table_function],
)
def test_truth_tables_must_have_power_of_two_length(fn):
    with pytest.raises(ValueError, match=r"values\.shape\[-1\] must be a power of two"):
        fn(torch.zeros(6))


@pytest.mark.parametrize(
    "fn",
    [
        influences,
        total_influence,
        junta_weights,
        spectral_weights,
        lambda c: best_junta(c, 1),
        lambda c: low_degree_weight(c, 1),
    ],
)
def test_coefficients_must_have_power_of_two_length(fn):
    with pytest.raises(ValueError, match=r"coeffs\.shape\[-1\] must be a power of two"):
        fn(torch.zeros(12))


def test_bad_degrees_and_junta_sizes():
    c = fourier_coefficients(majority(3))
    with pytest.raises(ValueError, match="degree must be an integer >= 0"):
        low_degree_weight(c, -1)
    with pytest.raises(TypeError, match="degree must be an integer"):
        low_degree_weight(c, 1.5)
    for k in (-1, 4):
        with pytest.raises(ValueError, match=r"k must be an integer in \[0, 3\]"):
            best_junta(c, k)
    with pytest.raises(ValueError, match="coeffs must be one function's spectrum"):
        best_junta(torch.stack([c, c]), 1)
    with pytest.raises(ValueError, match="values must be one truth table"):
        truth_table_function(torch.ones(2, 4))
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        krawtchouk_kernel(0, 1)
    with pytest.raises(ValueError, match="degree must be an integer >= 0"):
        krawtchouk_kernel(3, -1)


def _dictator(x):
    return x[:, 0]


ESTIMATORS = {
    "coefficients": lambda f, **kw: estimate_coefficients(f, 4, [(0,)], **kw),
    "influences": lambda f, **kw: estimate_influences(f, 4, **kw),
    "total_influence": lambda f, **kw: estimate_total_influence(f, 4, **kw),
    "low_degree_weight": lambda f, **kw: estimate_low_degree_weight(f, 4, 1, **kw),
}


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize(
    "f, kwargs, error, match",
    [
        (_dictator, {"samples": 1}, ValueError, "samples must be an integer >= 2"),
        (_dictator, {"samples": 0}, ValueError, "samples must be an integer >= 2"),
        (_dictator, {"samples": 100.0}, TypeError, "samples must be an integer"),
        (_dictator, {"level": 0.0}, ValueError, r"level must be in \(0, 1\)"),
        (_dictator, {"level": 1.0}, ValueError, r"level must be in \(0, 1\)"),
        (_dictator, {"level": 1.5}, ValueError, r"level must be in \(0, 1\)"),
        (_dictator, {"level": float("nan")}, ValueError, r"level must be in \(0, 1\)"),
        (_dictator, {"seed": -1}, ValueError, "seed must be an integer >= 0"),
        ("not a function", {}, TypeError, "f must be a callable"),
        (None, {}, TypeError, "f must be a callable"),
        (lambda x: x[:-1, 0], {"samples": 40}, ValueError, "f must return one value per point"),
        (lambda x: x, {"samples": 40}, ValueError, "f must return one value per point"),
        (lambda x: x[:, 0] * float("nan"), {"samples": 40}, ValueError, "f returned NaN"),
        (lambda x: x[:, 0] / 0.0, {"samples": 40}, ValueError, "f returned NaN or infinite"),
    ],
)
def test_bad_estimator_arguments(name, f, kwargs, error, match):
    with pytest.raises(error, match=match):
        ESTIMATORS[name](f, **kwargs)


def test_bad_estimator_specific_arguments():
    with pytest.raises(ValueError, match="n must be an integer in"):
        estimate_influences(_dictator, 0)
    with pytest.raises(ValueError, match="subsets entries must be an integer in"):
        estimate_coefficients(_dictator, 4, [(0, 4)])
    with pytest.raises(ValueError, match="subsets must name at least one subset"):
        estimate_coefficients(_dictator, 4, [])
    with pytest.raises(ValueError, match="batches must be an integer >= 2"):
        estimate_low_degree_weight(_dictator, 4, 1, batches=1)
    with pytest.raises(ValueError, match="samples must give each of the 20 batches at least 2 points"):
        estimate_low_degree_weight(_dictator, 4, 1, samples=39, batches=20)
    with pytest.raises(ValueError, match="degree must be an integer >= 0"):
        estimate_low_degree_weight(_dictator, 4, -1)
