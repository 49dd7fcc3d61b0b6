"""The reproduction ``star-audio`` (:mod:`icml_generative_experiments.star.repro`): the synthetic audio, the
training loops, and (slow) one tiny run through the runner."""

import numpy as np
import pytest
import torch

import icml_generative_experiments.star.repro as repro
from icml_generative.star import STARLoss, spectral_features
from icml_generative_experiments.star import testbed as tb
from icml_tools.repro import run_reproduction


def test_clips_are_seeded_mixes_of_structure_and_texture():
    a, b = tb.clip("train", 0, 3), tb.clip("train", 0, 3)
    assert a.shape == (tb.SAMPLES,) and np.array_equal(a, b)
    assert not np.array_equal(a, tb.clip("heldout", 0, 3)) and not np.array_equal(a, tb.clip("train", 1, 3))
    assert np.abs(a).max() <= 0.95 + 1e-12
    structure, texture = tb.clip("train", 0, 3, "structure"), tb.clip("train", 0, 3, "texture")
    residual = a - structure - texture  # the -60 dB noise floor (after the same peak gain)
    assert 0.3e-3 < residual.std() < 1.5e-3
    # structure is low-frequency and harmonic, texture high-frequency: their spectral centroids differ
    freqs = np.fft.rfftfreq(tb.SAMPLES, 1 / tb.RATE)

    def centroid(x):
        power = np.abs(np.fft.rfft(x)) ** 2
        return float((freqs * power).sum() / power.sum())

    assert centroid(structure) < 1500 < centroid(texture)
    batch = tb.clips("train", 0, 4)
    assert batch.shape == (4, 1, tb.SAMPLES) and batch.dtype == torch.float32


def test_training_loops_run_and_return_eval_models():
    data = tb.clips("train", 0, 8)
    model, log = tb.train_vae(data, STARLoss(4), 3, seed=0, batch=2)
    assert not model.training and log["seconds"] > 0 and np.isfinite(log["recon_loss_last"])
    latents = tb.encode(model, data, seed=0)
    assert latents["mean"].shape == (8, 4, tb.SAMPLES // model.hop_length)
    assert tb.decode(model, latents["mean"]).shape == data.shape
    flow, flog = tb.train_flow(latents["sample"], 3, seed=0, batch=4, width=16, layers=1, heads=2)
    assert np.isfinite(flog["loss_last"]) and not flow.training
    assert spectral_features(data).shape == (8, 64)


def test_the_quick_budget_s_loops_run():
    quick = repro.BUDGETS["quick"]
    # OneCycleLR (pct_start 0.1) divides by zero at exactly 10 steps (its warm-up ends at step 0, measured):
    # the quick budget's step count must not be one it refuses
    latents = torch.randn(8, 4, 10)
    _, log = tb.train_flow(latents, quick["flow_steps"], seed=0, batch=4, width=16, layers=1, heads=2)
    assert np.isfinite(log["loss_last"])


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    tiny = {"seeds": 1, "gammas": (2.0,), "train": 16, "heldout": 8, "vae_steps": 4, "flow_steps": 4}
    monkeypatch.setitem(repro.BUDGETS, "quick", tiny)
    monkeypatch.setattr(repro, "FLOW_CONFIG", {"width": 16, "layers": 1, "heads": 2})
    result = run_reproduction("star-audio", "quick", 0)
    table = {row["condition"]: row for row in result["rows"] if "seeds" in row}
    assert set(table) == {"uniform", "star gamma=2"}
    assert (
        result["ours"] == table["star gamma=2"]["ordering"]
        and result["baseline"] == table["uniform"]["ordering"]
    )
    checks = {k: v for k, v in result["checks"].items() if "reported" not in k}
    assert result["passed"] == (result["headroom"]["holds"] and all(checks.values()))
    assert result["frechet_floor"] > 0 and len(result["figures"][0]["series"]) == 2
