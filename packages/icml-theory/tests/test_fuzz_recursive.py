"""Bad-input fuzz tests (GUIDE "Bad input") of icml_theory.recursive, and the corruption path's properties under
hypothesis: every public API returns a result its check accepts or raises ValueError/TypeError naming the
argument. Models are tiny (hidden 8, 2 supervision steps) and built fresh per example."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_theory.recursive
from icml_theory.recursive import (
    BatchResult,
    Evaluation,
    EvaluationCounter,
    ReasoningNet,
    RecursiveConfig,
    RecursiveModel,
    RecursiveTrainer,
    check_tokens,
    corruption_path,
    count_evaluations,
    dis_config,
    evaluate,
    predict,
    sequence_loss,
    stablemax_cross_entropy,
    trm_config,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates

FUZZ = Coverage()
FUZZ.exempt(BatchResult, "a result container only RecursiveTrainer.train_batch builds")
FUZZ.exempt(Evaluation, "a result container only evaluate builds; at_budget is fuzzed below")
FUZZ.exempt(ReasoningNet, "built by RecursiveModel from a RecursiveConfig, which is fuzzed")
V, L = 4, 5
TOKENS = torch.tensor([[0, 1, 2, 3, 0], [3, 3, 1, 0, 2]])
LABELS = torch.tensor([[1, 1, 2, 3, 0], [3, 2, 1, 0, 2]])
METHODS = ("trm", "dis", "dis-cfg")


def small_config(method: str) -> RecursiveConfig:
    base = dict(hidden=8, supervision_steps=2, h_cycles=2, l_cycles=1)
    if method == "trm":
        return trm_config(V, L, **base)
    return dis_config(V, L, cfg=method == "dis-cfg", **base)


@st.composite
def token_pairs(draw, max_batch: int = 6, max_len: int = 8, vocab: int = 5):
    batch = draw(st.integers(0, max_batch))
    length = draw(st.integers(1, max_len))
    values = st.integers(0, vocab - 1)
    start = draw(st.lists(st.lists(values, min_size=length, max_size=length), min_size=batch, max_size=batch))
    end = draw(st.lists(st.lists(values, min_size=length, max_size=length), min_size=batch, max_size=batch))
    return (
        torch.tensor(start, dtype=torch.long).reshape(batch, length),
        torch.tensor(end, dtype=torch.long).reshape(batch, length),
    )


@settings(max_examples=60, deadline=None)
@given(token_pairs(), st.integers(1, 9), st.integers(0, 2**32))
def test_corruption_path_properties(pair, steps, seed):
    start, end = pair
    path = corruption_path(start, end, steps, torch.Generator().manual_seed(seed))
    assert path.shape == (start.shape[0], steps + 1, start.shape[1])
    assert torch.equal(path[:, 0], start) and torch.equal(path[:, -1], end)
    distance = (path != end[:, None]).sum(-1)
    assert (distance[:, 1:] <= distance[:, :-1]).all()
    assert ((path == start[:, None]) | (path == end[:, None])).all()
    # a position replaced once stays replaced (the frames are nested)
    replaced = (path != start[:, None]) & (start != end)[:, None]
    assert (replaced[:, 1:] >= replaced[:, :-1]).all()


@FUZZ.covers(corruption_path)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_corruption_path(data):
    fuzz_call(
        data,
        corruption_path,
        {"start": TOKENS, "end": LABELS, "steps": 3, "generator": torch.Generator().manual_seed(0)},
        check=lambda p: p.ndim == 3 and p.shape[0] == 2 and p.shape[2] == L,
        related={"start": ["end"], "end": ["start"]},
    )


@FUZZ.covers(RecursiveConfig, trm_config, dis_config)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_configs(data):
    fn = data.draw(st.sampled_from([RecursiveConfig, trm_config, dis_config]), label="fn")
    valid = {"vocab_size": V, "seq_len": L, "hidden": 8, "h_cycles": 2, "l_cycles": 1, "supervision_steps": 2}
    if fn is RecursiveConfig:
        valid |= {"mixer": "mlp", "heads": 2, "method": "trm", "loss": "softmax", "guidance": 1.0}
        valid |= {"halt_exploration": 0.1, "expansion": 2, "layers": 1}
    fuzz_call(
        data,
        fn,
        valid,
        check=lambda c: isinstance(c, RecursiveConfig) and c.evaluations >= 1,
        related={"heads": ["hidden"], "hidden": ["heads"]},
    )


@FUZZ.covers(RecursiveModel)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_model_constructor(data):
    fuzz_call(
        data,
        RecursiveModel,
        {"config": small_config("trm"), "seed": 3},
        check=lambda m: isinstance(m, RecursiveModel) and m.config.hidden == 8,
    )


@FUZZ.covers(check_tokens)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_check_tokens(data):
    fuzz_call(
        data,
        check_tokens,
        {"value": TOKENS, "name": "value", "vocab_size": V, "seq_len": L},
        mutate=["value"],
        check=lambda t: t.dtype == torch.long and t.shape[1] == L and int(t.min()) >= 0 and int(t.max()) < V,
    )


@FUZZ.covers(predict, evaluate)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_predict_and_evaluate(data):
    method = data.draw(st.sampled_from(METHODS), label="method")
    model = RecursiveModel(small_config(method))
    if data.draw(st.booleans(), label="evaluate"):
        fuzz_call(
            data,
            evaluate,
            {"model": model, "inputs": TOKENS, "labels": LABELS, "steps": 2, "batch_size": 1},
            check=lambda e: 1 <= len(e.exact) <= 2 and all(0 <= a <= 1 for a in e.exact + e.token),
            related={"inputs": ["labels"], "labels": ["inputs"]},
        )
    else:
        fuzz_call(
            data,
            predict,
            {"model": model, "inputs": TOKENS, "steps": 1, "batch_size": 3},
            check=lambda p: p.ndim == 3 and p.shape[2] == L and int(p.min()) >= 0 and int(p.max()) < V,
        )


@FUZZ.covers(RecursiveTrainer)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_trainer(data):
    method = data.draw(st.sampled_from(METHODS), label="method")
    model = RecursiveModel(small_config(method))
    choice = data.draw(st.sampled_from(["init", "train_batch", "fit"]), label="call")
    if choice == "init":
        fuzz_call(
            data,
            RecursiveTrainer,
            {
                "model": model,
                "lr": 1e-3,
                "weight_decay": 0.1,
                "betas": (0.9, 0.95),
                "q_weight": 0.5,
                "seed": 0,
            },
            check=lambda t: isinstance(t, RecursiveTrainer),
        )
        return
    trainer = RecursiveTrainer(model)

    def check_result(r):
        return isinstance(r, BatchResult) and r.loss >= 0 and 1 <= r.steps <= 2 and 0 <= r.exact <= 1

    if choice == "train_batch":
        fuzz_call(
            data,
            trainer.train_batch,
            {"inputs": TOKENS, "labels": LABELS},
            check=check_result,
            related={"inputs": ["labels"], "labels": ["inputs"]},
        )
    else:
        fuzz_call(
            data,
            trainer.fit,
            {"inputs": TOKENS, "labels": LABELS, "epochs": 1, "batch_size": 1, "augment": None},
            check=lambda h: len(h) >= 1 and all(check_result(r) for r in h),
            strategies={"epochs": st.sampled_from([0, -1, 1.5, None, "1", True]), "augment": hostile(None)},
            related={"inputs": ["labels"], "labels": ["inputs"]},
        )


@FUZZ.covers(stablemax_cross_entropy, sequence_loss)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_losses(data):
    logits = torch.randn(2, L, V, generator=torch.Generator().manual_seed(0))
    if data.draw(st.booleans(), label="stablemax"):
        fuzz_call(
            data,
            stablemax_cross_entropy,
            {"logits": logits, "labels": LABELS},
            check=lambda v: v.shape == (2, L) and bool((v >= 0).all()),
            related={"logits": ["labels"], "labels": ["logits"]},
        )
    else:
        fuzz_call(
            data,
            sequence_loss,
            {"logits": logits, "labels": LABELS, "kind": "stablemax"},
            check=lambda v: v.shape == (2,) and bool((v >= 0).all()),
            related={"logits": ["labels"], "labels": ["logits"]},
        )


@FUZZ.covers(count_evaluations, EvaluationCounter)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_counter(data):
    model = RecursiveModel(small_config("dis"))

    def counted(model, examples):
        with count_evaluations(model) as counter:
            predict(model, TOKENS)
        return counter.per_example(examples)

    fuzz_call(data, counted, {"model": model, "examples": 2}, check=lambda v: v > 0 and v * 0 == 0)
    assert counted(model, 2) == 2 * 2 * 2  # 2 steps x 2 cycles x (1 + 1) evaluations


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_evaluation_budget(data):
    result = Evaluation(exact=[0.1, 0.5], token=[0.5, 0.9], evaluations=[4.0, 8.0])
    fuzz_call(data, result.at_budget, {"evaluations": 5.0}, check=lambda v: v is None or v in result.exact)


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_theory.recursive)


def test_config_is_frozen():
    config = small_config("trm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hidden = 16  # type: ignore[misc]
