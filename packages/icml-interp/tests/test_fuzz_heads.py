"""Fuzz tests (GUIDE "Bad input") of icml_interp.heads: every public callable gets hostile inputs and either
returns a checked result or raises ValueError/TypeError naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_interp.heads
from icml_interp.heads import (
    HeadScores,
    RelativePosition,
    attention_entropy,
    attention_patterns,
    copy_score,
    duplicate_token_score,
    head_scores,
    induction_score,
    mean_ablation_hooks,
    pattern_matching_score,
    previous_token_score,
    relative_position_score,
    repeated_sequence_induction_score,
    zero_ablation_hooks,
)
from icml_tools.assets import tiny_llama
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(RelativePosition, "the result container relative_position_score (fuzzed) returns")
FUZZ.exempt(HeadScores, "the result container head_scores (fuzzed, with its top method) returns")

CHEAP = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=15, deadline=None)
_G = np.random.default_rng(0)
B, H, N = 2, 3, 9
_causal = np.tril(_G.random((B, H, N, N)) + 0.05)
PATTERN = torch.tensor(_causal / _causal.sum(-1, keepdims=True), dtype=torch.float32)  # rows sum to 1
TOKENS = torch.tensor(_G.integers(0, 3, (B, N)))
QUERY_MASK = torch.tensor(_G.random((B, N)) < 0.8)
KEY_MASK = torch.tensor(_G.random((B, N)) < 0.8)
ALIGNMENT = torch.tensor(_G.integers(-1, N, (B, N)))
IDS = torch.tensor(_G.integers(0, 256, (B, N)))
ATTENTION_MASK = torch.ones(B, N, dtype=torch.long)
ATTENTION_MASK[1, -2:] = 0
WITH_PATTERN = {"pattern": ["tokens", "alignment", "query_mask", "key_mask"]}
WITH_IDS = {
    "input_ids": ["attention_mask", "alignment", "tokens", "query_mask", "positions", "layers"],
    "reference_ids": ["attention_mask"],
}


def in_unit_interval(v: torch.Tensor) -> bool:
    return v.shape == (H,) and bool((v.isnan() | ((v >= -1e-6) & (v <= 1 + 1e-6))).all())


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=0, layers=2)


@FUZZ.covers(previous_token_score)
@CHEAP
@given(st.data())
def test_previous_token_score(data):
    fuzz_call(
        data,
        previous_token_score,
        {"pattern": PATTERN, "query_mask": QUERY_MASK},
        related=WITH_PATTERN,
        check=lambda v: v.numel() >= 1,  # a 3-d hostile pattern is a batch of one with its own head count
    )


@FUZZ.covers(duplicate_token_score, induction_score)
@CHEAP
@given(st.data())
def test_token_scores(data):
    fn = data.draw(st.sampled_from([duplicate_token_score, induction_score]))
    valid = {"pattern": PATTERN, "tokens": TOKENS, "query_mask": QUERY_MASK}
    if fn is duplicate_token_score:
        valid["exclude_current_token"] = data.draw(st.booleans())
    fuzz_call(
        data,
        fn,
        valid,
        related={**WITH_PATTERN, "tokens": ["pattern"], "query_mask": ["pattern"]},
        check=lambda v: v.ndim == 1,
    )


@FUZZ.covers(repeated_sequence_induction_score)
@CHEAP
@given(st.data())
def test_repeated_sequence_induction_score(data):
    fuzz_call(
        data,
        repeated_sequence_induction_score,
        {"pattern": PATTERN, "half_length": 4, "offset": 1},
        related={"pattern": ["half_length", "offset"], "half_length": ["offset"], "offset": ["half_length"]},
        check=lambda v: v.ndim == 1,
    )


@FUZZ.covers(pattern_matching_score)
@CHEAP
@given(st.data())
def test_pattern_matching_score(data):
    fuzz_call(
        data,
        pattern_matching_score,
        {"pattern": PATTERN, "alignment": ALIGNMENT, "query_mask": QUERY_MASK},
        related={**WITH_PATTERN, "alignment": ["pattern"], "query_mask": ["pattern"]},
        check=lambda v: v.ndim == 1,
    )


@FUZZ.covers(relative_position_score)
@CHEAP
@given(st.data())
def test_relative_position_score(data):
    fuzz_call(
        data,
        relative_position_score,
        {"pattern": PATTERN, "query_mask": QUERY_MASK, "key_mask": KEY_MASK},
        related={**WITH_PATTERN, "query_mask": ["pattern"], "key_mask": ["pattern"]},
        check=lambda r: isinstance(r, RelativePosition) and bool((r.std.isnan() | (r.std >= 0)).all()),
    )


@FUZZ.covers(attention_entropy)
@CHEAP
@given(st.data())
def test_attention_entropy(data):
    fuzz_call(
        data,
        attention_entropy,
        {
            "pattern": PATTERN,
            "query_mask": QUERY_MASK,
            "key_mask": KEY_MASK,
            "normalize": True,
            "causal": None,
        },
        related={**WITH_PATTERN, "query_mask": ["pattern"], "key_mask": ["pattern"]},
        check=lambda v: v.shape != (H,) or in_unit_interval(v),
    )


@FUZZ.covers(attention_patterns)
@FEW
@given(st.data())
def test_attention_patterns(model, data):
    fuzz_call(
        data,
        attention_patterns,
        {"model": model, "input_ids": IDS, "layers": [1], "attention_mask": ATTENTION_MASK},
        related=WITH_IDS,
        check=lambda p: p.ndim == 5 and p.shape[0] == 1,
    )


@FUZZ.covers(head_scores)
@FEW
@given(st.data())
def test_head_scores(model, data):
    found = fuzz_call(
        data,
        head_scores,
        {
            "model": model,
            "input_ids": IDS,
            "tokens": TOKENS,
            "alignment": ALIGNMENT,
            "attention_mask": ATTENTION_MASK,
            "query_mask": QUERY_MASK,
            "layers": [0, -1],
            "scores": ["induction", "pattern_matching", "relative_position", "copy"],
        },
        related={**WITH_IDS, "tokens": ["input_ids"], "alignment": ["input_ids", "scores"]},
        check=lambda r: (
            isinstance(r, HeadScores) and all(v.shape[0] == len(r.layers) for v in r.scores.values())
        ),
    )
    if isinstance(found, HeadScores):
        fuzz_call(
            data,
            found.top,
            {
                "name": "induction" if "induction" in found.scores else next(iter(found.scores)),
                "k": 3,
                "largest": True,
            },
            check=lambda rows: len(rows) <= 8 and all(isinstance(v, float) for *_, v in rows),
        )


@FUZZ.covers(copy_score)
@FEW
@given(st.data())
def test_copy_score(model, data):
    fuzz_call(
        data,
        copy_score,
        {
            "model": model,
            "input_ids": IDS,
            "layers": [0],
            "positions": [-1, 2],
            "attention_mask": ATTENTION_MASK,
        },
        related=WITH_IDS,
        check=lambda v: v.ndim == 2 and bool((v.isnan() | ((v >= 0) & (v <= 1 + 1e-6))).all()),
    )


@FUZZ.covers(mean_ablation_hooks, zero_ablation_hooks)
@FEW
@given(st.data())
def test_ablation_hooks(model, data):
    if data.draw(st.booleans()):
        hooks = fuzz_call(
            data,
            mean_ablation_hooks,
            {
                "model": model,
                "heads": [(0, 1), (1, 3)],
                "reference_ids": IDS,
                "attention_mask": ATTENTION_MASK,
            },
            related=WITH_IDS,
            check=lambda hooks: isinstance(hooks, list) and all(callable(fn) for _, fn in hooks),
        )
    else:
        hooks = fuzz_call(
            data, zero_ablation_hooks, {"heads": [(0, 1), (1, 3)]}, check=lambda h: isinstance(h, list)
        )
    if isinstance(hooks, list) and hooks:  # what was accepted runs
        from icml_interp.hooks import HookedModel

        assert HookedModel(model).run_with_hooks(IDS, fwd_hooks=hooks).isfinite().all()


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_interp.heads)
