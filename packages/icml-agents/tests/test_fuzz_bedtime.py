"""The bad-input contract (GUIDE "Bad input") for icml_agents.bedtime: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icml_agents import bedtime
from icml_agents.backends import ScriptedBackend
from icml_agents.bedtime import (
    AttributeDescriber,
    Attributes,
    BackendDescriber,
    Describer,
    FeatureDescriber,
    Item,
    RandomDescriber,
    attribute_scores,
    bleu,
    build_differentiation,
    build_generation,
    build_recognition,
    chance,
    describe,
    evaluate,
    generate_series,
    hard_negative,
    load_released,
    one_hot,
    parse_description,
    perturb,
    random_attributes,
    render_plot,
    results_table,
    rouge_l,
    serialize,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Item, "the task item container the builders make")
FUZZ.exempt(Describer, "the abstract interface evaluate() runs")
FUZZ.exempt(AttributeDescriber, "an abstract base: its subclasses FeatureDescriber and the nets are fuzzed")

ATTRS = Attributes("increasing", "fast", "low", "spike", "middle")
X = generate_series(ATTRS, 48, 0)
REC = build_recognition(4, seed=0, length=48)
DIF = build_differentiation(3, 3, seed=1, length=48)
ATTR_VALUES = st.sampled_from([None, 3, "x", {"trend": "up"}, {"colour": "red"}, ATTRS.as_dict(), ATTRS])
SERIES = st.sampled_from(
    [
        None,
        "x",
        np.array([1.0]),
        np.array([1.0, np.inf, 2.0]),
        np.full(5, np.nan),
        np.zeros((3, 3)),
        [1, 2, 3],
    ]
)


@FUZZ.covers(Attributes, random_attributes, describe, hard_negative, parse_description)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_attributes(data):
    fuzz_call(
        data,
        Attributes,
        {"trend": "flat", "seasonality": "none", "noise": "low", "event": "shift up", "position": "end"},
        check=lambda a: isinstance(a, Attributes),
        related={"event": ["position"], "position": ["event"]},
    )
    fuzz_call(data, random_attributes, {"seed": 3}, check=lambda a: isinstance(a, Attributes))
    fuzz_call(
        data,
        describe,
        {"attributes": ATTRS, "seed": 0},
        check=lambda s: parse_description(s) == ATTRS.as_dict(),
        strategies={"attributes": ATTR_VALUES},
        related={"attributes": ["trend", "position", "mapping", "missing"]},
    )
    fuzz_call(
        data,
        hard_negative,
        {"attributes": ATTRS, "seed": 0},
        check=lambda out: out[0] != ATTRS,
        strategies={"attributes": ATTR_VALUES},
    )
    fuzz_call(data, parse_description, {"text": "It rises overall."}, check=lambda d: isinstance(d, dict))


@FUZZ.covers(generate_series, serialize, render_plot, perturb)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_series_and_modalities(data):
    fuzz_call(
        data,
        generate_series,
        {"attributes": ATTRS, "length": 48, "seed": 0},
        check=lambda x: x.ndim == 1 and np.isfinite(x).all(),
        strategies={"attributes": ATTR_VALUES, "length": st.sampled_from([0, 5, -1, 2.5, None, 10**9])},
        related={"attributes": ["trend", "position", "mapping", "missing"]},
    )
    fuzz_call(
        data, serialize, {"x": X, "decimals": 2}, check=lambda s: s.count(",") >= 1, strategies={"x": SERIES}
    )
    fuzz_call(
        data,
        render_plot,
        {"x": X, "height": 16, "width": 32, "line_width": 1},
        check=lambda im: im.dtype == np.uint8 and im.ndim == 2,
        strategies={"x": SERIES, "height": st.sampled_from([0, 7, -3, 1.5, None, 10**6])},
    )
    fuzz_call(
        data,
        perturb,
        {"x": X, "transform": "missing", "severity": 0.5, "seed": 0},
        check=lambda y: y.ndim == 1 and not np.isnan(y).all(),
        strategies={"x": SERIES},
        allow_non_finite=True,  # the missing-values transform answers NaN by design
    )


@FUZZ.covers(build_recognition, build_differentiation, build_generation, chance)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_builders(data):
    sizes = {
        "n": st.sampled_from([0, -1, 1.5, None, "3", 10**9]),
        "length": st.sampled_from([0, 3, None, 10**9]),
    }
    fuzz_call(
        data,
        build_recognition,
        {"n": 3, "seed": 0, "length": 30},
        check=lambda it: len(it) == 3,
        strategies=sizes,
    )
    fuzz_call(
        data,
        build_differentiation,
        {"n": 2, "k": 3, "seed": 0, "length": 30},
        check=lambda it: len(it) == 2,
        strategies={**sizes, "k": st.sampled_from([1, 9, 2.0, None])},
    )
    fuzz_call(
        data,
        build_generation,
        {"n": 2, "seed": 0, "length": 30},
        check=lambda it: len(it) == 2,
        strategies=sizes,
    )
    fuzz_call(
        data,
        chance,
        {"items": REC},
        check=lambda c: c == 0.5,
        strategies={"items": st.sampled_from([[], None, "x"])},
    )


@FUZZ.covers(attribute_scores, bleu, rouge_l)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_scores(data):
    text = describe(ATTRS, 0)
    fuzz_call(
        data,
        attribute_scores,
        {"text": text, "attributes": ATTRS},
        check=lambda s: 0 <= s["f1"] <= 1,
        strategies={"attributes": ATTR_VALUES},
    )
    fuzz_call(
        data, bleu, {"candidate": text, "reference": text, "max_n": 4}, check=lambda v: 0 <= v <= 1 + 1e-12
    )
    fuzz_call(data, rouge_l, {"candidate": text, "reference": "a b"}, check=lambda v: 0 <= v <= 1)


def _scripted():
    return ScriptedBackend(lambda request: "flat", logprobs=lambda prompt, cont: [-1.0] * len(cont.split()))


@FUZZ.covers(evaluate, FeatureDescriber, RandomDescriber, BackendDescriber, one_hot, results_table)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_evaluate(data):
    describers = st.sampled_from([None, "model", FeatureDescriber(), RandomDescriber(1)])
    fuzz_call(
        data,
        evaluate,
        {
            "describer": RandomDescriber(0),
            "items": REC,
            "batch_size": 2,
            "transform": "noise",
            "severity": 0.5,
            "seed": 0,
            "progress": None,
        },
        check=lambda row: row["n"] == len(REC) and 0 <= row["accuracy"] <= 1,
        strategies={
            "describer": describers,
            "items": st.sampled_from([[], None, [REC[0], DIF[0]], [*REC[:1], "x"]]),
        },
    )

    def run_backend(decimals, max_new_tokens, items):
        return evaluate(BackendDescriber(_scripted(), decimals, max_new_tokens), items)

    fuzz_call(
        data,
        run_backend,
        {"decimals": 1, "max_new_tokens": 4, "items": DIF},
        check=lambda row: row["n"] == len(DIF),
        strategies={"items": st.sampled_from([[], None, "x"])},
    )

    def run_random(seed, modality):
        return evaluate(RandomDescriber(seed, modality), DIF)["accuracy"]

    fuzz_call(data, run_random, {"seed": 0, "modality": "plot"}, check=lambda a: 0 <= a <= 1)
    fuzz_call(
        data,
        lambda series: FeatureDescriber().describe(series),
        {"series": [X, X[:30]]},
        check=lambda out: len(out) == 2,
        strategies={"series": st.sampled_from([[], None, [X, None], [np.ones(1)]])},
    )
    fuzz_call(data, one_hot, {"labels": [ATTRS], "smoothing": 1e-3}, check=lambda p: p["trend"].shape[1] == 3)
    fuzz_call(
        data,
        results_table,
        {"rows": [evaluate(RandomDescriber(0), REC)]},
        check=lambda t: "|" in t,
        strategies={"rows": st.sampled_from([None, [{}], ["x"], 3])},
    )


@FUZZ.covers(load_released)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_load_released(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bedtime") / "x.jsonl"
    path.write_text('{"series": [1, 2], "description": "flat"}\n')
    fuzz_call(
        data,
        load_released,
        {"path": path, "fields": None},
        check=lambda recs: len(recs) == 1,
        strategies={"path": st.sampled_from([None, 3, str(path) + ".missing", path.parent])},
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(bedtime)
