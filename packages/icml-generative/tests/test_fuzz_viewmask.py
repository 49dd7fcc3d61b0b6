"""The bad-input contract (GUIDE "Bad input") for icml_generative.viewmask: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
"""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_generative.viewmask as viewmask_module
from icml_generative.viewmask import (
    LFQ,
    LFQOutput,
    LFQTokenizer,
    MultiViewTransformer,
    Sample,
    TokenizerOutput,
    ViewBackbone,
    cosine_schedule,
    generate_views,
    mask_targets,
    masked_token_loss,
    sample_views,
    train_tokenizer,
    train_viewmask,
    unmasking_counts,
    view_attention_mask,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(LFQOutput, "a result container only LFQ builds")
FUZZ.exempt(TokenizerOutput, "a result container only LFQTokenizer builds")
FUZZ.exempt(Sample, "a result container only sample_views builds")

SMALL_INTS = st.one_of(
    st.sampled_from([None, "x", object(), 0, -1, True, 2.0, 0.5, math.nan, 2**63, 10_000_001]),
    st.integers(-3, 3),
)
torch.manual_seed(0)
TOK = LFQTokenizer(image_size=8, bits=3, downsample=4, width=8)
MODEL = MultiViewTransformer(8, grid=(2, 2), num_views=3, width=16, depth=1, heads=2).eval()
TEXT_MODEL = MultiViewTransformer(
    8, grid=(2, 2), num_views=3, width=16, depth=1, heads=2, text_vocab=4, max_text=2
)
G = torch.Generator().manual_seed(0)
COND = torch.randint(0, 8, (2, 2, 2), generator=G)
TARGETS = torch.randint(0, 8, (2, 2, 2, 2), generator=G)
IMAGES = torch.rand(2, 3, 8, 8, generator=G)
TEXT = torch.tensor([[1, 2], [3, 0]])
OTHER_MODELS = st.sampled_from([None, "x", torch.nn.Linear(2, 2), TOK])


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # one torch thread for this module (root conftest)


def shaped(t, shape):
    return isinstance(t, torch.Tensor) and tuple(t.shape) == shape


@FUZZ.covers(LFQ)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_lfq(data):
    lfq = fuzz_call(data, LFQ, {"bits": 3, "entropy_weight": 0.1, "commitment_weight": 0.25})
    if isinstance(lfq, LFQ):
        z = torch.randn(2, 3, 2, 2)
        fuzz_call(data, lfq.forward, {"z": z}, check=lambda out: out.indices.ndim == 3)


@FUZZ.covers(LFQTokenizer)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_lfq_tokenizer(data):
    fuzz_call(
        data,
        LFQTokenizer,
        {"image_size": 8, "channels": 3, "bits": 3, "downsample": 4, "width": 8},
        related={"image_size": ["downsample"], "downsample": ["image_size"]},
    )
    fuzz_call(
        data, TOK.encode, {"images": IMAGES}, check=lambda i: i.ndim == 3 and tuple(i.shape[1:]) == (2, 2)
    )
    fuzz_call(
        data,
        TOK.decode,
        {"indices": torch.zeros(2, 2, 2, dtype=torch.long)},
        check=lambda x: x.ndim == 4 and tuple(x.shape[1:]) == (3, 8, 8),
    )


@FUZZ.covers(train_tokenizer)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_train_tokenizer(data):
    tok = LFQTokenizer(image_size=8, bits=3, downsample=4, width=8)
    fuzz_call(
        data,
        train_tokenizer,
        {"tokenizer": tok, "images": IMAGES, "steps": 2, "batch_size": 2, "lr": 1e-3, "seed": 0},
        check=lambda losses: len(losses) == 2 and all(math.isfinite(x) for x in losses),
        strategies={"steps": SMALL_INTS, "batch_size": SMALL_INTS, "tokenizer": OTHER_MODELS},
        related={"images": ["tokenizer"], "tokenizer": ["images"]},
    )


@FUZZ.covers(MultiViewTransformer, ViewBackbone)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_multi_view_transformer(data):
    fuzz_call(
        data,
        MultiViewTransformer,
        {"codebook_size": 8, "grid": (2, 2), "num_views": 3, "width": 16, "depth": 1, "heads": 2},
        related={"width": ["heads"], "heads": ["width"]},
    )
    fuzz_call(
        data,
        ViewBackbone,
        {"grid": (2, 2), "num_views": 3, "width": 16, "depth": 1, "heads": 2},
        related={"width": ["heads"], "heads": ["width"]},
    )
    fuzz_call(
        data,
        MODEL.forward,
        {"condition": COND, "targets": TARGETS, "views": None},
        check=lambda logits: logits.shape[-1] == 8 and logits.shape[0] == 2,
        related={"condition": ["targets"], "targets": ["condition", "views"], "views": ["targets"]},
        strategies={"views": st.sampled_from([[1, 2], [2, 1], [1], [0, 1], [3, 1], [1, 1], "x", [1.5, 2]])},
    )


@FUZZ.covers(cosine_schedule, unmasking_counts, view_attention_mask)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_schedules(data):
    fuzz_call(data, cosine_schedule, {"r": 0.3}, check=lambda g: bool(((g >= 0) & (g <= 1)).all()))
    fuzz_call(
        data,
        unmasking_counts,
        {"num_tokens": 12, "steps": 4},
        check=lambda c: len(c) >= 1 and c[-1] == 0 and all(x > y or x == 0 for x, y in itertools.pairwise(c)),
        strategies={"num_tokens": SMALL_INTS, "steps": SMALL_INTS},
    )
    fuzz_call(
        data,
        view_attention_mask,
        {"num_views": 3, "tokens_per_view": 2, "prefix": 1, "attention": "independent"},
        check=lambda m: m.ndim == 2 and m.shape[0] == m.shape[1] and bool(m.diagonal().all()),
        strategies={"num_views": SMALL_INTS, "tokens_per_view": SMALL_INTS, "prefix": SMALL_INTS},
    )


@FUZZ.covers(mask_targets, masked_token_loss)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_masking_and_loss(data):
    fuzz_call(
        data,
        mask_targets,
        {
            "targets": TARGETS,
            "mask_id": 8,
            "objective": "elbo",
            "generator": torch.Generator().manual_seed(0),
        },
        check=lambda r: r[0].shape == r[1].shape and bool(r[1].any()),
    )
    fuzz_call(
        data,
        masked_token_loss,
        {
            "model": MODEL,
            "condition": COND,
            "targets": TARGETS,
            "objective": "maskgit",
            "label_smoothing": 0.1,
        },
        check=lambda loss: bool(torch.isfinite(loss)),
        related={"condition": ["targets"], "targets": ["condition"]},
        strategies={"model": OTHER_MODELS},
    )


@FUZZ.covers(train_viewmask)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_train_viewmask(data):
    model = MultiViewTransformer(8, grid=(2, 2), num_views=3, width=16, depth=1, heads=2)
    fuzz_call(
        data,
        train_viewmask,
        {
            "model": model,
            "condition": COND,
            "targets": TARGETS,
            "steps": 2,
            "batch_size": 2,
            "lr": 1e-3,
            "warmup": 1,
        },
        check=lambda losses: len(losses) == 2 and all(math.isfinite(x) for x in losses),
        related={"condition": ["targets"], "targets": ["condition"]},
        strategies={
            "steps": SMALL_INTS,
            "batch_size": SMALL_INTS,
            "warmup": SMALL_INTS,
            "model": OTHER_MODELS,
        },
    )


@FUZZ.covers(sample_views, generate_views)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sampling(data):
    fuzz_call(
        data,
        sample_views,
        {"model": MODEL, "condition": COND, "steps": 3, "temperature": 1.0, "gumbel": 1.0},
        check=lambda s: tuple(s.tokens.shape[1:]) == (2, 2, 2) and bool((s.tokens < 8).all()),
        strategies={"steps": SMALL_INTS, "model": OTHER_MODELS},
    )
    fuzz_call(
        data,
        sample_views,
        {"model": TEXT_MODEL, "condition": COND, "steps": 2, "text": TEXT, "guidance": 1.5},
        check=lambda s: tuple(s.tokens.shape[1:]) == (2, 2, 2),
        related={"text": ["guidance"], "guidance": ["text"]},
    )
    model = MultiViewTransformer(TOK.codebook_size, grid=TOK.grid, num_views=3, width=16, depth=1, heads=2)
    fuzz_call(
        data,
        generate_views,
        {"tokenizer": TOK, "model": model, "images": IMAGES},
        check=lambda x: tuple(x.shape[1:]) == (2, 3, 8, 8),
        strategies={"tokenizer": OTHER_MODELS, "model": OTHER_MODELS},
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(viewmask_module)
