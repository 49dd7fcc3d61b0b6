"""icml_agents.bedtime: the generator, descriptions and parser, the tasks, the modalities and transforms,
the describers and the evaluation API (harness sanity), the loader, bad input."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_agents.backends import HFLocalBackend, ScriptedBackend
from icml_agents.bedtime import (
    ATTRIBUTES,
    TRANSFORMS,
    Attributes,
    BackendDescriber,
    FeatureDescriber,
    RandomDescriber,
    attribute_scores,
    bleu,
    build_differentiation,
    build_generation,
    build_recognition,
    describe,
    evaluate,
    generate_series,
    hard_negative,
    load_released,
    parse_description,
    perturb,
    random_attributes,
    render_plot,
    results_table,
    rouge_l,
    serialize,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_parser_reads_every_description_and_hard_negatives_differ_in_one_attribute(seed):
    attrs = random_attributes(seed)
    assert parse_description(describe(attrs, seed)) == attrs.as_dict()
    wrong, changed = hard_negative(attrs, seed)
    applicable = set(attrs.applicable()) | set(wrong.applicable())
    differing = {k for k in applicable if getattr(attrs, k) != getattr(wrong, k)}
    # the one attribute that differs; an event added or removed carries a position that the other side lacks
    assert changed in differing and differing - {changed} <= ({"position"} if changed == "event" else set())
    assert parse_description(describe(wrong, seed)) == wrong.as_dict()


def test_generated_series_carry_their_attributes():
    a = Attributes("increasing", "fast", "low", "shift down", "end")
    x = generate_series(a, 120, seed=3)
    assert x.shape == (120,) and np.array_equal(x, generate_series(a, 120, seed=3))
    assert FeatureDescriber().attributes(x) == a
    flat = generate_series(Attributes("flat", "none", "high", "none", None), 240, seed=1)
    assert (
        abs(np.polyfit(np.linspace(0, 1, 240), flat, 1)[0]) < 1.0
        and 0.35 < np.diff(flat).std() / math.sqrt(2) < 0.65
    )


def test_tasks_are_balanced_and_hard():
    rec = build_recognition(200, seed=0)
    assert sum(it.answer for it in rec) == 100
    for it in rec:
        stated = parse_description(it.candidates[0])
        wrong = {k for k in it.attributes.applicable() if stated[k] != getattr(it.attributes, k)}
        assert (it.answer == 1) == (not wrong) and (it.answer == 1 or it.changed in wrong)
    dif = build_differentiation(100, k=5, seed=1)
    assert all(len(set(it.candidates)) == 5 for it in dif)
    positions = [it.answer for it in dif]
    assert set(positions) == set(range(5))
    for it in dif:
        assert parse_description(it.candidates[it.answer]) == it.attributes.as_dict()
    assert all(it.answer == -1 and not it.candidates for it in build_generation(5))


def test_harness_sanity_random_at_chance_feature_describer_at_95_percent():
    rec, dif = build_recognition(2000, seed=10), build_differentiation(2000, 4, seed=11)
    for items, chance_level in ((rec, 0.5), (dif, 0.25)):
        row = evaluate(RandomDescriber(0), items)
        se = math.sqrt(chance_level * (1 - chance_level) / len(items))
        assert row["chance"] == chance_level and abs(row["accuracy"] - chance_level) <= 3 * se
        assert evaluate(FeatureDescriber(), items)["accuracy"] >= 0.95


def test_generation_scores():
    a = Attributes("decreasing", "slow", "high", "spike", "middle")
    ref = describe(a, 0)
    assert attribute_scores(ref, a) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    partial = attribute_scores("It trends downward with strong noise and a spike near the end.", a)
    assert partial["precision"] == pytest.approx(3 / 4) and partial["recall"] == pytest.approx(3 / 5)
    assert attribute_scores("", a)["f1"] == 0.0
    assert bleu(ref, ref) == pytest.approx(1.0) and rouge_l(ref, ref) == pytest.approx(1.0)
    assert rouge_l("a b c d", "a x c d") == pytest.approx(0.75)  # LCS a c d
    assert bleu("completely different words", ref) < 0.1
    row = evaluate(FeatureDescriber(), build_generation(50, seed=2))
    assert row["f1"] > 0.9 and 0 < row["bleu"] <= 1 and len(row["descriptions"]) == 50


def test_modalities():
    x = np.array([0.0, 1.0, np.nan, 3.0])
    assert serialize(x, 1) == "0.0, 1.0, nan, 3.0"
    image = render_plot(generate_series(random_attributes(0)), 32, 96)
    assert image.shape == (32, 96) and image.dtype == np.uint8 and image.max() == 255
    assert (image > 0).any(axis=0).mean() > 0.9  # the line spans the width
    gap = render_plot(np.r_[np.zeros(10), np.full(10, np.nan), np.ones(10)], 16, 30)
    assert not gap[:, 12:17].any()  # nothing drawn across the missing stretch


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_transforms_at_severity_zero_are_the_identity_and_hurt_at_one(transform):
    x = generate_series(random_attributes(1), 120, 1)
    assert np.array_equal(perturb(x, transform, 0.0, seed=5), x)
    y = perturb(x, transform, 1.0, seed=5)
    assert not (y.shape == x.shape and np.array_equal(y, x, equal_nan=True))
    assert np.array_equal(y, perturb(x, transform, 1.0, seed=5), equal_nan=True)


def test_evaluate_under_a_transform_and_results_table():
    items = build_recognition(300, seed=4)
    clean = evaluate(FeatureDescriber(), items)
    noisy = evaluate(FeatureDescriber(), items, transform="noise", severity=1.0)
    assert noisy["accuracy"] < clean["accuracy"] - 0.1 and noisy["transform"] == "noise"
    seen = []
    evaluate(
        RandomDescriber(1), items, batch_size=128, progress=lambda done, total: seen.append((done, total))
    )
    assert seen == [(128, 300), (256, 300), (300, 300)]
    table = results_table([clean, noisy])
    assert table.count("\n") == 3 and "feature describer" in table


def _tf_backend():
    """Log-likelihoods that say True exactly when the description claims an upward trend."""

    def logprobs(prompt, continuation):
        description = prompt.split("Description: ")[-1].split("\n")[0] if "Description: " in prompt else ""
        up = parse_description(description)["trend"] == "increasing"
        if continuation.strip() in ("True", "False"):
            return [-0.1 if (continuation.strip() == "True") == up else -3.0]
        return [-1.0 if continuation.strip() == "B" else -2.0]

    return ScriptedBackend(lambda request: "The series trends upward.", logprobs=logprobs)


def test_backend_describer_with_a_scripted_backend_is_deterministic_and_batched():
    backend = _tf_backend()
    describer = BackendDescriber(backend, decimals=1)
    items = build_recognition(40, seed=5)
    row = evaluate(describer, items, batch_size=16)
    expected = [
        int((parse_description(it.candidates[0])["trend"] == "increasing") == bool(it.answer)) for it in items
    ]
    assert row["correct"] == expected and row == {**row, "n": 40}
    assert len(backend.logprob_calls) == 80 and "Time series: " in backend.logprob_calls[0][0]
    assert evaluate(describer, items, batch_size=16)["correct"] == expected
    dif = evaluate(describer, build_differentiation(6, 4, seed=6), batch_size=4)
    assert dif["n"] == 6
    gen = evaluate(describer, build_generation(4, seed=7), batch_size=2)
    assert gen["descriptions"] == ["The series trends upward."] * 4


def test_backend_describer_runs_a_tiny_random_hf_model_batched():
    transformers = pytest.importorskip("transformers")
    from icml_tools.assets import smollm2_dir, tiny_llama

    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm2_dir())
    backend = HFLocalBackend(tiny_llama(vocab=len(tokenizer)), tokenizer, batch_size=4)
    describer = BackendDescriber(backend, decimals=0, max_new_tokens=4)
    items = build_recognition(6, seed=8, length=24)
    first = evaluate(describer, items, batch_size=3)
    assert first["n"] == 6 and first["correct"] == evaluate(describer, items, batch_size=6)["correct"]
    assert evaluate(describer, build_differentiation(2, 3, seed=9, length=24), batch_size=2)["n"] == 2
    assert len(evaluate(describer, build_generation(2, seed=9, length=24))["descriptions"]) == 2


def test_loader_reads_jsonl_and_csv_in_the_documented_format(tmp_path):
    records = [
        {"id": "a", "dataset": "TaxoSynth", "series": [1.0, 2.0, None, 4.0], "descriptions": ["goes up"]},
        {"id": "b", "series": [3, 2, 1], "description": "goes down"},
    ]
    jsonl = tmp_path / "part.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = load_released(jsonl)
    assert [r["id"] for r in out] == ["a", "b"] and out[1]["descriptions"] == ["goes down"]
    assert np.isnan(out[0]["series"][2]) and out[0]["dataset"] == "TaxoSynth"
    csv_path = tmp_path / "part.csv"
    csv_path.write_text('id,values,captions\nx,"[0.5, 1.5]","[""flat"", ""level""]"\n')
    got = load_released(csv_path, fields={"series": "values", "descriptions": "captions"})
    assert got[0]["series"].tolist() == [0.5, 1.5] and got[0]["descriptions"] == ["flat", "level"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"series": [1, "x"], "description": "d"}) + "\n")
    with pytest.raises(ValueError, match=r"record 0.*series"):
        load_released(bad)
    with pytest.raises(ValueError, match="fields has unknown"):
        load_released(jsonl, fields={"values": "series"})


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="unknown attributes"):
        generate_series({"trend": "up", "colour": "red"})
    with pytest.raises(ValueError, match="trend"):
        Attributes("sideways", "none", "low", "none", None)
    with pytest.raises(ValueError, match="position"):
        Attributes("flat", "none", "low", "spike", None)
    with pytest.raises(ValueError, match="severity"):
        perturb(np.arange(10.0), "noise", 1.5)
    with pytest.raises(ValueError, match="severity"):
        evaluate(RandomDescriber(), build_recognition(4), transform="noise", severity=-0.1)
    with pytest.raises(ValueError, match="transform"):
        perturb(np.arange(10.0), "blur", 0.5)
    with pytest.raises(ValueError, match="items"):
        evaluate(RandomDescriber(), [*build_recognition(2), *build_generation(1)])
    assert set(ATTRIBUTES) == {"trend", "seasonality", "noise", "event", "position"}
