"""The reproduction ``echo-frontier`` and the benchmark ``echo-attention-step``
(:mod:`icml_generative_experiments.echo_attention`): the textured testbed, the fixed routing rule, the
benchmark's rows and (slow) one tiny run through the runner."""

import pytest
import torch

import icml_generative_experiments.echo_attention.repro as repro
from icml_generative.echo_attention import EchoPolicy, VideoLayout
from icml_generative_experiments.cache.testbed import TestbedConfig, moving_sprites
from icml_generative_experiments.echo_attention import bench
from icml_tools.repro import run_reproduction


def test_textured_background_is_static_and_the_default_recipe_is_unchanged():
    cfg = TestbedConfig(frames=4, background="texture", max_sprites=1, sprite_sides=(3,))
    clips, _ = moving_sprites(6, cfg, seed=1)
    static = (clips == clips[:, :, :1]).all(2).all(1)  # (n, H, W): pixels equal in every frame
    assert static.float().mean() > 0.5  # one 3x3 sprite on 16x16: most of the frame stays the same
    assert clips[:, 0, 0][static].std() > 0.05  # and it is textured, not flat
    assert TestbedConfig().key() == "2ef5169bf5ec"  # the NaviCache recipe keeps its cached weights' key
    assert TestbedConfig(background="texture").key() != TestbedConfig().key()
    with pytest.raises(ValueError, match="background"):
        TestbedConfig(background="stripes")


def test_fixed_routes_fit_the_budget():
    layout = VideoLayout(8, 16)
    policy = EchoPolicy(2, 2, 8, layout, anchor_stride=4, block_size=8, neighbor_frames=0)
    g = torch.Generator().manual_seed(0)
    captured = [[tuple(torch.randn(1, 2, 128, 8, generator=g) for _ in range(3))] for _ in range(2)]
    from icml_generative.echo_attention import fit_echo_calibration

    fit_echo_calibration(policy, captured)
    for budget in (0.25, 0.4, 0.6):
        result = repro._fixed_routes(policy, captured, budget)
        assert result["fraction"] <= budget and policy.flops()["fraction"] == result["fraction"]


def test_benchmark_rows(monkeypatch):
    monkeypatch.setitem(bench.BUDGETS, "quick", {**bench.BUDGETS["quick"], "repeats": 1})
    rows = bench.run("quick")
    assert len(rows) == 4 and all(r["median_seconds"] > 0 for r in rows)
    assert rows[0]["ratio to dense (medians)"] == 1.0 and rows[0]["rel_error_vs_dense"] == 0.0
    assert all(0 < r["attention_flops_fraction"] <= 1 for r in rows)
    assert all(r["attention_flops_fraction"] <= bench.BUDGET for r in rows if "budget" in r["case"])
    assert all(r["rel_error_vs_dense"] > 0 for r in rows[1:])


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    tiny = {
        "testbed": TestbedConfig(frames=4, train_steps=5, background="texture"),
        "budgets": (0.3, 0.6),
        "anchor_stride": 2,
        "samples": 2,
        "steps": 2,
        "calib_clips": 2,
        "router_steps": 2,
        "finetune_steps": 1,
    }
    monkeypatch.setitem(repro.BUDGETS, "quick", tiny)
    result = run_reproduction("echo-frontier", "quick", 0)
    rows = result["rows"]
    assert [(r["budget"], r["method"]) for r in rows] == [
        (b, m) for b in (0.3, 0.6) for m in ("sparse", "fixed", "learned")
    ]
    assert all(r["flops_fraction"] <= r["budget"] for r in rows)
    assert result["ours"] == rows[2]["psnr_mean"] and result["baseline"] == rows[0]["psnr_mean"]
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
    for entry in result["paired_psnr_minus_sparse"].values():
        lo, hi = entry["learned"]["ci95"]
        assert lo <= entry["learned"]["mean"] <= hi
    assert len(result["frame_block_similarity"]) == 6 and all(
        len(r) == 2 for r in result["frame_block_similarity"]
    )
