"""icml_stats.dp (Cond-DP): the conditioning matrix (labels never enter; identity Hessian), per-sample
gradients against a loop, clipping, C = I is DP-SGD to the bit, the opacus optimizer makes the same update,
the accountant against opacus and dp_accounting, the scikit-learn contract and bad input."""

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from icml_stats.dp import (  # noqa: E402
    CondDPRegressor,
    CondDPSGD,
    LaplaceLabelRegressor,
    calibrate_noise,
    conditioning_matrix,
    frequency_conditioning,
    privacy_spent,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def spectral(n=400, d=8, a=1.0, seed=0):
    rng = np.random.default_rng(seed)
    R = np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** (-a) @ R
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    return X, y


def test_conditioning_whitens_the_least_squares_hessian():
    X, _ = spectral(a=2.0)
    C = conditioning_matrix(X, normalize=None)
    np.testing.assert_allclose(C @ X.T @ X @ C, np.eye(X.shape[1]), atol=1e-8)
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    np.testing.assert_allclose(C, vt.T @ np.diag(1 / s) @ vt, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        conditioning_matrix(X, power=0.0, normalize=None), np.eye(X.shape[1]), atol=1e-12
    )
    # the regularized family: V (Sigma^2 + reg)^(-power/2) V^T
    np.testing.assert_allclose(
        conditioning_matrix(X, power=0.5, reg=0.3, normalize=None),
        vt.T @ np.diag((s**2 + 0.3) ** -0.25) @ vt,
        rtol=1e-7,
    )
    # rms normalization: conditioned features as long as the raw ones on average
    Cn = conditioning_matrix(X)
    assert np.linalg.norm(X @ Cn) == pytest.approx(np.linalg.norm(X), rel=1e-12)


def test_conditioning_reads_public_features_only():
    X, y = spectral()
    a = CondDPRegressor(noise_multiplier=1.0, epochs=1, random_state=0).fit(X, y)
    b = CondDPRegressor(noise_multiplier=1.0, epochs=1, random_state=0).fit(X, -3 * y + 7)
    assert not np.allclose(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.conditioning_, b.conditioning_)


def test_frequency_conditioning_is_the_svd_matrix_of_one_hot_features():
    rng = np.random.default_rng(1)
    X = np.eye(5)[rng.choice(5, size=300, p=[0.5, 0.3, 0.1, 0.07, 0.03])]
    np.testing.assert_allclose(
        frequency_conditioning(X, normalize=None), conditioning_matrix(X, normalize=None), atol=1e-10
    )
    np.testing.assert_allclose(np.diag(frequency_conditioning(X, normalize=None)), X.sum(0) ** -0.5)


def test_rank_deficient_features_are_regularized_with_a_warning():
    X, _ = spectral()
    X = np.hstack([X, X[:, :1]])  # a duplicated column
    with pytest.warns(RuntimeWarning, match="rank 8 < 9"):
        C = conditioning_matrix(X)
    assert np.isfinite(C).all()


def linear(d, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(d, 1, dtype=torch.float64)


def test_per_sample_gradients_match_a_loop():
    X, y = spectral(n=32)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    model = nn.Sequential(
        nn.Linear(8, 5, dtype=torch.float64), nn.Tanh(), nn.Linear(5, 1, dtype=torch.float64)
    )
    opt = CondDPSGD(model, lr=0.1, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=32)
    g = opt.per_sample_gradients(Xt, yt)
    for i in range(len(X)):
        model.zero_grad()
        (0.5 * (model(Xt[i : i + 1]).reshape(()) - yt[i]) ** 2).backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(g[name][i], p.grad, atol=1e-6, rtol=0)


def test_clipped_per_sample_gradients_have_norm_at_most_the_bound():
    X, y = spectral(n=64)
    opt = CondDPSGD(
        linear(8),
        lr=0.1,
        max_grad_norm=0.05,
        noise_multiplier=1.0,
        expected_batch_size=64,
        conditioning={"weight": conditioning_matrix(X)},
    )
    total = opt.clipped_sum(torch.as_tensor(X), torch.as_tensor(y))
    norm = torch.sqrt(sum((v**2).sum() for v in total.values()))
    assert norm <= 64 * 0.05 + 1e-9


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_batch_sum_is_formed_in_float32(dtype):
    """70,000 clipped gradients of -1 sum past float16's 65504: the sum, the noise and the division by the
    batch size run in float32 (the float16 sum was -inf, and the bias stepped to +inf without a word)."""
    n = 70_000
    model = nn.Linear(1, 1).to(dtype)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    x, y = torch.zeros(n, 1, dtype=dtype), torch.full((n, 1), 10.0, dtype=dtype)
    opt = CondDPSGD(
        model,
        lr=0.5,
        max_grad_norm=1.0,
        noise_multiplier=1.0,
        expected_batch_size=n,
        conditioning={"weight": np.eye(1)},
        generator=torch.Generator().manual_seed(0),
    )
    summed = opt.clipped_sum(x, y)
    assert summed["bias"].dtype == torch.float32
    assert float(summed["bias"]) == pytest.approx(-n, rel=2e-3)
    opt.step(x, y)
    assert model.bias.dtype == dtype and float(model.bias.detach()) == pytest.approx(0.5, abs=1e-3)
    assert torch.isfinite(model.weight).all()


def test_a_bfloat16_parameter_is_conditioned_in_float32():
    """C kept in bfloat16 (8-bit mantissa) moved the update of a bfloat16 model by 0.39 of its norm; C is now
    kept in float32 and both products with it run in float32: only the parameter's rounding is left."""
    rng = np.random.default_rng(0)
    n, d = 256, 8
    U, V = np.linalg.qr(rng.standard_normal((n, d)))[0], np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = (U * np.geomspace(1.0, 0.01, d)) @ V.T * np.sqrt(n)  # cond(X) = 100
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    C = conditioning_matrix(X)
    model = nn.Linear(d, 1, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        model.weight.zero_()
    opt = CondDPSGD(
        model,
        lr=1.0,
        max_grad_norm=1e6,  # no clipping
        noise_multiplier=0.0,
        expected_batch_size=n,
        conditioning={"weight": C},
    )
    xb, yb = torch.tensor(X, dtype=torch.bfloat16), torch.tensor(y, dtype=torch.bfloat16)
    g = (
        opt.per_sample_gradients(xb, yb)["weight"].double().numpy().reshape(n, d)
    )  # the model's bf16 gradients
    ref = (g @ C.T).sum(0) @ C / n  # the same update in float64
    opt.step(xb, yb)
    assert model.weight.dtype == torch.bfloat16
    got = -model.weight.detach().double().numpy().ravel()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 4e-3
    assert opt.conditioning["weight"].dtype == torch.float32


def run(conditioning, steps=20, seed=3):
    X, y = spectral(n=200)
    model = linear(8)
    gen = torch.Generator().manual_seed(seed)
    opt = CondDPSGD(
        model,
        lr=0.3,
        max_grad_norm=0.5,
        noise_multiplier=1.3,
        expected_batch_size=50,
        conditioning=conditioning,
        generator=gen,
    )
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    for _ in range(steps):
        idx = opt.poisson_batch(200, 0.25)
        opt.step(Xt[idx], yt[idx])
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_identity_conditioning_is_dp_sgd_to_the_bit():
    dpsgd = run(None)
    assert torch.equal(run({"weight": np.eye(8)}), dpsgd)
    assert not torch.equal(run({"weight": conditioning_matrix(spectral(n=200)[0])}), dpsgd)
    X, y = spectral(n=300)
    a = CondDPRegressor(conditioning="identity", noise_multiplier=1.0, random_state=5).fit(X, y)
    b = CondDPRegressor(conditioning=np.eye(8), noise_multiplier=1.0, random_state=5).fit(X, y)
    assert np.array_equal(a.coef_, b.coef_) and a.intercept_ == b.intercept_


def test_the_opacus_optimizer_makes_the_same_update():
    pytest.importorskip("opacus")
    from opacus import GradSampleModule

    from icml_stats.dp.opacus import CondDPOptimizer

    X, y = spectral(n=64)
    C = conditioning_matrix(X)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    ours = linear(8)
    theirs = GradSampleModule(linear(8))
    opt = CondDPSGD(
        ours,
        lr=0.3,
        max_grad_norm=0.5,
        noise_multiplier=1.1,
        expected_batch_size=64,
        conditioning={"weight": C},
        generator=torch.Generator().manual_seed(7),
    )
    dp_opt = CondDPOptimizer(
        torch.optim.SGD(theirs.parameters(), lr=0.3),
        conditioning={theirs._module.weight: C},
        noise_multiplier=1.1,
        max_grad_norm=0.5,
        expected_batch_size=64,
        generator=torch.Generator().manual_seed(7),
    )
    for _ in range(5):
        opt.step(Xt, yt)
        dp_opt.zero_grad()
        (0.5 * (theirs(Xt).reshape(-1) - yt) ** 2).mean().backward()  # opacus: mean loss, divided by B
        dp_opt.step()
    for p, q in zip(ours.parameters(), theirs._module.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-8, atol=1e-9)  # mean loss x B / B: rounding only
    with pytest.raises(ValueError, match="conditioning keys"):
        CondDPOptimizer(
            torch.optim.SGD(theirs.parameters(), lr=0.3),
            conditioning={torch.zeros(8): C},
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            expected_batch_size=64,
        )


@pytest.mark.parametrize(
    ("dtype", "bound"),
    # measured relative errors: bfloat16 1.6e-3 (the update's rounding to bfloat16 alone: 1.6e-3), float16
    # 2.2e-4 (alone: 2.2e-4); with C and the sums in the parameter's dtype they were 0.24 and 1.6e-2
    [(torch.bfloat16, 8e-3), (torch.float16, 1e-3)],
)
def test_the_opacus_optimizer_conditions_half_precision_in_float32(dtype, bound):
    """A half-precision model under opacus' GradSampleModule: C, the conditioned per-sample gradients,
    their clipped sum, the noise and the division by B are float32 as in CondDPSGD, so the update equals
    the same update computed in float64 from the model's own per-sample gradients and opacus' noise (the
    same generator) up to its rounding to the parameter's dtype."""
    pytest.importorskip("opacus")
    from opacus import GradSampleModule

    from icml_stats.dp.opacus import CondDPOptimizer

    rng = np.random.default_rng(0)
    n, d, c, sigma = 256, 8, 0.5, 0.5
    U, V = np.linalg.qr(rng.standard_normal((n, d)))[0], np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = (U * np.geomspace(1.0, 0.01, d)) @ V.T * np.sqrt(n)  # cond(X) = 100
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    C = conditioning_matrix(X)
    model = GradSampleModule(nn.Linear(d, 1, dtype=dtype))
    weight, bias = model._module.weight, model._module.bias
    with torch.no_grad():
        weight.zero_()
        bias.zero_()
    opt = CondDPOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0),
        conditioning={weight: C},
        noise_multiplier=sigma,
        max_grad_norm=c,
        expected_batch_size=n,
        generator=torch.Generator().manual_seed(3),
    )
    opt.zero_grad()
    (
        0.5 * (model(torch.tensor(X, dtype=dtype)).reshape(-1) - torch.tensor(y, dtype=dtype)) ** 2
    ).mean().backward()
    # the same update in float64: per-sample gradients (opacus stores those of the summed loss), conditioned,
    # clipped jointly, summed, noised with opacus' draws (float32, in parameter order), conditioned, over B
    gw = weight.grad_sample.double().numpy().reshape(n, d) @ C.T
    gb = bias.grad_sample.double().numpy().reshape(n)
    factor = np.minimum(1.0, c / (np.sqrt((gw**2).sum(1) + gb**2) + 1e-6))
    assert (factor < 1).mean() > 0.3  # clipping is active: measured 0.60
    draws = torch.Generator().manual_seed(3)
    noise = [
        torch.normal(0.0, sigma * c, size=p.shape, generator=draws).double().numpy() for p in (weight, bias)
    ]
    ref_w = ((factor @ gw + noise[0].ravel()) @ C / n).ravel()
    ref_b = (factor @ gb + noise[1].ravel()) / n
    opt.step()
    assert weight.dtype == dtype and weight.grad.dtype == dtype
    got = -np.concatenate([weight.detach().double().numpy().ravel(), bias.detach().double().numpy()])
    ref = np.concatenate([ref_w, ref_b])
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < bound  # measured and old: see above
    assert opt.conditioning[id(weight)].dtype == torch.float32


def ill_conditioned(n, d=8, seed=0):
    """Features with cond(X) = 100 and a linear target (the half-precision opacus test's data)."""
    rng = np.random.default_rng(seed)
    U, V = np.linalg.qr(rng.standard_normal((n, d)))[0], np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = (U * np.geomspace(1.0, 0.01, d)) @ V.T * np.sqrt(n)
    return X, X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)


def float64_update(grad_samples, C, noise, c, divisor):
    """The update of a DP step in float64 from opacus' per-sample gradients ``[(n, ...)]`` (the
    conditioned parameter first) and noise draws: G_i -> G_i C^T, joint clipping to ``c``, sum, noise,
    (...) C, divided by ``divisor`` (expected batch size x accumulated backward passes)."""
    g = [s.reshape(len(s), -1) for s in grad_samples]
    if C is not None:
        g[0] = g[0] @ C.T
    factor = np.minimum(1.0, c / (np.sqrt(sum((v**2).sum(1) for v in g)) + 1e-6))
    out = [factor @ v + z.ravel() for v, z in zip(g, noise, strict=True)]
    if C is not None:
        out[0] = out[0] @ C
    return np.concatenate(out) / divisor, (factor < 1).mean()


def accumulated_update(C, dtype, chunks, expected_batch_size, bias=True, plain=False):
    """``p.grad`` of one CondDPOptimizer (``plain``: DPOptimizer) step after one backward pass per chunk of
    64 samples (opacus' gradient accumulation), and the same update in float64 from the per-sample gradients
    and noise draws that opacus used."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    from icml_stats.dp.opacus import CondDPOptimizer

    X, y = ill_conditioned(64)
    c, sigma = 0.5, 0.5
    model = GradSampleModule(nn.Linear(8, 1, bias=bias, dtype=dtype))
    params = list(model.parameters())  # the weight first
    with torch.no_grad():
        for p in params:
            p.zero_()
    kwargs = dict(
        noise_multiplier=sigma,
        max_grad_norm=c,
        expected_batch_size=expected_batch_size,
        generator=torch.Generator().manual_seed(3),
    )
    sgd = torch.optim.SGD(params, lr=1.0)
    opt = DPOptimizer(sgd, **kwargs) if plain else CondDPOptimizer(sgd, conditioning={params[0]: C}, **kwargs)
    opt.zero_grad()
    Xt, yt = torch.tensor(X, dtype=dtype), torch.tensor(y, dtype=dtype)
    for idx in np.array_split(np.arange(64), chunks):
        (0.5 * (model(Xt[idx]).reshape(-1) - yt[idx]) ** 2).mean().backward()
    grad_samples = [torch.cat(list(p.grad_sample)).double().numpy() for p in params]  # a list of `chunks`
    wide = (
        torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    )  # opacus' draws (float32 for half)
    draws = torch.Generator().manual_seed(3)
    noise = [
        torch.normal(0.0, sigma * c, size=p.shape, generator=draws, dtype=wide).double().numpy()
        for p in params
    ]
    opt.step()
    ref, clipped = float64_update(grad_samples, None if plain else C, noise, c, expected_batch_size * chunks)
    return torch.cat([p.grad.reshape(-1) for p in params]), ref, clipped


@pytest.mark.parametrize(
    ("dtype", "bound"),
    # measured relative errors to float64 (the one-step update's are the same): float32 1.8e-6 (no bias
    # 2.5e-6; C amplifies float32 rounding, cond(X) = 100), bfloat16 2.7e-4 (no bias 1.0e-3), float16 2.5e-4
    # (no bias 2.8e-4), with a bias the reference's own rounding to the dtype; the old code raised "Number of
    # accumulated steps is inconsistent across parameters", and without a bias (every parameter conditioned)
    # divided by B instead of 2B: 1.0 (an update 2x too large)
    [(torch.float32, 1e-5), (torch.bfloat16, 8e-3), (torch.float16, 1e-3)],
)
def test_the_opacus_optimizer_accumulates_gradients_like_opacus(dtype, bound):
    """Two backward passes, then one step (opacus' gradient accumulation: p.grad_sample holds a list, one
    tensor per pass): the update is the one of a single step over the concatenated batch, equals the same
    update in float64, and with C = I is plain DPOptimizer's to the bit."""
    pytest.importorskip("opacus")
    C = conditioning_matrix(ill_conditioned(64)[0])
    got, ref, clipped = accumulated_update(C, dtype, 2, 32)
    assert clipped > 0.3  # clipping is active: measured 0.75
    assert np.linalg.norm(got.double().numpy() - ref) / np.linalg.norm(ref) < bound
    one, _, _ = accumulated_update(C, dtype, 1, 64)
    assert torch.equal(got, one)  # measured: bit-identical (per-sample gradients of 32 + 32 and 64 agree)
    got, ref, _ = accumulated_update(C, dtype, 2, 32, bias=False)
    assert np.linalg.norm(got.double().numpy() - ref) / np.linalg.norm(ref) < bound
    if dtype == torch.float32:  # half precision: opacus sums in the parameter's dtype, we in float32
        assert torch.equal(
            accumulated_update(np.eye(8), dtype, 2, 32)[0],
            accumulated_update(None, dtype, 2, 32, plain=True)[0],
        )


def test_the_opacus_optimizer_refuses_gradients_used_in_a_step():
    """opacus refuses to use per-sample gradients twice (no zero_grad between steps); a conditioned
    parameter's are refused too, also where every parameter is conditioned (the old code conditioned them
    again into a new tensor that passed opacus' check, and summed them twice)."""
    pytest.importorskip("opacus")
    from opacus import GradSampleModule

    from icml_stats.dp.opacus import CondDPOptimizer

    model = GradSampleModule(nn.Linear(4, 1, bias=False))
    opt = CondDPOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        conditioning={model._module.weight: 2 * np.eye(4)},
        noise_multiplier=0.0,
        max_grad_norm=1.0,
        expected_batch_size=8,
    )
    model(torch.randn(8, 4)).sum().backward()
    opt.signal_skip_step(True)  # as BatchMemoryManager does within a logical batch
    opt.step()
    with pytest.raises(ValueError, match="haven't been cleared"):
        opt.step()


@pytest.mark.parametrize(
    ("dtype", "bound"),
    # measured relative errors to float64, largest over 3 logical batches: float32 8.4e-7, bfloat16 1.4e-3
    # (float16 2.2e-4); the same on the old code (BatchMemoryManager clears p.grad_sample after each physical
    # batch and sums into p.summed_grad: no list of accumulated passes)
    [(torch.float32, 1e-5), (torch.bfloat16, 8e-3)],
)
def test_the_opacus_optimizer_under_batch_memory_manager(dtype, bound):
    """opacus' large-batch recipe: make_private with Poisson sampling, then BatchMemoryManager splits each
    logical batch into physical ones of at most 8 and sums their clipped gradients: each logical step
    equals the same update in float64 from the physical batches' per-sample gradients, and with C = I
    plain DPOptimizer's to the bit. The privacy engine's hook counts logical steps only."""
    opacus = pytest.importorskip("opacus")
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    from torch.utils.data import DataLoader, TensorDataset

    from icml_stats.dp.opacus import CondDPOptimizer

    X, y = ill_conditioned(96)
    C = conditioning_matrix(X)
    c, sigma = 0.5, 0.5

    def train(C, steps=3):
        torch.manual_seed(11)  # opacus' Poisson sampler draws from torch's global generator
        engine = opacus.PrivacyEngine(accountant="rdp")
        module = nn.Linear(8, 1, dtype=dtype)
        with torch.no_grad():
            for p in module.parameters():
                p.zero_()
        noise_gen = torch.Generator().manual_seed(3)
        model, optimizer, loader = engine.make_private(
            module=module,
            optimizer=torch.optim.SGD(module.parameters(), lr=1.0),
            data_loader=DataLoader(
                TensorDataset(torch.tensor(X, dtype=dtype), torch.tensor(y, dtype=dtype)), batch_size=32
            ),
            noise_multiplier=sigma,
            max_grad_norm=c,
            poisson_sampling=True,
            noise_generator=noise_gen,
        )
        if C is not None:
            optimizer = CondDPOptimizer.from_dp_optimizer(optimizer, {model._module.weight: C})
        params = list(model.parameters())
        grads, errors, physical = [], [], 0
        samples, state = [[] for _ in params], noise_gen.get_state()
        with BatchMemoryManager(
            data_loader=loader, max_physical_batch_size=8, optimizer=optimizer
        ) as batches:
            for xb, yb in batches:
                (0.5 * (model(xb).reshape(-1) - yb) ** 2).mean().backward()
                for s, p in zip(samples, params, strict=True):
                    s.append(p.grad_sample.double().numpy())
                physical += 1
                optimizer.step()
                if not optimizer._is_last_step_skipped:  # the logical batch's step
                    draws = torch.Generator()
                    draws.set_state(state)
                    noise = [
                        torch.normal(0.0, sigma * c, size=p.shape, generator=draws).double().numpy()
                        for p in params
                    ]
                    ref, _ = float64_update(
                        [np.concatenate(s) for s in samples], C, noise, c, optimizer.expected_batch_size
                    )
                    got = torch.cat([p.grad.reshape(-1) for p in params])
                    grads.append(got.clone())
                    errors.append(np.linalg.norm(got.double().numpy() - ref) / np.linalg.norm(ref))
                    samples, state = [[] for _ in params], noise_gen.get_state()
                    if len(grads) == steps:
                        break
                optimizer.zero_grad()
        return grads, errors, physical, sum(h[2] for h in engine.accountant.history)

    _, errors, physical, counted = train(C)
    assert physical >= 2 * 3  # several physical batches per logical one: measured 12 for 3
    assert counted == 3  # the accountant's steps: logical ones
    assert max(errors) < bound
    if dtype == torch.float32:
        identity, plain = train(np.eye(8))[0], train(None)[0]
        assert all(torch.equal(a, b) for a, b in zip(identity, plain, strict=True))


def test_accountant_matches_opacus_and_dp_accounting():
    rdp = pytest.importorskip("opacus.accountants")
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    q, sigma, steps, delta = 0.05, 1.0, 100, 1e-5
    ours = privacy_spent(sigma, q, steps, delta, "add-remove")
    acc = rdp.RDPAccountant()
    acc.history = [(sigma, q, steps)]
    opacus_rdp = acc.get_epsilon(delta)
    pld = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    pld.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    # the optimal conversion of the same RDP curve: tighter than opacus' RDP conversion, looser than PLD
    assert pld.get_epsilon(delta) <= ours <= opacus_rdp
    assert ours == pytest.approx(pld.get_epsilon(delta), rel=0.2)
    # label DP (replace one label): dp_accounting's REPLACE_ONE PLD of the same pair
    replace = privacy_spent(sigma, q, steps, delta, "replace-one")
    pld = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE)
    pld.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    assert pld.get_epsilon(delta) <= replace == pytest.approx(pld.get_epsilon(delta), rel=0.2)
    assert replace > ours


def test_regressor_meets_its_privacy_target_and_fits():
    X, y = spectral(n=2000, a=0.5)
    m = CondDPRegressor(epsilon=4.0, batch_size=200, epochs=5, random_state=0).fit(X, y)
    assert m.steps_ == 50 and m.sample_rate_ == 0.1 and m.delta_ == 1 / 2000
    assert m.noise_multiplier_ == calibrate_noise(4.0, 1 / 2000, 0.1, 50, "replace-one")
    assert privacy_spent(m.noise_multiplier_, 0.1, 50, 1 / 2000, "replace-one") <= 4.0
    assert m.score(X, y) > 0.5
    lap = LaplaceLabelRegressor(epsilon=4.0, label_bound=3.0, random_state=0).fit(X, y)
    assert lap.score(X, y) > 0.0


def test_scikit_learn_estimator_checks():
    for est in (CondDPRegressor(noise_multiplier=1.0, epochs=2, batch_size=16), LaplaceLabelRegressor()):
        results = check_estimator(est, on_fail=None)
        failed = [r["check_name"] for r in results if r["status"] == "failed"]
        assert failed == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"epsilon": -1.0}, ValueError, "epsilon"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"conditioning": "pca"}, ValueError, "conditioning"),
        ({"conditioning": np.eye(3)}, ValueError, "conditioning"),
        ({"relation": "swap"}, ValueError, "relation"),
    ],
)
def test_bad_parameters_are_named(kwargs, error, match):
    X, y = spectral(n=50)
    with pytest.raises(error, match=match):
        CondDPRegressor(**kwargs).fit(X, y)


def test_bad_features_are_named():
    X, y = spectral(n=50)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CondDPRegressor(noise_multiplier=1.0).fit(Xn, y)
    with pytest.raises(ValueError, match="X"):
        conditioning_matrix(X[:, 0])
    with pytest.raises(ValueError, match="X"):
        conditioning_matrix(Xn)
    m = CondDPRegressor(noise_multiplier=1.0, epochs=1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :3])
    with pytest.raises(ValueError, match="conditioning"):
        CondDPSGD(
            linear(8),
            lr=0.1,
            max_grad_norm=1.0,
            noise_multiplier=1.0,
            expected_batch_size=8,
            conditioning={"weight": np.eye(3)},
        )
    with pytest.raises(ValueError, match="bias2"):
        CondDPSGD(
            linear(8),
            lr=0.1,
            max_grad_norm=1.0,
            noise_multiplier=1.0,
            expected_batch_size=8,
            conditioning={"bias2": np.eye(8)},
        )
    with pytest.raises(ValueError, match="one-hot"):
        frequency_conditioning(X)


def test_the_opacus_optimizer_plugs_into_privacy_engine():
    """The integration opacus users run: PrivacyEngine.make_private, then conditioning; the accountant's
    hook carries over (epsilon grows with the steps) and the conditioned model learns."""
    opacus = pytest.importorskip("opacus")
    from torch.utils.data import DataLoader, TensorDataset

    from icml_stats.dp.opacus import CondDPOptimizer

    X, y = spectral(n=512, a=1.0)
    data = TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
    engine = opacus.PrivacyEngine(accountant="rdp")
    module = linear(8)
    model, optimizer, loader = engine.make_private(
        module=module,
        optimizer=torch.optim.SGD(module.parameters(), lr=0.5),
        data_loader=DataLoader(data, batch_size=64),
        noise_multiplier=0.5,
        max_grad_norm=1.0,
    )
    with pytest.raises(TypeError, match="optimizer"):
        CondDPOptimizer.from_dp_optimizer(optimizer.original_optimizer, {})
    cond = CondDPOptimizer.from_dp_optimizer(optimizer, {model._module.weight: conditioning_matrix(X)})
    assert cond.noise_multiplier == 0.5 and cond.expected_batch_size == optimizer.expected_batch_size
    first = None
    for _ in range(3):
        for xb, yb in loader:
            cond.zero_grad()
            (0.5 * (model(xb).reshape(-1) - yb) ** 2).mean().backward()
            cond.step()
        eps = engine.get_epsilon(1e-5)
        assert first is None or eps > first
        first = first or eps
    pred = model(torch.as_tensor(X)).detach().numpy().reshape(-1)
    assert 1 - np.mean((pred - y) ** 2) / np.var(y) > 0.5
