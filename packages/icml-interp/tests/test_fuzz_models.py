"""Fuzz tests (GUIDE "Bad input", issue 22) of the model-facing APIs: hooks, lens, perplexity, steering, patching.

Every public callable gets hostile inputs (wrong types, NaN/inf, empty or re-shaped arrays, other dtypes,
out-of-range numbers): each call returns a checked result or raises ValueError/TypeError naming the argument.
The models are the tiny random GPT-2s of conftest.py (vocabulary 256, width 64, 2 layers, 4 heads)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import icml_interp.hooks
import icml_interp.lens
import icml_interp.patching
import icml_interp.perplexity
import icml_interp.steering
from icml_interp.hooks import (
    ARCHITECTURES,
    ActivationCache,
    ArchSpec,
    HookedModel,
    HookPoint,
    act_name,
    register_architecture,
    spec_for,
    wrap,
)
from icml_interp.lens import logit_lens, mlp_value_lens, token_rank_by_layer
from icml_interp.patching import (
    Circuit,
    EdgeScores,
    Graph,
    NeuronScores,
    PatchingResult,
    activation_patching,
    answer_logprob,
    attribution_patching,
    build_graph,
    cross_model_layer_patching,
    edge_attribution_patching,
    edge_patching,
    evaluate_circuit,
    faithfulness,
    find_circuit,
    logit_diff,
    logit_margin,
    neuron_attribution_patching,
    normalized_effect,
    patch_hooks,
    path_patching,
    prefill_patch,
    run_with_patches,
)
from icml_interp.perplexity import split_perplexity, split_perplexity_over_checkpoints, token_nll
from icml_interp.steering import (
    KeyScalingTest,
    add_steering_vector,
    default_layers,
    difference_of_means,
    difference_vectors,
    direction_from_activations,
    generate_steered,
    key_scaling_test,
    last_token_activations,
    neuron_scores,
    random_neurons,
    scale_mlp_keys,
    scale_sweep,
    steering_vector,
    top_neurons,
)
from icml_tools.fuzz import Coverage, fuzz_call, rejects

FUZZ = Coverage()
FUZZ.exempt(
    HookPoint, "built only by HookedModel (HookedModel.hook_point returns them); users never construct one"
)
for _container in (Circuit, EdgeScores, Graph, NeuronScores):
    FUZZ.exempt(_container, "a result container the edge attribution functions (fuzzed) build")
FUZZ.exempt(KeyScalingTest, "the result container key_scaling_test (fuzzed) builds")
FUZZ.exempt(
    PatchingResult, "the result table the patching scans build; its rows are checked in their fuzz tests"
)

VOCAB, D_MODEL, N_LAYERS, N_HEADS, D_MLP = 256, 64, 2, 4, 256
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SOME = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CHEAP = settings(max_examples=60, deadline=None)

_MODELS: dict[str, object] = {}


def models(zoo) -> SimpleNamespace:
    """Tiny GPT-2s built once per module: ``a`` (seed 0), ``b`` (seed 1), and ``a`` hooked."""
    if not _MODELS:
        _MODELS["a"] = zoo.gpt2(0)
        _MODELS["b"] = zoo.gpt2(1)
        _MODELS["hooked"] = HookedModel(_MODELS["a"])
    return SimpleNamespace(**_MODELS)


IDS = torch.tensor([[5, 17, 42, 9, 100], [3, 77, 12, 8, 200]])  # (2, 5)
CORRUPT = torch.tensor([[5, 17, 43, 9, 101], [4, 77, 13, 8, 201]])
SEQ = torch.tensor([5, 17, 42, 9])
NOT_MODELS = st.sampled_from(
    [None, "gpt2", 3, object(), nn.Linear(2, 2), SimpleNamespace(config=SimpleNamespace(model_type="nope"))]
)


def finite(t) -> bool:
    return bool(torch.isfinite(torch.as_tensor(t)).all())


# ---------------------------------------------------------------------------------------------------- hooks
@FUZZ.covers(act_name)
@CHEAP
@given(st.data())
def test_act_name(data):
    fuzz_call(
        data,
        act_name,
        {"short": "resid_post", "layer": 1},
        check=lambda r: isinstance(r, str) and r.startswith("blocks.") and r.endswith(".hook_resid_post"),
    )


@FUZZ.covers(ArchSpec)
@CHEAP
@given(st.data())
def test_arch_spec(data):
    llama = ARCHITECTURES["llama"]
    valid = {f: getattr(llama, f) for f in llama.__dataclass_fields__}

    def ok(
        spec,
    ):  # any non-empty paths are a valid spec (whether the modules exist is checked by HookedModel)
        paths = [getattr(spec, f) for f in ("layers", "embed", "final_norm", "unembed", "mlp_in", "down")]
        return all(isinstance(p, str) and p.strip() for p in paths) and spec.qkv in (
            "separate",
            "gpt2",
            "neox",
        )

    fuzz_call(data, ArchSpec, valid, check=ok)


@FUZZ.covers(register_architecture)
@CHEAP
@given(st.data())
def test_register_architecture(data):
    before = set(ARCHITECTURES)

    def register(model_type, spec):
        try:
            register_architecture(model_type, spec)
            return ARCHITECTURES[model_type]
        finally:  # keep the global map as it was
            for key in set(ARCHITECTURES) - before:
                del ARCHITECTURES[key]

    fuzz_call(
        data,
        register,
        {"model_type": "fuzz_arch", "spec": ARCHITECTURES["llama"]},
        check=lambda r: r is ARCHITECTURES["llama"],
    )
    assert set(ARCHITECTURES) == before


@FUZZ.covers(spec_for, wrap, HookedModel)
@FEW
@given(data=st.data())
def test_spec_for_wrap_and_hooked_model(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        spec_for,
        {"model": m.a},
        strategies={"model": NOT_MODELS},
        check=lambda r: r is ARCHITECTURES["gpt2"],
    )
    fuzz_call(
        data, wrap, {"model": m.a}, strategies={"model": NOT_MODELS}, check=lambda r: r.n_layers == N_LAYERS
    )

    def build_and_run(model, spec, input_ids):
        return HookedModel(model, spec)(input_ids)

    fuzz_call(
        data,
        build_and_run,
        {"model": m.a, "spec": ARCHITECTURES["gpt2"], "input_ids": IDS},
        strategies={"model": NOT_MODELS, "spec": st.sampled_from(["gpt2", 1, {}, ARCHITECTURES["llama"]])},
        check=lambda r: r.ndim == 3 and r.shape[-1] == VOCAB and finite(r),
    )


@FEW
@given(data=st.data())
def test_hooked_model_transformer_lens_habits(zoo, data):
    """add_hook / reset_hooks, run_with_cache(names_filter=...) and to_tokens keep the bad-input contract."""
    m = models(zoo)
    hooked = m.hooked
    names = st.sampled_from([None, 3, "", "blocks.9.hook_resid_pre", ["hook_embed", 1], b"x"])

    def hook_then_run(name, fn):
        try:
            hooked.add_hook(name, fn)
            return hooked(IDS)
        finally:
            hooked.reset_hooks()

    fuzz_call(
        data,
        hook_then_run,
        {"name": "blocks.0.hook_mlp_out", "fn": lambda a, h: a * 0.5},
        strategies={"name": names, "fn": st.sampled_from([None, 3, "f"])},
        check=lambda r: r.shape == (2, 5, VOCAB) and finite(r),
    )
    fuzz_call(
        data,
        lambda names_filter: hooked.run_with_cache(IDS, names_filter=names_filter)[1],
        {"names_filter": ["blocks.1.hook_resid_post"]},
        strategies={"names_filter": names.filter(lambda v: v is not None)},
        check=lambda cache: list(cache.keys()) == ["blocks.1.hook_resid_post"],
    )


@FUZZ.covers(ActivationCache)
@FEW
@given(data=st.data())
def test_activation_cache(zoo, data):
    m = models(zoo)
    _, cache = m.hooked.run_with_cache(IDS, [act_name("resid_post", i) for i in range(N_LAYERS)])
    assert isinstance(cache, ActivationCache) and cache["resid_post", 1] is cache["blocks.1.hook_resid_post"]
    fuzz_call(
        data,
        cache.stack,
        {"short": "resid_post", "layers": [0, 1]},
        check=lambda r: r.shape[0] in (1, 2, 3) and r.shape[1:] == (2, 5, D_MODEL),
    )


# ---------------------------------------------------------------------------------------------------- lens
@FUZZ.covers(logit_lens)
@FEW
@given(data=st.data())
def test_logit_lens(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        logit_lens,
        {"model": m.a, "input_ids": IDS},
        strategies={"model": NOT_MODELS},
        check=lambda r: r.shape[0] == N_LAYERS + 1 and r.shape[-1] == VOCAB and finite(r),
    )


@FUZZ.covers(token_rank_by_layer)
@FEW
@given(data=st.data())
def test_token_rank_by_layer(zoo, data):
    m = models(zoo)

    def ok(r):
        return (
            len(r["rank"]) == len(r["prob"]) == N_LAYERS + 1
            and all(0 <= k < VOCAB for k in r["rank"])
            and all(0 <= p <= 1 for p in r["prob"])
        )

    fuzz_call(
        data,
        token_rank_by_layer,
        {"model": m.a, "input_ids": SEQ, "target": 42, "position": -1},
        strategies={"model": NOT_MODELS},
        check=ok,
    )


@FUZZ.covers(mlp_value_lens)
@FEW
@given(data=st.data())
def test_mlp_value_lens(zoo, data):
    m = models(zoo)

    def ok(r):
        ids, logits = r
        in_vocab = bool(((ids >= 0) & (ids < VOCAB)).all())
        return ids.shape == logits.shape and ids.ndim == 2 and ids.shape[1] >= 1 and in_vocab

    fuzz_call(
        data,
        mlp_value_lens,
        {"model": m.a, "layer": 1, "top_k": 3, "neurons": [0, 5, 7]},
        strategies={"model": NOT_MODELS},
        check=ok,
    )


# ---------------------------------------------------------------------------------------------------- perplexity
PAIRS = [([5, 17, 42], [9, 100]), ([3, 77], [12])]


@FUZZ.covers(token_nll)
@FEW
@given(data=st.data())
def test_token_nll(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        token_nll,
        {"model": m.a, "input_ids": IDS},
        strategies={"model": NOT_MODELS},
        check=lambda r: r.ndim == 2 and bool((r >= 0).all()) and finite(r),
    )


@FUZZ.covers(split_perplexity)
@FEW
@given(data=st.data())
def test_split_perplexity(zoo, data):
    m = models(zoo)
    bad_pairs = st.sampled_from(
        [
            [([5, 999], [1])],
            [([5, -1], [1])],
            [([5, 1.5], [1])],
            [([], [1])],
            [("text", [1])],
            [(SEQ[None], [1])],
        ]
    )

    def ok(r):
        return (
            all(r[k] >= 1 and math.isfinite(r[k]) for k in ("answer_ppl", "full_ppl"))
            and len(r["items"]) >= 1
        )

    # tokenizer is read only for string prompts or answers; the pairs here are token ids, so any value is fine
    fuzz_call(
        data,
        split_perplexity,
        {"model": m.a, "pairs": PAIRS, "tokenizer": None},
        mutate=["model", "pairs"],
        strategies={
            "model": NOT_MODELS,
            "pairs": st.one_of(bad_pairs, st.just(PAIRS[:1]), st.sampled_from([None, "x", 3, [], {}])),
        },
        check=ok,
    )
    # a one-token prompt has no scored prompt token: its prompt_ppl is NaN, with a warning
    with pytest.warns(RuntimeWarning, match="one-token prompts"):
        out = split_perplexity(m.a, [([5], [9, 100])])
    assert math.isnan(out["prompt_ppl"]) and math.isfinite(out["answer_ppl"])


@FUZZ.covers(split_perplexity_over_checkpoints)
@FEW
@given(data=st.data())
def test_split_perplexity_over_checkpoints(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        split_perplexity_over_checkpoints,
        {"models": {"a": m.a, "b": m.b}, "pairs": PAIRS},
        strategies={"models": st.sampled_from([None, "ab", 3, [], {}, {"a": None}, [m.a, "x"]])},
        check=lambda rows: len(rows) in (1, 2) and all(r["full_ppl"] >= 1 for r in rows),
    )


# ---------------------------------------------------------------------------------------------------- steering
@FUZZ.covers(neuron_scores)
@FEW
@given(data=st.data())
def test_neuron_scores(zoo, data):
    m = models(zoo)

    def ok(r):
        return (
            r["score"].shape == (D_MLP,)
            and bool((r["score"] >= 0).all())
            and bool(((r["overlap"] >= 0) & (r["overlap"] <= 1)).all())
            and finite(r["score"])
        )

    fuzz_call(
        data,
        neuron_scores,
        {
            "model": m.a,
            "input_ids": IDS,
            "layer": 1,
            "answer_tokens": [[9], [12, 8]],
            "top_tokens": 5,
            "position": -1,
        },
        strategies={"model": NOT_MODELS},
        related={"input_ids": ["answer_tokens"], "answer_tokens": ["input_ids"]},  # one answer set per prompt
        check=ok,
    )


@FUZZ.covers(top_neurons)
@CHEAP
@given(st.data())
def test_top_neurons(data):
    scores = torch.tensor([0.1, 3.0, 2.0, -1.0, 0.5])
    fuzz_call(
        data,
        top_neurons,
        {"scores": scores, "k": 2},
        related={"scores": ["k"]},  # a shorter scores can hold fewer than k neurons
        check=lambda r: len(r) >= 1 and len(set(r)) == len(r) and all(0 <= i < 5 for i in r),
    )


@FUZZ.covers(random_neurons)
@CHEAP
@given(st.data())
def test_random_neurons(data):
    def ok(r):
        return len(r) == 3 and len(set(r)) == 3 and all(0 <= i < 10 and i not in (1, 2) for i in r)

    fuzz_call(
        data,
        random_neurons,
        {"d_mlp": 10, "k": 3, "exclude": [1, 2], "seed": 0},
        related={"d_mlp": ["k"], "exclude": ["k"]},  # fewer neurons left than k
        check=lambda r: len(r) >= 1 and len(set(r)) == len(r) and all(i >= 0 for i in r),
    )
    assert ok(random_neurons(10, 3, exclude=[1, 2], seed=5))


@FUZZ.covers(key_scaling_test)
@FEW
@given(data=st.data())
def test_key_scaling_test(zoo, data):
    m = models(zoo)

    def ok(r):
        return (
            isinstance(r, dict)
            and all(isinstance(t, KeyScalingTest) and t.null.ndim == 1 and finite(t.null) for t in r.values())
            and all(0 < t.p_lower <= 1 and 0 < t.p_upper <= 1 for t in r.values())
        )

    bad_neurons = st.sampled_from(
        [None, {}, {0: []}, {5: [1]}, {0: [999]}, {0: [1, 1]}, {0: [0.5]}, {0: list(range(D_MLP))}, [1, 2]]
    )
    fuzz_call(
        data,
        key_scaling_test,
        {
            "model": m.a,
            "input_ids": IDS,
            "neurons": {1: [3, 7]},
            "metric": logit_margin([9, 12]),
            "factors": (0.0, 2.0),
            "n_random": 5,
            "seed": 0,
        },
        strategies={"model": NOT_MODELS, "neurons": bad_neurons, "metric": BAD_METRICS},
        related={"input_ids": ["target"], "metric": ["target"]},  # one target per prompt, in the vocabulary
        check=ok,
    )


@FUZZ.covers(scale_mlp_keys)
@FEW
@given(data=st.data())
def test_scale_mlp_keys(zoo, data):
    m = models(zoo)

    def run(model, neurons, factor):
        with scale_mlp_keys(model, neurons, factor) as hooked:
            return hooked(IDS)

    bad_neurons = st.sampled_from(
        [
            None,
            {},
            {0: []},
            {5: [1]},
            {-1: [1]},
            {0: [999]},
            {0: ["x"]},
            {"a": [1]},
            {0: [0.5]},
            {0: torch.tensor([0.5])},
            [1, 2],
        ]
    )
    fuzz_call(
        data,
        run,
        {"model": m.a, "neurons": {0: [1, 2], 1: torch.tensor([[3], [4]])}, "factor": 2.0},
        strategies={"model": NOT_MODELS, "neurons": bad_neurons},
        check=lambda r: r.shape == (2, 5, VOCAB),
    )


@FUZZ.covers(difference_of_means)
@FEW
@given(data=st.data())
def test_difference_of_means(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        difference_of_means,
        {
            "model": m.a,
            "positive_ids": IDS,
            "negative_ids": CORRUPT[:1, :4],
            "layer": 0,
            "component": "resid_post",
            "position": -1,
        },
        strategies={"model": NOT_MODELS},
        related={
            "positive_ids": ["position"],
            "negative_ids": ["position"],
        },  # a shorter prompt, same position
        check=lambda r: r.shape == (D_MODEL,) and finite(r),
    )


@FUZZ.covers(add_steering_vector)
@FEW
@given(data=st.data())
def test_add_steering_vector(zoo, data):
    m = models(zoo)
    clean = m.hooked(IDS)

    def run(model, layer, vector, alpha, component, positions):
        with add_steering_vector(
            model, layer, vector, alpha, component=component, positions=positions
        ) as hooked:
            return hooked(IDS)

    fuzz_call(
        data,
        run,
        {
            "model": m.a,
            "layer": 1,
            "vector": torch.ones(D_MODEL),
            "alpha": 2.0,
            "component": "resid_post",
            "positions": "last",
        },
        strategies={"model": NOT_MODELS},
        check=lambda r: r.shape == clean.shape and torch.equal(r[:, :-1], clean[:, :-1]) and finite(r),
    )


RAGGED = [[5, 17, 42, 9, 100], [3, 77, 12]]
RAGGED_OTHER = [[5, 17, 43, 9, 101], [4, 77, 13]]
BAD_SEQUENCES = st.sampled_from(
    [None, "abc", [], [[]], [[1, 2], "x"], [[1, 2.5]], [[-1, 3]], [[1, VOCAB]], [torch.tensor([1.0, 2.0])],
     torch.tensor([[1.0, 2.0]]), torch.zeros(0, 3, dtype=torch.long), [[True, False]]]
)  # fmt: skip


@FUZZ.covers(last_token_activations, default_layers)
@FEW
@given(data=st.data())
def test_last_token_activations(zoo, data):
    m = models(zoo)
    assert default_layers(m.a) == (1, 1)
    fuzz_call(
        data,
        last_token_activations,
        {"model": m.a, "sequences": RAGGED, "layer": 1, "component": "resid_post", "batch_size": 2},
        strategies={"model": NOT_MODELS, "sequences": BAD_SEQUENCES},
        check=lambda r: r.shape == (2, D_MODEL) and finite(r),
    )


@FUZZ.covers(difference_vectors, steering_vector)
@FEW
@given(data=st.data())
def test_difference_vectors_and_steering_vector(zoo, data):
    m = models(zoo)
    fn = data.draw(st.sampled_from([difference_vectors, steering_vector]))
    valid = {"model": m.a, "positive": RAGGED, "negative": RAGGED_OTHER, "layer": 0, "component": "resid_pre"}
    if fn is steering_vector:
        valid["method"] = data.draw(st.sampled_from(["mean", "pca", "probe"]))
    fuzz_call(
        data,
        fn,
        valid,
        strategies={"model": NOT_MODELS, "positive": BAD_SEQUENCES, "negative": BAD_SEQUENCES},
        related={"positive": ["negative"], "negative": ["positive"]},
        check=lambda r: r.shape[-1] == D_MODEL and finite(r),
    )


@FUZZ.covers(direction_from_activations)
@SOME
@given(data=st.data())
def test_direction_from_activations(data):
    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(6, 8, generator=g) + 1, torch.randn(6, 8, generator=g)
    fuzz_call(
        data,
        direction_from_activations,
        {
            "positive_acts": pos,
            "negative_acts": neg,
            "method": data.draw(st.sampled_from(["mean", "pca", "probe"])),
            "probe_l2": 1e-3,
            "probe_steps": 20,
        },
        related={"positive_acts": ["negative_acts"], "negative_acts": ["positive_acts"]},
        check=lambda r: r.shape == (8,) and finite(r),
    )


@FUZZ.covers(generate_steered, scale_sweep)
@FEW
@given(data=st.data())
def test_generate_steered_and_scale_sweep(zoo, data):
    m = models(zoo)
    if data.draw(st.booleans()):
        fuzz_call(
            data,
            generate_steered,
            {
                "model": m.a,
                "prompts": RAGGED,
                "vector": torch.ones(D_MODEL),
                "layer": 1,
                "scale": 2.0,
                "positions": "prefill",
                "component": "resid_post",
                "max_new_tokens": 3,
                "pad_token_id": 0,
                "batch_size": 2,
            },
            strategies={"model": NOT_MODELS, "prompts": BAD_SEQUENCES},
            check=lambda r: len(r) == 2 and all(len(x) > 0 for x in r),
        )
    else:
        fuzz_call(
            data,
            scale_sweep,
            {
                "model": m.a,
                "prompts": RAGGED,
                "vector": torch.ones(D_MODEL),
                "layer": 1,
                "scales": [0.0, 1.0],
            },
            strategies={"model": NOT_MODELS, "prompts": BAD_SEQUENCES},
            check=lambda r: len(r) >= 1 and all(len(x) == 2 for x in r),
        )


# ---------------------------------------------------------------------------------------------------- patching
METRIC = logit_diff(42, 9)
BAD_METRICS = st.sampled_from(
    [
        None,
        "logit_diff",
        3,
        lambda logits: logits,
        lambda logits: "x",
        lambda logits: torch.tensor(math.nan),
        logit_diff(42, 999),
    ]
)


def _ok_result(n_rows):
    def ok(r):
        return (
            isinstance(r, PatchingResult)
            and len(r.rows) in n_rows
            and all(math.isfinite(row["effect"]) and math.isfinite(row["metric"]) for row in r.rows)
            and r.clean != r.corrupt
        )

    return ok


@FUZZ.covers(logit_diff, answer_logprob, logit_margin)
@CHEAP
@given(st.data())
def test_token_metrics(data):
    logits = torch.randn(2, 5, VOCAB, generator=torch.Generator().manual_seed(0))

    def fits(metric):
        ids = metric.ids.values()
        return all(int(v.max()) < VOCAB and v.numel() in (1, 2) for v in ids) and -5 <= metric.position < 5

    def ok_diff(metric):
        if fits(metric):
            rows, pos = torch.arange(2), metric.position
            c, w = metric.ids["correct"].expand(2), metric.ids["wrong"].expand(2)
            want = (logits[rows, pos, c] - logits[rows, pos, w]).mean()
            value = metric(logits)
            return value.shape == () and torch.allclose(value, want)
        rejects(metric, logits, name=["correct", "wrong", "position"])
        return True

    def ok_logprob(metric):
        if fits(metric):
            value = metric(logits)
            return value.shape == () and float(value) <= 0
        rejects(metric, logits, name=["target", "position"])
        return True

    fuzz_call(data, logit_diff, {"correct": [42, 7], "wrong": 9, "position": -1}, check=ok_diff)
    fuzz_call(data, answer_logprob, {"target": 42, "position": -2}, check=ok_logprob)

    def ok_margin(metric):
        if fits(metric):
            rows, pos = torch.arange(2), metric.position
            t = metric.ids["target"].expand(2)
            last = logits[:, pos]
            best_other = torch.stack(
                [torch.cat([last[i, : t[i]], last[i, t[i] + 1 :]]).max() for i in range(2)]
            )
            value = metric(logits)
            return value.shape == () and torch.allclose(value, (last[rows, t] - best_other).mean())
        rejects(metric, logits, name=["target", "position"])
        return True

    fuzz_call(data, logit_margin, {"target": [42, 7], "position": -1}, check=ok_margin)


@FUZZ.covers(normalized_effect)
@CHEAP
@given(st.data())
def test_normalized_effect(data):
    def ok(r):
        return isinstance(r, float)

    fuzz_call(data, normalized_effect, {"patched": 0.5, "clean": 0.0, "corrupt": 2.0}, check=ok)
    assert normalized_effect(1.5, 1.0, 3.0) == 0.25
    with pytest.warns(RuntimeWarning, match="overflows"):
        normalized_effect(1e308, -1e308, -1e308 + 1e293)


# a token metric's ids must fit the model's vocabulary: the refusal names the metric's own argument
PATCH_RELATED = {"clean_ids": ["corrupt_ids"], "corrupt_ids": ["clean_ids"], "metric": ["correct", "wrong"]}


@FUZZ.covers(activation_patching)
@FEW
@given(data=st.data())
def test_activation_patching(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        activation_patching,
        {
            "model": m.a,
            "clean_ids": IDS,
            "corrupt_ids": CORRUPT,
            "metric": METRIC,
            "components": ("attn_out",),
            "layers": [1],
            "per_position": False,
            "per_head": False,
            "batch_size": 4,
            "progress": False,
        },
        strategies={"model": NOT_MODELS, "metric": BAD_METRICS},
        related=PATCH_RELATED,
        check=_ok_result(range(1, 11)),
    )


@FUZZ.covers(attribution_patching)
@FEW
@given(data=st.data())
def test_attribution_patching(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        attribution_patching,
        {
            "model": m.a,
            "clean_ids": IDS,
            "corrupt_ids": CORRUPT,
            "metric": METRIC,
            "components": ("z",),
            "layers": [0],
            "per_position": False,
            "per_head": True,
        },
        strategies={"model": NOT_MODELS, "metric": BAD_METRICS},
        related=PATCH_RELATED,
        check=_ok_result(range(1, 21)),
    )


SMALL_INTS = st.sampled_from([0, -1, 2.5, "2", None, True])


def _ok_edges(r):
    return isinstance(r, EdgeScores) and finite(r.scores) and len(r.edges()) == 110


@FUZZ.covers(edge_attribution_patching)
@FEW
@given(data=st.data())
def test_edge_attribution_patching(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        edge_attribution_patching,
        {
            "model": m.a,
            "clean_ids": IDS,
            "corrupt_ids": CORRUPT,
            "metric": METRIC,
            "method": "eap-ig",
            "steps": 2,
        },
        strategies={
            "model": NOT_MODELS,
            "metric": BAD_METRICS,
            "method": st.sampled_from(["EAP", "ig", None, 1]),
            "steps": SMALL_INTS,
        },
        related=PATCH_RELATED,
        check=_ok_edges,
    )


@FUZZ.covers(edge_patching, build_graph)
@FEW
@given(data=st.data())
def test_edge_patching(zoo, data):
    m = models(zoo)
    assert build_graph(m.a).n_edges == 110  # 1 + 2 x (4 heads + MLP) senders into 2 x (12 + 1) + 1 receivers
    edges = [("input", "logits"), ("a0.h1", "a1.h2.v"), ("m0", "m1")]
    fuzz_call(
        data,
        edge_patching,
        {"model": m.a, "clean_ids": IDS, "corrupt_ids": CORRUPT, "metric": METRIC, "edges": edges},
        strategies={
            "model": NOT_MODELS,
            "metric": BAD_METRICS,
            "edges": st.sampled_from(
                [[("m1", "m0")], [("x", "logits")], "input", [("input",)], torch.ones(2, 2, dtype=torch.bool)]
            ),
        },
        related=PATCH_RELATED,
        check=lambda r: isinstance(r, EdgeScores) and len(r.edges()) == 3 and finite(r.scores),
    )


@FUZZ.covers(evaluate_circuit)
@FEW
@given(data=st.data())
def test_evaluate_circuit(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        evaluate_circuit,
        {
            "model": m.a,
            "clean_ids": IDS,
            "corrupt_ids": CORRUPT,
            "metric": METRIC,
            "edges": [("a0.h1", "a1.h2.v")],
        },
        strategies={
            "model": NOT_MODELS,
            "metric": BAD_METRICS,
            "edges": st.sampled_from([[("logits", "m0")], None, 3, torch.zeros(3, dtype=torch.bool)]),
        },
        related=PATCH_RELATED,
        check=math.isfinite,
    )


@FUZZ.covers(find_circuit)
@FEW
@given(data=st.data())
def test_find_circuit(zoo, data):
    m = models(zoo)
    scores = edge_attribution_patching(m.a, IDS, CORRUPT, METRIC, method="eap")
    fuzz_call(
        data,
        find_circuit,
        {
            "model": m.a,
            "clean_ids": IDS,
            "corrupt_ids": CORRUPT,
            "metric": METRIC,
            "scores": scores,
            "threshold": 0.8,
        },
        strategies={
            "model": NOT_MODELS,
            "metric": BAD_METRICS,
            "scores": st.sampled_from(
                [None, "x", edge_attribution_patching(m.b, IDS, CORRUPT, METRIC, method="eap").scores]
            ),
            "threshold": st.sampled_from([-0.1, 1.5, math.nan, "x", None]),
        },
        related=PATCH_RELATED,
        check=lambda c: isinstance(c, Circuit) and c.faithfulness >= 0.8 and 0 < len(c.edges) <= 110,
    )


@FUZZ.covers(neuron_attribution_patching)
@FEW
@given(data=st.data())
def test_neuron_attribution_patching(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        neuron_attribution_patching,
        {"model": m.a, "clean_ids": IDS, "corrupt_ids": CORRUPT, "metric": METRIC, "layers": [1], "steps": 2},
        strategies={
            "model": NOT_MODELS,
            "metric": BAD_METRICS,
            "layers": st.sampled_from([[5], [], "0", 2.5]),
        },
        related=PATCH_RELATED,
        check=lambda r: r.scores.shape == (1, D_MLP) and finite(r.scores) and len(r.top(3)) == 3,
    )


@FUZZ.covers(faithfulness)
@CHEAP
@given(data=st.data())
def test_faithfulness(data):
    fuzz_call(
        data,
        faithfulness,
        {"value": 0.5, "clean": 1.0, "corrupt": 0.0},
        check=lambda f: isinstance(f, float),
    )


@FUZZ.covers(path_patching)
@FEW
@given(data=st.data())
def test_path_patching(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        path_patching,
        {
            "model": m.a,
            "clean_ids": IDS,
            "corrupt_ids": CORRUPT,
            "metric": METRIC,
            "receivers": [(1, 2)],
            "senders": [(0, 1), (0, 3)],
            "receiver_input": ("q", "v"),
            "freeze_mlps": True,
        },
        strategies={
            "model": NOT_MODELS,
            "metric": BAD_METRICS,
            "receivers": st.sampled_from(["x", "RESID_FINAL", 3, [], [(0, 1)], [(1, 9)], [(1,)], None]),
        },
        related={
            "clean_ids": ["corrupt_ids"],
            "corrupt_ids": ["clean_ids"],
            "metric": ["correct", "wrong"],
            "receivers": ["senders"],  # senders must lie upstream of the receivers
            "senders": ["receivers"],
        },
        check=_ok_result(range(1, 5)),  # senders=None: every head upstream of the receiver, 4 in layer 0
    )


@FUZZ.covers(cross_model_layer_patching)
@FEW
@given(data=st.data())
def test_cross_model_layer_patching(zoo, data):
    m = models(zoo)
    fuzz_call(
        data,
        cross_model_layer_patching,
        {
            "model_a": m.a,
            "model_b": m.b,
            "input_ids": IDS,
            "metric": METRIC,
            "components": ["mlp_out"],
            "layers": [0, 1],
            "positions": [1, 4],
        },
        strategies={"model_a": NOT_MODELS, "model_b": st.one_of(NOT_MODELS, st.just(zoo.neox(0)))},
        related={"input_ids": ["positions"]},  # the positions must lie inside the (mutated) prompt
        check=_ok_result(range(1, 4)),
    )


def _source(m):
    name = act_name("resid_post", 0)
    _, cache = m.hooked.run_with_cache(CORRUPT, [name])
    return name, cache


@FUZZ.covers(patch_hooks)
@FEW
@given(data=st.data())
def test_patch_hooks(zoo, data):
    name, cache = _source(models(zoo))

    def ok(r):
        return isinstance(r, list) and all(n == name and callable(fn) for n, fn in r)

    fuzz_call(
        data,
        patch_hooks,
        {"source": cache, "names": [name], "positions": [0, 2], "heads": None},
        strategies={"source": st.sampled_from([None, {}, {name: "x"}, [name], "x"])},
        check=ok,
    )


@FUZZ.covers(run_with_patches)
@FEW
@given(data=st.data())
def test_run_with_patches(zoo, data):
    m = models(zoo)
    name, cache = _source(m)
    fuzz_call(
        data,
        run_with_patches,
        {
            "model": m.a,
            "input_ids": IDS,
            "source": cache,
            "names": [name],
            "positions": [0, 2],
            "heads": None,
        },
        strategies={"model": NOT_MODELS, "source": st.sampled_from([None, {}, {name: "x"}, [name], "x"])},
        related={"input_ids": ["source", "positions"], "source": ["names"]},  # the patch must fit the input
        check=lambda r: r.shape == (2, 5, VOCAB) and finite(r),
    )


@FUZZ.covers(prefill_patch)
@FEW
@given(data=st.data())
def test_prefill_patch(zoo, data):
    m = models(zoo)
    name, cache = _source(m)

    def run(model, source, names):
        with prefill_patch(model, source, names) as hooked:
            return hooked(IDS)

    fuzz_call(
        data,
        run,
        {"model": m.a, "source": cache, "names": [name]},
        strategies={"model": NOT_MODELS, "source": st.sampled_from([None, {}, {name: "x"}, [name], "x"])},
        related={"source": ["names"]},
        check=lambda r: r.shape == (2, 5, VOCAB) and finite(r),
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(
        icml_interp.hooks,
        icml_interp.lens,
        icml_interp.perplexity,
        icml_interp.steering,
        icml_interp.patching,
    )
