"""markov-stages: the model's attention read through the interpretability core's hooks on a GPT-2 copy,
the reproduction's helpers, the benchmark, and the reproduction end to end (slow)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml_interp.hooks import wrap
from icml_theory.markov import AttentionOnlyTransformer, MixtureOfLagsChain, lag_mass, train
from icml_theory_experiments.markov import bench, repro
from icml_theory_experiments.markov.testbed import as_gpt2
from icml_tools.protocol import validate_result

PATTERN = "blocks.0.attn.hook_pattern"

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates


@pytest.mark.parametrize(("heads", "seed"), [(1, 0), (3, 1)])
def test_lag_mass_through_icml_interp_hooks_equals_ours(heads, seed):
    chain = MixtureOfLagsChain(**repro.CHAIN, seed=seed)
    model = AttentionOnlyTransformer(chain.n_states, heads=heads, seed=seed, context=12, init_scale=0.02)
    train(
        model, chain, 150, lr=0.01, optimizer="adam", log_every=150, n_eval=64, seed=seed
    )  # non-trivial patterns
    tokens = torch.as_tensor(chain.sample(16, 12, seed=seed + 7))
    _, ours = model.run_with_cache(tokens, PATTERN)
    hooked = wrap(as_gpt2(model))
    _, theirs = hooked.run_with_cache(tokens, names_filter=[PATTERN])
    assert theirs[PATTERN].shape == ours[PATTERN].shape == (16, heads, 12, 12)
    assert torch.allclose(theirs[PATTERN], ours[PATTERN], atol=1e-5)
    mass = lag_mass(theirs[PATTERN], chain.order - 1)
    assert torch.allclose(mass.sum(-1), torch.ones(heads), atol=1e-5)
    assert torch.allclose(mass, lag_mass(ours[PATTERN], chain.order - 1), atol=1e-5)
    assert float(mass[:, 0].max()) > 1.5 / 12  # trained: some head already prefers lag 1 to uniform


def test_gpt2_copy_refuses_too_narrow_heads():
    with pytest.raises(ValueError, match="d_head"):
        as_gpt2(AttentionOnlyTransformer(8, 12, 1, d_head=4))


def test_repro_helpers():
    chain = MixtureOfLagsChain(**repro.CHAIN, seed=0)
    data = chain.sample(256, 13, seed=1)
    levels = repro._levels(chain, data)
    assert list(levels) == [(), (1,), (1, 3), (1, 3, 6)]
    assert all(a > b for a, b in zip(list(levels.values()), list(levels.values())[1:], strict=False))
    named = {str(k): v for k, v in levels.items()}
    assert repro._nearest(named, levels[(1, 3)] + 0.001) == "(1, 3)"
    assert repro._ratio(2.0, 4.0) == 0.5
    assert (
        repro._ratio(None, 4.0) is None
        and repro._ratio(1.0, 0.0) is None
        and repro._ratio(np.nan, 1.0) is None
    )


def test_benchmark_rows(monkeypatch):
    # one timed run per setting instead of the quick budget's 3: the rows' layout and their ratio's consistency
    # are what is checked here, and neither depends on how many runs the medians are of
    monkeypatch.setitem(bench.BUDGET, "quick", {**bench.BUDGET["quick"], "repeats": 1})
    rows = bench.run("quick")
    assert [r["heads"] for r in rows] == [3]
    row = rows[0]
    assert row["steps per s, full logging"] > 0 and row["steps per s, training loss only"] > 0
    assert row["with / without logging (time per step)"] == pytest.approx(
        row["steps per s, training loss only"] / row["steps per s, full logging"], rel=0.02
    )


@pytest.mark.slow
def test_quick_reproduction_runs_and_decides_by_its_criterion():
    result = repro.run("quick")
    validate_result(result)
    seed = result["per seed"]["0"]
    expected = (
        seed["three plateaus matched"] and seed["in decreasing importance order"]
        and seed["heads end on distinct lags"] and seed["ODE within factor"]
    )  # fmt: skip
    assert seed["passed"] == expected
    assert result["passed"] == (result["headroom"]["holds"] and expected)
    assert set(seed["final eval loss by heads"]) == {1, 2, 3}
    assert np.isfinite(result["ours"])
