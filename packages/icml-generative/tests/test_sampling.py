import itertools
import math

import pytest
import torch

from icml_generative.sampling import gaussian_mixture_score, karras_sigmas, sample_pf_ode, sliced_wasserstein

MEANS = [[0.0, 1.0, -1.0], [2.0, -0.5, 0.0], [-1.5, -1.0, 3.0]]  # (k=3, d=3)
STDS = [0.3, 0.7, 1.2]
WEIGHTS = [0.5, 0.2, 0.3]


def mixture_log_density(x: torch.Tensor, sigma: float) -> torch.Tensor:  # (n,), an independent reference
    var = torch.tensor(STDS, dtype=torch.float64) ** 2 + sigma**2
    components = torch.distributions.Independent(
        torch.distributions.Normal(
            torch.tensor(MEANS, dtype=torch.float64), var.sqrt()[:, None].expand(3, 3)
        ),
        1,
    )
    mixture = torch.distributions.Categorical(probs=torch.tensor(WEIGHTS, dtype=torch.float64))
    return torch.distributions.MixtureSameFamily(mixture, components).log_prob(x)


@pytest.mark.parametrize("sigma", [0.0, 0.05, 1.0, 20.0])
def test_mixture_score_matches_autograd_of_log_density(sigma):
    x = (
        3 * torch.randn(64, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ).requires_grad_()
    (grad,) = torch.autograd.grad(mixture_log_density(x, sigma).sum(), x)
    score = gaussian_mixture_score(MEANS, STDS, WEIGHTS)(x.detach(), sigma)
    torch.testing.assert_close(score, grad, rtol=1e-10, atol=1e-12)


def test_mixture_score_is_stable_far_from_every_mode():
    x = torch.tensor([[1e4, -1e4, 5e3]], dtype=torch.float64)
    score = gaussian_mixture_score(MEANS, STDS, WEIGHTS)(x, 0.0)
    # Far away the widest component owns all the mass: score = (μ - x) / s² of that component.
    expected = (torch.tensor(MEANS[2], dtype=torch.float64) - x) / STDS[2] ** 2
    torch.testing.assert_close(score, expected, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_are_the_float32_score_rounded(dtype):
    # x = 200 at s = 0.3: (x - mu)^2 / s^2 (4.4e5) overflows float16, the score (about -2200) does not
    score = gaussian_mixture_score([[2.0, 0.0], [-2.0, 0.0]], 0.3)
    x = torch.tensor([[200.0, 0.0], [3.0, 1.0]])
    out = score(x.to(dtype), 0.0)
    assert out.dtype == dtype and bool(torch.isfinite(out).all())
    assert torch.equal(out, score(x.to(dtype).float(), 0.0).to(dtype))


@pytest.mark.parametrize("offset", [0.0, 2.0**10, 2.0**14, 2.0**16])
def test_float32_score_does_not_depend_on_where_the_mixture_sits(offset):
    # the score depends on x − μ only; the old code rounded the float64 means to float32 before subtracting
    # (relative error 3.4e-6 at offset 0, 4.3e-4 at 2^10, 1.3e-2 at 2^16)
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(4, 2, generator=g, dtype=torch.float64) * 3 + offset
    x = torch.round(torch.randn(256, 2, generator=g, dtype=torch.float64) * 3 * 128) / 128 + offset
    assert torch.equal(x.float().double(), x)  # the same inputs in float32 and float64
    score = gaussian_mixture_score(mu, 1.0)
    got, want = score(x.float(), 0.1), score(x, 0.1)
    assert got.dtype == torch.float32
    error = ((got.double() - want).norm(dim=1) / want.norm(dim=1)).max().item()
    assert error < 3e-6  # measured: 1.9e-6 at every offset


def test_karras_sigmas_closed_form():
    sigmas = karras_sigmas(5, 0.002, 80.0, rho=7.0)
    assert sigmas.shape == (5,) and sigmas.dtype == torch.float64
    assert sigmas[0].item() == pytest.approx(80.0, rel=1e-14) and sigmas[-1].item() == pytest.approx(
        0.002, rel=1e-12
    )
    assert (sigmas[1:] < sigmas[:-1]).all()
    mid = ((80.0 ** (1 / 7) + 0.002 ** (1 / 7)) / 2) ** 7
    assert sigmas[2].item() == pytest.approx(mid, rel=1e-13)
    linear = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(karras_sigmas(4, 1.0, 4.0, rho=1.0), linear)


def single_gaussian_error(method: str, steps: int) -> float:
    """Max relative endpoint error on data N(0, s0²): the PF-ODE map is x_T sqrt((s0²+σ_min²)/(s0²+σ_max²))."""
    s0, sigma_min, sigma_max = 0.5, 0.002, 40.0
    x_T = torch.linspace(-80.0, 80.0, 11, dtype=torch.float64)[:, None]  # (11, 1)
    exact = x_T * math.sqrt((s0**2 + sigma_min**2) / (s0**2 + sigma_max**2))
    sigmas = karras_sigmas(steps + 1, sigma_min, sigma_max)
    x_0 = sample_pf_ode(gaussian_mixture_score([[0.0]], s0), x_T, sigmas, method)
    return ((x_0 - exact).abs().max() / exact.abs().max()).item()


@pytest.mark.parametrize(("method", "order"), [("euler", 1.0), ("heun", 2.0)])
def test_pf_ode_converges_on_a_single_gaussian_with_the_solver_order(method, order):
    errors = [single_gaussian_error(method, steps) for steps in (32, 64, 128)]
    assert errors[0] > errors[1] > errors[2]
    observed = [math.log2(a / b) for a, b in itertools.pairwise(errors)]
    assert observed == pytest.approx([order, order], abs=0.1)
    assert errors[-1] < (0.02 if method == "euler" else 1e-3)


def test_heun_beats_euler_per_evaluation_on_a_single_gaussian():
    assert single_gaussian_error("heun", 32) < single_gaussian_error("euler", 64)  # both 64 evaluations


def test_number_of_score_evaluations():
    calls = []

    def score(x, sigma):
        calls.append(sigma)
        return -x / (1.0 + sigma**2)

    x = torch.ones(4, 2)
    sample_pf_ode(score, x, [4.0, 2.0, 1.0], "euler")
    assert calls == [4.0, 2.0]
    calls.clear()
    sample_pf_ode(score, x, [4.0, 2.0, 1.0, 0.0], "heun")
    assert calls == [4.0, 2.0, 2.0, 1.0, 1.0]  # the last step, to σ = 0, is an Euler step


def test_pf_ode_keeps_shape_and_dtype():
    x = torch.randn(8, 2, dtype=torch.float32)
    out = sample_pf_ode(gaussian_mixture_score([[0.0, 0.0]], 1.0), x, karras_sigmas(5, 0.01, 10.0), "heun")
    assert out.shape == (8, 2) and out.dtype == torch.float32


def test_sliced_wasserstein_equals_brute_force_in_one_dimension():
    x = torch.tensor([[0.3], [-1.2], [2.0], [0.7], [-0.1]], dtype=torch.float64)
    y = torch.tensor([[1.1], [0.0], [-2.5], [0.4], [3.3]], dtype=torch.float64)
    brute = min(
        sum((x[i, 0] - y[j, 0]).item() ** 2 for i, j in enumerate(perm))
        for perm in itertools.permutations(range(5))
    )  # the best of all 120 couplings
    assert sliced_wasserstein(x, y, n_projections=3) == pytest.approx(math.sqrt(brute / 5), rel=1e-12)


def test_sliced_wasserstein_zero_and_shift():
    x = torch.randn(200, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert sliced_wasserstein(x, x[torch.randperm(200)]) == 0.0
    v = torch.tensor([3.0, 0.0], dtype=torch.float64)
    # Averaged over the whole circle, (θᵀv)² has mean |v|²/2.
    assert sliced_wasserstein(x, x + v, n_projections=20_000) == pytest.approx(3.0 / math.sqrt(2), rel=0.02)


def test_bad_input_raises():
    score = gaussian_mixture_score([[0.0, 0.0]], 1.0)
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="method"):
        sample_pf_ode(score, x, [2.0, 1.0], "rk4")
    with pytest.raises(ValueError, match="decreasing"):
        sample_pf_ode(score, x, [1.0, 2.0])
    with pytest.raises(ValueError, match="sigmas"):
        sample_pf_ode(score, x, [1.0])
    with pytest.raises(TypeError, match="x_T"):
        sample_pf_ode(score, torch.zeros(3, 2, dtype=torch.long), [2.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        sample_pf_ode(score, torch.full((3, 2), float("nan")), [2.0, 1.0])
    with pytest.raises(ValueError, match="score_fn"):
        sample_pf_ode(lambda x, s: x[:, :1], x, [2.0, 1.0])
    with pytest.raises(TypeError, match="score_fn"):
        sample_pf_ode("score", x, [2.0, 1.0])
    with pytest.raises(ValueError, match="n must"):
        karras_sigmas(1, 0.1, 1.0)
    with pytest.raises(ValueError, match="sigma_min < sigma_max"):
        karras_sigmas(5, 1.0, 1.0)
    with pytest.raises(ValueError, match="weights"):
        gaussian_mixture_score([[0.0], [1.0]], 1.0, [0.5, 0.6])
    with pytest.raises(ValueError, match="stds"):
        gaussian_mixture_score([[0.0], [1.0]], [1.0, -1.0])
    with pytest.raises(ValueError, match="means"):
        gaussian_mixture_score([0.0, 1.0], 1.0)
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        score(torch.zeros(3, 3), 1.0)
    with pytest.raises(ValueError, match="sigma"):
        score(x, -1.0)
    with pytest.raises(ValueError, match="same shape"):
        sliced_wasserstein(torch.zeros(3, 2), torch.zeros(4, 2))
