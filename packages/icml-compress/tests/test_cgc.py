"""CGC and its baselines (issue 35, "Must hold"): planted curvature families, the coloring's properties, Basis
Sharing's closed form, reported costs, parameter counts, save/load and generate, bad input."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_compress.cgc import (
    CorruptSharedModelError,
    ShareConfig,
    SharedBasisLinear,
    collect_statistics,
    color_groups,
    compress_model,
    conflict_graph,
    dsatur_coloring,
    fit_shared_basis,
    layer_cost,
    load_shared,
    pair_costs,
    plan_groups,
    rank_for_ratio,
    refit_coefficients,
    save_shared,
    thresholds,
)
from icml_compress.cgc.fit import group_costs
from icml_tools.assets import tiny_llama

GEN = torch.Generator().manual_seed(0)
IDS = torch.randint(0, 256, (2048,), generator=GEN)
SEQ = IDS[:24].unsqueeze(0)


def planted(n_per_family: int = 4, d_in: int = 32, d_out: int = 16, top: int = 6, seed: int = 0):
    """Layers interleaved from two families (even indices: A, odd: B); the input moments of a family put
    their mass on its own random top-``top`` eigenspace, and the weights act on it."""
    g = torch.Generator().manual_seed(seed)
    bases = [torch.linalg.qr(torch.randn(d_in, d_in, generator=g, dtype=torch.float64))[0] for _ in range(2)]
    weights, hessians = [], []
    for i in range(2 * n_per_family):
        U = bases[i % 2]
        ev = torch.full((d_in,), 1e-3, dtype=torch.float64)
        ev[:top] = torch.linspace(4.0, 1.0, top, dtype=torch.float64)
        hessians.append(U @ torch.diag(ev) @ U.T)
        weights.append(torch.randn(d_out, d_in, generator=g, dtype=torch.float64))
    return weights, hessians


def basis_sharing_reference(weights, hessians, rank, damping=0.01):
    """Basis Sharing's closed form written independently: symmetric square-root whitening of the summed
    moments, SVD, truncation; returns the reconstructed weights (unique whatever the square root)."""
    Hg = sum(h.double() for h in hessians)
    Hg = (Hg + Hg.T) / 2
    Hg = Hg + damping * Hg.diagonal().mean() * torch.eye(Hg.shape[0], dtype=Hg.dtype)
    ev, V = torch.linalg.eigh(Hg)
    S = V @ torch.diag(ev.sqrt()) @ V.T
    Sinv = V @ torch.diag(ev.rsqrt()) @ V.T
    W_cat = torch.cat([w.double().T for w in weights], 1)
    U, s, Vh = torch.linalg.svd(S @ W_cat, full_matrices=False)
    approx = Sinv @ (U[:, :rank] * s[:rank]) @ Vh[:rank]
    return [blk.T for blk in approx.split(weights[0].shape[0], 1)]


def test_planted_families_are_colored_apart():
    weights, hessians = planted()
    costs = pair_costs(weights, hessians, 0.5)
    same = np.array([[i % 2 == j % 2 for j in range(8)] for i in range(8)])
    off = ~np.eye(8, dtype=bool)
    assert costs[same & off].max() < costs[~same].min()  # sharing across families always costs more
    tau = (costs[same & off].max() + costs[~same].min()) / 2
    for seed in range(3):
        groups = color_groups(dsatur_coloring(conflict_graph(costs, tau), 4, seed, costs))
        assert groups == [[0, 2, 4, 6], [1, 3, 5, 7]]  # the planted families: no two neighbours share
    overlap = pair_costs(weights, hessians, 0.5, cost="overlap")  # the surrogate separates them too
    assert overlap[same & off].max() < overlap[~same].min()


def test_planted_families_found_by_the_whole_cgc_plan():
    """compress_model's own sweep, on a stack of 8 Linear layers holding the planted weights and moments:
    CGC groups the two interleaved families (non-adjacent layers), Basis Sharing pairs neighbours."""
    weights, hessians = planted()
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList()
    for w in weights:
        block = torch.nn.Module()
        block.proj = torch.nn.Linear(32, 16, bias=False)
        block.proj.weight.data.copy_(w)
        model.layers.append(block)
    stats = {f"layers.{i}.proj": h for i, h in enumerate(hessians)}
    for seed in range(3):
        cfg = ShareConfig(ratio=0.5, shared=("proj",), seed=seed)
        assert plan_groups(model, stats, cfg)["families"]["layers.*.proj"]["groups"] == [
            [0, 2, 4, 6],
            [1, 3, 5, 7],
        ]
    bs = plan_groups(
        model, stats, ShareConfig(ratio=0.5, shared=("proj",), method="basis-sharing", max_group=2)
    )
    assert bs["families"]["layers.*.proj"]["groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.integers(0, 2**16), st.floats(0, 1))
def test_coloring_is_proper_capped_and_seeded(n, cap, seed, density):
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < density, 1)
    adj = upper | upper.T
    costs = rng.random((n, n))
    costs = (costs + costs.T) / 2
    for c in (None, costs):
        colors = dsatur_coloring(adj, cap, seed, c)
        assert colors == dsatur_coloring(adj, cap, seed, c)  # deterministic under a seed
        assert all(colors[i] != colors[j] for i in range(n) for j in range(n) if adj[i, j])
        groups = color_groups(colors)
        assert max(len(g) for g in groups) <= cap and sorted(v for g in groups for v in g) == list(range(n))
        assert sorted(set(colors)) == list(range(len(groups)))


def test_fit_equals_basis_sharing_closed_form_and_costs_recompute():
    weights, hessians = planted(2, d_in=24, d_out=12)
    for group in ([0, 1], [2, 3], [1]):
        W = [weights[i] for i in group]
        H = [hessians[i] for i in group]
        k = rank_for_ratio(24, 12, len(group), 0.3)
        fit = fit_shared_basis(W, H, k)
        for i, ref in enumerate(basis_sharing_reference(W, H, k)):
            torch.testing.assert_close(fit.weight(i), ref, rtol=1e-8, atol=1e-9)
        recomputed = [
            float(torch.trace((w - fit.weight(i)) @ h @ (w - fit.weight(i)).T))
            for i, (w, h) in enumerate(zip(W, H, strict=True))
        ]
        assert fit.costs == pytest.approx(recomputed, rel=1e-9)
        grams = [w.T @ w for w in W]
        assert group_costs(grams, H, k) == pytest.approx(fit.costs, rel=1e-7, abs=1e-10)
        refit = fit_shared_basis(W, H, k, refit=True)
        assert sum(refit.costs) <= sum(fit.costs) * (1 + 1e-9)  # refit cannot raise the cost


def test_refit_is_least_squares_under_the_layer_moments():
    weights, hessians = planted(1, d_in=16, d_out=8)
    B = torch.randn(16, 5, dtype=torch.float64, generator=GEN)
    C = refit_coefficients(B, weights[0], hessians[0], damping=1e-12)
    best = layer_cost(weights[0], (B @ C).T, hessians[0])
    for _ in range(5):
        C2 = C + 1e-3 * torch.randn(C.shape, dtype=torch.float64, generator=GEN)
        assert layer_cost(weights[0], (B @ C2).T, hessians[0]) >= best
    # a basis in another dtype (a SharedBasisLinear's basis in a half model's) is solved in float64 as well;
    # it raised a dtype mismatch
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        low = B.to(dtype)
        expected = refit_coefficients(low.double(), weights[0], hessians[0], damping=1e-12)
        assert torch.equal(refit_coefficients(low, weights[0], hessians[0], damping=1e-12), expected)


def stats_for(model, cfg):
    return collect_statistics(model, IDS, config=cfg, progress=False)


@pytest.mark.parametrize("method", ["svd", "basis-sharing", "cgc"])
def test_compressed_tiny_llama_round_trips_and_generates(method, tmp_path):
    cfg = ShareConfig(
        ratio=0.3, method=method, max_group=2 if method == "basis-sharing" else 4, n_calibration=4, seq_len=64
    )
    model = tiny_llama(0, layers=4)
    ref = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    stats = stats_for(model, cfg)
    model = compress_model(model, stats, cfg, progress=False)
    mods = {n: m for n, m in model.named_modules() if isinstance(m, SharedBasisLinear)}
    assert len(mods) == 28  # 7 Linears x 4 blocks; lm_head (tied) untouched
    record = model.icml_sharing
    for g in record["groups"]:
        assert len({id(mods[n].basis) for n in g["layers"]}) == 1  # one shared Parameter per group
        for n, c in zip(g["layers"], g["costs"], strict=True):
            dW = ref[n].double() - mods[n].dense_weight().double()
            assert c == pytest.approx(float(torch.trace(dW @ stats[n] @ dW.T)), rel=1e-4, abs=1e-7)
    if method == "basis-sharing":
        q = [g["layers"] for g in record["groups"] if g["layers"][0].endswith("q_proj")]
        assert q == [
            [f"model.layers.{i}.self_attn.q_proj", f"model.layers.{i + 1}.self_attn.q_proj"] for i in (0, 2)
        ]
        o = [g["layers"] for g in record["groups"] if g["layers"][0].endswith("o_proj")]
        assert all(len(g) == 1 for g in o)  # o_proj and down_proj keep a basis of their own
    unique = sum(p.numel() for n, p in model.named_parameters() if ".basis" in n or ".coeff" in n)
    assert unique == record["parameters"]["after"]
    with torch.no_grad():
        logits = model(SEQ).logits
    save_shared(model, tmp_path / "m")
    again = load_shared(tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(again(SEQ).logits, logits)
    assert again.icml_sharing["groups"] == record["groups"]
    out = again.generate(SEQ[:, :5], max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 9)


def test_load_shared_restores_the_generation_config(tmp_path):
    """``save_shared`` writes the model's ``generation_config.json`` and ``load_shared`` reads it, as
    ``save_pretrained``/``from_pretrained`` do: ``generate()`` keeps its defaults. Before, the reloaded
    model generated 20 new tokens where the saved one stopped after 3 (``max_new_tokens`` lost)."""
    from transformers import GenerationConfig

    from icml_compress.cgc.model import CorruptSharedModelError

    model = tiny_llama(0, layers=1)
    model.generation_config = GenerationConfig(max_new_tokens=3, eos_token_id=[7, 9], repetition_penalty=1.3)
    cfg = ShareConfig(ratio=0.3, method="svd", n_calibration=2, seq_len=32)
    model = compress_model(model, stats_for(model, cfg), cfg, progress=False)
    expected = model.generate(SEQ[:, :4], pad_token_id=0)
    assert expected.shape == (1, 7)
    again = load_shared(save_shared(model, tmp_path / "m"))
    assert again.generation_config.to_diff_dict() == model.generation_config.to_diff_dict()
    assert torch.equal(again.generate(SEQ[:, :4], pad_token_id=0), expected)
    (tmp_path / "m" / "generation_config.json").write_text("{")
    with pytest.raises(CorruptSharedModelError, match=r"generation_config\.json is not a readable"):
        load_shared(tmp_path / "m")


def test_compress_model_keeps_training_flags_and_a_failed_fit_changes_nothing():
    """New layers take the replaced layer's training flag (an eval model stays all eval); a fit that fails
    on the last layer leaves every Linear in place and no record."""
    model = tiny_llama(0, layers=2)  # eval mode
    cfg = ShareConfig(ratio=0.5, method="cgc", n_calibration=2, seq_len=32, taus=3)
    compress_model(model, stats_for(model, cfg), cfg, progress=False)
    assert sum(isinstance(m, SharedBasisLinear) for m in model.modules()) == 14
    assert not any(m.training for m in model.modules())  # the 14 new layers were in train mode

    model = tiny_llama(0, layers=1)
    cfg = ShareConfig(ratio=0.5, method="svd", n_calibration=2, seq_len=32)
    stats = dict(stats_for(model, cfg))
    last = "model.layers.0.mlp.down_proj"
    stats[last] = -torch.eye(stats[last].shape[0], dtype=torch.float64)  # not positive definite
    layers = dict(model.named_modules())
    with pytest.raises(ValueError, match="could not be made positive definite"):
        compress_model(model, stats, cfg, progress=False)
    after = dict(model.named_modules())
    assert after.keys() == layers.keys() and all(after[n] is m for n, m in layers.items())
    assert not hasattr(model, "icml_sharing")


def test_cgc_sweep_never_costs_more_than_per_layer_svd_and_reuses_costs():
    cfg = ShareConfig(ratio=0.3, n_calibration=4, seq_len=64)
    model = tiny_llama(1, layers=4)
    stats = stats_for(model, cfg)
    plan = plan_groups(model, stats, cfg)
    for info in plan["families"].values():
        if "sweep" in info:
            alone = next(s["cost"] for s in info["sweep"] if s["tau"] == -math.inf)
            assert min(s["cost"] for s in info["sweep"]) <= alone
            assert {len(s) for s in info["groups"]} <= {1, 2, 3, 4}
    costs = {f: np.asarray(i["costs"]) for f, i in plan["families"].items() if "costs" in i}
    assert plan_groups(model, stats, cfg, costs=costs)["groups"] == plan["groups"]


def test_equal_parameter_counts_at_smollm2_shapes():
    """Every method's count at SmolLM2-135M's shapes (30 blocks) is within 0.5% of the others at 20% and
    30%: groups of 1 (SVD), pairs (Basis Sharing) and a mix of sizes (a CGC coloring)."""
    shapes = {
        "q": (576, 576),
        "k": (192, 576),
        "v": (192, 576),
        "o": (576, 576),
        "gate": (1536, 576),
        "up": (1536, 576),
        "down": (576, 1536),
    }
    shared = {"q", "k", "v", "gate", "up"}
    for ratio in (0.2, 0.3):
        counts = []
        for sizes in ([1] * 30, [2] * 15, [4, 4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1]):
            total = 0
            for name, (out, inp) in shapes.items():
                for n in sizes if name in shared else [1] * 30:
                    total += rank_for_ratio(inp, out, n, ratio) * (inp + n * out)
            counts.append(total)
        before = 30 * sum(o * i for o, i in shapes.values())
        assert max(counts) / min(counts) - 1 < 0.005
        assert all(abs(1 - c / before - ratio) < 0.005 for c in counts)


def test_bad_input_is_refused_by_name(tmp_path):
    for bad in (0, 1, -0.2, 1.5):
        with pytest.raises(ValueError, match="ratio"):
            ShareConfig(ratio=bad)
        with pytest.raises(ValueError, match="ratio"):
            rank_for_ratio(8, 8, 2, bad)
    with pytest.raises(TypeError, match="ratio"):
        ShareConfig(ratio="0.2")
    with pytest.raises(ValueError, match="method"):
        ShareConfig(ratio=0.2, method="svd-llm")
    cfg = ShareConfig(ratio=0.3, n_calibration=2, seq_len=32)
    model = tiny_llama(0, layers=2)
    stats = stats_for(model, cfg)
    with pytest.raises(ValueError, match="different shapes forced into one group"):
        compress_model(
            model, stats, cfg, groups=[["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"]]
        )
    with pytest.raises(ValueError, match="twice"):
        compress_model(
            model,
            stats,
            cfg,
            groups=[["model.layers.0.self_attn.q_proj"], ["model.layers.0.self_attn.q_proj"]],
        )
    with pytest.raises(ValueError, match="statistics"):
        compress_model(model, {}, cfg)
    with pytest.raises(ValueError, match="one 2-D weight shape"):
        fit_shared_basis([torch.randn(4, 8), torch.randn(5, 8)], [torch.eye(8)] * 2, 2)
    with pytest.raises(ValueError, match="rank"):
        fit_shared_basis([torch.randn(4, 8)], [torch.eye(8)], 9)
    with pytest.raises(ValueError, match="symmetric"):
        conflict_graph(np.array([[0.0, 1.0], [2.0, 0.0]]), 0.5)
    with pytest.raises(ValueError, match="NaN"):
        thresholds(np.array([[0.0, math.nan], [math.nan, 0.0]]))
    with pytest.raises(ValueError, match="compress_model"):
        save_shared(model, tmp_path / "x")


def test_failed_save_keeps_the_old_one_and_corrupt_saves_are_named(tmp_path, monkeypatch):
    cfg = ShareConfig(ratio=0.3, method="svd", n_calibration=2, seq_len=32)
    model = compress_model(
        tiny_llama(0, layers=1), stats_for(tiny_llama(0, layers=1), cfg), cfg, progress=False
    )
    path = save_shared(model, tmp_path / "m")
    before = (path / "model.safetensors").read_bytes()
    import safetensors.torch

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_model", boom)
    with pytest.raises(OSError, match="disk full"):
        save_shared(model, path)
    monkeypatch.undo()
    assert (path / "model.safetensors").read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary left behind
    weights = path / "model.safetensors"
    weights.write_bytes(before[: len(before) // 2])
    with pytest.raises(CorruptSharedModelError, match=r"model\.safetensors"):
        load_shared(path)
    (path / "sharing.json").write_text("{")
    with pytest.raises(CorruptSharedModelError, match=r"sharing\.json"):
        load_shared(path)
    with pytest.raises(CorruptSharedModelError, match=r"no sharing\.json"):
        load_shared(tmp_path)


@pytest.mark.slow
def test_smollm2_compressed_by_cgc_round_trips_and_answers(tmp_path):
    """The end-to-end check on the real model (first 2 of 30 blocks, to stay quick): save/load with the
    tokenizer gives identical logits, and the reloaded model generates an answer."""
    from icml_tools.assets import english_corpus, smollm2

    model, tokenizer = smollm2()
    cfg = ShareConfig(ratio=0.3, max_blocks=2, n_calibration=4, seq_len=128)
    stats = collect_statistics(model, english_corpus(20_000), tokenizer, cfg, progress=False)
    model = compress_model(model, stats, cfg, progress=False)
    assert model.icml_sharing["parameters"]["removed_fraction"] == pytest.approx(0.3, abs=0.005)
    ids = torch.tensor([tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        logits = model(ids).logits
    save_shared(model, tmp_path / "s", tokenizer=tokenizer)
    again = load_shared(tmp_path / "s")
    with torch.no_grad():
        assert torch.equal(again(ids).logits, logits)
    out = again.generate(ids, max_new_tokens=6, do_sample=False)
    assert out.shape[1] > ids.shape[1] and tokenizer.decode(out[0, ids.shape[1] :]).strip()


@pytest.mark.parametrize("s", [1e-14, 1e-20])
def test_fit_is_scale_invariant_in_tiny_moments(s):
    # input moments with mean diagonal below 1e-12 (inputs of RMS < 1e-6): the damping was clamped to an
    # absolute 0.01 * 1e-12, which outweighed them. Before the fix, two 16x32 layers at rank 8 cost
    # [10.52, 6.98] x 1e-14 with H * 1e-14 against [0.769, 0.898] with H (1e-20: [20.08, 13.57]), the
    # reconstructed weight 2.4 apart; now the same fit for every scale (weights within 1.2e-14 down to 1e-280)
    g = torch.Generator().manual_seed(0)
    W = [torch.randn(16, 32, generator=g, dtype=torch.float64) for _ in range(2)]
    X = torch.randn(200, 32, generator=g, dtype=torch.float64) * torch.logspace(
        0, -3, 32, dtype=torch.float64
    )
    H = X.T @ X / 200
    ref = fit_shared_basis(W, [H, H], 8)
    fit = fit_shared_basis(W, [H * s, H * s], 8)
    assert [c / s for c in fit.costs] == pytest.approx(ref.costs, rel=1e-9)  # measured 1e-15
    torch.testing.assert_close(fit.weight(0), ref.weight(0), rtol=0, atol=1e-10)  # measured 1e-14
    assert [c / s for c in group_costs([w.T @ w for w in W], [H * s, H * s], 8)] == pytest.approx(
        group_costs([w.T @ w for w in W], [H, H], 8), rel=1e-9
    )
