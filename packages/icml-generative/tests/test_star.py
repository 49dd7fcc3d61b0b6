"""STAR: the loss and its diagnostics against torch.distributions, the Mamba scan against its recurrence,
the VAE and the flow model (round trips, save/load), diffusers' AutoencoderOobleck, logit-normal times."""

import math

import numpy as np
import pytest
import torch
from diffusers import AutoencoderOobleck
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from icml_generative.sampling import frechet_distance
from icml_generative.star import (
    STARVAE,
    BiMamba,
    LatentFlowTransformer,
    Mamba,
    STARLoss,
    beta_schedule,
    channel_correlation,
    channel_ordering,
    flow_matching_loss,
    latent_correlation,
    logit_normal_times,
    matched_uniform_beta,
    per_channel_kl,
    sample_flow,
    selective_scan,
    selective_scan_reference,
    si_sdr,
    spectral_features,
    stft_distance,
    truncate_channels,
    truncation_curve,
)

# ---- the loss -----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    channels=st.integers(2, 40),
    beta_min=st.floats(0, 1),
    span=st.floats(0, 2),
    gamma=st.floats(0.1, 5),
)
def test_beta_schedule_monotone_with_endpoints(channels, beta_min, span, gamma):
    betas = beta_schedule(channels, beta_min, beta_min + span, gamma)
    assert betas.shape == (channels,)
    assert betas[0].item() == pytest.approx(beta_min, abs=1e-15)
    assert betas[-1].item() == pytest.approx(beta_min + span, rel=1e-12, abs=1e-15)
    assert (betas.diff() >= -1e-15).all()
    u = np.arange(channels) / (channels - 1)
    np.testing.assert_allclose(betas.numpy(), beta_min + span * u**gamma, rtol=1e-12, atol=1e-15)
    assert matched_uniform_beta(channels, beta_min, beta_min + span, gamma) == pytest.approx(
        float(betas.mean())
    )


def test_beta_schedule_shape_of_gamma():
    """γ > 1 convex (below the line), γ = 1 linear, γ < 1 concave; one channel gets beta_min."""
    line = beta_schedule(9, 0.0, 1.0, 1.0)
    assert torch.allclose(line, torch.linspace(0, 1, 9, dtype=torch.float64))
    assert (beta_schedule(9, 0.0, 1.0, 2.0)[1:-1] < line[1:-1]).all()
    assert (beta_schedule(9, 0.0, 1.0, 0.5)[1:-1] > line[1:-1]).all()
    assert beta_schedule(1, 0.3, 0.9).tolist() == [0.3]


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 4),
    channels=st.integers(1, 6),
    length=st.integers(1, 7),
    seed=st.integers(0, 2**31 - 1),
    reduction=st.sampled_from(["sum", "mean"]),
)
def test_per_channel_kl_equals_torch_distributions(batch, channels, length, seed, reduction):
    gen = torch.Generator().manual_seed(seed)
    mean = 2 * torch.randn(batch, channels, length, generator=gen, dtype=torch.float64)
    logvar = 3 * torch.randn(batch, channels, length, generator=gen, dtype=torch.float64)
    q = torch.distributions.Normal(mean, (0.5 * logvar).exp())
    prior = torch.distributions.Normal(torch.zeros_like(mean), torch.ones_like(mean))
    exact = torch.distributions.kl_divergence(q, prior)  # (b, c, l)
    want = exact.sum(2).mean(0) if reduction == "sum" else exact.mean(2).mean(0)
    for posterior in (q, (mean, logvar)):
        got = per_channel_kl(posterior, reduction=reduction)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    total = exact.sum((1, 2)).mean(0) if reduction == "sum" else exact.mean(2).sum(1).mean(0)
    torch.testing.assert_close(per_channel_kl(q, reduction=reduction).sum(), total, rtol=1e-10, atol=1e-10)
    # the channel axis may be last
    torch.testing.assert_close(
        per_channel_kl((mean.transpose(1, 2), logvar.transpose(1, 2)), channel_dim=-1, reduction=reduction),
        want,
    )


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_per_channel_kl_of_half_precision_moments_is_computed_in_float32(dtype, reduction):
    # channels near the prior (μ, log σ² ≈ 0): σ² − log σ² − 1 cancels; in bfloat16 the old KL of the last
    # channel was off by 64 % (fp16: 1.2 %)
    g = torch.Generator().manual_seed(0)
    scale = torch.linspace(1.0, 0.02, 16)[None, :, None]
    mean = (torch.randn(4, 16, 250, generator=g) * scale).to(dtype)
    logvar = (torch.randn(4, 16, 250, generator=g) * scale - 3 * scale).to(dtype)
    half = per_channel_kl((mean, logvar), reduction=reduction)
    expect = per_channel_kl((mean.float(), logvar.float()), reduction=reduction)
    assert half.dtype == dtype
    # against float32 on the same rounded moments: the float32 result, rounded once (measured: 0.39 eps)
    assert torch.equal(half, expect.to(dtype))
    torch.testing.assert_close(half.float(), expect, rtol=torch.finfo(dtype).eps / 2, atol=0)


@pytest.mark.usefixtures("one_torch_thread")
def test_per_channel_kl_of_float32_channels_near_the_prior_does_not_cancel():
    # moments within sd of the prior's (0, 0): σ² − log σ² − 1 as lv.exp() − lv − 1 cancelled in float32 (old:
    # relative error 3e-4 at sd 1e-3, 1.03 at 1e-4, a negative KL at 3e-5; the gradient's relative error 1.0)
    g = torch.Generator().manual_seed(0)
    sd = torch.tensor([1e-1, 1e-2, 1e-3, 1e-4, 3e-5], dtype=torch.float64)[None, :, None]
    mean = (torch.randn(16, 5, 256, generator=g, dtype=torch.float64) * sd).float()
    logvar = (torch.randn(16, 5, 256, generator=g, dtype=torch.float64) * sd).float().requires_grad_()
    m, lv = mean.double(), logvar.detach().double()
    want = (0.5 * (m.square() + torch.expm1(lv) - lv)).mean(2).mean(0)  # float64 on the same float32 moments
    kl = per_channel_kl((mean, logvar))
    assert kl.dtype == torch.float32 and bool((kl > 0).all())
    torch.testing.assert_close(kl.double(), want, rtol=1e-7, atol=0)  # measured: 4.8e-8
    loss = STARLoss(5, 1.0, 1.0)((mean, logvar))
    assert loss.dtype == torch.float32 and loss.item() > 0
    assert abs(loss.item() / want.sum().item() - 1) < 1e-7  # measured: 2.8e-8 (old 1.6e-6)
    loss.backward()
    grad = 0.5 * torch.expm1(lv) / (16 * 256)  # d KL / d logvar
    torch.testing.assert_close(logvar.grad.double(), grad, rtol=1e-6, atol=0)  # measured: 5.6e-7


def test_star_loss_with_equal_betas_is_the_beta_vae_loss():
    gen = torch.Generator().manual_seed(0)
    mean, logvar = torch.randn(3, 8, 5, generator=gen), torch.randn(3, 8, 5, generator=gen)
    q = torch.distributions.Normal(mean, (0.5 * logvar).exp())
    elementwise = torch.distributions.kl_divergence(q, torch.distributions.Normal(0.0, 1.0))
    kl = elementwise.mean(2).sum(1).mean()  # nats per frame (the default reduction), summed over channels
    torch.testing.assert_close(STARLoss(8, 0.25, 0.25, 3.0)(q), 0.25 * kl)
    torch.testing.assert_close(STARLoss.uniform(8, 0.25)((mean, logvar)), 0.25 * kl)
    per_example = elementwise.sum((1, 2)).mean()
    torch.testing.assert_close(STARLoss(8, 0.25, 0.25, reduction="sum")(q), 0.25 * per_example)
    star, matched = STARLoss(8), STARLoss.matched_uniform(8)
    assert torch.allclose(star.betas.sum(), matched.betas.sum())
    weighted = (beta_schedule(8).float() * per_channel_kl(q)).sum()
    torch.testing.assert_close(star(q), weighted)


def test_star_loss_gradient_pushes_high_channels_harder():
    mean = torch.ones(2, 4, 3, requires_grad=True)
    STARLoss(4, 0.0, 1.0, 2.0)((mean, torch.zeros(2, 4, 3))).backward()
    grads = mean.grad.abs().sum((0, 2))
    assert grads[0] == 0 and (grads.diff() > 0).all()


def test_channel_correlation_and_lc():
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(200, 1, 10, generator=gen, dtype=torch.float64)
    z = torch.cat([base, -2 * base, torch.randn(200, 1, 10, generator=gen, dtype=torch.float64)], 1)
    corr = channel_correlation(z)
    assert corr[0, 1].item() == pytest.approx(-1.0) and abs(corr[0, 2].item()) < 0.05
    np.testing.assert_allclose(
        corr.numpy(), np.corrcoef(z.transpose(0, 1).reshape(3, -1).numpy()), atol=1e-12
    )
    assert latent_correlation(z) == pytest.approx((1 + abs(corr[0, 2].item()) + abs(corr[1, 2].item())) / 3)
    with pytest.warns(RuntimeWarning, match="constant"):
        corr = channel_correlation(torch.cat([z, torch.ones(200, 1, 10, dtype=torch.float64)], 1))
    assert corr[3, :3].abs().max() == 0 and corr[3, 3] == 1


def test_channel_ordering_and_truncation():
    assert channel_ordering(torch.tensor([5.0, 3.0, 2.0, 0.1])) == pytest.approx(-1.0)
    assert channel_ordering([0.1, 0.2, 0.3]) == pytest.approx(1.0)
    z = torch.arange(24.0).reshape(2, 4, 3) + 1
    cut = truncate_channels(z, 2)
    assert (cut[:, :2] == z[:, :2]).all() and (cut[:, 2:] == 0).all()
    assert (truncate_channels(z, 4) == z).all()
    # decode = identity, distance = squared error: the curve is the energy of the dropped channels
    curve = truncation_curve(lambda v: v, z, z, lambda a, b: ((a - b) ** 2).sum())
    assert curve[4] == 0 and curve[3] == float((z[:, 3] ** 2).sum())
    assert list(curve) == [1, 2, 3, 4] and all(
        a > b for a, b in zip(curve.values(), list(curve.values())[1:], strict=False)
    )


# ---- audio metrics --------------------------------------------------------------------------------------------


def test_stft_distance_and_si_sdr_known_values():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1, 4096, generator=gen, dtype=torch.float64)
    assert stft_distance(x, x).abs().max() < 1e-12
    noisy = x + 0.1 * torch.randn(x.shape, generator=gen, dtype=torch.float64)
    assert (stft_distance(noisy, x) > 0).all() and (
        stft_distance(x + 1.0 * noisy, x) > stft_distance(noisy, x)
    ).all()
    # SI-SDR: scale invariant, and 10 log10(|x|² / |e|²) for an orthogonal error e
    assert torch.allclose(si_sdr(3 * noisy, x), si_sdr(noisy, x))
    e = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    e = e - e.mean(-1, keepdim=True)
    xc = x - x.mean(-1, keepdim=True)
    e = e - (e * xc).sum(-1, keepdim=True) / (xc * xc).sum(-1, keepdim=True) * xc
    e = 0.1 * e / e.norm(dim=-1, keepdim=True) * xc.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(si_sdr(xc + e, xc), torch.full((3,), 20.0, dtype=torch.float64))
    # (B, T) and (B, 1, T) agree
    torch.testing.assert_close(stft_distance(noisy[:, 0], x[:, 0]), stft_distance(noisy, x))
    features = spectral_features(x)
    assert features.shape == (3, 64) and torch.isfinite(features).all()


def test_frechet_distance_closed_form():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 3, generator=gen, dtype=torch.float64)
    assert frechet_distance(x, x) == pytest.approx(0.0, abs=1e-9)
    shifted = x + torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64)
    assert frechet_distance(x, shifted) == pytest.approx(5.0, rel=1e-9)
    # x against 2x: ‖m - 2m‖² + tr(Σ + 4Σ - 2·2Σ) from the sample mean m and covariance Σ
    cov = torch.cov(x.T)
    want = float((x.mean(0) ** 2).sum() + cov.trace() + (4 * cov).trace() - 2 * (2 * cov).trace())
    assert frechet_distance(x, 2 * x) == pytest.approx(want, rel=1e-9)
    assert frechet_distance(x, 2 * x) == pytest.approx(frechet_distance(2 * x, x), rel=1e-12)


# ---- Mamba ---------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 5),
    state=st.integers(1, 4),
    length=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
)
def test_parallel_scan_equals_recurrence(batch, channels, state, length, seed):
    gen = torch.Generator().manual_seed(seed)
    kw = {"generator": gen, "dtype": torch.float64}
    u, delta = (
        torch.randn(batch, channels, length, **kw),
        torch.nn.functional.softplus(torch.randn(batch, channels, length, **kw)),
    )
    A = -torch.exp(torch.randn(channels, state, **kw))
    B, C = torch.randn(batch, state, length, **kw), torch.randn(batch, state, length, **kw)
    D = torch.randn(channels, **kw)
    torch.testing.assert_close(
        selective_scan(u, delta, A, B, C, D),
        selective_scan_reference(u, delta, A, B, C, D),
        rtol=1e-10,
        atol=1e-10,
    )


def test_bimamba_block_parallel_equals_sequential_scan_float32():
    torch.manual_seed(0)
    block = BiMamba(32, scan="parallel")
    x = torch.randn(3, 70, 32)
    y = block(x)
    for mixer in (block.forward_mixer, block.backward_mixer):
        mixer.scan = "sequential"
    assert (block(x) - y).abs().max().item() <= 1e-5
    # the backward mixer sees the future: changing the last step changes the first output
    x2 = x.clone()
    x2[:, -1] = torch.randn(3, 32)  # (a constant shift would vanish in the LayerNorm)
    assert (block(x2)[:, -5] - block(x)[:, -5]).abs().max() > 1e-6
    # a forward-only Mamba is causal
    mixer = Mamba(32)
    assert torch.equal(mixer(x)[:, :-1], mixer(x2)[:, :-1])


# ---- the VAE and the flow model ---------------------------------------------------------------------------


def tiny_vae(**kw):
    cfg = {"latent_channels": 4, "base_channels": 4, "channel_multiples": (1, 2), "strides": (4, 5)}
    return STARVAE(**{**cfg, **kw})


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("storage", [torch.bfloat16, torch.float8_e4m3fn])
def test_vae_under_layerwise_casting_runs_as_the_rounded_model(storage):
    # diffusers' enable_layerwise_casting stores the weights in bfloat16 / float8 and computes in float32: the
    # input check wanted the storage dtype (float32 audio: "audio must have the model's dtype torch.bfloat16"),
    # and audio in the storage dtype then failed in the first convolution (bias float). The VAE now takes
    # audio in the compute dtype and equals a hook-free VAE holding the same rounded weights (measured: 0.0).
    torch.manual_seed(0)
    cast = tiny_vae(mamba_layers=1).eval()
    cast.enable_layerwise_casting(storage_dtype=storage, compute_dtype=torch.float32)
    rounded = tiny_vae(mamba_layers=1).eval()
    rounded.load_state_dict({k: v.float() for k, v in cast.state_dict().items()})
    audio = torch.randn(2, 1, 400, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = cast(audio, sample_posterior=False)
        expected = rounded(audio, sample_posterior=False)
    assert torch.equal(out.sample, expected.sample) and torch.equal(out.latents, expected.latents)
    assert cast.encoder_in.weight.dtype == storage  # still stored rounded
    with pytest.raises(TypeError, match=r"audio must have the model's dtype torch.float32, got"):
        cast(audio.to(storage))  # the storage dtype is not what it computes in


@pytest.mark.parametrize("mamba_layers", [0, 1])
def test_vae_shapes_training_step_and_save_load(tmp_path, mamba_layers):
    torch.manual_seed(0)
    vae = tiny_vae(mamba_layers=mamba_layers)
    assert vae.hop_length == 20
    audio = torch.randn(2, 1, 200)
    out = vae(audio, generator=torch.Generator().manual_seed(0))
    assert out.sample.shape == audio.shape and out.latents.shape == (2, 4, 10)
    loss = stft_distance(out.sample, audio, (64, 32)).mean() + STARLoss(4)(out.latent_dist)
    loss.backward()
    assert all(p.grad is not None for p in vae.parameters())
    vae.eval()
    vae.save_pretrained(tmp_path)
    loaded = STARVAE.from_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(
            loaded(audio, sample_posterior=False).sample, vae(audio, sample_posterior=False).sample
        )
    assert loaded.config.strides == [4, 5]


@pytest.mark.parametrize("low_cpu_mem_usage", [True, False])
def test_vae_from_pretrained_in_bfloat16_casts_every_parameter(tmp_path, low_cpu_mem_usage):
    # diffusers builds the model under torch_dtype and, with low_cpu_mem_usage=False, copies the weights into
    # it: Mamba's A_log, made float32 explicitly, stayed float32 and the forward refused bfloat16 input
    torch.manual_seed(0)
    tiny_vae(mamba_layers=1).save_pretrained(tmp_path)
    loaded = STARVAE.from_pretrained(
        tmp_path, torch_dtype=torch.bfloat16, low_cpu_mem_usage=low_cpu_mem_usage
    ).eval()
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    reference = STARVAE.from_pretrained(tmp_path).eval()  # float32, rounded to bfloat16 below
    reference.load_state_dict({k: v.bfloat16().float() for k, v in loaded.state_dict().items()})
    audio = torch.randn(2, 1, 200, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = loaded(audio.bfloat16(), sample_posterior=False).sample
        ref = reference(audio.bfloat16().float(), sample_posterior=False).sample
    assert out.dtype == torch.bfloat16
    err = ((out.float() - ref).norm() / ref.norm()).item()
    # measured 5.7e-3 (bfloat16 activations against float32 ones, the same bfloat16-rounded weights)
    assert err < 0.03, err


def test_flow_model_save_load_context_mask_and_sampling(tmp_path):
    torch.manual_seed(0)
    model = LatentFlowTransformer(latent_channels=4, max_frames=8, width=16, layers=2, heads=2, context_dim=6)
    torch.nn.init.normal_(
        model.latent_out.weight, std=0.1
    )  # zero-initialised output: make it depend on input
    z, ctx = torch.randn(2, 4, 8), torch.randn(2, 3, 6)
    v = model(z, torch.tensor([0.2, 0.7]), context=ctx)
    assert v.shape == z.shape
    # the hybrid mask: a padded context token does not change the latents' velocity
    mask = torch.tensor([[True, True, False], [True, True, True]])
    ctx2 = ctx.clone()
    ctx2[0, 2] += 5
    va = model(z, torch.tensor([0.2, 0.7]), context=ctx, context_mask=mask)
    vb = model(z, torch.tensor([0.2, 0.7]), context=ctx2, context_mask=mask)
    torch.testing.assert_close(va[0], vb[0])
    assert not torch.allclose(model(z, 0.2, context=ctx2)[0], model(z, 0.2, context=ctx)[0])
    model.save_pretrained(tmp_path)
    loaded = LatentFlowTransformer.from_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(z, 0.3, context=ctx), model(z, 0.3, context=ctx))
    loss = flow_matching_loss(model, z, context=ctx, generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert math.isfinite(loss.item())
    out = sample_flow(model, torch.randn(2, 4, 8), steps=4, method="heun", context=ctx)
    assert out.shape == (2, 4, 8) and torch.isfinite(out).all()


class _ConstantVelocity(torch.nn.Module):
    def __init__(self, v):
        super().__init__()
        self.v = v

    def forward(self, z, t):
        return self.v.expand_as(z)


def test_sample_flow_integrates_exactly_for_constant_and_linear_fields():
    v = torch.tensor([[[1.0], [-2.0]]])
    z0 = torch.zeros(3, 2, 1)
    torch.testing.assert_close(sample_flow(_ConstantVelocity(v), z0, steps=3), z0 + v)

    class TimeLinear(torch.nn.Module):
        def forward(self, z, t):
            return t[:, None, None].expand_as(z).clone()  # dz/dt = t: z(1) = z(0) + 1/2

    assert torch.allclose(sample_flow(TimeLinear(), z0, steps=5, method="heun"), z0 + 0.5)
    assert not torch.allclose(sample_flow(TimeLinear(), z0, steps=5, method="euler"), z0 + 0.5)


def test_flow_matching_learns_a_point_mass():
    """On data concentrated at one point the optimal velocity carries noise there: sampling lands near it."""
    torch.manual_seed(0)
    target = torch.tensor([[[2.0, -1.0]]]).expand(256, 1, 2)
    model = LatentFlowTransformer(latent_channels=1, max_frames=2, width=16, layers=1, heads=2)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        loss = flow_matching_loss(model, target[:64], generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = sample_flow(model, torch.randn(64, 1, 2, generator=gen), steps=20)
    assert (out - target[:64]).abs().mean() < 0.3


def test_logit_normal_times_pass_a_ks_test():
    t = logit_normal_times(
        20000, mean=0.3, std=0.8, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    assert ((t > 0) & (t < 1)).all()
    logit = torch.log(t / (1 - t)).numpy()
    assert stats.kstest(logit, "norm", args=(0.3, 0.8)).pvalue > 0.01
    # and against a wrong location it is rejected
    assert stats.kstest(logit, "norm", args=(0.4, 0.8)).pvalue < 1e-6


# ---- diffusers' AutoencoderOobleck -------------------------------------------------------------------------


def test_star_loss_attaches_to_autoencoder_oobleck():
    torch.manual_seed(0)
    vae = AutoencoderOobleck(
        encoder_hidden_size=12,  # 2 x the 6 latent channels (mean, scale)
        downsampling_ratios=[2, 4],
        channel_multiples=[1, 2],
        decoder_channels=8,
        decoder_input_channels=6,
        audio_channels=1,
        sampling_rate=16000,
    )
    audio = 0.1 * torch.randn(2, 1, 256)
    posterior = vae.encode(audio).latent_dist
    loss_fn = STARLoss(6, 1e-3, 1e-1, 2.0)
    kl = per_channel_kl(posterior)
    # Oobleck's own kl() is the sum over channels of twice the KL, averaged over batch and time
    torch.testing.assert_close(posterior.kl(), 2 * kl.sum(), rtol=1e-5, atol=1e-6)
    opt = torch.optim.Adam(vae.parameters(), 1e-3)
    before = [p.detach().clone() for p in vae.encoder.parameters()]
    z = posterior.sample()
    recon = vae.decode(z).sample
    loss = stft_distance(recon[..., : audio.shape[-1]], audio, (64, 32)).mean() + loss_fn(posterior)
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert math.isfinite(loss.item())
    assert any(not torch.equal(a, b) for a, b in zip(before, vae.encoder.parameters(), strict=True))


# ---- bad input --------------------------------------------------------------------------------------------


def test_bad_input_errors_name_the_argument():
    with pytest.raises(ValueError, match="gamma"):
        beta_schedule(8, gamma=0)
    with pytest.raises(ValueError, match="gamma"):
        STARLoss(8, gamma=-1.0)
    with pytest.raises(ValueError, match=r"beta_min .* must not exceed beta_max"):
        STARLoss(8, beta_min=0.1, beta_max=0.01)
    with pytest.raises(ValueError, match="channels"):
        STARLoss(0)
    with pytest.raises(ValueError, match="audio must be shaped"):
        tiny_vae().encode(torch.randn(2, 200))
    with pytest.raises(ValueError, match="audio must be shaped"):
        tiny_vae().encode(torch.randn(1, 2, 1, 200))
    with pytest.raises(ValueError, match="multiple of hop_length"):
        tiny_vae().encode(torch.randn(1, 1, 201))
    with pytest.raises(ValueError, match="estimate must be shaped"):
        stft_distance(torch.randn(1, 1, 1, 256), torch.randn(1, 1, 1, 256))
    with pytest.raises(ValueError, match="reference must be shaped"):
        si_sdr(torch.randn(2, 256), torch.randn(512))
    with pytest.raises(TypeError, match="posterior"):
        per_channel_kl(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="channels"):
        STARLoss(5)((torch.randn(2, 4, 3), torch.randn(2, 4, 3)))
    with pytest.raises(ValueError, match="channel_dim"):
        per_channel_kl((torch.randn(2, 4), torch.randn(2, 4)), channel_dim=0)
