"""A fuzz test per public API of icml_compress.cgc (issue 35), checked with :mod:`icml_tools.fuzz` against
the bad-input contract of GUIDE "Bad input". Tiny everything: 8-by-4 weights, a two-block random Llama of
width 32."""

from __future__ import annotations

import copy
import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml_compress import cgc
from icml_compress.cgc import (
    ShareConfig,
    SharedBasisLinear,
    SharedFit,
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
    sharing_record,
    thresholds,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(SharedFit, "a result container only fit_shared_basis builds (fuzzed through it)")

GEN = torch.Generator().manual_seed(0)
W = [torch.randn(4, 8, generator=GEN, dtype=torch.float64) for _ in range(3)]
X = torch.randn(64, 8, generator=GEN, dtype=torch.float64)
H = [X.T @ X / 64 + 0.1 * i * torch.eye(8, dtype=torch.float64) for i in range(3)]
COSTS = np.array([[0.0, 1.0, -2.0], [1.0, 0.0, 0.5], [-2.0, 0.5, 0.0]])
VOCAB = 64
IDS = torch.randint(0, VOCAB, (128,), generator=GEN)
CONFIG = ShareConfig(ratio=0.3, n_calibration=2, seq_len=16)
NOT_A_MODULE = st.sampled_from([None, "model", 3, nn.Linear, nn.Sequential(nn.Embedding(10, 4))])
NOT_STATS = st.sampled_from([None, {}, [1], {"model.layers.0.self_attn.q_proj": torch.eye(3)}])


def tiny():
    from icml_tools.assets import tiny_llama

    return tiny_llama(0, layers=2, hidden=32, heads=2, kv_heads=1, intermediate=64, vocab=VOCAB)


@functools.cache
def stats():
    return collect_statistics(tiny(), IDS, config=CONFIG, progress=False)


@functools.cache
def compressed():
    return compress_model(tiny(), stats(), CONFIG, progress=False)


@FUZZ.covers(ShareConfig)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_share_config(data):
    fuzz_call(
        data,
        ShareConfig,
        {
            "ratio": 0.3,
            "method": "cgc",
            "max_group": 3,
            "cost": "overlap",
            "taus": 4,
            "seed": 1,
            "refit": True,
        },
        check=lambda c: isinstance(c, ShareConfig) and 0 < c.ratio < 1,
    )


@FUZZ.covers(rank_for_ratio)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rank_for_ratio(data):
    def check(k) -> bool:
        return isinstance(k, int) and k >= 1

    fuzz_call(
        data,
        rank_for_ratio,
        {"d_in": 8, "d_out": 4, "n": 2, "ratio": 0.3},
        check=check,
        strategies={n: st.sampled_from([0, -1, 1.5, True, None, "8"]) for n in ("d_in", "d_out", "n")},
    )


@FUZZ.covers(fit_shared_basis)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fit_shared_basis(data):
    def check(fit) -> bool:
        return isinstance(fit, SharedFit) and all(math.isfinite(c) and c >= -1e-9 for c in fit.costs)

    fuzz_call(
        data,
        fit_shared_basis,
        {"weights": W[:2], "hessians": H[:2], "rank": 3, "refit": False, "damping": 0.01, "name": "g"},
        check=check,
        strategies={
            "weights": st.sampled_from(
                [None, [], W[0], [W[0], W[1][:3]], [W[0].float(), torch.full((4, 8), math.nan)]]
            ),
            "hessians": st.sampled_from([None, H[:1], [H[0], torch.eye(7)], [H[0], -math.inf * H[1]]]),
            "rank": st.sampled_from([0, -1, 9, 1.5, True, None]),
        },
        related={"weights": ["hessians"], "hessians": ["weights"], "rank": ["weights"]},
    )


@FUZZ.covers(layer_cost)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_layer_cost(data):
    fuzz_call(
        data,
        layer_cost,
        {"W": W[0], "W_hat": W[1], "H": H[0]},
        check=lambda c: isinstance(c, float) and math.isfinite(c),
        related={"W": ["W_hat", "H"]},
    )


@FUZZ.covers(refit_coefficients)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_refit_coefficients(data):
    def check(case) -> bool:
        kw, C = case
        return C.shape == (kw["basis"].shape[1], kw["W"].shape[0]) and bool(torch.isfinite(C).all())

    def call(**kw):
        return kw, refit_coefficients(**kw)

    call.__qualname__ = "refit_coefficients"
    fuzz_call(
        data,
        call,
        {
            "basis": torch.randn(8, 3, generator=GEN, dtype=torch.float64),
            "W": W[0],
            "H": H[0],
            "damping": 1e-8,
        },
        check=check,
        related={"W": ["basis", "H"], "basis": ["W"]},
    )


@FUZZ.covers(pair_costs)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_pair_costs(data):
    def check(c) -> bool:
        return c.shape == (3, 3) and np.array_equal(c, c.T) and bool(np.isfinite(c).all())

    fuzz_call(
        data,
        pair_costs,
        {"weights": W, "hessians": H, "ratio": 0.3, "cost": "exact", "refit": False, "damping": 0.01},
        check=check,
        strategies={
            "weights": st.sampled_from([None, [], [W[0], W[1].T]]),
            "hessians": st.sampled_from([None, H[:2], [H[0], H[1], torch.eye(4)]]),
        },
        related={"weights": ["hessians"], "hessians": ["weights"]},
    )


@FUZZ.covers(conflict_graph)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_conflict_graph(data):
    def check(adj) -> bool:
        return adj.dtype == bool and np.array_equal(adj, adj.T) and not adj.diagonal().any()

    fuzz_call(data, conflict_graph, {"costs": COSTS, "tau": 0.0}, check=check)


@FUZZ.covers(dsatur_coloring)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_dsatur_coloring(data):
    def check(case) -> bool:
        adj, cap, colors = case
        proper = all(
            colors[i] != colors[j] for i in range(len(colors)) for j in range(len(colors)) if adj[i, j]
        )
        return proper and max(colors.count(c) for c in set(colors)) <= cap

    def call(**kw):  # the adjacency and cap it was given (not the costs, which may hold +inf)
        return kw["adjacency"], kw["max_group"], dsatur_coloring(**kw)

    call.__qualname__ = "dsatur_coloring"
    fuzz_call(
        data,
        call,
        {"adjacency": COSTS > 0, "max_group": 2, "seed": 3, "costs": COSTS},
        check=check,
        strategies={
            "adjacency": st.sampled_from([None, np.ones((2, 3), bool), np.eye(3, dtype=bool), COSTS])
        },
        related={"adjacency": ["costs"], "costs": ["adjacency"]},
    )


@FUZZ.covers(color_groups)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_color_groups(data):
    def check(case) -> bool:
        kw, groups = case
        return sorted(v for g in groups for v in g) == list(range(len(kw["colors"])))

    def call(**kw):
        return kw, color_groups(**kw)

    call.__qualname__ = "color_groups"
    fuzz_call(data, call, {"colors": [0, 1, 0, 2]}, check=check)


@FUZZ.covers(thresholds)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_thresholds(data):
    def check(t) -> bool:
        return t[0] == -math.inf and t[-1] == math.inf and t == sorted(t)

    fuzz_call(
        data,
        thresholds,
        {"costs": COSTS, "count": 5},
        check=check,
        strategies={"count": st.sampled_from([0, -1, 2.5, None])},
        allow_non_finite=True,  # the sweep always holds -inf (no sharing) and +inf (no conflicts)
    )


@FUZZ.covers(SharedBasisLinear)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_shared_basis_linear(data):
    def check(m) -> bool:
        y = m(torch.randn(2, m.in_features))
        return y.shape == (2, m.out_features) and bool(torch.isfinite(y).all())

    fuzz_call(
        data,
        SharedBasisLinear,
        {"basis": nn.Parameter(torch.randn(3, 8)), "coeff": torch.randn(4, 3), "bias": torch.zeros(4)},
        check=check,
        strategies={
            "basis": st.sampled_from(
                [None, torch.randn(3, 8), nn.Parameter(torch.randn(2, 8)), nn.Parameter(torch.randn(3))]
            ),
            "coeff": st.sampled_from([None, torch.randn(4, 2), torch.randn(4), "c"]),
            "bias": st.sampled_from([torch.zeros(3), "b", torch.zeros(4, 1)]),
        },
        related={"basis": ["coeff"], "coeff": ["basis", "bias"], "bias": ["coeff"]},
    )


@FUZZ.covers(collect_statistics)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_collect_statistics(data):
    def check(s) -> bool:
        return len(s) == 14 and all(bool(torch.isfinite(h).all()) for h in s.values())

    fuzz_call(
        data,
        collect_statistics,
        {"model": tiny(), "calibration_texts": IDS, "tokenizer": None, "config": CONFIG, "progress": False},
        check=check,
        strategies={
            "model": NOT_A_MODULE,
            "config": st.sampled_from(["cgc", {"ratio": 0.3}, 0.3]),
        },
        related={"calibration_texts": ["tokenizer", "config"], "tokenizer": ["calibration_texts"]},
    )


def _compress_fresh(model, statistics, config, groups=None, costs=None, progress=False):
    if isinstance(model, nn.Module):
        model = copy.deepcopy(model)
    return compress_model(model, statistics, config, groups=groups, costs=costs, progress=progress)


_compress_fresh.__qualname__ = "compress_model"


@FUZZ.covers(compress_model)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_compress_model(data):
    def check(m) -> bool:
        with torch.no_grad():
            y = m(IDS[:8].unsqueeze(0)).logits
        return sum(isinstance(x, SharedBasisLinear) for x in m.modules()) == 14 and bool(
            torch.isfinite(y).all()
        )

    fuzz_call(
        data,
        _compress_fresh,
        {
            "model": tiny(),
            "statistics": stats(),
            "config": CONFIG,
            "groups": None,
            "costs": None,
            "progress": False,
        },
        check=check,
        strategies={
            "model": NOT_A_MODULE,
            "statistics": NOT_STATS,
            "config": st.sampled_from([None, "cgc", {"ratio": 0.3}]),
            "groups": st.sampled_from(
                [3, [["nope"]], [[]], [["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"]]]
            ),
            "costs": st.sampled_from([3, {"model.layers.*.self_attn.q_proj": np.zeros((3, 3))}]),
        },
    )


@FUZZ.covers(plan_groups)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_plan_groups(data):
    def check(plan) -> bool:
        names = sorted(n for g in plan["groups"] for n in g)
        return names == sorted(stats())

    fuzz_call(
        data,
        plan_groups,
        {"model": tiny(), "statistics": stats(), "config": CONFIG, "costs": None, "progress": False},
        check=check,
        strategies={
            "model": NOT_A_MODULE,
            "statistics": NOT_STATS,
            "config": st.sampled_from([None, "cgc", {"ratio": 0.3}]),
            "costs": st.sampled_from([3, [1], {"model.layers.*.self_attn.q_proj": np.zeros((3, 3))}]),
        },
    )


@FUZZ.covers(save_shared, load_shared)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_save_and_load_shared(data):
    model = compressed()
    with tempfile.TemporaryDirectory() as d:

        def save_then_load(model, path, tokenizer=None, extra=None):
            out = save_shared(model, path, tokenizer=tokenizer, extra=extra)
            return load_shared(out)

        save_then_load.__qualname__ = "save_shared"

        def check(again) -> bool:
            with torch.no_grad():
                return torch.equal(again(IDS[:8].unsqueeze(0)).logits, model(IDS[:8].unsqueeze(0)).logits)

        fuzz_call(
            data,
            save_then_load,
            {"model": model, "path": Path(d) / "m", "tokenizer": None, "extra": {"k": 1}},
            check=check,
            strategies={
                "model": st.sampled_from([None, "m", tiny(), nn.Linear(2, 2)]),
                "path": st.sampled_from([None, 3, b"p", ""]),
                "tokenizer": st.sampled_from([3, "tok", object()]),
                "extra": st.sampled_from([3, "x", [1]]),
            },
        )


@FUZZ.covers(sharing_record)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_sharing_record(data):
    fuzz_call(
        data,
        sharing_record,
        {"model": compressed()},
        check=lambda r: {"config", "groups", "families", "parameters"} <= set(r),
        strategies={"model": st.sampled_from([None, "m", tiny(), nn.Linear(2, 2)])},
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(cgc)
