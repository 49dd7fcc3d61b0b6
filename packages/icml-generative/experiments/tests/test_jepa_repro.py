"""The reproduction ``jepa-minority`` (:mod:`icml_generative_experiments.jepa_guidance.repro`): the worlds'
ground truth, the sampler, the metrics, and (slow) one tiny run through the runner."""

import math

import numpy as np
import pytest
import torch

import icml_generative_experiments.jepa_guidance.repro as repro
from icml_generative.jepa_guidance import TweedieGuidance
from icml_generative_experiments.jepa_guidance import bench
from icml_generative_experiments.jepa_guidance import testbed as tb
from icml_tools.repro import run_reproduction


def test_world_log_density_is_a_normalised_density_and_the_generator_sample_is_biased():
    grid = torch.linspace(-7, 7, 561, dtype=torch.float64)
    xx, yy = torch.meshgrid(grid, grid, indexing="ij")
    logp = tb.world_log_density(torch.stack([xx.ravel(), yy.ravel()], 1))
    cell = (grid[1] - grid[0]) ** 2
    assert math.isclose(float(logp.exp().sum() * cell), 1.0, rel_tol=1e-3)
    world, biased = tb.mixture_sample(20000, 0), tb.mixture_sample(20000, 0, bias=tb.BIAS)
    assert torch.equal(world, tb.mixture_sample(20000, 0))
    assert tb.rare_fraction(biased) < 0.5 * tb.rare_fraction(world)
    assert 0.1 < tb.rare_fraction(world) < 0.2 and tb.modes_covered(world) == tb.RARE_MODES + 1
    # a sample scores well against its own world and badly against points far away
    assert tb.precision(tb.mixture_sample(2000, 1), tb.mixture_sample(2000, 2)) > 0.95
    assert tb.precision(tb.mixture_sample(200, 1) + 20.0, tb.mixture_sample(2000, 2)) == 0.0


def test_sampler_is_deterministic_and_guidance_with_eta_zero_changes_nothing():
    model, log = tb.train_generator(tb.mixture_sample(512, 0, bias=tb.BIAS), 5, 0, width=16)
    assert not model.training and np.isfinite(log["loss_last"])
    noise = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    plain = tb.sample(model, noise, steps=6)
    assert torch.equal(plain, tb.sample(model, noise, steps=6))
    assert torch.equal(plain, tb.sample(model, noise, TweedieGuidance(tb.world_log_density, 0.0), steps=6))
    moved = tb.sample(model, noise, TweedieGuidance(tb.world_log_density, 0.3, schedule="variance"), steps=6)
    assert not torch.equal(plain, moved) and torch.isfinite(moved).all()


def test_paired_bootstrap_brackets_the_mean():
    diff = np.random.default_rng(0).normal(-1.0, 1.0, 400)
    lo, hi = tb.paired_bootstrap(diff, 0)
    assert lo < diff.mean() < hi < 0


def test_digits_worlds():
    x, y = tb.digits()
    assert x.shape == (1797, 64) and float(x.min()) == -1.0 and float(x.max()) == 1.0
    biased = tb.digits_biased(0)
    rare = int(torch.isin(y, torch.tensor(tb.DIGITS_RARE)).sum())
    assert (
        len(x) - rare + 0.05 * rare < len(biased) < len(x) - rare + 0.2 * rare
    )  # about 10 % of the 8s, 9s kept


def test_benchmark_rows(monkeypatch):
    monkeypatch.setitem(bench.BUDGETS, "quick", {"repeats": 1})
    rows = bench.run("quick")
    assert len(rows) == 12 and all(r["median_seconds"] > 0 for r in rows)
    assert [r["ratio to unguided step (medians)"] for r in rows if r["case"].endswith("unguided")] == [
        1.0,
        1.0,
    ]


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    tiny = {"seeds": 1, "samples": 64, "gen_steps": 10, "enc_steps": 10, "digits": True}
    monkeypatch.setitem(repro.BUDGETS, "quick", tiny)
    monkeypatch.setattr(repro, "DIGITS", {**repro.DIGITS, "samples": 16, "gen_steps": 10, "enc_steps": 10})
    result = run_reproduction("jepa-minority", "quick", 0)
    table = {row["sampler"]: row for row in result["rows"] if "seeds" in row}
    assert set(table) == {"unguided", "oracle", "minority", "jepa"}
    assert result["ours"] == table["jepa"]["mean_log_density"]
    assert result["baseline"] == table["minority"]["mean_log_density"]
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
    lo, hi = result["paired_log_density_jepa_minus"]["minority"]["ci95"]
    assert lo <= result["paired_log_density_jepa_minus"]["minority"]["mean"] <= hi
    assert set(result["digits"]["methods"]) == {"unguided", "minority", "jepa"}
