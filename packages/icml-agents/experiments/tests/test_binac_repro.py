"""The binac-arithmetic testbed (one carry, the carry-free draft, the oracle) and the reproduction's protocol."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml_agents.binac import BiNACTrainer, evaluate
from icml_agents_experiments.binac import arithmetic as A
from icml_agents_experiments.binac import repro


def test_problems_have_exactly_one_carry_and_the_draft_one_wrong_digit():
    rng = np.random.default_rng(0)
    for cols in A.one_carry_problems(300, rng):
        carries = [c for c, s in enumerate(cols) if s >= 10]
        assert len(carries) == 1 and all(0 <= s <= 18 for s in cols)
        c = carries[0]
        truth, draft = A.answer_tokens(cols), A.carry_free_tokens(cols)
        wrong = [k for k in range(A.N_COLUMNS + 1) if truth[k] != draft[k]]
        assert wrong == [c + 1]  # the carry lands on the next digit and goes no further
        assert truth[c + 1] - A.DIGIT0 == (draft[c + 1] - A.DIGIT0 + 1) % 10
        assert A.total(cols) == int("".join(str(t - A.DIGIT0) for t in reversed(truth)))
        assert A.oracle_feedback(A.TEMPLATE.critic_prompt(A.prompt_tokens(cols), draft)) == [A.WRONG0 + c + 1]
        assert A.oracle_feedback(A.TEMPLATE.critic_prompt(A.prompt_tokens(cols), truth)) == [A.OK]
    seen = {next(c for c, s in enumerate(cols) if s >= 10) for cols in A.one_carry_problems(200, rng)}
    assert seen == set(range(A.N_COLUMNS))


def test_oracle_with_the_scripted_reviser_solves_every_problem_and_the_generic_critic_none():
    problems = A.one_carry_problems(50, np.random.default_rng(1))
    prompts, refs = [A.prompt_tokens(c) for c in problems], [A.answer_tokens(c) for c in problems]
    from icml_agents.binac import ScriptedPolicy

    actor = ScriptedPolicy(A.scripted_reviser, eos_token_id=A.EOS)
    oracle = evaluate(actor, A.oracle_critic(), A.verifier, prompts, refs, A.TEMPLATE)
    assert oracle["draft"].sum() == 0 and oracle["revised"].mean() == 1.0
    generic = evaluate(actor, A.generic_critic(), A.verifier, prompts, refs, A.TEMPLATE)
    assert generic["revised"].sum() == 0


def test_warm_up_teaches_the_carry_free_answer_and_the_revision_format():
    actor = A.actor_policy(A.tiny_llama(seed=0))
    A.warm_up(actor, repro.WARMUP_STEPS, seed=0)
    problems = A.one_carry_problems(100, np.random.default_rng(2))
    prompts = [A.prompt_tokens(c) for c in problems]
    drafts = actor.generate(prompts, greedy=True).sequences()
    assert np.mean([d == A.carry_free_tokens(c) for d, c in zip(drafts, problems, strict=True)]) >= 0.95
    # told "digit k is wrong", it keeps the other digits and rewrites digit k at random
    rev = [A.TEMPLATE.revision_prompt(p, d, [A.WRONG0 + 1]) for p, d in zip(prompts, drafts, strict=True)]
    out = actor.generate(rev, torch.Generator().manual_seed(0)).sequences()
    kept = np.mean([o[:1] + o[2:] == d[:1] + d[2:] for o, d in zip(out, drafts, strict=True)])
    changed = np.mean([o[1] != d[1] for o, d in zip(out, drafts, strict=True)])
    assert kept >= 0.9 and 0.6 <= changed <= 1.0  # about 0.9 for a uniform digit
    verdicts = evaluate(actor, None, A.verifier, prompts, [A.answer_tokens(c) for c in problems], A.TEMPLATE)
    assert verdicts["draft"].sum() == 0  # the stall: every draft is wrong


def test_arms_share_the_warm_start_and_match_parameters():
    actor = A.actor_policy(A.tiny_llama(hidden=repro.HIDDEN, seed=0))
    wide = A.actor_policy(A.tiny_llama(hidden=repro.WIDE, seed=0))
    critic = A.critic_policy(A.tiny_llama(hidden=repro.HIDDEN, seed=1))
    trainers: dict[str, BiNACTrainer] = {
        arm: repro.make_arm(arm, actor, wide, critic, 0) for arm in repro.ARMS
    }
    binac = trainers["binac"].ledger.total_parameters
    assert trainers["grpo"].ledger.total_parameters >= binac  # GRPO alone: at least actor + critic
    assert trainers["fixed-random"].ledger.total_parameters == binac
    assert trainers["oracle"].ledger.parameters["critic"] == 0
    for arm, t in trainers.items():
        if arm != "grpo":
            ref = actor.state_dict()
            assert all(torch.equal(v, ref[k]) for k, v in t.actor.state_dict().items())
            assert t.actor is not actor  # each arm trains its own copy


def test_reproduction_protocol_on_a_tiny_budget(monkeypatch):
    monkeypatch.setitem(repro.BUDGETS, "quick", {"seeds": [0], "steps": 4, "eval_every": 2})
    monkeypatch.setattr(repro, "WARMUP_STEPS", 5)
    monkeypatch.setattr(repro, "N_EVAL", 12)
    monkeypatch.setattr(repro, "BOOTSTRAP", 50)
    out = repro.run("quick", 0)
    rows = {r["method"]: r for r in out["rows"]}
    assert set(repro.ARMS) <= rows.keys()
    calls = {arm: rows[arm]["verifier_calls"] for arm in repro.ARMS}
    budget = 4 * repro.PROMPTS_PER_STEP * repro.GRPO_G
    assert all(c == budget for arm, c in calls.items() if arm != "binac-lookahead")
    assert budget <= calls["binac-lookahead"] < budget + repro.PROMPTS_PER_STEP * 36
    assert out["ours"] == pytest.approx(rows["binac"]["auc_revised"])
    assert out["baseline"] == pytest.approx(rows["grpo"]["auc_revised"])
    h = out["headroom"]
    assert h["stall"] == (h["grpo_zero_std_fraction"] >= 0.8)
    assert h["oracle_lift"] == (h["oracle_minus_grpo"] >= 0.30)
    for other in ("grpo", "fixed-random", "fixed-generic"):
        mean, (lo, hi) = (
            rows[f"binac - {other} (AUC, paired)"]["auc_revised"],
            rows[f"binac - {other} (AUC, paired)"]["ci95"],
        )
        assert lo <= mean <= hi
        assert mean == pytest.approx(rows["binac"]["auc_revised"] - rows[other]["auc_revised"])
        assert out["checks"][other] == (lo > 0)
    assert out["passed"] == (h["holds"] and all(out["checks"].values()))


def test_steps_to():
    assert repro.steps_to(np.array([0.1, 0.4, 0.6, 0.7]), 0.5, [0, 20, 40, 60]) == 40
    assert repro.steps_to(np.array([0.1]), 0.5, [0]) is None
