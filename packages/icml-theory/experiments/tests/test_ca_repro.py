"""The ca-junta reproduction, its learnability harness and the sweep script."""

from __future__ import annotations

import json

import pytest
import torch

from icml_theory.ca import Rule, local_table, simulate
from icml_theory_experiments.ca import learn, repro, rules, sweep
from icml_tools.protocol import validate_result
from icml_tools.repro import run_reproduction

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("k", [1, 2])
def test_mlp_windows_are_the_truth_table_inputs(k):
    """The MLP and transformer see each cell's window numbered as local_table indexes it."""
    rule = Rule.random(5)
    states = (torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(k)) < 0.5).to(torch.uint8)
    w = learn.windows(states, k)  # (cells, (2k+1)^2) of ±1, live = -1
    index = ((w < 0).long() << torch.arange(w.shape[1])).sum(1)
    assert torch.equal(local_table(rule, k)[index], simulate(states, rule, k).reshape(-1))


def test_every_architecture_trains_and_scores():
    budget = learn.Budget(steps=3, grids_per_step=2, test_grids=2)
    for arch in learn.ARCHS:
        acc = learn.train_and_test(rules.REPRO_RULES[0], 1, arch, budget, seed=0)
        assert 0.0 <= acc <= 1.0
    # an easy rule is learnt: N xor S at k = 1 by the MLP within 150 small steps
    easy = next(r for r in rules.REPRO_RULES if r.name == "N xor S")
    assert learn.train_and_test(easy, 1, "mlp", learn.Budget(steps=150, grids_per_step=4), seed=0) > 0.95
    with pytest.raises(ValueError, match="arch must be one of"):
        learn.build("rnn", 1)


def test_rule_sets_are_fixed_and_distinct():
    assert len(rules.REPRO_RULES) == 16 and len(rules.SWEEP_RULES) == 33
    tables = {r.table.numpy().tobytes() for r in rules.SWEEP_RULES}
    assert len(tables) == 33 and len({r.name for r in rules.SWEEP_RULES}) == 33


def test_spectral_measures_are_cached_and_exact(tmp_path):
    life = rules.REPRO_RULES[0]
    first, hit = rules.spectral_measures(life, 1, tmp_path)
    again, hit_again = rules.spectral_measures(life, 1, tmp_path)
    assert (hit, hit_again) == (False, True) and first == again
    assert first["W_le"][-1] == pytest.approx(1.0, abs=1e-12)  # Parseval for a ±1 function
    assert first["density"] == pytest.approx(float(life.table.float().mean()))


def test_a_small_run_follows_the_protocol_and_its_verdict_comes_from_the_numbers(monkeypatch):
    monkeypatch.setattr(repro, "REPRO_RULES", rules.REPRO_RULES[:5])
    monkeypatch.setattr(repro, "KS", (1,))
    small = learn.Budget(steps=2, grids_per_step=2, test_grids=2)
    monkeypatch.setitem(repro.BUDGETS, "quick", {"cnn": small, "mlp": small})
    monkeypatch.setattr(repro, "BOOTSTRAP", 50)
    result = repro.run("quick", seed=0)
    validate_result(result)
    assert result["cache"].startswith("built: 5 spectra")
    assert len(result["rows"]) == 10 and len(result["cells"]) == 2
    cells_hold = all(c["rho_W_le_3"] > c["rho_minus_I"] > 0 for c in result["cells"])
    assert result["passed"] == (result["headroom"]["holds"] and cells_hold)
    for c in result["cells"]:
        low, high = c["bootstrap_95"]
        assert low <= high and c["resolved"] == (low > 0)
    json.dumps(result)  # plain JSON


@pytest.mark.slow
def test_quick_run():
    """The registered quick run: protocol, headroom reported, four cells, verdict from the numbers."""
    result = run_reproduction("ca-junta", "quick", 0)
    assert len(result["cells"]) == 4 and len(result["rows"]) == 64
    assert set(result["headroom"]["accuracy_iqr"]) == {"cnn", "mlp"}
    # the predictors' correlation is a property of the fixed rules (exact spectra): 0.79 and 0.54
    rho = result["headroom"]["predictor_spearman_W_vs_minus_I"]
    assert rho["1"] == pytest.approx(0.788, abs=1e-3) and rho["2"] == pytest.approx(0.539, abs=1e-3)
    holds = all(c["W_beats_I"] and c["I_positive"] for c in result["cells"])
    assert result["passed"] == (result["headroom"]["holds"] and holds)


def test_sweep_script_writes_rows_and_summary(tmp_path):
    out = tmp_path / "sweep"
    args = ["--out", str(out), "--ks", "1", "3", "--archs", "mlp", "--rules", "3", "--seeds", "1"]
    assert sweep.main([*args, "--steps", "2", "--grids", "1", "--mc-samples", "400"]) == 0
    rows = json.loads((out / "rows.json").read_text())
    assert len(rows) == 6 and {r["k"] for r in rows} == {1, 3}
    estimated = [r for r in rows if r["k"] == 3]
    assert all(not r["exact"] and r["W_le_3_95"][0] <= r["W_le_3"] <= r["W_le_3_95"][1] for r in estimated)
    assert len(json.loads((out / "summary.json").read_text())) == 2
    # a rerun skips what is there
    assert sweep.main([*args, "--steps", "2", "--grids", "1", "--mc-samples", "400"]) == 0
    assert len(json.loads((out / "rows.json").read_text())) == 6
    with pytest.raises(SystemExit):
        sweep.main(["--out", str(out), "--rules", "2"])
