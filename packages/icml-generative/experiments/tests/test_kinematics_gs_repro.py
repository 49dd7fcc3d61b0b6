"""The kinematics-gs-blur testbed and reproduction: the true scene as a KinematicsGS renders the sharp frames
exactly, blur comes from motion only, the split finds the mover of a one-mover scene after training from the
reproduction's start, and (slow) the quick reproduction end to end."""

import math

import pytest
import torch

from icml_generative.kinematics_gs import KinematicsGS, TrainConfig, train_kinematics_gs
from icml_generative_experiments.kinematics_gs.repro import SPLIT_THRESHOLD, TRAIN, arm_model, initialize
from icml_generative_experiments.kinematics_gs.scenes import make_scene, make_video

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # one torch thread for this module (root conftest)


def true_model(scene) -> KinematicsGS:
    model = KinematicsGS(len(scene.means), frequencies=2, hidden=0, blur="none", motion_aligned=False)
    model.initialize(scene.means, motion=scene.motion_coefficients(2))
    with torch.no_grad():
        model.log_scales.copy_(scene.scales.log())
        model.quats.copy_(scene.quats)
        model.opacity_logits.copy_(torch.logit(scene.opacities))
        model.color_logits.copy_(torch.logit(scene.colors.clamp(1e-6, 1 - 1e-6)))
    return model


def test_the_true_scene_as_a_model_renders_the_sharp_frames():
    scene = make_scene(0, size=24)
    video = make_video(scene, frames=4, subframes=4)
    model = true_model(scene)
    for f, t in enumerate(video.times.tolist()):
        torch.testing.assert_close(model.positions(t).detach(), scene.positions(t), rtol=0, atol=1e-6)
        render = model.render(video.viewmats[f], video.Ks[f], t, 24, 24).detach()
        torch.testing.assert_close(render, video.sharp[f], rtol=0, atol=1e-4)
    assert video.held_out.tolist() == [False, True, False, False]
    assert video.exposure == pytest.approx(0.25)


def test_blur_comes_from_the_movers_only():
    scene = make_scene(1, size=24)
    video = make_video(scene, frames=5, subframes=6)
    moving = (video.blurry - video.sharp).abs().amax(-1) > 0.05
    assert bool(moving.any())  # the movers blur
    scene.amplitude.zero_()
    still = make_video(scene, frames=5, subframes=6)
    torch.testing.assert_close(still.blurry, still.sharp, rtol=0, atol=1e-5)


def test_the_split_finds_the_mover_of_a_one_mover_scene():
    scene = make_scene(2, movers=1)
    video = make_video(scene)
    model, extra = arm_model("kinematics-gs", len(scene.means), video.exposure, 4)
    initialize(model, scene, 2)
    train = ~video.held_out
    cfg = TrainConfig(steps=200, **TRAIN, **{**extra, "split_at": 0.5})
    log = train_kinematics_gs(
        model, video.blurry[train], video.viewmats[train], video.Ks[train], video.times[train], cfg
    )
    mover = scene.mover >= 0
    assert log.dynamic is not None and int(mover.sum()) == 46
    accuracy = float((log.dynamic == mover).double().mean())
    assert accuracy >= 0.9, accuracy
    assert float(log.dynamic[mover].double().mean()) >= 0.9  # the mover's Gaussians are found dynamic
    assert (
        SPLIT_THRESHOLD < 0.02 * float(scene.amplitude.norm(dim=-1).min()) ** 2
    )  # far below a mover's variance


@pytest.mark.slow
def test_the_quick_reproduction_runs_end_to_end():
    from icml_generative_experiments.kinematics_gs.repro import run

    result = run("quick")
    assert set(result["checks"]) == {
        "beats_no_blur_by_2db",
        "noninferior_to_subframe",
        "lower_anisotropy_than_subframe",
    }
    assert math.isfinite(result["ours"]) and math.isfinite(result["baseline"])
    assert math.isfinite(result["headroom"]["oracle_minus_no_blur_db"])
    methods = [row["method"] for row in result["rows"]]
    assert methods[:4] == ["oracle", "no-blur", "subframe", "kinematics-gs"]
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
