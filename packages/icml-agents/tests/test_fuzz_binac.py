"""A fuzz test per public API of icml_agents.binac (issue 48), checked with :mod:`icml_tools.fuzz` against the
bad-input contract of GUIDE "Bad input"."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml_agents import binac
from icml_agents.binac import (
    BiNACConfig,
    BiNACTrainer,
    CausalLMPolicy,
    Completions,
    Ledger,
    Rollout,
    ScriptedPolicy,
    Template,
    count_parameters,
    evaluate,
    improvement_rewards,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Rollout, "the record BiNACTrainer.rollout fills (fuzzed through BiNACTrainer)")

EOS = 2


class BigramLM(nn.Module):
    """A tiny causal LM: next-token logits from the current token only."""

    def __init__(self, vocab: int = 12):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, vocab)

    def forward(self, input_ids, attention_mask, position_ids):
        return self.emb(input_ids)


def echo(prompt, generator=None):
    return [t for t in prompt if t > EOS][:3]


def exact(ref, completion):
    return float(list(ref) == list(completion))


ACTOR = CausalLMPolicy(BigramLM(), eos_token_id=EOS, max_new_tokens=3)
SCRIPTED = ScriptedPolicy(echo, eos_token_id=EOS)
PROMPTS = [[3, 4, 5], [6, 7]]
REFS = [[3, 4, 5], [6, 7]]
NOT_PROMPTS = st.sampled_from([None, "abc", [], [[]], [[-1]], [[1.5]], [["a"]], [None], 3, [[True]]])


@FUZZ.covers(improvement_rewards)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_improvement_rewards(data):
    d, k, m = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    r0 = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=d, max_size=d)))
    r1 = np.array(data.draw(st.lists(st.floats(0, 1), min_size=d * k * m, max_size=d * k * m)))
    direct = r1.reshape(d, k, m).mean(2) - r0[:, None]
    np.testing.assert_allclose(improvement_rewards(r0, r1, k, m).numpy(), direct.reshape(-1), atol=1e-12)
    fuzz_call(
        data,
        improvement_rewards,
        {"draft_rewards": r0, "revision_rewards": r1, "feedbacks_per_draft": k, "revisions_per_feedback": m},
        check=lambda out: out.shape == (out.numel(),) and bool(torch.isfinite(out).all()),
        related={
            "draft_rewards": ["revision_rewards"],
            "revision_rewards": ["draft_rewards"],
            "feedbacks_per_draft": ["revision_rewards"],
            "revisions_per_feedback": ["revision_rewards"],
        },
    )


@FUZZ.covers(BiNACConfig)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_binac_config(data):
    fuzz_call(
        data,
        BiNACConfig,
        {
            "group_size": 4,
            "feedbacks_per_draft": 2,
            "revisions_per_feedback": 1,
            "draft_weight": 1.0,
            "critic_mode": "bilevel",
            "critic_reward": "in_context",
            "critic_every": 1,
            "actor_lr": 1e-3,
            "critic_lr": 1e-3,
            "epsilon": 0.2,
            "scale_rewards": "group",
            "loss_type": "dapo",
            "std_eps": 1e-4,
            "max_grad_norm": 1.0,
            "supervised_tokens": (3, 4),
        },
        check=lambda c: isinstance(c, BiNACConfig),
        related={"feedbacks_per_draft": ["critic_mode"], "supervised_tokens": ["critic_mode"]},
    )


@FUZZ.covers(Template)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_template(data):
    out = fuzz_call(
        data,
        Template,
        {"feedback_prefix": (9,), "revision_prefix": (10, 11)},
        check=lambda t: t.revision_prompt([1], [2], [3])[:2] == [1, 2],
        strategies={
            n: st.sampled_from([None, "x", [-1], [1.5], 3, [None]])
            for n in ("feedback_prefix", "revision_prefix")
        },
    )
    if isinstance(out, Template) and out.feedback_prefix == (9,) and out.revision_prefix == (10, 11):
        assert out.revision_prompt([1], [2], [3]) == [1, 2, 9, 3, 10, 11]


@FUZZ.covers(Completions)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_completions_round_trip(data):
    seqs = data.draw(st.lists(st.lists(st.integers(3, 20), max_size=5), min_size=1, max_size=4))
    c = Completions.from_sequences(seqs, EOS)
    assert c.sequences() == seqs
    assert c.mask.sum(1).tolist() == [len(s) + 1 for s in seqs]  # the end token is generated too
    fuzz_call(
        data,
        Completions.from_sequences,
        {"sequences": seqs, "eos_token_id": EOS},
        check=lambda out: out.sequences() == seqs,
        strategies={
            "sequences": NOT_PROMPTS.filter(lambda v: v != [[]]),
            "eos_token_id": st.sampled_from([-1, None, "x", 1.5]),
        },
    )


@FUZZ.covers(Ledger)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_ledger(data):
    def build_and_verify(verifier, references, completions):
        ledger = Ledger(verifier)
        return ledger.verify(references, completions), ledger.calls

    fuzz_call(
        data,
        build_and_verify,
        {"verifier": exact, "references": REFS, "completions": [[3, 4, 5], [6]]},
        check=lambda out: out[0].shape == (2,) and out[1] == 2,
        strategies={
            "verifier": st.sampled_from([None, "exact", lambda r, c: float("nan"), lambda r, c: "1"])
        },
        related={"references": ["completions"], "completions": ["references"]},
    )


@FUZZ.covers(CausalLMPolicy)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_causal_lm_policy(data):
    def build_and_generate(model, eos_token_id, max_new_tokens, temperature, allowed_tokens, prompts):
        policy = CausalLMPolicy(
            model,
            eos_token_id=eos_token_id,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            allowed_tokens=allowed_tokens,
        )
        return policy.generate(prompts, torch.Generator().manual_seed(0))

    allowed = [3, 4, 5]
    fuzz_call(
        data,
        build_and_generate,
        {
            "model": BigramLM(),
            "eos_token_id": EOS,
            "max_new_tokens": 3,
            "temperature": 1.0,
            "allowed_tokens": allowed,
            "prompts": PROMPTS,
        },
        check=lambda c: c.tokens.shape[0] == 2 and int(c.tokens.max()) < 12,
        strategies={
            "prompts": NOT_PROMPTS,
            "allowed_tokens": NOT_PROMPTS,
            "model": st.sampled_from([None, "gpt2", nn.Linear]),
        },
    )


@FUZZ.covers(ScriptedPolicy)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_scripted_policy(data):
    fuzz_call(
        data,
        lambda fn, eos_token_id, prompts: ScriptedPolicy(fn, eos_token_id=eos_token_id).generate(prompts),
        {"fn": echo, "eos_token_id": EOS, "prompts": PROMPTS},
        check=lambda c: c.sequences() == [[3, 4, 5], [6, 7]],
        strategies={"prompts": NOT_PROMPTS, "fn": st.sampled_from([None, "echo", 3])},
    )


@FUZZ.covers(count_parameters)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_count_parameters(data):
    fuzz_call(data, count_parameters, {"module": nn.Linear(3, 2)}, check=lambda n: n == 8)


@FUZZ.covers(evaluate)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_evaluate(data):
    fuzz_call(
        data,
        evaluate,
        {
            "actor": SCRIPTED,
            "critic": SCRIPTED,
            "verifier": exact,
            "prompts": PROMPTS,
            "references": REFS,
            "template": Template((9,), (10,)),
            "greedy": True,
        },
        check=lambda out: out["draft"].tolist() == [1.0, 1.0] and out["revised"].shape == (2,),
        strategies={
            "prompts": NOT_PROMPTS,
            "references": st.sampled_from([None, [], [[1]], "ab"]),
            "actor": st.sampled_from([None, "actor"]),
            "critic": st.sampled_from(["critic", 3]),
            "verifier": st.sampled_from([None, lambda r, c: float("inf")]),
            "template": st.sampled_from(["t", (9,)]),
        },
        related={"prompts": ["references"], "references": ["prompts"]},
    )


@FUZZ.covers(BiNACTrainer)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_binac_trainer(data):
    def build_and_step(actor, critic, verifier, template, config, seed, prompts, references):
        trainer = BiNACTrainer(actor, critic, verifier, template, config, seed=seed)
        return trainer.step(prompts, references)

    fuzz_call(
        data,
        build_and_step,
        {
            "actor": ACTOR,
            "critic": SCRIPTED,
            "verifier": exact,
            "template": Template((9,), (10,)),
            "config": BiNACConfig(group_size=2, feedbacks_per_draft=2, critic_mode="fixed"),
            "seed": 0,
            "prompts": PROMPTS,
            "references": REFS,
        },
        check=lambda stats: stats["verifier_calls"] == 2 * (2 + 4) and 0 <= stats["draft_accuracy"] <= 1,
        strategies={
            "prompts": NOT_PROMPTS,
            "references": st.sampled_from([None, [], [[1]], "ab"]),
            "actor": st.sampled_from([None, "actor", 3]),
            "critic": st.sampled_from(["critic", 3]),
            "verifier": st.sampled_from([None, lambda r, c: float("nan")]),
            "template": st.sampled_from(["t", (9,)]),
            "config": st.sampled_from([None, {}, "cfg"]),
        },
        related={
            "prompts": ["references"],
            "references": ["prompts"],
            "critic": ["critic_mode"],
            "config": ["critic"],
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(binac)
