"""The DiT testbed (diffusers' ``DiTTransformer2DModel`` on clips laid out as one image: frames stacked as
channels, or tiled into one canvas) and every cache method of the reproduction on it. Tiny sizes: a few
seconds in all."""

from dataclasses import replace

import pytest
import torch
from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig

from icml_generative.cache import (
    EasyCacheConfig,
    NaviCacheConfig,
    TeaCacheConfig,
    apply_easycache,
    apply_navicache,
    apply_teacache,
    calibrate_mag_ratios,
    count_block_forwards,
    fit_teacache_coefficients,
    get_cache_stats,
    psnr,
    remove_navicache,
)
from icml_generative.cache.teacache import dit_modulated_input, modulated_input
from icml_generative_experiments.cache.testbed import (
    DiTTestbedConfig,
    class_tokens,
    moving_sprites,
    pretrained_testbed,
    sample_flow_euler,
    tile_frames,
    tiled_dit_class,
    tiny_dit,
    train_testbed,
    untile_frames,
)

torch.set_num_threads(1)
STEPS = 10
TINY = DiTTestbedConfig(size=8, num_layers=3, num_heads=2, head_dim=8, train_steps=2, batch_size=2)


@pytest.fixture(scope="module")
def dit():
    return tiny_dit(TINY).eval()


def _inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(batch, TINY.channels, TINY.frames, TINY.size, TINY.size, generator=g)
    cond = class_tokens(torch.arange(batch) % 4)
    return noise, cond, torch.zeros_like(cond)


def test_tiling_round_trip_and_layout():
    clips = torch.randn(2, 3, 4, 5, 6)
    canvas = tile_frames(clips, 2)
    assert canvas.shape == (2, 3, 10, 12)
    # row-major frames: frame 1 is the top-right tile, frame 2 the bottom-left one
    assert torch.equal(canvas[:, :, :5, 6:], clips[:, :, 1]) and torch.equal(
        canvas[:, :, 5:, :6], clips[:, :, 2]
    )
    assert torch.equal(untile_frames(canvas, 2), clips)
    with pytest.raises(ValueError, match="clips must be"):
        tile_frames(torch.randn(2, 3, 3, 5, 5), 2)
    with pytest.raises(ValueError, match="canvas must be"):
        untile_frames(torch.randn(2, 3, 9, 10), 2)


def test_tiled_dit_shapes_labels_and_saved_weights(dit, tmp_path):
    noise, cond, uncond = _inputs(4)
    t = torch.full((4,), 500.0)
    out = dit(noise, timestep=t, encoder_hidden_states=cond, return_dict=False)[0]
    assert out.shape == noise.shape and torch.isfinite(out).all()
    # a one-hot token is its class, the all-zero token the null class (index = number of classes)
    torch.testing.assert_close(out, dit(noise, timestep=t, class_labels=torch.arange(4)).sample)
    null = dit(noise, timestep=t, class_labels=torch.full((4,), 4)).sample
    torch.testing.assert_close(dit(noise, timestep=t, encoder_hidden_states=uncond).sample, null)
    with pytest.raises(ValueError, match="class_labels"):
        dit(noise, timestep=t)
    with pytest.raises(ValueError, match="hidden_states must be clips"):
        dit(noise[:, :, :3], timestep=t, encoder_hidden_states=cond)
    # the channel layout: frame f of channel c is input channel c·F + f of one size × size image
    assert dit.config.in_channels == 3 * 4 and dit.config.sample_size == TINY.size
    image = noise.flatten(1, 2)
    assert torch.equal(image[:, 1 * 4 + 2], noise[:, 1, 2])
    # the tile layout: one canvas of 2 × 2 frames, same interface
    tiled = tiny_dit(replace(TINY, layout="tile")).eval()
    assert tiled.config.in_channels == 3 and tiled.config.sample_size == 2 * TINY.size
    assert tiled(noise, timestep=t, encoder_hidden_states=cond).sample.shape == noise.shape
    # trained, cached and reloaded under a key of its own
    model, info = pretrained_testbed(TINY, tmp_path, progress=False)
    assert info["trained_now"] and "navicache-testbed-dit-" in info["path"]
    again, info = pretrained_testbed(TINY, tmp_path, progress=False)
    assert not info["trained_now"] and isinstance(again, tiled_dit_class())
    torch.testing.assert_close(
        again(noise, timestep=t, encoder_hidden_states=cond).sample,
        model(noise, timestep=t, encoder_hidden_states=cond).sample,
    )


def test_dit_testbed_config_bad_input():
    with pytest.raises(ValueError, match="frames must be a square number"):
        DiTTestbedConfig(frames=8, layout="tile")
    assert DiTTestbedConfig(frames=8).frames == 8  # any number of frames as channels
    with pytest.raises(ValueError, match="frames must be an integer >= 2"):
        DiTTestbedConfig(frames=1)
    with pytest.raises(ValueError, match="layout"):
        DiTTestbedConfig(layout="time")
    with pytest.raises(ValueError, match="multiples of frames"):
        tiled_dit_class()(frames=4, layout="channels", in_channels=3, out_channels=3)
    # the tile recipe keeps the key it was measured under before the layout field existed
    assert DiTTestbedConfig(layout="tile").key() == "dit-3a6ca5e900eb"
    with pytest.raises(ValueError, match="patch_size"):
        DiTTestbedConfig(patch_size=3)
    with pytest.raises(ValueError, match="speeds"):
        DiTTestbedConfig(speeds=())
    with pytest.raises(ValueError, match="frames must be a positive square"):
        tiled_dit_class()(frames=3)
    with pytest.raises(TypeError, match="cfg must be"):
        train_testbed({"frames": 4})
    assert DiTTestbedConfig().key() != DiTTestbedConfig(train_steps=1).key()
    clips, _ = moving_sprites(2, TINY)
    assert clips.shape == (2, 3, 4, 8, 8)


def test_dit_modulated_input_is_the_first_self_attention_input(dit):
    noise, cond, _ = _inputs()
    seen = {}

    def grab(module, args, kwargs):
        seen["args"], seen["kwargs"] = args, kwargs

    block = dit.transformer_blocks[0]
    attn_in = []
    h1 = block.register_forward_pre_hook(grab, with_kwargs=True)
    h2 = block.attn1.register_forward_pre_hook(
        lambda m, a, k: attn_in.append(a[0] if a else k["hidden_states"]), with_kwargs=True
    )
    try:
        dit(noise, timestep=torch.full((2,), 300.0), encoder_hidden_states=cond)
    finally:
        h1.remove()
        h2.remove()
    x = seen["args"][0]
    m = dit_modulated_input(block, x, seen["args"], seen["kwargs"])
    torch.testing.assert_close(m, attn_in[0].float())
    assert torch.equal(modulated_input(block, x, seen["args"], seen["kwargs"]), m)
    assert torch.equal(dit_modulated_input(torch.nn.Linear(2, 2), x, (x,), {}), x)  # other blocks: the input


def test_every_cache_method_runs_on_the_tiled_dit(dit):
    noise, cond, uncond = _inputs()
    reference = sample_flow_euler(dit, noise, cond, uncond, 3.0, STEPS)
    blocks = len(dit.transformer_blocks)

    def run():
        with count_block_forwards(dit) as counter:
            out = sample_flow_euler(dit, noise, cond, uncond, 3.0, STEPS)
        return out, counter.blocks / (blocks * 2)

    for apply in (
        lambda: apply_navicache(dit, NaviCacheConfig(threshold=0.3, alignment_steps=2)),
        lambda: apply_navicache(dit, NaviCacheConfig(threshold=0.3, alignment_steps=2, state="ratio+drift")),
        lambda: apply_easycache(dit, EasyCacheConfig(threshold=0.3, alignment_steps=2)),
    ):
        apply()
        try:
            out, forwards = run()
            stats = get_cache_stats(dit)
        finally:
            remove_navicache(dit)
        assert stats.steps_skipped > 0 and forwards == stats.steps_computed < STEPS
        assert psnr(out, reference) > 10
    # TeaCache: calibration with the DiT indicator, then skipping
    apply_teacache(dit, TeaCacheConfig(calibrate=True, num_inference_steps=STEPS))
    run()
    coefficients = fit_teacache_coefficients([get_cache_stats(dit)], degree=2)
    remove_navicache(dit)
    apply_teacache(dit, TeaCacheConfig(threshold=0.3, coefficients=coefficients, alignment_steps=2))
    try:
        _, forwards = run()
    finally:
        remove_navicache(dit)
    assert forwards < STEPS
    # diffusers' own caches through CacheMixin.enable_cache (BasicTransformerBlock is in its registry)
    dit.enable_cache(FirstBlockCacheConfig(threshold=0.5))
    try:
        _, forwards = run()
    finally:
        dit.disable_cache()
    assert forwards < STEPS
    mag = calibrate_mag_ratios(dit, lambda: sample_flow_euler(dit, noise, cond, uncond, 3.0, STEPS), STEPS, 2)
    dit.enable_cache(
        MagCacheConfig(threshold=0.5, num_inference_steps=STEPS, mag_ratios=mag, retention_ratio=0.2)
    )
    try:
        _, forwards = run()
    finally:
        dit.disable_cache()
    assert forwards < STEPS
    assert torch.equal(sample_flow_euler(dit, noise, cond, uncond, 3.0, STEPS), reference)
