"""A fuzz test per public API of icml_compress.ragep (issue 30), checked with :mod:`icml_tools.fuzz` against
the bad-input contract of GUIDE "Bad input". Tiny everything: a one-layer random Mixtral of width 32."""

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

from icml_compress import ragep
from icml_compress.ragep import (
    Calibration,
    LayerStats,
    MoELayer,
    MoESpec,
    PruningPlan,
    allocate_budgets,
    calibrate,
    effective_rank,
    find_moe_layers,
    frequency_select,
    load_pruned,
    naee_select,
    plan_pruning,
    prune_experts,
    prune_moe,
    random_select,
    reap_select,
    register_moe_architecture,
    route,
    save_pruned,
    spectral_salience,
    uniform_budgets,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Calibration, "a result container only calibrate builds (fuzzed through it)")
FUZZ.exempt(LayerStats, "a result container only calibrate builds (fuzzed through it)")
FUZZ.exempt(MoELayer, "a view only find_moe_layers builds (fuzzed through it)")
FUZZ.exempt(PruningPlan, "a result container only plan_pruning builds (fuzzed through it)")

VOCAB, HIDDEN = 64, 32
IDS = torch.randint(0, VOCAB, (4, 12), generator=torch.Generator().manual_seed(0))
NOT_A_MODEL = st.sampled_from([None, "model", 3, nn.Linear(2, 2), nn.Sequential(nn.Embedding(10, 4))])
BAD_IDS = st.sampled_from(
    [None, [1, 2], torch.zeros(0, 4, dtype=torch.long), torch.ones(3), torch.full((2, 3), VOCAB), -IDS - 1]
)


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=6,
        num_experts_per_tok=2,
    )
    return MixtralForCausalLM(cfg).eval()


@functools.cache
def model():
    return mixtral()


@functools.cache
def cal():
    return calibrate(model(), IDS, keep_inputs=16)


def stats():
    return cal().layers[0]


def layer():
    return find_moe_layers(model())[0]


NOT_STATS = st.sampled_from([None, {}, "stats", 3])
BAD_K = st.sampled_from([0, -1, 7, 1.5, True, None, "2"])


def _kept(k):
    def check(ids) -> bool:
        return (
            isinstance(ids, list)
            and len(ids) == k
            and ids == sorted(set(ids))
            and 0 <= ids[0]
            and ids[-1] < 6
        )

    return check


@FUZZ.covers(MoESpec)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_moe_spec(data):
    fuzz_call(
        data,
        MoESpec,
        {"count_attr": "num_experts", "routing": "softmax", "always_normalize": False},
        check=lambda s: isinstance(s, MoESpec),
        strategies={
            "count_attr": st.sampled_from([None, 3, "", "not a name"]),
            "routing": st.sampled_from([None, "relu", 1]),
            "always_normalize": st.sampled_from([None, 1, "yes"]),
        },
    )


@FUZZ.covers(register_moe_architecture)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_register_moe_architecture(data):
    before = dict(ragep.ARCHITECTURES)
    try:
        fuzz_call(
            data,
            register_moe_architecture,
            {"model_type": "my_moe", "spec": MoESpec("num_experts")},
            strategies={
                "model_type": st.sampled_from([None, 3]),
                "spec": st.sampled_from([None, "softmax", {}]),
            },
        )
    finally:
        ragep.ARCHITECTURES.clear()
        ragep.ARCHITECTURES.update(before)


@FUZZ.covers(find_moe_layers)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_find_moe_layers(data):
    fuzz_call(
        data,
        find_moe_layers,
        {"model": model()},
        check=lambda layers: len(layers) == 1 and layers[0].n_experts == 6,
        strategies={"model": NOT_A_MODEL},
    )


@FUZZ.covers(route)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_route(data):
    x = torch.randn(10, HIDDEN, generator=torch.Generator().manual_seed(1))

    def check(out) -> bool:
        probs, index, weights = out
        return (
            probs.shape == (10, 6)
            and index.shape == (10, 2)
            and torch.allclose(weights.sum(-1), torch.ones(10))
        )

    fuzz_call(
        data,
        route,
        {"layer": layer(), "x": x, "alive": torch.tensor([True, False, True, True, False, True])},
        check=check,
        strategies={
            "layer": st.sampled_from([None, "layer", model()]),
            "x": st.sampled_from([None, x[:, :5], x.long(), x * math.nan, torch.zeros(0, HIDDEN)]),
            "alive": st.sampled_from(
                [torch.ones(6), torch.ones(5, dtype=torch.bool), torch.eye(6, dtype=torch.bool)[0]]
            ),
        },
    )


@FUZZ.covers(calibrate)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_calibrate(data):
    def check(c) -> bool:
        s = c.layers[0]
        return (
            isinstance(c, Calibration)
            and s.tokens == IDS.numel()
            and float(s.counts.sum()) == 2 * IDS.numel()
        )

    fuzz_call(
        data,
        calibrate,
        {
            "model": model(),
            "sequences": IDS,
            "batch_size": 2,
            "route_all": False,
            "keep_inputs": 8,
            "progress": False,
        },
        check=check,
        strategies={"model": NOT_A_MODEL, "sequences": BAD_IDS},
    )


@FUZZ.covers(effective_rank)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_effective_rank(data):
    m = torch.randn(20, 5, generator=torch.Generator().manual_seed(2))
    fuzz_call(
        data,
        effective_rank,
        {"matrix": m, "center": True},
        check=lambda r: 1 <= r <= 5,
        strategies={
            "matrix": st.sampled_from([None, m[0], m.long(), m * math.inf, torch.zeros(0, 3), [[1.0]]])
        },
    )


@FUZZ.covers(allocate_budgets)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_allocate_budgets(data):
    fuzz_call(
        data,
        allocate_budgets,
        {"scores": [3.0, 1.0, 2.0], "n_experts": [8, 8, 8], "keep_ratio": 0.5, "min_experts": [2, 2, 2]},
        check=lambda b: sum(b) == 12 and all(2 <= x <= 8 for x in b) and b[0] >= b[2] >= b[1],
        strategies={
            "scores": st.sampled_from([None, [1.0], [1.0, -1.0, 2.0], [1.0, math.nan, 2.0], "abc"]),
            "n_experts": st.sampled_from([None, [8, 8], [0, 8, 8], [8.0, 8.0, 8.0], [1, 1, 1]]),
            "keep_ratio": st.sampled_from([0, -0.1, 1.01, math.nan, True, None, 0.1]),
            "min_experts": st.sampled_from([None, [0, 2, 2], [9, 2, 2], [2, 2]]),
        },
        related={
            "n_experts": ["scores", "min_experts", "keep_ratio"],
            "min_experts": ["n_experts", "keep_ratio"],
            "scores": ["n_experts"],
        },
    )


@FUZZ.covers(uniform_budgets)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_uniform_budgets(data):
    fuzz_call(
        data,
        uniform_budgets,
        {"n_experts": [8, 6], "keep_ratio": 0.5, "min_experts": [2, 2]},
        check=lambda b: b == [4, 3],
        strategies={
            "n_experts": st.sampled_from([None, [8], [0, 6], [1, 1]]),
            "keep_ratio": st.sampled_from([0, 2.0, math.inf, "half", 0.1]),
            "min_experts": st.sampled_from([None, [9, 2], [2]]),
        },
        related={"n_experts": ["min_experts", "keep_ratio"], "min_experts": ["n_experts", "keep_ratio"]},
    )


@FUZZ.covers(frequency_select)
@FUZZ.covers(reap_select)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_score_selections(data):
    fn = data.draw(st.sampled_from([frequency_select, reap_select]))
    fuzz_call(
        data, fn, {"stats": stats(), "k": 3}, check=_kept(3), strategies={"stats": NOT_STATS, "k": BAD_K}
    )


@FUZZ.covers(random_select)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_select(data):
    fuzz_call(
        data,
        random_select,
        {"stats": stats(), "k": 3, "rng": np.random.default_rng(0)},
        check=_kept(3),
        strategies={
            "stats": NOT_STATS,
            "k": BAD_K,
            "rng": st.sampled_from([None, 0, np.random.RandomState(0)]),
        },
    )


@FUZZ.covers(spectral_salience)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_spectral_salience(data):
    fuzz_call(
        data,
        spectral_salience,
        {"stats": stats(), "k": 3, "energy_fraction": 0.9, "return_scores": False},
        check=_kept(3),
        strategies={
            "stats": NOT_STATS,
            "k": BAD_K,
            "energy_fraction": st.sampled_from([0, -1, 1.5, math.nan, "0.9", None]),
            "return_scores": st.sampled_from([None, 1, "yes"]),
        },
    )


@FUZZ.covers(naee_select)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_naee_select(data):
    no_inputs = copy.copy(stats())
    no_inputs.inputs = None
    fuzz_call(
        data,
        naee_select,
        {"layer": layer(), "stats": stats(), "k": 3, "max_subsets": 100},
        check=_kept(3),
        strategies={
            "layer": st.sampled_from([None, model(), "layer"]),
            "stats": st.sampled_from([None, no_inputs, "stats"]),
            "k": BAD_K,
            "max_subsets": st.sampled_from([0, -1, 10, 1.5, None]),
        },
        related={"max_subsets": ["k"], "k": ["max_subsets"]},
    )


@FUZZ.covers(plan_pruning)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_plan_pruning(data):
    def check(plan) -> bool:
        return isinstance(plan, PruningPlan) and len(plan.kept[0]) == plan.budgets[0] >= 2

    fuzz_call(
        data,
        plan_pruning,
        {
            "calibration": cal(),
            "keep_ratio": 0.5,
            "method": "naee",
            "budgets": "rank",
            "model": model(),
            "seed": 0,
            "energy_fraction": 0.9,
        },
        check=check,
        strategies={
            "calibration": st.sampled_from([None, stats(), {}]),
            "keep_ratio": st.sampled_from([0, 1.5, -1, math.nan, "half", 0.2]),
            "method": st.sampled_from(["magnitude", None, 3]),
            "budgets": st.sampled_from(["even", 3]),
            "model": st.sampled_from([None, nn.Linear(2, 2), "m"]),
            "seed": st.sampled_from([-1, 1.5, None, "0"]),
        },
        related={"model": ["method"]},
    )


@FUZZ.covers(prune_experts)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_prune_experts(data):
    ref = model()(IDS).logits

    def call(**kw):
        return prune_experts(copy.deepcopy(kw.pop("model")), **kw)

    call.__qualname__ = "prune_experts"

    def check(pruned) -> bool:
        return (
            pruned.config.ragep_kept_experts == {"0": [0, 2, 3, 5]} and pruned(IDS).logits.shape == ref.shape
        )

    fuzz_call(
        data,
        call,
        {"model": model(), "plan": {0: [5, 0, 3, 2]}},
        check=check,
        strategies={
            "model": NOT_A_MODEL,
            "plan": st.sampled_from(
                [None, [0, 1], {1: [0, 1]}, {0: [0]}, {0: [0, 0, 1]}, {0: [0, 9]}, {0: "01"}]
            ),
        },
    )


@FUZZ.covers(prune_moe)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_prune_moe(data):
    def call(**kw):
        m = kw.pop("model")
        return prune_moe(copy.deepcopy(m) if isinstance(m, nn.Module) else m, **kw)

    call.__qualname__ = "prune_moe"
    fuzz_call(
        data,
        call,
        {"model": model(), "sequences": IDS, "keep_ratio": 0.5, "method": "ragep", "route_all": True},
        check=lambda plan: isinstance(plan, PruningPlan) and plan.budgets == {0: 3},
        strategies={
            "model": NOT_A_MODEL,
            "sequences": BAD_IDS,
            "keep_ratio": st.sampled_from([0, 2, 0.1, None]),
            "method": st.sampled_from(["x", None]),
            "route_all": st.sampled_from([None, 1]),
        },
    )


@FUZZ.covers(save_pruned)
@FUZZ.covers(load_pruned)
@settings(max_examples=15, deadline=None)
@given(st.data())
def test_save_then_load(data):
    pruned = prune_experts(copy.deepcopy(model()), {0: [0, 1, 4]})
    with tempfile.TemporaryDirectory() as d:

        def save_then_load(model, path):
            save_pruned(model, path)
            return load_pruned(path)

        save_then_load.__qualname__ = "save_pruned"
        fuzz_call(
            data,
            save_then_load,
            {"model": pruned, "path": Path(d) / "m"},
            check=lambda m: torch.equal(m(IDS).logits, pruned(IDS).logits),
            strategies={"model": NOT_A_MODEL, "path": st.sampled_from([None, 3, b"p", ""])},
        )
        save_pruned(pruned, Path(d) / "m")
        fuzz_call(
            data,
            load_pruned,
            {"path": Path(d) / "m"},
            strategies={"path": st.sampled_from([None, 3, "", Path(d) / "nothing"])},
        )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(ragep)
