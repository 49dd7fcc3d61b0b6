"""icml_generative.jepa_guidance: the JEPA-score against exact references, the guidance step in torch
samplers and in a diffusers pipeline, the baseline, the encoder trainer, and bad input."""

import math

import pytest
import torch

from icml_generative.jepa_guidance import (
    JEPAGuidance,
    MinorityGuidance,
    TweedieGuidance,
    encoder_jvp,
    jepa_score,
    jepa_singular_values,
    minority_score,
    mlp_encoder,
    sigreg_loss,
    train_jepa_encoder,
    tweedie_x0,
    vicreg_regularizer,
)

F64 = torch.float64


def _gap_encoder(n_in=40, d=20, seed=0):
    """A smooth encoder ``x -> W (x + 0.1 tanh(Lx))`` whose Jacobian has a clear gap after 5 values."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=F64)).Q
    v = torch.linalg.qr(torch.randn(n_in, d, generator=gen, dtype=F64)).Q
    sv = torch.cat(
        [torch.tensor([10.0, 8, 6, 5, 4], dtype=F64), 0.1 * torch.rand(d - 5, generator=gen, dtype=F64)]
    )
    w = u @ torch.diag(sv) @ v.T
    lin = torch.randn(n_in, n_in, generator=gen, dtype=F64) / math.sqrt(n_in)
    return lambda x: (x + 0.1 * torch.tanh(x @ lin.T)) @ w.T


def test_linear_encoder_exact_score_is_the_log_volume():
    a = torch.randn(5, 12, dtype=F64, generator=torch.Generator().manual_seed(1))
    x = torch.randn(3, 12, dtype=F64)
    expected = torch.log(torch.linalg.svdvals(a)).sum()
    torch.testing.assert_close(jepa_score(lambda t: t @ a.T, x), expected.expand(3))
    # images: the input is flattened, the Jacobian is D x (C*H*W)
    conv = torch.nn.Conv2d(1, 2, 3, dtype=F64)
    img = torch.randn(2, 1, 4, 4, dtype=F64)
    sv = jepa_singular_values(conv, img)
    assert sv.shape == (2, 8)


@pytest.mark.parametrize("jvp", ["finite_difference", "forward"])
def test_randomized_top_k_is_within_1pct_of_exact_and_improves_with_power_iterations(jvp):
    enc = _gap_encoder()
    x = torch.randn(4, 40, dtype=F64, generator=torch.Generator().manual_seed(2))
    exact = torch.linalg.svdvals(
        torch.stack([torch.autograd.functional.jacobian(enc, xi[None])[0, :, 0] for xi in x])
    )
    torch.testing.assert_close(jepa_singular_values(enc, x), exact[:, :20])  # row-by-row exact path
    errors = []
    for q in (0, 1, 2):
        approx = jepa_singular_values(enc, x, 3, power_iters=q, jvp=jvp)
        errors.append(((approx - exact[:, :3]).abs() / exact[:, :3]).max().item())
        assert bool((approx <= exact[:, :3] * (1 + 1e-6)).all())  # a projection never over-estimates
    assert errors[2] < 0.01 and errors[2] <= errors[1] <= errors[0]
    # the score agrees with the exact top-3 score
    torch.testing.assert_close(
        jepa_score(enc, x, 3, jvp=jvp), exact[:, :3].log().sum(1), rtol=1e-4, atol=1e-4
    )


def test_randomized_is_exact_once_the_sketch_covers_the_embedding():
    enc = mlp_encoder(6, 3, (16,)).double()
    x = torch.randn(5, 6, dtype=F64)
    torch.testing.assert_close(
        jepa_singular_values(enc, x, 3, method="randomized", power_iters=0, jvp="forward"),
        jepa_singular_values(enc, x),
    )


def test_finite_difference_jvp_matches_torch_func_jvp():
    enc = mlp_encoder(10, 4, (32,))
    x, v = torch.randn(6, 10), torch.randn(6, 10)
    v = v / v.norm(dim=1, keepdim=True)
    fd = encoder_jvp(enc, x, v, "finite_difference", 1e-3)
    exact = encoder_jvp(enc, x, v, "forward")
    _, ref = torch.func.jvp(enc, (x,), (v,))
    torch.testing.assert_close(exact, ref)
    assert (fd - exact).abs().max() < 5e-3 * exact.abs().max()


def test_score_is_seeded_and_leaves_the_global_rng_alone():
    enc = _gap_encoder()
    x = torch.randn(2, 40, dtype=F64)
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    a = jepa_score(enc, x, 2, power_iters=0, seed=3)
    assert torch.equal(torch.rand(1), before)
    assert torch.equal(a, jepa_score(enc, x, 2, power_iters=0, seed=3))
    assert not torch.equal(a, jepa_score(enc, x, 2, power_iters=0, seed=4))


def test_training_is_seeded_and_leaves_the_global_rngs_alone(monkeypatch):
    # the predictor's weights and the encoder's dropout come from the seed, not from the caller's state, and
    # the caller's generators are as they were (torch.manual_seed also reseeded every CUDA device's)
    cuda_seeds = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", cuda_seeds.append)
    data = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))

    def train(state: int):
        torch.manual_seed(state)
        torch.manual_seed(state)
        enc = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 4))
        enc.load_state_dict(reference)
        cuda_seeds.clear()
        log = train_jepa_encoder(enc, data, steps=3, batch_size=16, seed=7)
        return enc, log

    torch.manual_seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 4)
    ).state_dict()
    torch.manual_seed(11)
    expected_next = torch.rand(3)
    (a, log_a), (b, log_b) = train(1), train(2)  # the caller's states differ before each call
    assert log_a["loss"] == log_b["loss"]
    assert all(
        torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    torch.manual_seed(11)
    cuda_seeds.clear()
    train_jepa_encoder(a, data, steps=1, batch_size=16, seed=7)
    assert torch.equal(torch.rand(3), expected_next) and cuda_seeds == []


def test_failed_training_puts_back_every_submodules_mode():
    enc = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 4))
    enc.eval()
    enc[1].train()  # MC dropout in an eval model
    modes = [m.training for m in enc.modules()]
    with pytest.raises(ValueError, match="encoder refused data"):
        train_jepa_encoder(enc, torch.randn(64, 5), steps=2, batch_size=16)
    assert [m.training for m in enc.modules()] == modes
    with (
        pytest.raises(ValueError, match="became non-finite"),
        pytest.warns(RuntimeWarning, match="overflows"),
    ):
        train_jepa_encoder(enc, torch.randn(64, 8) * 1e30, steps=2, batch_size=16, lr=1e30)
    assert [m.training for m in enc.modules()] == modes


def test_score_is_differentiable_and_a_guidance_step_lowers_it():
    torch.manual_seed(0)
    enc = mlp_encoder(8, 4, (32, 32))
    z = torch.randn(16, 8)
    score = jepa_score(enc, z.requires_grad_(True), 3, create_graph=True)
    (g,) = torch.autograd.grad(score.sum(), z)
    assert torch.isfinite(g).all() and g.abs().sum() > 0
    z = z.detach()
    guidance = JEPAGuidance(enc, eta=0.01, top_k=3, start_fraction=1.0, normalize=False)
    moved = guidance(z, lambda v: 0.9 * v, step=0, num_steps=10)
    before = jepa_score(enc, 0.9 * z, 3, seed=0)
    after = jepa_score(enc, 0.9 * moved, 3, seed=0)
    assert bool((after < before).all())
    torch.testing.assert_close(guidance.last_objective, before)


def test_activity_schedule_and_eta_zero():
    g = TweedieGuidance(lambda x: x.sum(1), eta=0.0, start_fraction=0.8, interval=2)
    assert [g.is_active(s, 10) for s in range(10)] == [
        False,
        False,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
        False,
    ]
    z = torch.randn(3, 2)
    assert g(z, lambda v: v, 4, 10) is z  # eta 0: the sampler's own tensor, untouched
    g.eta = 1.0
    assert g(z, lambda v: v, 3, 10) is z  # an inactive step
    # the variance schedule scales the normalised step; objective sum(x): gradient 1 everywhere
    v = TweedieGuidance(lambda x: x.sum(1), eta=2.0, start_fraction=1.0, schedule="variance")
    torch.testing.assert_close(v(z, lambda t: t, 0, 5, variance=0.25), z - 0.5)
    with pytest.raises(ValueError, match="variance"):
        v(z, lambda t: t, 0, 5)


def _euler_sampler(x0_of, guidance, noise, steps=8, label=None):
    """A DDIM-like deterministic VP sampler on a toy denoiser, guided before each step."""
    abar = torch.linspace(0.05, 0.999, steps + 1)
    z = noise
    for i in range(steps):
        a, a_next = abar[i], abar[i + 1]

        def x0_fn(v, a=a):
            return x0_of(v, a, label)

        if guidance is not None:
            z = guidance(z, x0_fn, i, steps)
        with torch.no_grad():
            x0 = x0_fn(z)
        eps = (z - a.sqrt() * x0) / (1 - a).sqrt()
        z = a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps
    return z


def _toy_denoiser(v, a, label=None):
    shift = 0.0 if label is None else label[:, None].to(v) * 0.5  # class-conditional: a label-dependent mean
    return (a.sqrt() * (v - shift)) / (a + (1 - a)) + shift  # Tweedie for x0 ~ N(shift, I)


@pytest.mark.parametrize("label", [None, torch.tensor([0, 1, 2, 3])])
def test_eta_zero_reproduces_the_sampler_bit_for_bit_and_guidance_moves_it(label):
    torch.manual_seed(0)
    enc = mlp_encoder(6, 5, (16,))
    noise = torch.randn(4, 6)
    plain = _euler_sampler(_toy_denoiser, None, noise, label=label)
    zero = _euler_sampler(_toy_denoiser, JEPAGuidance(enc, eta=0.0, top_k=3), noise, label=label)
    assert torch.equal(plain, zero)
    guided = _euler_sampler(_toy_denoiser, JEPAGuidance(enc, eta=0.2, top_k=3), noise, label=label)
    assert torch.isfinite(guided).all() and not torch.equal(plain, guided)
    assert jepa_score(enc, guided).mean() < jepa_score(enc, plain).mean()


def test_tweedie_x0_inverts_each_parameterisation():
    x0, eps = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    a = 0.3
    z = math.sqrt(a) * x0 + math.sqrt(1 - a) * eps
    torch.testing.assert_close(tweedie_x0(z, eps, alpha_bar=a), x0)
    v = math.sqrt(a) * eps - math.sqrt(1 - a) * x0
    torch.testing.assert_close(
        tweedie_x0(z, v, alpha_bar=torch.tensor(a), prediction_type="v_prediction"), x0
    )
    torch.testing.assert_close(tweedie_x0(x0 + 2.0 * eps, eps, sigma=2.0), x0)
    s = 0.7
    torch.testing.assert_close(
        tweedie_x0((1 - s) * x0 + s * eps, eps - x0, sigma=s, prediction_type="flow"), x0
    )
    assert tweedie_x0(z, x0, prediction_type="sample") is x0
    with pytest.raises(ValueError, match="alpha_bar"):
        tweedie_x0(z, eps)


def test_minority_score_is_the_reconstruction_error():
    x0 = torch.randn(5, 3, dtype=F64)
    assert torch.equal(minority_score(x0, lambda t: t, 1.0, 0.0), torch.zeros(5, dtype=F64))
    shrink = minority_score(x0, lambda t: 0.5 * t, 1.0, 0.0)
    torch.testing.assert_close(shrink, 0.25 * (x0**2).sum(1))
    noisy = minority_score(x0, lambda t: t, 1.0, 0.5, draws=200, seed=1)
    torch.testing.assert_close(noisy.mean(), torch.tensor(0.75, dtype=F64), rtol=0.1, atol=0)
    # the baseline raises the minority score of the Tweedie estimate
    g = MinorityGuidance(lambda t: 0.5 * t, 1.0, 0.0, eta=0.1, start_fraction=1.0)
    moved = g(x0, lambda t: t, 0, 4)
    assert bool((minority_score(moved, lambda t: 0.5 * t, 1.0, 0.0) > shrink).all())


def test_bad_input_names_the_argument():
    enc = mlp_encoder(4, 3, (8,))
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match="k must be"):
        jepa_score(enc, x, 4)  # larger than the embedding (3)
    with pytest.raises(ValueError, match="eta"):
        JEPAGuidance(enc, eta=math.nan)
    with pytest.raises(ValueError, match="eta"):
        JEPAGuidance(enc, eta=math.inf)
    with pytest.raises(TypeError, match="differentiable"):
        jepa_score(lambda t: enc(t).detach(), x)
    with pytest.raises(TypeError, match="differentiable"):
        jepa_score(lambda t: torch.as_tensor(enc(t).detach().numpy()), x, 2)
    with pytest.raises(TypeError, match="encoder must be callable"):
        JEPAGuidance("dinov2")
    with pytest.raises(TypeError, match="x0_fn and preprocess must be differentiable"):
        JEPAGuidance(enc, top_k=2, start_fraction=1.0)(x, lambda v: v.detach(), 0, 4)
    # a linear encoder's JEPA-score is constant: a zero push, not an error
    linear = JEPAGuidance(torch.nn.Linear(4, 3), top_k=2, start_fraction=1.0)
    assert torch.equal(linear(x, lambda v: v, 0, 4), x)


def test_non_finite_gradient_is_repaired_with_a_warning():
    def objective(x):
        return x.sum(1) * torch.tensor([math.inf, 1.0])  # sample 0's gradient is infinite

    g = TweedieGuidance(objective, eta=1.0, start_fraction=1.0)
    z = torch.zeros(2, 3)
    with pytest.warns(RuntimeWarning, match="not finite"):
        out = g(z, lambda v: v, 0, 4)
    assert torch.equal(out[0], z[0]) and torch.equal(out[1], z[1] - 1)


def test_encoder_trainer_learns_a_spread_embedding():
    gen = torch.Generator().manual_seed(0)
    data = torch.randn(512, 4, generator=gen) @ torch.tensor(
        [[2.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0.5, 0], [0, 0, 0, 0.1]]
    )
    for anti_collapse, reg in (("sigreg", sigreg_loss), ("vicreg", vicreg_regularizer)):
        torch.manual_seed(0)
        enc = mlp_encoder(4, 3, (32,))
        with torch.no_grad():
            before = reg(enc(data))
        log = train_jepa_encoder(
            enc, data, steps=150, batch_size=128, lr=3e-3, anti_collapse=anti_collapse, noise=0.05
        )
        assert not enc.training and len(log["loss"]) == 150
        with torch.no_grad():
            after = reg(enc(data))
        assert after < 0.5 * before
    # the regularisers' zeros: normal quantiles, whitened data
    q = math.sqrt(2) * torch.erfinv(2 * (torch.arange(1000, dtype=F64) + 0.5) / 1000 - 1)
    assert sigreg_loss(q[:, None], projections=4) < 1e-12
    raw = torch.randn(1000, 3, dtype=F64)
    white = torch.linalg.qr(raw - raw.mean(0)).Q * math.sqrt(999)  # mean 0, covariance exactly I
    assert vicreg_regularizer(white) < 1e-12


def _tiny_sd_pipeline():
    """A diffusers StableDiffusionPipeline around a random two-level UNet2DConditionModel (8x8 latents,
    DDIM); prompt embeddings are passed directly and latents returned (no text encoder, no VAE)."""
    pytest.importorskip("transformers")
    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(8, 16),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=2,
        norm_num_groups=4,
    ).eval()
    pipe = StableDiffusionPipeline(
        vae=None,
        text_encoder=None,
        tokenizer=None,
        unet=unet,
        scheduler=DDIMScheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize("schedule", ["constant", "variance"])
def test_diffusers_callback_runs_in_a_stable_diffusion_pipeline(schedule):
    pipe = _tiny_sd_pipeline()
    embeds = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(1)
    enc = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 6), torch.nn.Tanh())

    def run(callback=None, guidance_scale=1.0):
        extra = (
            {}
            if callback is None
            else {
                "callback_on_step_end": callback,
                "callback_on_step_end_tensor_inputs": ["latents", "prompt_embeds"],
            }
        )
        return pipe(
            prompt_embeds=embeds,
            negative_prompt_embeds=torch.zeros_like(embeds),
            num_inference_steps=5,
            guidance_scale=guidance_scale,
            height=64,
            width=64,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
            **extra,
        ).images

    plain = run()
    zero = run(JEPAGuidance(enc, eta=0.0, top_k=3, schedule=schedule).diffusers_callback())
    assert torch.equal(plain, zero)
    calls = []
    guidance = JEPAGuidance(enc, eta=0.5, top_k=3, schedule=schedule)
    original = guidance.objective

    def counting(x):
        calls.append(x.shape)
        return original(x)

    guidance.objective = counting
    guided = run(guidance.diffusers_callback())
    assert calls == [(1, 4, 8, 8)] * 4  # steps 1..4 of 5 are active (start_fraction 0.8)
    assert torch.isfinite(guided).all() and not torch.equal(plain, guided)
    # classifier-free guidance doubles the embeddings: the default x0_fn takes the conditional half
    cfg = run(JEPAGuidance(enc, eta=0.5, top_k=3, schedule=schedule).diffusers_callback(), guidance_scale=3.0)
    assert torch.isfinite(cfg).all()


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("storage", [torch.bfloat16, torch.float8_e4m3fn])
def test_diffusers_callback_under_layerwise_casting_guides_as_the_rounded_model(storage):
    # unet.enable_layerwise_casting (weights stored in bfloat16 / float8, computed in float32) casts the weights
    # back after each forward, in place (param.data): the guidance's backward through the unet found them in
    # the storage dtype and raised "expected scalar type Float but found BFloat16" (Float8_e4m3fn). It now
    # guides exactly as a hook-free unet holding the same rounded weights in float32 (measured: 0.0 apart, the
    # guidance moving the latents by 4.6).
    cast = _tiny_sd_pipeline()
    cast.unet.enable_layerwise_casting(storage_dtype=storage, compute_dtype=torch.float32)
    rounded = _tiny_sd_pipeline()
    rounded.unet.load_state_dict({k: v.to(torch.float32) for k, v in cast.unet.state_dict().items()})
    embeds = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(1)
    enc = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 6), torch.nn.Tanh())

    def run(pipe, guided):
        extra = (
            {
                "callback_on_step_end": JEPAGuidance(enc, eta=0.5, top_k=3).diffusers_callback(),
                "callback_on_step_end_tensor_inputs": ["latents", "prompt_embeds"],
            }
            if guided
            else {}
        )
        return pipe(
            prompt_embeds=embeds,
            negative_prompt_embeds=torch.zeros_like(embeds),
            num_inference_steps=5,
            guidance_scale=3.0,
            height=64,
            width=64,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
            **extra,
        ).images

    plain = run(rounded, False)
    assert torch.equal(run(cast, False), plain)  # the pipeline alone: the rounded model, bit for bit
    guided = run(rounded, True)
    assert torch.equal(run(cast, True), guided) and (guided - plain).abs().max() > 1.0
    assert all(p.dtype == storage for p in cast.unet.conv_in.parameters())  # still stored rounded


@pytest.mark.parametrize("scheduler", ["DDIMScheduler", "DPMSolverMultistepScheduler"])
def test_diffusers_callback_in_img2img_guides_at_the_timestep_denoised_next(scheduler):
    # img2img with strength 0.5 runs the last 5 of 10 timesteps: the callback read timesteps[i + 1] of the
    # whole schedule (801 where the latents sat at 301) and guided the final latents after the last step
    import diffusers
    from diffusers import StableDiffusionImg2ImgPipeline

    sd = _tiny_sd_pipeline()
    pipe = StableDiffusionImg2ImgPipeline(
        **{**sd.components, "scheduler": getattr(diffusers, scheduler)()}, requires_safety_checker=False
    )
    pipe.set_progress_bar_config(disable=True)
    calls = []  # (guidance or pipeline, timestep) of every unet call
    forward = pipe.unet.forward

    def logged(sample, t, *args, **kwargs):
        calls.append(("guide" if torch.is_grad_enabled() else "pipe", int(t)))
        return forward(sample, t, *args, **kwargs)

    pipe.unet.forward = logged
    torch.manual_seed(1)
    enc = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 6), torch.nn.Tanh())
    embeds = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(1))
    pipe(
        image=torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(2)),  # latents: no VAE needed
        prompt_embeds=embeds,
        strength=0.5,
        num_inference_steps=10,
        guidance_scale=1.0,
        output_type="latent",
        generator=torch.Generator().manual_seed(0),
        callback_on_step_end=JEPAGuidance(enc, eta=0.5, top_k=3, start_fraction=1.0).diffusers_callback(),
        callback_on_step_end_tensor_inputs=["latents", "prompt_embeds"],
    )
    run = pipe.scheduler.timesteps[5:].tolist()
    assert [t for kind, t in calls if kind == "pipe"] == run
    assert [t for kind, t in calls if kind == "guide"] == run[
        1:
    ]  # before each later step, never after the last
    assert all(kind == "guide" for kind, _ in calls[1::2])  # each right before the step it guides


def test_diffusers_callback_explains_what_it_needs():
    pipe = _tiny_sd_pipeline()
    guidance = JEPAGuidance(torch.nn.Flatten(), eta=0.5, top_k=2)
    with pytest.raises(ValueError, match="prompt_embeds"):
        pipe(
            prompt_embeds=torch.randn(1, 4, 16),
            num_inference_steps=3,
            guidance_scale=1.0,
            height=64,
            width=64,
            output_type="latent",
            callback_on_step_end=guidance.diffusers_callback(),
        )
    from diffusers import EulerDiscreteScheduler

    pipe.scheduler = EulerDiscreteScheduler()  # variance exploding: x̂0 needs the sigma, not alphas_cumprod
    with pytest.raises(TypeError, match="x0_fn"):
        pipe(
            prompt_embeds=torch.randn(1, 4, 16),
            num_inference_steps=3,
            guidance_scale=1.0,
            height=64,
            width=64,
            output_type="latent",
            callback_on_step_end=guidance.diffusers_callback(),
            callback_on_step_end_tensor_inputs=["latents", "prompt_embeds"],
        )


def test_diffusers_callback_with_a_user_x0_fn_under_an_euler_scheduler():
    from diffusers import EulerDiscreteScheduler

    pipe = _tiny_sd_pipeline()
    pipe.scheduler = EulerDiscreteScheduler()
    torch.manual_seed(2)
    enc = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 6), torch.nn.Tanh())
    seen = []

    def x0_fn(pipe, latents, t, kwargs):  # after step i the scheduler's step_index points at t
        sigma = pipe.scheduler.sigmas[pipe.scheduler.step_index]
        seen.append(float(sigma))
        eps = pipe.unet(pipe.scheduler.scale_model_input(latents, t), t, kwargs["prompt_embeds"]).sample
        return tweedie_x0(latents, eps, sigma=sigma)

    def run(eta):
        return pipe(
            prompt_embeds=torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(3)),
            num_inference_steps=5,
            guidance_scale=1.0,
            height=64,
            width=64,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
            callback_on_step_end=JEPAGuidance(enc, eta=eta, top_k=2).diffusers_callback(x0_fn),
            callback_on_step_end_tensor_inputs=["latents", "prompt_embeds"],
        ).images

    plain, guided = run(0.0), run(0.5)
    assert seen == sorted(seen, reverse=True) and len(seen) == 4
    assert torch.isfinite(guided).all() and not torch.equal(plain, guided)


HALF = [torch.bfloat16, torch.float16]


def _half_and_reference_encoders(dtype):
    """A half-precision encoder and the float32 encoder with the same (rounded) weights."""
    torch.manual_seed(0)
    enc = mlp_encoder(8, 6).to(dtype)
    ref = mlp_encoder(8, 6)
    ref.load_state_dict({name: t.float() for name, t in enc.state_dict().items()})
    return enc, ref


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("dtype", HALF)
def test_jepa_score_runs_on_a_half_precision_encoder(dtype):
    # the SVD (no half kernel) runs in float32 and the default step is sqrt(machine eps) in half precision;
    # the old code refused fd_eps=1e-4 against the dtype's epsilon, then failed in svdvals
    enc, ref = _half_and_reference_encoders(dtype)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)).to(dtype)
    eps = torch.finfo(dtype).eps
    # measured against float32 on the same rounded weights and inputs: score relative error 3.3e-3 (bf16),
    # 3.6e-4 (fp16); singular values 8.3e-3 (bf16), 1.0e-3 (fp16)
    for kw in ({}, {"k": 3}, {"k": 3, "jvp": "forward"}, {"k": 3, "method": "exact"}):
        score, sv = jepa_score(enc, x, **kw), jepa_singular_values(enc, x, **kw)
        assert score.dtype == sv.dtype == dtype
        torch.testing.assert_close(score.float(), jepa_score(ref, x.float(), **kw), rtol=eps, atol=0)
        torch.testing.assert_close(
            sv.float(), jepa_singular_values(ref, x.float(), **kw), rtol=2 * eps, atol=0
        )
    # the step is checked against the dtype only where finite differences are used
    jepa_score(enc, x, 3, jvp="forward", fd_eps=1e-4)
    jepa_score(enc, x, method="exact", fd_eps=1e-4)
    with pytest.raises(ValueError, match="fd_eps"):
        jepa_score(enc, x, 3, fd_eps=1e-4)
    # a guidance step: half precision in and out, its objective that of the float32 encoder
    z = torch.randn(4, 8, generator=torch.Generator().manual_seed(2)).to(dtype)
    guidance, reference = (JEPAGuidance(e, eta=0.5, top_k=3, start_fraction=1.0) for e in (enc, ref))
    moved = guidance(z, lambda v: 0.9 * v, 0, 4)
    reference(z.float(), lambda v: 0.9 * v, 0, 4)
    assert moved.dtype == dtype and bool(torch.isfinite(moved).all()) and not torch.equal(moved, z)
    # measured: 2.3e-2 of about 8 (bf16), 2.7e-3 (fp16)
    torch.testing.assert_close(guidance.last_objective.float(), reference.last_objective, rtol=eps, atol=0)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_tweedie_x0_keeps_the_model_output_in_half_precision(dtype, prediction_type):
    # at alpha_bar = 0.999, 1 - alpha_bar rounded to 0 in bfloat16: x0_hat was the sample itself, off by
    # 0.13 (bf16); the coefficients are now float32
    gen = torch.Generator().manual_seed(0)
    z, out = (torch.randn(2, 4, 16, 16, generator=gen).to(dtype) for _ in range(2))
    for a in (0.999, 0.99, 0.3):
        half = tweedie_x0(z, out, alpha_bar=a, prediction_type=prediction_type)
        ref = tweedie_x0(z.float(), out.float(), alpha_bar=a, prediction_type=prediction_type)
        assert half.dtype == dtype
        # measured: at most 0.86 of the dtype's epsilon times the largest |x0_hat| (0.56 in bf16)
        atol = torch.finfo(dtype).eps * ref.abs().max().item()
        torch.testing.assert_close(half.float(), ref, rtol=0, atol=atol)


@pytest.mark.usefixtures("one_torch_thread")
def test_minority_score_accumulates_half_precision_in_float32():
    # 65536 squares of about 4 per sample: past float16's 65504, the old sum (and last_objective) was inf
    x0 = torch.randn(2, 64, 32, 32, generator=torch.Generator().manual_seed(0)).half()
    ref = minority_score(x0.float(), lambda t: -t, 1.0, 0.0)
    score = minority_score(x0, lambda t: -t, 1.0, 0.0)
    assert score.dtype == torch.float32 and ref.min() > 2e5
    torch.testing.assert_close(score, ref, rtol=1e-6, atol=0)  # the squares (2 x0)² are exact in float32
    guidance = MinorityGuidance(lambda t: -t, 1.0, 0.0, start_fraction=1.0)
    moved = guidance(x0, lambda t: t, 0, 4)
    assert moved.dtype == torch.float16 and bool(torch.isfinite(moved).all())
    torch.testing.assert_close(guidance.last_objective, -ref, rtol=1e-6, atol=0)


@pytest.mark.usefixtures("one_torch_thread")
def test_encoder_trainer_refuses_float16_weights():
    # Adam's eps (1e-8) is 0 in float16: the first step made the weights NaN
    enc = mlp_encoder(8, 4).half()
    with pytest.raises(ValueError, match=r"encoder has float16 trainable parameters.*bfloat16"):
        train_jepa_encoder(enc, torch.randn(64, 8).half(), steps=2, batch_size=16)
    with pytest.raises(ValueError, match="data is float16"):
        train_jepa_encoder(torch.nn.Flatten(), torch.randn(64, 8).half(), steps=2, batch_size=16)
    log = train_jepa_encoder(
        mlp_encoder(8, 4).bfloat16(), torch.randn(64, 8).bfloat16(), steps=2, batch_size=16
    )
    assert all(math.isfinite(v) for v in log["loss"])
