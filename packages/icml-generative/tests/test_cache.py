import copy
import itertools
import math

import numpy as np
import pytest
import torch
from diffusers.hooks import FirstBlockCacheConfig, apply_first_block_cache
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry

from icml_generative.cache import (
    EasyCacheConfig,
    NaviCacheConfig,
    RatioDriftKalman,
    RatioKalman,
    TeaCacheConfig,
    apply_easycache,
    apply_navicache,
    apply_teacache,
    cache_context,
    calibrate_mag_ratios,
    count_block_forwards,
    fit_teacache_coefficients,
    get_cache_stats,
    psnr,
    remove_navicache,
    spearman,
    ssim,
)
from icml_generative.cache.teacache import dit_modulated_input, modulated_input

torch.set_num_threads(1)
STEPS = 12
CHANNELS, FRAMES, SIZE, TEXT_DIM = 3, 4, 8, 8  # pixel-space clips (B, 3, 4, 8, 8), one-hot class tokens of 8


# the shared shape of the tiny Wan-style transformers (Wan, SkyReels V2): 3 blocks, 2 heads x 8
TINY_WAN = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=8,
    in_channels=CHANNELS,
    out_channels=CHANNELS,
    text_dim=TEXT_DIM,
    freq_dim=32,
    ffn_dim=16,
    num_layers=3,
    rope_max_seq_len=32,
)


def tiny_wan():
    """A randomly initialised three-block diffusers ``WanTransformer3DModel`` (2 heads × 8, 64 tokens)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    return WanTransformer3DModel(**TINY_WAN, cross_attn_norm=True, qk_norm="rms_norm_across_heads")


def class_tokens(labels: torch.Tensor) -> torch.Tensor:
    """One-hot class tokens ``(n, 1, TEXT_DIM)`` as ``encoder_hidden_states``; all-zero is unconditional."""
    return torch.nn.functional.one_hot(labels.long(), TEXT_DIM).float()[:, None, :]


@torch.no_grad()
def sample_flow_euler(model, noise, cond, uncond=None, guidance_scale=1.0, num_steps=STEPS, shift=3.0):
    """Flow-matching Euler steps from σ = 1 to 0 (time shift ``shift``) with classifier-free guidance; each
    transformer pass runs in the cache context "cond" or "uncond" with the step index, σ and number of
    steps, as diffusers' ``WanPipeline`` sets them."""
    s = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)
    sigmas = shift * s / (1 + (shift - 1) * s)
    x = noise.clone()
    for i in range(num_steps):
        sigma = float(sigmas[i])
        t = torch.full((x.shape[0],), sigma * 1000.0)
        fields = {"step_index": i, "sigma": sigma, "num_inference_steps": num_steps}
        with cache_context(model, "cond", **fields):
            v = model(x, timestep=t, encoder_hidden_states=cond, return_dict=False)[0]
        if uncond is not None and guidance_scale != 1.0:
            with cache_context(model, "uncond", **fields):
                v_u = model(x, timestep=t, encoder_hidden_states=uncond, return_dict=False)[0]
            v = v_u + guidance_scale * (v - v_u)
        x = x + (float(sigmas[i + 1]) - sigma) * v
    return x


class TinyBlock(torch.nn.Module):
    """A pre-norm DiT block with adaLN shift/scale from the timestep embedding."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim, elementwise_affine=False)
        self.attn = torch.nn.MultiheadAttention(dim, 2, batch_first=True)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim)
        )
        self.ada = torch.nn.Linear(dim, 2 * dim)

    def forward(self, hidden_states: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        shift, scale = self.ada(temb)[:, None].chunk(2, dim=-1)
        h = self.norm(hidden_states) * (1 + scale) + shift
        hidden_states = hidden_states + self.attn(h, h, h, need_weights=False)[0]
        return hidden_states + self.mlp(self.norm(hidden_states))


TransformerBlockRegistry.register(TinyBlock, TransformerBlockMetadata(return_hidden_states_index=0))


class TinyDiT(torch.nn.Module):
    """A plain torch video DiT: per-pixel tokens, the class token added to the timestep embedding."""

    def __init__(self, channels: int = 3, dim: int = 16, layers: int = 3) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(channels, dim)
        self.time = torch.nn.Sequential(torch.nn.Linear(1, dim), torch.nn.SiLU(), torch.nn.Linear(dim, dim))
        self.text = torch.nn.Linear(8, dim)
        self.blocks = torch.nn.ModuleList(TinyBlock(dim) for _ in range(layers))
        self.out = torch.nn.Linear(dim, channels)

    def forward(self, hidden_states, timestep, encoder_hidden_states, return_dict=False):
        b, c, f, h, w = hidden_states.shape
        x = self.embed(hidden_states.flatten(2).transpose(1, 2))  # (B, F*H*W, dim)
        temb = self.time(timestep[:, None] / 1000) + self.text(encoder_hidden_states[:, 0])
        for block in self.blocks:
            x = block(x, temb)
        return (self.out(x).transpose(1, 2).reshape(b, c, f, h, w),)


def _inputs(batch=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(batch, CHANNELS, FRAMES, SIZE, SIZE, generator=g)
    cond = class_tokens(torch.arange(batch) % 4)
    return noise, cond, torch.zeros_like(cond)


@pytest.fixture(scope="module")
def wan():
    return tiny_wan().eval()


def _record_stack(model):
    """Record (context-free) the block stack's input and output at every call."""
    calls = []
    blocks = model.blocks
    h1 = blocks[0].register_forward_pre_hook(
        lambda m, a, k: calls.append({"in": k.get("hidden_states", a[0] if a else None)}), with_kwargs=True
    )
    h2 = blocks[-1].register_forward_hook(lambda m, a, o: calls[-1].update(out=o))
    return calls, (h1, h2)


# -- bookkeeping --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", ["ratio", "ratio+drift"])
@pytest.mark.parametrize("threshold", [1e-9, 0.2, 1e9])
def test_alignment_steps_and_last_step_always_computed(wan, state, threshold):
    noise, cond, uncond = _inputs()
    apply_navicache(wan, NaviCacheConfig(threshold=threshold, alignment_steps=3, state=state))
    try:
        sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        stats = get_cache_stats(wan)
    finally:
        remove_navicache(wan)
    computed = {r.step: r.computed for r in stats.records}
    assert [r.step for r in stats.records] == list(range(STEPS))
    assert all(computed[s] for s in (0, 1, 2, STEPS - 1))
    assert stats.steps_computed + stats.steps_skipped == STEPS
    if threshold == 1e-9:
        assert stats.steps_skipped == 0
    if threshold == 1e9:  # everything that may be skipped is skipped
        assert stats.computed_steps == [0, 1, 2, STEPS - 1]
    assert stats.full_forwards == {"cond": stats.steps_computed, "uncond": stats.steps_computed}


def test_skipped_step_is_input_plus_cached_residual_exactly_per_context(wan):
    noise, cond, uncond = _inputs()
    calls, handles = _record_stack(wan)
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2))
    try:
        sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        stats = get_cache_stats(wan)
    finally:
        remove_navicache(wan)
        for h in handles:
            h.remove()
    assert len(calls) == 2 * STEPS and stats.steps_skipped > 0
    residual = {}
    for i, call in enumerate(calls):
        ctx, step = ("cond", "uncond")[i % 2], i // 2
        if step in stats.computed_steps:
            residual[ctx] = call["out"] - call["in"]
        else:
            assert torch.equal(call["out"], call["in"] + residual[ctx])
    assert not torch.equal(residual["cond"], residual["uncond"])  # each context kept its own residual


def test_cond_uncond_pairing(wan):
    noise, cond, uncond = _inputs()
    apply_navicache(wan, NaviCacheConfig(threshold=0.3, alignment_steps=2, num_inference_steps=STEPS))
    t = torch.full((1,), 900.0)
    try:
        with count_block_forwards(wan) as counter:
            sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        stats = get_cache_stats(wan)
        assert counter.full_forwards == 2 * stats.steps_computed  # both passes follow the one decision
        # "uncond" running a step before "cond" (the leader of this run) is refused
        with cache_context(wan, "cond", step_index=0):
            wan(noise, timestep=t, encoder_hidden_states=cond)
        with pytest.raises(RuntimeError, match="before the leading context 'cond'"):
            with cache_context(wan, "uncond", step_index=1):
                wan(noise, timestep=t, encoder_hidden_states=uncond)
    finally:
        remove_navicache(wan)


def test_removing_the_hook_restores_exact_uncached_outputs(wan):
    noise, cond, uncond = _inputs()
    reference = sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2))
    cached = sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    assert get_cache_stats(wan).steps_skipped > 0 and not torch.equal(cached, reference)
    remove_navicache(wan)
    assert torch.equal(sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS), reference)
    apply_navicache(wan, NaviCacheConfig(threshold=1e-12, alignment_steps=2))  # never skips: exact too
    try:
        assert torch.equal(sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS), reference)
    finally:
        remove_navicache(wan)


def test_state_is_reset_between_runs(wan):
    noise, cond, uncond = _inputs()
    apply_navicache(wan, NaviCacheConfig(threshold=0.3, alignment_steps=2))
    try:
        first = sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        second = sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    finally:
        remove_navicache(wan)
    assert torch.equal(first, second)


# -- estimators -----------------------------------------------------------------------------------------------
def test_kalman_estimate_variance_below_measurement_variance():
    rng = np.random.default_rng(0)
    z = 2.0 + 0.3 * rng.standard_normal(4000)
    for kf in (RatioKalman(0.05, 0.05), RatioDriftKalman(0.05, 0.05, 0.005)):
        estimates = []
        for step, value in enumerate(z):
            kf.update(float(value), step, sigma=0.5)
            estimates.append(kf.k)
        est = np.array(estimates[50:])
        # the scalar filter's steady state is an EMA with variance ratio K / (2 - K) = 0.45; the drift
        # filter's extra state costs some of that
        assert est.var() < (0.5 if isinstance(kf, RatioKalman) else 0.6) * z[50:].var()
        assert abs(est.mean() - 2.0) < 0.05
    # the scalar filter's steady state is an EMA with gain K from P^2 + QP - QR = 0
    q = r = 0.05
    p = (-q + math.sqrt(q * q + 4 * q * r)) / 2
    gain = (p + q) / (p + q + r)
    kf = RatioKalman(q, r)
    for step, value in enumerate(z[:200]):
        kf.update(float(value), step, 0.5)
    before = kf.k
    kf.update(before + 1.0, 200, 0.5)
    assert kf.k - before == pytest.approx(gain, rel=1e-6)


def test_drift_filter_tracks_a_linear_trend_better_than_the_ratio_filter():
    rng = np.random.default_rng(1)
    steps = np.arange(60)
    truth = 1.0 + 0.05 * steps
    z = truth + 0.1 * rng.standard_normal(60)
    errors = {}
    for name, kf in (("ratio", RatioKalman()), ("drift", RatioDriftKalman())):
        for s in range(5):
            kf.align(float(z[s]), s)
        err = []
        for s in range(5, 59):
            kf.update(float(z[s]), s, 1 - s / 60)
            err.append(kf.predict(1) - truth[s + 1])
        errors[name] = np.abs(err).mean()
    assert errors["drift"] < 0.7 * errors["ratio"]


def test_drift_filter_never_predicts_a_non_positive_ratio():
    kf = RatioDriftKalman()
    for step, z in enumerate((1.0, 0.7, 0.4)):  # alignment slope -0.3 per step
        kf.align(z, step)
    assert kf.predict(1) == pytest.approx(0.1)  # 0.4 - 0.3: still positive, extrapolated
    with pytest.warns(RuntimeWarning, match="ratio\\+drift.*<= 0"):
        assert kf.predict(3) == pytest.approx(0.4)  # 0.4 - 0.9 < 0: the filtered ratio without drift
    kf.k = -0.2  # a filtered ratio that is not positive either: the last measurement
    assert kf.predict(3) == pytest.approx(0.4)
    kf.reset()
    assert kf.last_z is None and not kf._warned


def test_easycache_uses_the_last_measured_ratio_unfiltered(wan):
    noise, cond, uncond = _inputs()
    calls, handles = _record_stack(wan)
    apply_easycache(wan, EasyCacheConfig(threshold=0.3, alignment_steps=2))
    try:
        sample_flow_euler(wan, noise, cond, uncond, 1.0, STEPS)  # no CFG: one pass per step
        stats = get_cache_stats(wan)
    finally:
        remove_navicache(wan)
        for h in handles:
            h.remove()
    computed = stats.computed_steps
    for r in stats.records:
        if not math.isfinite(r.ratio):
            continue
        c1, c0 = [c for c in computed if c < r.step][-1], [c for c in computed if c < r.step][-2]
        a, b = calls[c1], calls[c0]
        z = (a["out"] - b["out"]).abs().mean().item() / ((a["in"] - b["in"]).abs().mean().item() + 1e-8)
        assert r.ratio == pytest.approx(z, rel=1e-6)


# -- diffusers integration ------------------------------------------------------------------------------------
def test_no_cache_context_raises_a_clear_error(wan):
    noise, cond, _ = _inputs()
    apply_navicache(wan, NaviCacheConfig(num_inference_steps=STEPS))
    try:
        with pytest.raises(RuntimeError, match=r"no cache context is set.*cache_context"):
            wan(noise, timestep=torch.full((1,), 500.0), encoder_hidden_states=cond)
    finally:
        remove_navicache(wan)


def wan_pipeline(transformer):
    """A ``WanPipeline`` around ``transformer``; ``generate()`` returns the latents (64x64 pixels, 13 frames
    -> (1, 3, 4, 8, 8); CFG: "cond" and "uncond") and the block forwards run."""
    pytest.importorskip("transformers")  # diffusers' pipelines import it (icml-generative[hf])
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    pipe = WanPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=None,
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
    )
    pipe.set_progress_bar_config(disable=True)
    cond = class_tokens(torch.tensor([1]))

    def generate():
        with count_block_forwards(pipe.transformer) as counter:
            frames = pipe(
                prompt_embeds=cond,
                negative_prompt_embeds=torch.zeros_like(cond),
                height=64,
                width=64,
                num_frames=13,
                num_inference_steps=STEPS,
                guidance_scale=4.0,
                output_type="latent",
                generator=torch.Generator().manual_seed(0),
            ).frames
        return frames, counter.blocks

    return pipe, generate


def test_works_inside_a_diffusers_wan_pipeline(wan):
    _, generate_counted = wan_pipeline(wan)

    def generate():
        return generate_counted()[0]

    reference = generate()
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2))  # steps come from the context
    try:
        cached = generate()
        stats = get_cache_stats(wan)  # kept although the pipeline resets stateful hooks at the end
    finally:
        remove_navicache(wan)
    assert stats.num_inference_steps == STEPS and 0 < stats.steps_skipped < STEPS
    assert stats.full_forwards == {"cond": stats.steps_computed, "uncond": stats.steps_computed}
    assert psnr(cached, reference) > 20 and not torch.equal(cached, reference)
    assert torch.equal(generate(), reference)


def _dit_transformer_2d():
    """A randomly initialised three-block diffusers ``DiTTransformer2DModel`` on 4×8×8 latents (16 tokens)."""
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    return DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        num_layers=3,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=1000,
    ).eval()


def test_dit_transformer_2d_model():
    model = _dit_transformer_2d()
    x = torch.randn(1, 4, 8, 8)
    labels = torch.tensor([3])

    def run():
        outs = []
        for i, t in enumerate(torch.linspace(999, 0, STEPS)):
            with cache_context(model, "cond", step_index=i, num_inference_steps=STEPS):
                outs.append(model(x + 0.01 * i, timestep=t[None].long(), class_labels=labels).sample)
        return torch.stack(outs)

    reference = run()
    apply_navicache(model, NaviCacheConfig(threshold=1.0, alignment_steps=2))
    cached = run()
    assert get_cache_stats(model).steps_skipped > 0 and not torch.equal(cached, reference)
    remove_navicache(model)
    assert torch.equal(run(), reference)


def test_dit_modulated_input_is_the_first_self_attention_input():
    model = _dit_transformer_2d()
    block = model.transformer_blocks[0]
    seen, attn_in = {}, []
    h1 = block.register_forward_pre_hook(lambda m, a, k: seen.update(args=a, kwargs=k), with_kwargs=True)
    h2 = block.attn1.register_forward_pre_hook(
        lambda m, a, k: attn_in.append(a[0] if a else k["hidden_states"]), with_kwargs=True
    )
    try:
        model(torch.randn(2, 4, 8, 8), timestep=torch.tensor([300, 700]), class_labels=torch.tensor([3, 1]))
    finally:
        h1.remove()
        h2.remove()
    x = seen["args"][0]
    m = dit_modulated_input(block, x, seen["args"], seen["kwargs"])
    torch.testing.assert_close(m, attn_in[0].float())
    assert torch.equal(modulated_input(block, x, seen["args"], seen["kwargs"]), m)
    assert torch.equal(dit_modulated_input(torch.nn.Linear(2, 2), x, (x,), {}), x)  # other blocks: the input


@pytest.mark.usefixtures("one_torch_thread")
def test_count_block_forwards_does_not_depend_on_fused_qkv_projections():
    """diffusers' ``fuse_qkv_projections()`` makes Wan's attention call ``to_qkv`` / ``to_kv`` instead of
    ``to_q``, ``to_k``, ``to_v``; the counter watched ``attn1.to_q`` and counted 0 blocks on the fused model
    (measured: 0 instead of 72 uncached, 0 instead of 24 with NaviCache, 0 instead of 28 with diffusers'
    First-Block Cache). The count is now that of the unfused model, and that of the blocks whose attention ran."""
    noise, cond, uncond = _inputs()
    caches = {
        "uncached": (lambda m: None, lambda m: None),
        "navicache": (
            lambda m: apply_navicache(m, NaviCacheConfig(threshold=0.5, alignment_steps=2)),
            remove_navicache,
        ),
        "first-block-cache": (
            lambda m: m.enable_cache(FirstBlockCacheConfig(threshold=0.5)),
            lambda m: m.disable_cache(),
        ),
    }
    counts = {}
    for fused in (False, True):
        model = tiny_wan().eval()
        if fused:
            model.fuse_qkv_projections()
            assert all(b.attn1.fused_projections and b.attn2.fused_projections for b in model.blocks)
        for name, (apply, remove) in caches.items():
            ran = [0]  # the blocks whose self-attention really ran
            handles = [
                b.attn1.register_forward_hook(lambda *_, ran=ran: ran.__setitem__(0, ran[0] + 1))
                for b in model.blocks
            ]
            apply(model)
            try:
                with count_block_forwards(model) as counter:
                    out = sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS)
            finally:
                remove(model)
                for h in handles:
                    h.remove()
            assert counter.blocks == ran[0], (name, fused)
            counts[name, fused] = counter.blocks, out
    for name in caches:
        (unfused, a), (fused, b) = counts[name, False], counts[name, True]
        assert fused == unfused, name
        torch.testing.assert_close(b, a)  # the same computation, fused or not
    assert counts["uncached", False][0] == 2 * STEPS * 3
    assert 0 < counts["navicache", False][0] < 2 * STEPS * 3
    assert 0 < counts["first-block-cache", False][0] < 2 * STEPS * 3


def test_plain_torch_dit_with_navicache_and_diffusers_first_block_cache():
    torch.manual_seed(0)
    model = TinyDiT().eval()
    noise, cond, uncond = _inputs()
    reference = sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS)
    apply_navicache(model, NaviCacheConfig(threshold=0.3, alignment_steps=2))
    cached = sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS)
    stats = get_cache_stats(model)
    remove_navicache(model)
    assert stats.steps_skipped > 0 and psnr(cached, reference) > 15
    assert torch.equal(sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS), reference)
    apply_first_block_cache(
        model, FirstBlockCacheConfig(threshold=0.5)
    )  # the registered block works there too
    with count_block_forwards(model) as counter:
        sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS)
    assert counter.blocks < 2 * STEPS * 3


def test_torch_compile_eager_backend_matches():
    torch.manual_seed(0)
    model = TinyDiT().eval()
    noise, cond, uncond = _inputs()
    apply_navicache(model, NaviCacheConfig(threshold=0.3, alignment_steps=2))
    expected = sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS)
    skipped = get_cache_stats(model).steps_skipped
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")
    got = sample_flow_euler(compiled, noise, cond, uncond, 3.0, STEPS)
    torch._dynamo.reset()
    assert skipped > 0 and get_cache_stats(model).steps_skipped == skipped
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


# -- baselines ------------------------------------------------------------------------------------------------
def test_teacache_calibration_and_skipping(wan):
    noise, cond, uncond = _inputs(batch=2)
    with pytest.raises(ValueError, match="coefficients are required"):
        TeaCacheConfig(threshold=0.1)
    apply_teacache(wan, TeaCacheConfig(calibrate=True))
    try:
        sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        stats = get_cache_stats(wan)
    finally:
        remove_navicache(wan)
    assert stats.steps_skipped == 0 and len(stats.calibration) == STEPS - 1
    coefficients = fit_teacache_coefficients([stats], degree=2)
    x, y = np.array(stats.calibration).T
    assert np.abs(np.polyval(coefficients, x) - y).mean() <= np.abs(y - y.mean()).mean() + 1e-12
    apply_teacache(wan, TeaCacheConfig(threshold=0.3, coefficients=coefficients, alignment_steps=2))
    try:
        sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        assert get_cache_stats(wan).steps_skipped > 0
    finally:
        remove_navicache(wan)


def test_mag_ratios_calibration_and_diffusers_magcache(wan):
    from diffusers.hooks import MagCacheConfig

    noise, cond, uncond = _inputs()
    ratios = calibrate_mag_ratios(
        wan, lambda: sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS), STEPS, calls_per_step=2
    )
    assert len(ratios) == STEPS and ratios[0] == 1.0 and all(r > 0 for r in ratios)
    wan.enable_cache(MagCacheConfig(threshold=0.5, num_inference_steps=STEPS, mag_ratios=ratios))
    try:
        with count_block_forwards(wan) as counter:
            sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    finally:
        wan.disable_cache()
    assert counter.full_forwards < 2 * STEPS


def test_mag_ratios_use_the_image_stream_of_two_stream_blocks():
    """Flux blocks return ``(encoder_hidden_states, hidden_states)``: the ratios are those of the image-token
    residual (first double block's ``hidden_states`` in, last single block's ``hidden_states`` out), computed
    here by hand; 6 image tokens and 5 text tokens, so the text stream could not even be subtracted."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    flux = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        pooled_projection_dim=8,
        axes_dims_rope=(2, 2, 4),
    ).eval()
    n_img, n_txt, steps = 6, 5, 3

    def run():
        torch.manual_seed(1)
        with torch.no_grad():
            for t in torch.linspace(0.9, 0.1, steps):
                flux(
                    hidden_states=torch.randn(1, n_img, 4),
                    encoder_hidden_states=torch.randn(1, n_txt, 16),
                    pooled_projections=torch.randn(1, 8),
                    timestep=t[None],
                    img_ids=torch.zeros(n_img, 3),
                    txt_ids=torch.zeros(n_txt, 3),
                    return_dict=False,
                )

    ins, outs = [], []
    handles = [
        flux.transformer_blocks[0].register_forward_pre_hook(
            lambda m, a, k: ins.append(k["hidden_states"]), with_kwargs=True
        ),
        flux.single_transformer_blocks[-1].register_forward_hook(lambda m, a, o: outs.append(o[1])),
    ]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    r = [o - i for i, o in zip(ins, outs, strict=True)]  # (1, 6, 16) image-token residuals
    assert all(x.shape == (1, n_img, 16) for x in r)
    by_hand = [1.0] + [
        (c.norm(dim=-1) / (p.norm(dim=-1) + 1e-8)).mean().item() for p, c in itertools.pairwise(r)
    ]
    assert calibrate_mag_ratios(flux, run, steps) == by_hand


def test_mag_ratios_refuse_a_stack_that_changes_the_token_count():
    class Grow(torch.nn.Module):
        def forward(self, hidden_states):
            return torch.cat([hidden_states, hidden_states], dim=1)

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer_blocks = torch.nn.ModuleList([Grow()])

        def forward(self, x):
            return self.transformer_blocks[0](x)

    model = Stack()
    with pytest.raises(ValueError, match="model returned hidden states of shape"):
        calibrate_mag_ratios(model, lambda: [model(torch.zeros(1, 3, 2)) for _ in range(2)], 2)


# -- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, -0.1, math.nan, math.inf])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        NaviCacheConfig(threshold=threshold)
    with pytest.raises(ValueError, match="threshold"):
        TeaCacheConfig(threshold=threshold, calibrate=True)
    with pytest.raises(ValueError, match="threshold"):
        EasyCacheConfig(threshold=threshold)


def test_bad_alignment_and_state(wan):
    with pytest.raises(ValueError, match="alignment_steps"):
        NaviCacheConfig(alignment_steps=50, num_inference_steps=50)
    with pytest.raises(ValueError, match="alignment_steps"):
        NaviCacheConfig(alignment_steps=0)
    with pytest.raises(ValueError, match="state"):
        NaviCacheConfig(state="kalman")
    with pytest.raises(ValueError, match="preset"):
        NaviCacheConfig.preset("turbo")
    noise, cond, uncond = _inputs()
    apply_navicache(
        wan, NaviCacheConfig(alignment_steps=20)
    )  # larger than the 12-step schedule of the context
    try:
        with pytest.raises(ValueError, match="alignment_steps"):
            sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    finally:
        remove_navicache(wan)


def test_bad_module():
    with pytest.raises(ValueError, match="no transformer blocks"):
        apply_navicache(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        apply_navicache("transformer")
    with pytest.raises(TypeError, match="NaviCacheConfig"):
        apply_navicache(TinyDiT(), {"threshold": 0.1})
    model = TinyDiT()
    apply_navicache(model)
    with pytest.raises(ValueError, match="already applied"):
        apply_navicache(model)
    remove_navicache(model)
    with pytest.raises(ValueError, match="no NaviCache, EasyCache or TeaCache is applied"):
        get_cache_stats(model)


def test_presets():
    assert [NaviCacheConfig.preset(p).threshold for p in ("fast", "balanced", "quality")] == [
        0.07,
        0.05,
        0.04,
    ]
    assert NaviCacheConfig.preset("balanced", state="ratio+drift").state == "ratio+drift"


# -- metrics ------------------------------------------------------------------------------------------------
def test_psnr_ssim_spearman_known_values():
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(2, 3, 4, 16, 16, generator=g) * 2 - 1
    assert psnr(ref, ref) == math.inf and ssim(ref, ref) == pytest.approx(1.0)
    assert psnr(ref + 0.1, ref) == pytest.approx(10 * math.log10(4 / 0.01))
    noisy = [ref + s * torch.randn(ref.shape, generator=g) for s in (0.05, 0.2, 0.5)]
    values = [ssim(n, ref) for n in noisy]
    assert values[0] > values[1] > values[2] and ssim(noisy[1], ref) == pytest.approx(ssim(ref, noisy[1]))
    a = np.array([0.3, 0.1, 0.7, 0.2, 0.9])
    assert spearman(a, np.exp(a)) == pytest.approx(1.0) and spearman(a, -a) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(
        np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1]
    )
    with pytest.raises(ValueError, match="same shape"):
        psnr(ref, ref[0])


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ssim_map_of_half_precision_frames_is_computed_in_float32(dtype):
    from icml_generative.cache.metrics import ssim_map

    g = torch.Generator().manual_seed(0)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 32), torch.linspace(0, 1, 32), indexing="ij")
    target = (
        0.5 + 0.15 * torch.sin(6 * xx) * torch.cos(4 * yy) + 0.03 * torch.randn(2, 3, 32, 32, generator=g)
    )
    target = target.clamp(0, 1)
    out = (target + 0.02 * torch.randn(2, 3, 32, 32, generator=g)).clamp(0, 1)
    a, b = out.to(dtype), target.to(dtype)
    half, expect = ssim_map(a, b, 1.0), ssim_map(a.float(), b.float(), 1.0)
    assert half.dtype == dtype
    # against float32 on the same rounded frames: measured 0.25 eps per pixel, 0.002 eps on the mean (both
    # dtypes); in half precision blur(a²) − mu² cancelled: the old map was off by 13 (bf16) and 0.2 (fp16)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(half.float(), expect, rtol=0, atol=eps)
    assert abs(half.float().mean().item() - expect.mean().item()) < 0.1 * eps


def test_model_level_caches_the_whole_forward_residual(wan):
    noise, cond, uncond = _inputs()
    reference = sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    calls = []
    handle = wan.register_forward_hook(
        lambda m, a, k, o: calls.append((k["hidden_states"] if "hidden_states" in k else a[0], o[0])),
        with_kwargs=True,
    )
    apply_navicache(wan, NaviCacheConfig(threshold=0.2, alignment_steps=2, level="model"))
    try:
        with count_block_forwards(wan) as counter:
            sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
        stats = get_cache_stats(wan)
    finally:
        remove_navicache(wan)
        handle.remove()
    assert 0 < stats.steps_skipped and counter.full_forwards == 2 * stats.steps_computed
    residual = {}
    for i, (x, out) in enumerate(calls):
        ctx, step = i % 2, i // 2
        if step in stats.computed_steps:
            residual[ctx] = out - x
        else:
            assert torch.equal(out, x + residual[ctx])
    assert torch.equal(sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS), reference)
    with pytest.raises(ValueError, match="level"):
        NaviCacheConfig(level="layer")


# -- issue 22: the step without step_index, new runs, shape changes, stacking, disable_cache -----------------
def _flux_parts(pipeline_class, in_channels: int):
    """A random-init two-block ``FluxTransformer2DModel`` in ``pipeline_class`` (no text encoder, no VAE)
    and prompt embeddings to pass directly, drawn from the returned generator."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=in_channels,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=(4, 4, 8),
    ).eval()
    pipe = pipeline_class(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=None,
        text_encoder=None,
        tokenizer=None,
        text_encoder_2=None,
        tokenizer_2=None,
        transformer=transformer,
    )
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(1)
    embeds = {
        "prompt_embeds": torch.randn(1, 4, 32, generator=g),
        "pooled_prompt_embeds": torch.randn(1, 32, generator=g),
    }
    return pipe, transformer, embeds, g


def _tiny_flux_pipeline():
    """A diffusers ``FluxPipeline`` around a random-init two-block ``FluxTransformer2DModel`` (16 latent
    tokens); the prompt embeddings are passed directly and latents returned (no text encoder, no VAE).
    Flux, like every diffusers 0.42 pipeline but Wan and Cosmos, calls ``cache_context("cond")`` with no
    ``step_index``."""
    pytest.importorskip("transformers")  # diffusers' pipelines import it (icml-generative[hf])
    from diffusers import FluxPipeline

    pipe, _, embeds, _ = _flux_parts(FluxPipeline, 16)

    negative = {
        "negative_prompt_embeds": torch.zeros(1, 4, 32),
        "negative_pooled_prompt_embeds": torch.zeros(1, 32),
    }

    def generate(
        steps=STEPS, true_cfg=False
    ):  # 64x64 pixels -> latents 8x8 -> 16 packed tokens of 16 channels
        return pipe(
            **embeds,
            **(negative if true_cfg else {}),
            true_cfg_scale=3.0 if true_cfg else 1.0,  # true CFG: "cond" and "uncond" contexts
            height=64,
            width=64,
            num_inference_steps=steps,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
        ).images

    return pipe, generate


def _count_forwards(model):
    counter = {"n": 0}
    handle = model.register_forward_pre_hook(lambda m, a: counter.__setitem__("n", counter["n"] + 1))
    return counter, handle


@pytest.mark.parametrize("true_cfg", [False, True])
def test_skips_in_a_diffusers_pipeline_without_step_index_and_resets_per_generation(true_cfg):
    pipe, make = _tiny_flux_pipeline()

    def generate():
        return make(true_cfg=true_cfg)

    reference = generate()
    contexts = ("cond", "uncond") if true_cfg else ("cond",)
    config = NaviCacheConfig(threshold=0.5, alignment_steps=2, num_inference_steps=STEPS)
    apply_navicache(pipe.transformer, config)
    counter, handle = _count_forwards(pipe.transformer)
    try:
        runs = []
        for _ in range(2):  # the second generation starts over: same decisions, same output
            counter["n"] = 0
            out = generate()
            stats = get_cache_stats(pipe.transformer)
            runs.append((out, counter["n"], stats.as_dict()))
    finally:
        handle.remove()
        remove_navicache(pipe.transformer)
    for out, forwards, stats in runs:
        assert forwards == STEPS * len(contexts)
        assert stats["steps_skipped"] > 0
        assert stats["steps_computed"] + stats["steps_skipped"] == STEPS == len(stats["records"])
        assert [r["step"] for r in stats["records"]] == list(range(STEPS))
        assert stats["full_forwards"] == dict.fromkeys(contexts, stats["steps_computed"])
        assert stats["records"][-1]["computed"]  # the last step is computed
        assert psnr(out, reference) > 15 and not torch.equal(out, reference)
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][2] == runs[1][2]
    assert torch.equal(generate(), reference)


@pytest.mark.usefixtures("one_torch_thread")
def test_errors_in_pipelines_without_a_step_count_or_a_context_say_what_to_pass():
    # Flux, like every diffusers 0.42 pipeline but Wan and Cosmos, puts no num_inference_steps in its cache
    # context, and DiTPipeline (like PixArt's) sets no cache context at all. The errors said "(diffusers
    # pipelines set it)" and "(diffusers pipelines do this)" although they were raised inside exactly such a
    # pipeline; they now say which pipelines do not and what to do there.
    pipe, generate = _tiny_flux_pipeline()
    apply_navicache(pipe.transformer, NaviCacheConfig.preset("balanced"))  # no num_inference_steps
    try:
        with pytest.raises(
            ValueError, match=r"num_inference_steps in the config .*Flux and most other pipelines do not"
        ):
            generate()
    finally:
        remove_navicache(pipe.transformer)
    from diffusers import AutoencoderKL, DDIMScheduler, DiTPipeline

    model = _dit_transformer_2d()
    torch.manual_seed(0)
    vae = AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(8,),
        latent_channels=4,
        norm_num_groups=8,
        sample_size=8,
    ).eval()
    dit_pipe = DiTPipeline(transformer=model, vae=vae, scheduler=DDIMScheduler())
    dit_pipe.set_progress_bar_config(disable=True)
    apply_navicache(model, NaviCacheConfig(num_inference_steps=4))
    try:
        with pytest.raises(
            RuntimeError, match=r"no cache context is set.*DiTPipeline.*do not: call the model in a loop"
        ):
            dit_pipe(class_labels=[3], num_inference_steps=4, guidance_scale=1.0, output_type="np")
    finally:
        remove_navicache(model)


@pytest.mark.parametrize("offload", [False, True])
def test_a_generation_that_raised_part_way_does_not_leave_the_next_one_mid_run(offload):
    # Flux puts no step index nor timestep in the cache context and the pipeline's end-of-call reset never
    # ran: the next generation continued the aborted run's step counter (its records were steps 4..11 then
    # 0..3 of a run begun mid-generation) and its output moved by 0.066 (mean |x| 0.94) from a fresh cache's
    # With pipe.enable_model_cpu_offload() first, the end-of-call removal of accelerate's hook dropped the hook
    # reading the forward's timestep (registered over accelerate's), and the same 0.066 came back.
    pipe, generate = _tiny_flux_pipeline()
    if offload:
        pytest.importorskip("accelerate")
        pipe.enable_model_cpu_offload(device="cpu")
    apply_navicache(
        pipe.transformer, NaviCacheConfig(threshold=0.5, alignment_steps=2, num_inference_steps=STEPS)
    )
    try:
        fresh, fresh_stats = generate(), get_cache_stats(pipe.transformer).as_dict()

        def abort(pipe, i, t, kwargs):
            if i == 3:
                raise KeyboardInterrupt
            return kwargs

        g = torch.Generator().manual_seed(5)
        with pytest.raises(KeyboardInterrupt):
            pipe(
                prompt_embeds=torch.randn(1, 4, 32, generator=g),
                pooled_prompt_embeds=torch.randn(1, 32, generator=g),
                height=64,
                width=64,
                num_inference_steps=STEPS,
                output_type="latent",
                callback_on_step_end=abort,
            )
        after, after_stats = generate(), get_cache_stats(pipe.transformer).as_dict()
    finally:
        remove_navicache(pipe.transformer)
    assert 0 < fresh_stats["steps_skipped"] < STEPS
    assert after_stats == fresh_stats and torch.equal(after, fresh)
    assert not any(pipe.transformer._diffusers_hook.hooks.values())  # the timestep hook is removed too


def _sample_without_step_index(model, noise, cond, num_steps=STEPS, timestep_field=False):
    """``sample_flow_euler`` as most diffusers pipelines call the model: ``cache_context("cond")`` alone
    (optionally with the ``timestep``), no step index, no reset between runs."""
    s = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)
    sigmas = 3.0 * s / (1 + 2.0 * s)
    x = noise.clone()
    with torch.no_grad():
        for i in range(num_steps):
            t = torch.full((x.shape[0],), float(sigmas[i]) * 1000.0)
            fields = {"timestep": t} if timestep_field else {}
            with cache_context(model, "cond", **fields):
                v = model(x, timestep=t, encoder_hidden_states=cond, return_dict=False)[0]
            x = x + (float(sigmas[i + 1]) - float(sigmas[i])) * v
    return x


def test_step_counter_without_step_index_and_new_runs_without_reset(wan):
    noise, cond, _ = _inputs()
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2, num_inference_steps=STEPS))
    try:
        first = _sample_without_step_index(wan, noise, cond)
        stats = get_cache_stats(wan).as_dict()
        second = _sample_without_step_index(wan, noise, cond)  # the counter ran the schedule: new run
        assert get_cache_stats(wan).as_dict() == stats
        # a shorter run, then a full one: the timestep increasing again starts the new run
        _sample_without_step_index(wan, noise, cond, num_steps=STEPS // 2, timestep_field=True)
        third = _sample_without_step_index(wan, noise, cond, timestep_field=True)
        assert get_cache_stats(wan).as_dict() == stats
    finally:
        remove_navicache(wan)
    assert stats["steps_skipped"] > 0 and len(stats["records"]) == STEPS
    assert [r["step"] for r in stats["records"]] == list(range(STEPS))
    assert torch.equal(first, second) and torch.equal(first, third)


@pytest.mark.parametrize("method", ["navicache-blocks", "navicache-model", "teacache"])
def test_batch_size_change_recomputes_instead_of_broadcasting(wan, method):
    noise1, cond1, _ = _inputs(batch=1)
    noise2, cond2, _ = _inputs(batch=2, seed=1)
    t = torch.full((1,), 500.0)
    schedule = {"threshold": 1e9, "alignment_steps": 2, "num_inference_steps": STEPS}  # skips when it can
    if method == "teacache":
        apply_teacache(wan, TeaCacheConfig(coefficients=[1.0, 0.0], **schedule))
    else:
        apply_navicache(wan, NaviCacheConfig(level=method.split("-")[1], **schedule))
    try:
        with torch.no_grad():
            for i, (x, c) in enumerate([(noise1, cond1)] * 2 + [(noise2, cond2)] * 2):
                with cache_context(wan, "cond", step_index=i):
                    out = wan(x, timestep=t.expand(x.shape[0]), encoder_hidden_states=c, return_dict=False)[0]
                if i == 2:
                    changed = out
        stats = get_cache_stats(wan)
    finally:
        remove_navicache(wan)
    with torch.no_grad():
        expected = wan(noise2, timestep=t.expand(2), encoder_hidden_states=cond2, return_dict=False)[0]
    assert changed.shape == expected.shape
    torch.testing.assert_close(changed, expected)  # recomputed, not batch 1's residual broadcast
    assert [r.computed for r in stats.records] == [True, True, True, False]  # the new shape then caches


def test_refuses_to_stack_with_another_cache(wan):
    apply_navicache(wan, NaviCacheConfig(num_inference_steps=STEPS))
    try:
        with pytest.raises(ValueError, match=r"already been enabled with .*NaviCacheConfig"):
            wan.enable_cache(FirstBlockCacheConfig(threshold=0.1))
    finally:
        remove_navicache(wan)
    assert not wan.is_cache_enabled
    wan.enable_cache(FirstBlockCacheConfig(threshold=0.1))
    try:
        with pytest.raises(ValueError, match=r"already has a cache: FirstBlockCacheConfig \(enable_cache\)"):
            apply_navicache(wan, NaviCacheConfig(num_inference_steps=STEPS))
    finally:
        wan.disable_cache()
    model = TinyDiT()  # a plain module: diffusers' hooks applied directly
    apply_first_block_cache(model, FirstBlockCacheConfig(threshold=0.1))
    with pytest.raises(ValueError, match=r"already has a cache: hook 'fbc_leader_block_hook'"):
        apply_navicache(model, NaviCacheConfig(num_inference_steps=STEPS))


def test_diffusers_disable_cache_removes_navicache(wan):
    noise, cond, uncond = _inputs()
    reference = sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS)
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2))
    assert wan.is_cache_enabled
    assert not torch.equal(sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS), reference)
    wan.disable_cache()
    assert not wan.is_cache_enabled and "disable_cache" not in vars(wan)
    with pytest.raises(ValueError, match="no NaviCache"):
        get_cache_stats(wan)
    assert torch.equal(sample_flow_euler(wan, noise, cond, uncond, 3.0, STEPS), reference)
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2))  # and again
    remove_navicache(wan)
    assert not wan.is_cache_enabled


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("start", [0, 1])
def test_a_generation_after_an_inversion_starts_a_fresh_run(start):
    # DDIM inversion (rising timesteps, each call a run of its own) then regeneration from the inverted latent,
    # in a loop with cache_context("cond") alone, no reset between: the regeneration's first timestep (900) is
    # the inversion's last, not larger, so it continued the inversion's last one-call run. It began at step 1,
    # measured its ratio against the inversion's identical call (k = 0) and skipped steps 2..7, and its last
    # call began a run of its own; measured (start=0): max |x - fresh cache's| 1.50, |x - uncached| 1.36
    # against the fresh cache's 0.59 (mean |x| 0.50). Now bit-identical to a fresh cache's run.
    from diffusers import DDIMInverseScheduler, DDIMScheduler

    base = _dit_transformer_2d()
    steps, labels = 10, torch.tensor([3])
    x0 = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))

    @torch.no_grad()
    def sample(model, scheduler, x, begin=0):
        scheduler.set_timesteps(steps)
        for t in scheduler.timesteps[begin:]:
            with cache_context(model, "cond"):
                eps = model(x, timestep=t[None], class_labels=labels).sample
            x = scheduler.step(eps, t, x).prev_sample
        return x

    def cached():
        model = copy.deepcopy(base)
        apply_navicache(model, NaviCacheConfig(threshold=0.3, alignment_steps=2, num_inference_steps=steps))
        return model

    inverted = sample(base, DDIMInverseScheduler(num_train_timesteps=1000), x0)
    model = cached()
    assert torch.equal(
        sample(model, DDIMInverseScheduler(num_train_timesteps=1000), x0), inverted
    )  # no skips
    after = sample(model, DDIMScheduler(num_train_timesteps=1000), inverted, start)
    fresh_model = cached()
    fresh = sample(fresh_model, DDIMScheduler(num_train_timesteps=1000), inverted, start)
    stats, fresh_stats = get_cache_stats(model).as_dict(), get_cache_stats(fresh_model).as_dict()
    assert fresh_stats["steps_skipped"] > 0 and len(fresh_stats["records"]) == steps - start
    assert stats == fresh_stats
    assert torch.equal(after, fresh)


def _tiny_skyreels_pipeline(scheduler_class):
    """A diffusers ``SkyReelsV2Pipeline`` (Wan-like, random-init three-block transformer on (1, 3, 4, 8, 8)
    latents) with ``scheduler_class``; it calls ``cache_context("cond")`` / ``("uncond")`` with no step index
    and, unlike Flux, passes no ``sigmas`` to ``set_timesteps``, so any diffusers scheduler fits."""
    pytest.importorskip("transformers")  # diffusers' pipelines import it (icml-generative[hf])
    from diffusers import SkyReelsV2Pipeline, SkyReelsV2Transformer3DModel

    torch.manual_seed(0)
    transformer = SkyReelsV2Transformer3DModel(**TINY_WAN).eval()
    pipe = SkyReelsV2Pipeline(
        tokenizer=None, text_encoder=None, vae=None, transformer=transformer, scheduler=scheduler_class()
    )
    pipe.set_progress_bar_config(disable=True)
    cond = class_tokens(torch.tensor([1]))
    counter, _ = _count_forwards(transformer)

    def generate(steps):
        counter["n"] = 0
        with torch.no_grad():
            out = pipe(
                prompt_embeds=cond,
                negative_prompt_embeds=torch.zeros_like(cond),
                height=64,
                width=64,
                num_frames=13,
                num_inference_steps=steps,
                guidance_scale=4.0,  # CFG: "cond" and "uncond" contexts
                output_type="latent",
                generator=torch.Generator().manual_seed(0),
            ).frames
        return out, counter["n"]

    return pipe, generate


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # KDPM2's numpy 2 deprecations, inside diffusers
@pytest.mark.parametrize("scheduler", ["HeunDiscreteScheduler", "KDPM2DiscreteScheduler"])
def test_schedulers_with_two_model_calls_per_step(scheduler):
    # Heun and KDPM2 call the model 2n-1 times for n steps (len(scheduler.timesteps)). With the pipeline's
    # num_inference_steps (n = 8) in the config, the step counter restarted the run at call 9 of 15: the
    # generation was cached as two runs (8 calls, then 7), the second recomputed 2 "alignment" calls, its
    # last call, the generation's last, was skipped, and the statistics showed 7 steps. At threshold 1e9
    # (skip when allowed), Heun: 5 of 15 calls per context computed, the last one skipped. It now raises.
    import diffusers

    steps = 8
    pipe, generate = _tiny_skyreels_pipeline(getattr(diffusers, scheduler))
    reference, forwards = generate(steps)
    calls = len(pipe.scheduler.timesteps)
    assert calls == 2 * steps - 1 and forwards == 2 * calls  # cond + uncond
    assert pipe.num_timesteps == calls  # the remedy the error names: the denoising loop's length
    schedule = {"alignment_steps": 2}
    apply_navicache(pipe.transformer, NaviCacheConfig(threshold=1e9, num_inference_steps=steps, **schedule))
    try:
        with pytest.raises(
            ValueError,
            match=r"more than num_inference_steps \(8\) times in one generation \(call 9 .*"
            r"pipe\.num_timesteps.*HeunDiscreteScheduler",
        ):
            generate(steps)
    finally:
        remove_navicache(pipe.transformer)
    runs = {}
    for threshold in (1e-12, 1e9):  # skips nothing / skips every call it may
        apply_navicache(
            pipe.transformer, NaviCacheConfig(threshold=threshold, num_inference_steps=calls, **schedule)
        )
        try:
            runs[threshold] = [
                (*generate(steps), get_cache_stats(pipe.transformer).as_dict()) for _ in range(2)
            ]
        finally:
            remove_navicache(pipe.transformer)
    for threshold, [(out, forwards, stats), second] in runs.items():
        assert forwards == 2 * calls and [r["step"] for r in stats["records"]] == list(range(calls))
        computed = list(range(calls)) if threshold < 1 else [0, 1, calls - 1]  # alignment and last call
        assert [r["step"] for r in stats["records"] if r["computed"]] == computed
        assert stats["full_forwards"] == {"cond": len(computed), "uncond": len(computed)}
        assert torch.equal(second[0], out) and second[2] == stats  # the second generation starts afresh
    assert torch.equal(
        runs[1e-12][0][0], reference
    )  # nothing skipped: bit-identical to the uncached pipeline
    assert not torch.equal(runs[1e9][0][0], reference)


def test_a_step_index_beyond_num_inference_steps_raises(wan):
    # A loop over Heun's 2n-1 timesteps that passes step_index=i with num_inference_steps=n: steps n-1..2n-2
    # were all "last steps" (computed, recorded beyond the schedule); it now raises.
    noise, cond, _ = _inputs()
    apply_navicache(wan, NaviCacheConfig(threshold=0.5, alignment_steps=2, num_inference_steps=STEPS))
    try:
        with torch.no_grad(), cache_context(wan, "cond", step_index=STEPS):
            with pytest.raises(ValueError, match=r"step_index 12, but num_inference_steps is 12.*2n-1"):
                wan(noise, timestep=torch.full((1,), 500.0), encoder_hidden_states=cond)
    finally:
        remove_navicache(wan)


@pytest.mark.usefixtures("one_torch_thread")
def test_skyreels_diffusion_forcing_runs_the_step_matrix_and_the_error_names_pipe_num_timesteps():
    # SkyReels' diffusion forcing with ar_step > 0 denoises the latent frames staggered: len(step_matrix)
    # model calls (16 per context for n = 10, 4 latent frames, ar_step=2), while len(pipe.scheduler.timesteps)
    # stays 10. The leading frame's timestep stays 0 once it is done, so n = 10 raises at call 11; the message
    # named len(pipe.scheduler.timesteps), the value already set. pipe.num_timesteps (16) is the right one.
    # A long video's windows (18, then 14 calls) make one run of 32 calls with addnoise_condition=0, while
    # pipe.num_timesteps is the last window's 14; with addnoise_condition > 0 each window is a run of its own.
    pytest.importorskip("transformers")  # diffusers' pipelines import it (icml-generative[hf])
    from diffusers import (
        SkyReelsV2DiffusionForcingPipeline,
        SkyReelsV2Transformer3DModel,
        UniPCMultistepScheduler,
    )

    torch.manual_seed(0)
    transformer = SkyReelsV2Transformer3DModel(**TINY_WAN).eval()
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=8.0
    )
    pipe = SkyReelsV2DiffusionForcingPipeline(
        tokenizer=None, text_encoder=None, vae=None, transformer=transformer, scheduler=scheduler
    )
    pipe.set_progress_bar_config(disable=True)
    cond = class_tokens(torch.tensor([1]))
    counter, _ = _count_forwards(transformer)
    steps = 10

    def generate(**frames):
        counter["n"] = 0
        with torch.no_grad():
            out = pipe(
                prompt=None,
                prompt_embeds=cond,
                negative_prompt_embeds=torch.zeros_like(cond),
                height=64,
                width=64,
                num_inference_steps=steps,
                guidance_scale=4.0,  # CFG: "cond" and "uncond" contexts
                ar_step=2,
                causal_block_size=1,
                output_type="latent",
                generator=torch.Generator().manual_seed(0),
                **frames,
            ).frames
        return out, counter["n"]

    cases = {
        "short": {"num_frames": 13},
        "long": {"num_frames": 29, "base_num_frames": 17, "overlap_history": 5},
    }
    for case, calls, last_window in (("short", 16, 16), ("long", 32, 14)):
        reference, forwards = generate(**cases[case])
        assert forwards == 2 * calls and pipe.num_timesteps == last_window
        assert len(pipe.scheduler.timesteps) == steps
        schedule = {"alignment_steps": 2}
        for wrong in sorted({steps, last_window} - {calls}):  # short: 10; long: 10 and 14
            apply_navicache(
                transformer, NaviCacheConfig(threshold=1e9, num_inference_steps=wrong, **schedule)
            )
            try:
                with pytest.raises(
                    ValueError,
                    match=rf"more than num_inference_steps \({wrong}\) times .*\(call {wrong + 1} .*"
                    r"pipe\.num_timesteps after a call \(not len\(pipe\.scheduler\.timesteps\) in general\)"
                    r".*len\(step_matrix\).*one loop per window",
                ):
                    generate(**cases[case])
            finally:
                remove_navicache(transformer)
        runs = {}
        for threshold in (1e-12, 1e9):  # skips nothing / skips every call it may
            apply_navicache(
                transformer, NaviCacheConfig(threshold=threshold, num_inference_steps=calls, **schedule)
            )
            try:
                runs[threshold] = [
                    (*generate(**cases[case]), get_cache_stats(transformer).as_dict()) for _ in range(2)
                ]
            finally:
                remove_navicache(transformer)
        for threshold, [(out, forwards, stats), second] in runs.items():
            assert forwards == 2 * calls and [r["step"] for r in stats["records"]] == list(range(calls))
            computed = list(range(calls)) if threshold < 1 else [0, 1, calls - 1]  # alignment and last call
            assert [r["step"] for r in stats["records"] if r["computed"]] == computed
            assert torch.equal(second[0], out) and second[2] == stats  # the second generation starts afresh
        assert torch.equal(runs[1e-12][0][0], reference)  # nothing skipped: bit-identical, uncached
        assert not torch.equal(runs[1e9][0][0], reference)
    # addnoise_condition > 0: the overlap frame leading window 2 has timestep 20, above the 0 before it, so
    # window 2 is a run of its own; the longest window's 18 raises nothing, window 2's last call is not forced
    apply_navicache(transformer, NaviCacheConfig(threshold=1e9, num_inference_steps=18, alignment_steps=2))
    try:
        generate(**cases["long"], addnoise_condition=20)
        stats = get_cache_stats(transformer).as_dict()  # the last run's: window 2
    finally:
        remove_navicache(transformer)
    assert [r["step"] for r in stats["records"]] == list(range(14))
    assert [r["step"] for r in stats["records"] if r["computed"]] == [0, 1]


@pytest.mark.usefixtures("one_torch_thread")
def test_img2img_strength_runs_fewer_calls_and_pipe_num_timesteps_keeps_the_last_one_computed():
    # img2img with strength 0.5 runs scheduler.timesteps[t_start:], 6 calls for n = 12: with n in the config
    # nothing raises but the run's last call is not forced (calls 0 and 1 computed at threshold 1e9); with
    # pipe.num_timesteps (6), as the docs say, calls 0, 1 and 5. FluxImg2ImgPipeline sets no cache context
    # itself: the test wraps the call in "cond", as a pipeline calling cache_context("cond") would.
    pytest.importorskip("transformers")  # diffusers' pipelines import it (icml-generative[hf])
    from diffusers import FluxImg2ImgPipeline

    # 64 input channels: 16 latent channels, packed 2x2 as Flux's VAE latents are
    pipe, transformer, embeds, g = _flux_parts(FluxImg2ImgPipeline, 64)
    image = torch.randn(1, 16, 8, 8, generator=g)  # already 16-channel latents: no VAE

    def generate():
        with torch.no_grad(), transformer.cache_context("cond"):
            return pipe(
                **embeds,
                image=image,
                strength=0.5,
                height=64,
                width=64,
                num_inference_steps=STEPS,
                output_type="latent",
                generator=torch.Generator().manual_seed(0),
            ).images

    generate()
    calls = pipe.num_timesteps
    assert calls == STEPS // 2 and len(pipe.scheduler.timesteps) == STEPS
    for n, computed in ((STEPS, [0, 1]), (calls, [0, 1, calls - 1])):
        apply_navicache(transformer, NaviCacheConfig(threshold=1e9, alignment_steps=2, num_inference_steps=n))
        try:
            generate()
            stats = get_cache_stats(transformer).as_dict()
        finally:
            remove_navicache(transformer)
        assert [r["step"] for r in stats["records"]] == list(range(calls))
        assert [r["step"] for r in stats["records"] if r["computed"]] == computed
