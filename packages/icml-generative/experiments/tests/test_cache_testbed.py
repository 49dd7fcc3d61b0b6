"""The Wan testbed and what both testbeds share (:mod:`icml_generative_experiments.cache.testbed`): moving-sprite
clips, the motion-direction check, training (EMA, time patches) and the flow-matching Euler sampler."""

from dataclasses import replace

import pytest
import torch

from icml_generative_experiments.cache.testbed import (
    DIRECTIONS,
    TestbedConfig,
    flow_sigmas,
    motion_accuracy,
    motion_directions,
    moving_sprites,
    sample_flow_euler,
    tiny_wan,
    train_testbed,
)

torch.set_num_threads(1)
SMALL = TestbedConfig(frames=4, size=8, num_layers=3, head_dim=8, ffn_dim=16)


@pytest.fixture(scope="module")
def wan():
    return tiny_wan(SMALL).eval()


def test_moving_sprites_move_at_constant_velocity():
    cfg = TestbedConfig()
    clips, labels = moving_sprites(32, cfg, seed=3)
    assert clips.shape == (32, 3, 8, 16, 16) and clips.min() >= -1 and clips.max() <= 1
    assert set(labels.tolist()) == {0, 1, 2, 3}
    single, labels = moving_sprites(16, cfg, seed=4, max_sprites=1)
    for clip, label in zip(single, labels, strict=True):
        dy, dx = DIRECTIONS[label]
        # one sprite at speed 1 or 2: every frame is the previous one shifted (wrapping) in the labelled direction
        assert (clip != -0.8).any()
        assert any(
            all(
                torch.equal(torch.roll(clip[:, f], (dy * v, dx * v), (1, 2)), clip[:, f + 1])
                for f in range(cfg.frames - 1)
            )
            for v in (1, 2)
        )
    assert torch.equal(moving_sprites(4, cfg, seed=1)[0], moving_sprites(4, cfg, seed=1)[0])


def test_motion_directions_reads_the_labelled_motion():
    cfg = TestbedConfig(max_sprites=2, speeds=(1, 2))
    clips, labels = moving_sprites(64, cfg, seed=11)
    assert torch.equal(motion_directions(clips, cfg.speeds), labels)
    # played backwards, every clip moves the opposite way (right <-> left, down <-> up)
    assert torch.equal(motion_directions(clips.flip(2), cfg.speeds), labels ^ 1)
    # a static clip has no preferred direction beyond ties; a clip of noise is at chance over many clips
    noise = torch.randn(400, 3, 4, 16, 16, generator=torch.Generator().manual_seed(0))
    chance = (motion_directions(noise) == torch.arange(400) % 4).double().mean().item()
    assert abs(chance - 0.25) < 0.08
    with pytest.raises(ValueError, match="clips"):
        motion_directions(clips[:, :, :1])
    with pytest.raises(ValueError, match="speeds"):
        motion_directions(clips, (0,))


def test_training_with_ema_and_time_patches():
    cfg = TestbedConfig(frames=4, size=8, num_layers=2, head_dim=8, ffn_dim=16, patch_frames=2, train_steps=3)
    plain = train_testbed(cfg, progress=False)
    assert plain.config.patch_size[0] == 2
    # a decay that keeps nothing of the past is the raw weights; a real decay averages them
    instant = train_testbed(replace(cfg, ema_decay=1e-12), progress=False)
    averaged = train_testbed(replace(cfg, ema_decay=0.9), progress=False)
    for a, b in zip(plain.parameters(), instant.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert any(
        not torch.allclose(a, c) for a, c in zip(plain.parameters(), averaged.parameters(), strict=True)
    )
    with pytest.raises(ValueError, match="patch_frames"):
        TestbedConfig(frames=5, patch_frames=2)
    with pytest.raises(ValueError, match="ema_decay"):
        TestbedConfig(ema_decay=1.0)
    with pytest.raises(ValueError, match="speeds"):
        TestbedConfig(speeds=())


def test_motion_accuracy_reports_the_measure_and_its_ceiling(wan):
    result = motion_accuracy(wan, SMALL, n=8, num_steps=4)
    assert result["data_accuracy"] == 1.0 and result["chance"] == 0.25 and result["n"] == 8
    assert 0.0 <= result["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="n must"):
        motion_accuracy(wan, SMALL, n=0)


def test_flow_sigmas_and_euler_sampler_on_a_known_flow():
    sigmas = flow_sigmas(10, shift=3.0)
    assert sigmas[0] == 1 and sigmas[-1] == 0 and (sigmas.diff() < 0).all()

    class Exact(torch.nn.Module):  # the velocity field of a point mass at `target`: v = (x - target) / sigma
        target = torch.full((1, 3, 2, 4, 4), 0.5)

        def forward(self, x, timestep, encoder_hidden_states, return_dict=False):
            return ((x - self.target) / (timestep[:, None, None, None, None] / 1000),)

    noise = torch.randn(1, 3, 2, 4, 4)
    out = sample_flow_euler(Exact(), noise, torch.zeros(1, 1, 8), num_steps=10)
    torch.testing.assert_close(out, Exact.target)
