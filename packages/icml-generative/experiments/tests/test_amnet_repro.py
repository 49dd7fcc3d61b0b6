"""The reproduction ``amnet-any-modality`` (:mod:`icml_generative_experiments.amnet.repro`): the clip testbed,
the training loop, the equal-capacity baseline, and (slow) one tiny run through the runner."""

import numpy as np
import pytest
import torch

import icml_generative_experiments.amnet.repro as repro
from icml_generative.amnet import AMNet
from icml_generative_experiments.amnet import testbed as tb
from icml_tools.repro import run_reproduction


def test_clips_are_seeded_and_splits_use_other_photographs():
    a, b = tb.make_clip("train", 0, 2), tb.make_clip("train", 0, 2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["clean"], tb.make_clip("train", 1, 2)["clean"])
    s, t = tb.SIZE, tb.FRAMES
    shapes = {
        "clean": (t, 3, s, s),
        "low": (t, 3, s, s),
        "events": (t, tb.BINS, s, s),
        "infrared": (t, 1, s, s),
    }
    assert {k: tuple(v.shape) for k, v in a.items()} == shapes
    assert set(tb.TRAIN_IMAGES).isdisjoint(tb.HELDOUT_IMAGES)
    # low light is dark and noisy, the clean clip in [0, 1], the infrared proxy in [0, 1]
    assert 0 <= a["low"].min() and a["low"].mean() < 0.1 * a["clean"].mean()
    assert (
        0 <= a["clean"].min() <= a["clean"].max() <= 1
        and 0 <= a["infrared"].min() <= a["infrared"].max() <= 1
    )
    # the camera and the sprites move: frames differ and events fire after the first frame only
    assert (a["clean"][1:] - a["clean"][:-1]).abs().mean() > 1e-3
    assert a["events"][0].abs().sum() == 0 and a["events"][1:].abs().sum() > 0


def test_windows_pair_each_frame_with_its_clean_centre():
    data = tb.clips("heldout", 0, 2)
    win = tb.windows(data)
    n = 2 * tb.FRAMES
    assert win["low"].shape == (n, 3, 3, tb.SIZE, tb.SIZE) and win["clean"].shape == (n, 3, tb.SIZE, tb.SIZE)
    assert torch.equal(win["low"][5, 1], data["low"][0, 5]) and torch.equal(
        win["clean"][9], data["clean"][1, 1]
    )
    assert torch.equal(win["events"][0, 0], data["events"][0, 0])  # the first frame's window repeats it


def test_training_lowers_the_loss_and_returns_an_eval_model():
    win = tb.windows(tb.clips("train", 0, 2))
    model = AMNet(width=8, blocks=1)
    first = tb.train(model, win, 1, 0, dropout=0.5)["final_loss"]
    log = tb.train(model, win, 30, 0, dropout=0.5)
    assert not model.training and log["seconds"] > 0 and log["final_loss"] < first


def test_rgb_only_baseline_has_the_nearest_parameter_count():
    reference = repro.parameters(AMNet(width=repro.WIDTH))
    width = repro.rgb_only_width(reference)
    gap = abs(repro.parameters(AMNet(modalities=(), width=width)) - reference)
    for other in (width - 2, width + 2):
        assert abs(repro.parameters(AMNet(modalities=(), width=other)) - reference) >= gap
    assert gap / reference < 0.05


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    monkeypatch.setitem(
        repro.BUDGETS, "quick", {"seeds": 1, "train_clips": 2, "heldout_clips": 2, "steps": 2}
    )
    monkeypatch.setattr(repro, "WIDTH", 8)
    result = run_reproduction("amnet-any-modality", "quick", 0)
    table = {row["model | inputs"]: row for row in result["rows"] if "seeds" in row}
    assert set(table) == {"rgb_only | RGB"} | {
        f"{m} | {c}" for m in ("amnet", "zero_filled", "no_translator") for c in repro.COMBOS
    }
    assert (
        result["ours"] == table["amnet | RGB"]["psnr_db"]
        and result["baseline"] == table["rgb_only | RGB"]["psnr_db"]
    )
    gap = table["zero_filled | RGB+E+IR"]["psnr_db"] - table["rgb_only | RGB"]["psnr_db"]
    assert np.isclose(result["headroom"]["gap_db"], gap)
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
    assert set(result["alignment_cosine"]) == {"events", "infrared"}


def test_diagnostic_detaches_only_the_translators_input():
    from icml_generative.amnet import alignment_loss
    from icml_generative_experiments.amnet.diagnostic import detach_translator_inputs

    torch.manual_seed(0)
    model = AMNet(width=8, blocks=1)
    frames, events = torch.rand(2, 3, 3, 8, 8), torch.randn(2, 3, 5, 8, 8)

    def alignment_grads(m):
        m.zero_grad()
        out = m(frames, events, return_features=True)
        alignment_loss(out.translated_features["events"], out.real_features["events"]).backward()
        return m.rgb_encoder.stem.weight.grad, m.s2dg["events"].project_in.weight.grad

    rgb, translator = alignment_grads(model)
    assert rgb.abs().sum() > 0 and translator.abs().sum() > 0
    detach_translator_inputs(model)
    rgb, translator = alignment_grads(model)
    assert (rgb is None or rgb.abs().sum() == 0) and translator.abs().sum() > 0
