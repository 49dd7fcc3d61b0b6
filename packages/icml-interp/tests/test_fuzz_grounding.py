"""Fuzz tests (GUIDE "Bad input") of icml_interp.grounding: every public callable gets hostile inputs and either
returns a checked result or raises ValueError/TypeError naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_interp.grounding
from icml_interp.grounding import (
    FONT_CHARACTERS,
    AttentionMass,
    BindingResult,
    Layout,
    SwapResult,
    attention_mass,
    binding_by_layer,
    binding_score,
    chance_mass,
    default_symbols,
    glyph,
    grid_overlay,
    image_partitions,
    modality_gap,
    partition_attention_mass,
    partition_boxes,
    scan_lines,
    structured_prompt,
    swap_test,
    symbol_overlay,
)
from icml_tools.assets import tiny_llama
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(AttentionMass, "the result container attention_mass (fuzzed) returns")
FUZZ.exempt(BindingResult, "the result container binding_by_layer (fuzzed) returns")
FUZZ.exempt(SwapResult, "the result container swap_test (fuzzed, with its swap_accuracy) returns")
FUZZ.exempt(FONT_CHARACTERS, "a constant string (the font's characters), not a callable")

CHEAP = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=12, deadline=None)
_G = np.random.default_rng(0)
GRAY = _G.integers(0, 256, (48, 40)).astype(np.uint8)
RGB = _G.random((30, 36, 3)).astype(np.float32)
SEQ = 12
LAYOUT = Layout(image=[[1, 2], [3, 4], [5, 6]], text=[[8], [9], [10, 11]])
MATCHED = Layout(image=[[1, 2, 3], [4], [5, 6]], text=[[7], [8, 9], [10]], match=[2, 0, 0])
_raw = np.tril(_G.random((3, SEQ, SEQ)) + 0.05)
PATTERN = torch.tensor(_raw / _raw.sum(-1, keepdims=True), dtype=torch.float32)
IMAGE_MEANS = torch.tensor(_G.normal(size=(3, 8)), dtype=torch.float32)
TEXT_MEANS = torch.tensor(_G.normal(size=(5, 8)), dtype=torch.float32)
IDS = torch.tensor(_G.integers(0, 256, (2, SEQ)))
IDS2 = torch.tensor(_G.integers(0, 256, (2, SEQ)))
SUBSPACE = torch.tensor(_G.normal(size=(2, 64)), dtype=torch.float32)
ROW = torch.tensor([1] + [39] * 16 + [5, 6, 7])
IMAGE_ARGS = ["rows", "cols", "width", "n", "color", "symbols"]


def an_image(out) -> bool:
    return isinstance(out, np.ndarray) and out.ndim in (2, 3) and out.dtype != bool


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=0, layers=2)


@FUZZ.covers(grid_overlay)
@CHEAP
@given(st.data())
def test_grid_overlay(data):
    image, color = data.draw(st.sampled_from([(GRAY, 255), (RGB, (1.0, 0.5, 0.0)), (RGB, 0.25)]))
    fuzz_call(
        data,
        grid_overlay,
        {"image": image, "rows": 3, "cols": 4, "width": 2, "color": color},
        related={"image": IMAGE_ARGS, "rows": ["width"], "cols": ["width"]},
        check=an_image,
    )


@FUZZ.covers(scan_lines)
@CHEAP
@given(st.data())
def test_scan_lines(data):
    image, color = data.draw(st.sampled_from([(GRAY, 200), (RGB, [0.0, 1.0, 0.0])]))
    fuzz_call(
        data,
        scan_lines,
        {"image": image, "n": 4, "width": 1, "color": color},
        related={"image": IMAGE_ARGS, "n": ["width"]},
        check=an_image,
    )


@FUZZ.covers(symbol_overlay)
@CHEAP
@given(st.data())
def test_symbol_overlay(data):
    image, color = data.draw(st.sampled_from([(GRAY, 255), (RGB, (1.0, 0.0, 0.0))]))
    fuzz_call(
        data,
        symbol_overlay,
        {
            "image": image,
            "rows": 2,
            "cols": 2,
            "symbols": ["A", "B1", "Z", "9"],
            "scale": 1,
            "margin": 1,
            "color": color,
        },
        related={
            "image": IMAGE_ARGS,
            "rows": ["symbols"],
            "cols": ["symbols"],
            "scale": ["symbols"],
            "margin": ["symbols"],
        },
        check=an_image,
    )


@FUZZ.covers(partition_boxes)
@CHEAP
@given(st.data())
def test_partition_boxes(data):
    fuzz_call(
        data,
        partition_boxes,
        {"shape": (48, 40, 3), "rows": 3, "cols": 4},
        related={"shape": ["rows", "cols"]},
        check=lambda boxes: isinstance(boxes, list) and all(len(b) == 4 for b in boxes),
    )
    count = np.zeros((48, 40), dtype=int)
    for top, bottom, left, right in partition_boxes((48, 40), 3, 4):
        count[top:bottom, left:right] += 1
    assert (count == 1).all()


@FUZZ.covers(structured_prompt)
@CHEAP
@given(st.data())
def test_structured_prompt(data):
    cue, cols = data.draw(st.sampled_from([("grid", 3), ("scan", 1)]))
    symbols = data.draw(st.sampled_from([None, [str(i) for i in range(2 * cols)]]))
    fuzz_call(
        data,
        structured_prompt,
        {"question": "Where is the cat?", "rows": 2, "cols": cols, "symbols": symbols, "cue": cue},
        related={"rows": ["symbols", "cols"], "cols": ["symbols", "rows"], "cue": ["cols"]},
        check=lambda text: isinstance(text, str) and text,
    )


@FUZZ.covers(glyph)
@CHEAP
@given(st.data())
def test_glyph(data):
    fuzz_call(
        data,
        glyph,
        {"text": "AB3", "scale": 2},
        check=lambda m: m.dtype == bool and m.shape[0] % 5 == 0 and m.any(),
    )


@FUZZ.covers(default_symbols)
@CHEAP
@given(st.data())
def test_default_symbols(data):
    kind = data.draw(st.sampled_from(["letters", "numbers"]))
    fuzz_call(
        data,
        default_symbols,
        {"n": 30, "kind": kind},
        check=lambda s: (
            isinstance(s, list) and len(set(s)) == len(s) and all(isinstance(x, str) and x for x in s)
        ),
    )


@FUZZ.covers(Layout)
@CHEAP
@given(st.data())
def test_layout(data):
    fuzz_call(
        data,
        Layout,
        {"image": [[1, 2], [3, 4], [5]], "text": [[6], [7, 8]], "match": [2, 0]},
        related={"image": ["match", "text"], "text": ["match", "image"], "match": ["text", "image"]},
        check=lambda lay: isinstance(lay, Layout) and len(lay.match) == len(lay.text),
    )


@FUZZ.covers(binding_score)
@CHEAP
@given(st.data())
def test_binding_score(data):
    pair = {"image_means": ["text_means", "match"], "text_means": ["image_means", "match"]}
    fuzz_call(
        data,
        binding_score,
        {"image_means": IMAGE_MEANS, "text_means": TEXT_MEANS, "match": [2, 0, 2, 1, 0]},
        related={**pair, "match": ["text_means", "image_means"]},
        check=lambda v: v.dtype == torch.float64 and bool(((v >= -2) & (v <= 2)).all()),
    )


@FUZZ.covers(modality_gap)
@CHEAP
@given(st.data())
def test_modality_gap(data):
    fuzz_call(
        data,
        modality_gap,
        {"image_acts": IMAGE_MEANS, "text_acts": TEXT_MEANS},
        related={"image_acts": ["text_acts"], "text_acts": ["image_acts"]},
        check=lambda v: v.dtype == torch.float64 and bool(((v >= 0) & (v <= 2 + 1e-9)).all()),
    )


@FUZZ.covers(partition_attention_mass)
@CHEAP
@given(st.data())
def test_partition_attention_mass(data):
    layout = data.draw(st.sampled_from([LAYOUT, MATCHED]))
    fuzz_call(
        data,
        partition_attention_mass,
        {"pattern": PATTERN, "layout": layout},
        related={"pattern": ["layout"]},
        check=lambda v: v.dtype == torch.float64 and v.ndim == 1,
    )


@FUZZ.covers(chance_mass)
@CHEAP
@given(st.data())
def test_chance_mass(data):
    layout = data.draw(st.sampled_from([LAYOUT, MATCHED]))
    fuzz_call(data, chance_mass, {"layout": layout}, check=lambda v: isinstance(v, float) and 0 < v <= 1)


@FUZZ.covers(image_partitions)
@CHEAP
@given(st.data())
def test_image_partitions(data):
    fuzz_call(
        data,
        image_partitions,
        {"input_ids": ROW, "image_token_id": 39, "patch_grid": (4, 4), "rows": 2, "cols": 2},
        related={
            "input_ids": ["patch_grid", "image_token_id"],
            "image_token_id": ["patch_grid", "input_ids"],
            "patch_grid": ["input_ids", "rows", "cols"],
        },
        check=lambda parts: (
            isinstance(parts, list) and sorted(q for p in parts for q in p) == list(range(1, 17))
        ),
    )


MODEL_RELATED = {
    "inputs": ["layouts", "input_ids"],
    "layouts": ["inputs"],
}


@FUZZ.covers(binding_by_layer)
@FEW
@given(st.data())
def test_binding_by_layer(model, data):
    fuzz_call(
        data,
        binding_by_layer,
        {"model": model, "inputs": IDS, "layouts": LAYOUT, "layers": [0, 1], "hook": "resid_post"},
        related=MODEL_RELATED,
        check=lambda r: (
            isinstance(r, BindingResult)
            and r.binding.shape == r.modality_gap.shape == (len(r.layers),)
            and r.per_row.shape[1] == len(r.layers)
        ),
    )


@FUZZ.covers(attention_mass)
@FEW
@given(st.data())
def test_attention_mass(model, data):
    fuzz_call(
        data,
        attention_mass,
        {"model": model, "inputs": IDS, "layouts": [LAYOUT, MATCHED], "layers": [1]},
        related=MODEL_RELATED,
        check=lambda r: (
            isinstance(r, AttentionMass)
            and r.mass.shape == (len(r.layers), 4)
            and bool(((r.mass >= 0) & (r.mass <= 1 + 1e-9)).all())
        ),
    )


@FUZZ.covers(swap_test)
@FEW
@given(st.data())
def test_swap_test(model, data):
    runs = ["base", "source", "input_ids", "positions", "source_positions", "source_answers"]
    found = fuzz_call(
        data,
        swap_test,
        {
            "model": model,
            "base": IDS,
            "source": IDS2,
            "positions": [1, 2],
            "layer": 1,
            "answer_tokens": [3, 4, 5],
            "source_answers": [0, 2],
            "source_positions": [[3, 4], [5, 6]],
            "subspace": SUBSPACE,
            "hook": "resid_pre",
            "position": -1,
        },
        related={
            "base": runs,
            "source": runs,
            "positions": ["source_positions"],
            "source_positions": ["positions"],
            "answer_tokens": ["source_answers"],
            "source_answers": ["answer_tokens"],
        },
        check=lambda r: (
            isinstance(r, SwapResult)
            and r.logits.shape == r.clean_logits.shape
            and r.predictions.shape == r.follows.shape
            and 0 <= r.swap_accuracy <= 1
        ),
    )
    if isinstance(found, SwapResult):
        assert found.logits.shape[0] == found.predictions.shape[0]


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_interp.grounding)
