"""The rdp-fdp-optimal reproduction follows the protocol and its verdict comes from the numbers."""

from icml_theory_experiments.privacy import bench, repro
from icml_tools.bench import run_benchmark
from icml_tools.repro import run_reproduction


def test_quick_run_follows_the_protocol_and_passes():
    result = run_reproduction("rdp-fdp-optimal", "quick", 0)
    assert result["passed"] is True
    assert result["ours"] <= result["baseline"]
    rows = [r for r in result["rows"] if r["quantity"] == "epsilon"]
    assert len(rows) == 5 * len(repro.DELTAS)
    # the verdict is computed: a profile that breaks soundness must fail the same check
    assert repro._check(
        {
            "mechanism": "m",
            "quantity": "beta",
            "at": 0.1,
            "optimal": 0.9,
            "cks": 0.5,
            "mironov": 0.4,
            "exact": 0.8,
        }
    )
    assert repro._check(
        {
            "mechanism": "m",
            "quantity": "epsilon",
            "at": 0.1,
            "optimal": 1.1,
            "cks": 1.0,
            "mironov": 2.0,
            "exact": 0.5,
        }
    )


def test_benchmark_rows_check_correctness_first(monkeypatch):
    monkeypatch.setattr(bench, "REPEATS", 1)
    monkeypatch.setattr(bench, "SIZES", {"quick": [(20, 50)]})
    rows = run_benchmark("rdp-fdp-optimal", "quick", 0)
    assert rows[0]["impl"] == "optimal_tradeoff" and rows[0]["median_ms"] > 0
    assert all(r["correct"] for r in rows) and rows[0]["ratio_to_cks_curve"] is not None
