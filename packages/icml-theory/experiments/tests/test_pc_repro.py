"""The epc-depth testbed (data split, initialization, pairing), the iteration count, the benchmark's
correctness gate, and the reproduction end to end (slow)."""

from __future__ import annotations

import pytest
import torch

from icml_theory_experiments.pc import bench, repro
from icml_theory_experiments.pc.testbed import WIDTH, digits, mlp
from icml_tools.protocol import validate_result

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates


def test_digits_split_is_stratified_and_fixed():
    x, y, x_test, y_test = digits()
    assert x.shape == (1257, 64) and x_test.shape == (540, 64) and len(y) == 1257
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    counts = torch.bincount(y_test, minlength=10)
    assert int(counts.min()) >= 52 and int(counts.max()) <= 55  # 30 % of each class (174-183 images)
    again = digits()
    assert torch.equal(x, again[0]) and torch.equal(y_test, again[3])


def test_mlp_is_seeded_and_initialized_as_documented():
    a, b, c = mlp(20, 0), mlp(20, 0), mlp(20, 1)
    assert len(a) == 20 and all(isinstance(layer, torch.nn.Sequential) for layer in a[:-1])
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a[0][0].weight, c[0][0].weight)
    hidden = torch.cat([layer[0].weight.detach().reshape(-1) for layer in a[1:-1]])
    expected = (5 / 3) * (2 / (WIDTH + WIDTH)) ** 0.5
    assert float(hidden.std()) == pytest.approx(expected, rel=0.02)
    assert all(float(layer[0].bias.detach().abs().max()) == 0.0 for layer in a[:-1])


def test_iteration_job_counts_to_the_tolerance():
    out = repro._iterations((4, 0, 0, 1200, 500))  # sPC needs ~800 steps here
    assert out["equilibrium converged"]
    for name in ("sPC", "ePC"):
        gap = out[f"{name} gap"]
        assert gap[0] == pytest.approx(1.0)
        hit = out[name]
        assert hit is not None and gap[hit] <= repro.ENERGY_TOL and gap[hit - 1] > repro.ENERGY_TOL


def test_benchmark_checks_gradients_before_timing():
    rows = bench.run("quick")
    assert {r["method"] for r in rows} == set(bench.METHODS)
    assert all(r["correct"] and r["ePC gradient relative error"] <= 1e-6 for r in rows)
    bp = next(r for r in rows if r["method"] == "BP")
    assert bp["throughput / BP"] == 1.0 and all(r["median_ms_per_step"] > 0 for r in rows)


@pytest.mark.slow
def test_quick_reproduction_runs_and_decides_by_its_criterion():
    result = repro.run("quick", 0)
    validate_result(result)
    acc = {
        (r["depth"], r["method"]): r["test accuracy"] for r in result["rows"] if r["method"] in repro.METHODS
    }
    assert set(acc) == {(d, m) for d in repro.DEPTHS for m in repro.METHODS}
    deep = result["depths"]["20"]
    assert deep["BP - ePC (points)"] == pytest.approx(100 * (acc[20, "BP"] - acc[20, "ePC"]))
    checks = result["checks"]
    assert checks[f"BP - ePC <= {repro.EPC_GAP:g} points"] == (deep["BP - ePC (points)"] <= repro.EPC_GAP)
    assert result["passed"] == (result["headroom"]["holds"] and all(checks.values()))
    assert {f["name"] for f in result["figures"]} == {"signal-decay", "energy-gap"}
