"""Bi-NAC (icml_agents.binac): the protocol, the critic's reward, the two-timescale loop and its baselines.

A toy protocol keeps the deterministic tests exact: a prompt holds the true digits and, in its first token,
which digit the scripted actor's draft gets wrong; told "digit k is wrong", the scripted actor fixes digit k.
"""

from __future__ import annotations

import copy
import hashlib
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from icml_agents.binac import (
    BiNACConfig,
    BiNACTrainer,
    CausalLMPolicy,
    Completions,
    Ledger,
    ScriptedPolicy,
    Template,
    count_parameters,
    evaluate,
    improvement_rewards,
)

PAD, EOS, EQ, SEP, REV = 0, 2, 20, 21, 22
OK, WRONG0 = 23, 24  # "digit k is wrong": WRONG0 + k, k = 0..2
BAD0 = 30  # the first prompt token: BAD0 + the digit the draft gets wrong (3: none)
VOCAB = 40
FEEDBACK = (OK, WRONG0, WRONG0 + 1, WRONG0 + 2)
TEMPLATE = Template(feedback_prefix=(SEP,), revision_prefix=(REV,))


def make_prompt(truth: list[int], bad: int) -> list[int]:
    return [BAD0 + bad, *(3 + d for d in truth), EQ]


def reference(prompt: list[int]) -> list[int]:
    return prompt[1 : prompt.index(EQ)]


def scripted_actor_fn(prompt: list[int], generator=None) -> list[int]:
    """Drafts the truth with digit ``bad`` off by one; revising, fixes the digit the feedback names."""
    bad, truth = prompt[0] - BAD0, reference(prompt)
    if SEP not in prompt:
        return [3 + ((t - 3 + 1) % 10) if i == bad else t for i, t in enumerate(truth)]
    draft = prompt[prompt.index(EQ) + 1 : prompt.index(SEP)]
    k = prompt[prompt.index(SEP) + 1] - WRONG0
    return [truth[i] if i == k else d for i, d in enumerate(draft)]


def verifier(ref: list[int], completion: list[int]) -> float:
    return float(list(ref) == list(completion))


def dense_verifier(ref: list[int], completion: list[int]) -> float:
    """Partial credit (the fraction of digits right), so that a random tiny model's groups vary."""
    return sum(a == b for a, b in zip(ref, completion, strict=False)) / len(ref)


def scripted_actor() -> ScriptedPolicy:
    return ScriptedPolicy(scripted_actor_fn, eos_token_id=EOS)


class FirstTokenLM(nn.Module):
    """A learnable critic that sees only each row's first real token: logits = table[first token]."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.zeros(VOCAB, VOCAB))

    def forward(self, input_ids, attention_mask, position_ids):
        first = input_ids.gather(1, attention_mask.argmax(1, keepdim=True))  # (B, 1): the first real token
        return self.table[first].expand(-1, input_ids.shape[1], -1)


def table_critic() -> CausalLMPolicy:
    return CausalLMPolicy(FirstTokenLM(), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)


def tiny_llama(seed: int = 0, hidden: int = 32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def problems(n: int, seed: int = 0, bad=None):
    rng = np.random.default_rng(seed)
    prompts = [
        make_prompt(rng.integers(10, size=3).tolist(), int(rng.integers(3)) if bad is None else bad)
        for _ in range(n)
    ]
    return prompts, [reference(p) for p in prompts]


def state_hash(module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()


# -- the protocol -------------------------------------------------------------------------------------
def test_scripted_actor_fixes_the_digit_the_feedback_names():
    prompt = make_prompt([4, 7, 1], bad=1)
    draft = scripted_actor_fn(prompt)
    assert draft == [3 + 4, 3 + 8, 3 + 1]
    for k in range(3):
        revised = scripted_actor_fn(TEMPLATE.revision_prompt(prompt, draft, [WRONG0 + k]))
        assert revised[k] == reference(prompt)[k]
        assert [d for i, d in enumerate(revised) if i != k] == [d for i, d in enumerate(draft) if i != k]
        assert verifier(reference(prompt), revised) == float(k == 1)
    assert scripted_actor_fn(TEMPLATE.revision_prompt(prompt, draft, [OK])) == draft


def test_template_joins_prompt_draft_feedback_and_revision_prefix():
    assert TEMPLATE.critic_prompt([1, 2], [5]) == [1, 2, 5, SEP]
    assert TEMPLATE.revision_prompt([1, 2], [5], [OK]) == [1, 2, 5, SEP, OK, REV]
    assert Template().revision_prompt([1], [2], [3]) == [1, 2, 3]


def test_improvement_rewards_equal_a_hand_computation():
    r0 = [0.0, 1.0]
    # K = 2 feedbacks per draft, M = 2 revisions per feedback, draft-major
    r1 = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    delta = improvement_rewards(r0, r1, 2, 2)
    np.testing.assert_array_equal(delta.numpy(), [0.5, 0.0, 0.0, -0.5])
    with pytest.raises(ValueError, match="revision_rewards"):
        improvement_rewards(r0, r1[:-1], 2, 2)


def test_critic_reward_is_positive_only_for_useful_feedback():
    prompts, refs = problems(6, seed=1)
    order = [OK, WRONG0, WRONG0 + 1, WRONG0 + 2]  # each draft gets every word once (K = 4)
    counter = iter(range(10**6))
    critic = ScriptedPolicy(lambda p, g=None: [order[next(counter) % 4]], eos_token_id=EOS)
    cfg = BiNACConfig(group_size=2, feedbacks_per_draft=4, critic_mode="fixed")
    trainer = BiNACTrainer(scripted_actor(), critic, verifier, TEMPLATE, cfg)
    r = trainer.rollout(prompts, refs)
    delta = improvement_rewards(r.draft_rewards, r.revision_rewards, 4, 1).numpy()
    words = [f[0] for f in r.feedback.sequences()]
    bads = [p[0] - BAD0 for p in r.critic_prompts]
    hand = [1.0 if w == WRONG0 + b else 0.0 for w, b in zip(words, bads, strict=True)]
    np.testing.assert_array_equal(delta, hand)  # drafts all wrong (0), revision right iff the word names it
    assert ((delta > 0) == np.array([w == WRONG0 + b for w, b in zip(words, bads, strict=True)])).all()
    stats = trainer.critic_update(r)
    assert stats["improvement"] == pytest.approx(0.25) and stats["useful_feedback"] == pytest.approx(0.25)


def test_group_statistics_equal_a_direct_computation():
    prompts, refs = problems(5, seed=2)
    cfg = BiNACConfig(group_size=2, feedbacks_per_draft=3, revisions_per_feedback=1, critic_lr=0.05)
    trainer = BiNACTrainer(scripted_actor(), table_critic(), verifier, TEMPLATE, cfg, seed=3)
    r = trainer.rollout(prompts, refs)
    stats = {**trainer.critic_update(r), **trainer.actor_update(r)}
    delta = improvement_rewards(r.draft_rewards, r.revision_rewards, 3).numpy().reshape(-1, 3)
    assert stats["frac_zero_std_critic"] == pytest.approx(np.mean(delta.max(1) == delta.min(1)))
    rev = r.revision_rewards.numpy().reshape(-1, 2 * 3)
    assert stats["frac_zero_std_revision"] == pytest.approx(np.mean(rev.max(1) == rev.min(1)))
    assert stats["frac_zero_std_draft"] == 1.0  # every draft is wrong
    from icml_agents.rl import compute_advantages

    adv, _ = compute_advantages(torch.tensor(delta.reshape(-1)), 3)
    direct = (delta - delta.mean(1, keepdims=True)) / (delta.std(1, ddof=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(adv.numpy().reshape(-1, 3), direct, atol=1e-12)


def test_bilevel_loop_raises_the_probability_of_useful_feedback():
    critic = table_critic()
    cfg = BiNACConfig(group_size=2, feedbacks_per_draft=4, critic_lr=0.2, max_grad_norm=None)
    trainer = BiNACTrainer(scripted_actor(), critic, verifier, TEMPLATE, cfg, seed=0)
    check_prompts, _ = problems(30, seed=99)

    def p_useful() -> float:
        crit = [TEMPLATE.critic_prompt(p, scripted_actor_fn(p)) for p in check_prompts]
        useful = Completions.from_sequences([[WRONG0 + p[0] - BAD0] for p in check_prompts], EOS)
        useful.mask[:, 1:] = 0
        with torch.no_grad():
            return float(critic.log_probs(crit, useful)[:, 0].exp().mean())

    before = p_useful()
    for step in range(40):
        trainer.step(*problems(8, seed=step))
    after = p_useful()
    assert before == pytest.approx(0.2, abs=1e-6)  # zero logits over four words and the end token
    assert after > 0.9


def test_fixed_and_supervised_critics():
    prompts, refs = problems(4, seed=5)
    frozen = table_critic()
    before = state_hash(frozen)
    trainer = BiNACTrainer(scripted_actor(), frozen, verifier, TEMPLATE, BiNACConfig(critic_mode="fixed"))
    trainer.step(prompts, refs)
    assert state_hash(frozen) == before
    sup = table_critic()
    cfg = BiNACConfig(critic_mode="supervised", supervised_tokens=(OK, WRONG0), critic_lr=0.5)
    trainer = BiNACTrainer(scripted_actor(), sup, verifier, TEMPLATE, cfg)
    for _ in range(10):
        stats = trainer.step(prompts, refs)
    # every draft is wrong, so the supervised critic learns to say "wrong" (WRONG0) and nothing about where
    assert trainer.critic.generate([TEMPLATE.critic_prompt(prompts[0], [3])], greedy=True).sequences() == [
        [WRONG0]
    ]
    assert stats["critic_loss"] < 0.1


# -- the ledger -----------------------------------------------------------------------------------------
def test_ledger_counts_equal_calls_and_parameters_across_methods():
    prompts, refs = problems(3)
    g, k, m = 2, 3, 2
    actor = CausalLMPolicy(tiny_llama(0), eos_token_id=EOS, max_new_tokens=4)
    critic = CausalLMPolicy(tiny_llama(1), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)
    cfg = BiNACConfig(group_size=g, feedbacks_per_draft=k, revisions_per_feedback=m)
    binac = BiNACTrainer(copy.deepcopy(actor), copy.deepcopy(critic), verifier, TEMPLATE, cfg)
    grpo = BiNACTrainer(copy.deepcopy(actor), None, verifier, TEMPLATE, BiNACConfig(group_size=g + g * k * m))
    for _ in range(2):
        binac.step(prompts, refs)
        grpo.step(prompts, refs)
    assert binac.ledger.calls == grpo.ledger.calls == 2 * len(prompts) * (g + g * k * m)
    assert binac.ledger.parameters == {"actor": count_parameters(actor), "critic": count_parameters(critic)}
    assert grpo.ledger.parameters == {"actor": count_parameters(actor), "critic": 0}
    look = BiNACTrainer(
        actor,
        critic,
        verifier,
        TEMPLATE,
        BiNACConfig(**{**cfg.__dict__, "critic_reward": "after_adaptation"}),
    )
    look.step(prompts, refs)
    assert look.ledger.calls == len(prompts) * (g + 2 * g * k * m)  # the look-ahead revisions are counted


def test_count_parameters_counts_tied_weights_once():
    lin = nn.Linear(4, 4)
    tied = nn.ModuleDict({"a": lin, "b": lin})
    assert count_parameters(tied) == 20
    assert count_parameters(scripted_actor()) == 0


# -- the look-ahead and the live actor ---------------------------------------------------------------------
def test_critic_step_leaves_the_live_actor_unchanged():
    prompts, refs = problems(4, seed=7)
    actor = CausalLMPolicy(tiny_llama(0), eos_token_id=EOS, max_new_tokens=4)
    critic = CausalLMPolicy(tiny_llama(1), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)
    cfg = BiNACConfig(critic_reward="after_adaptation", actor_lr=0.05)
    trainer = BiNACTrainer(actor, critic, dense_verifier, TEMPLATE, cfg, seed=1)
    trainer.step(prompts, refs)  # the actor's optimizer has state now
    r = trainer.rollout(prompts, refs)
    actor_before = state_hash(actor)
    opt_before = copy.deepcopy(trainer.actor_opt.state_dict())
    critic_before = state_hash(critic)
    loss, _ = trainer.actor_loss(r)
    assert loss.requires_grad
    calls = trainer.ledger.calls
    trainer.critic_update(r)
    assert state_hash(actor) == actor_before  # the look-ahead copy was stepped, then discarded
    after = trainer.actor_opt.state_dict()
    for key, state in opt_before["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(after["state"][key][name]), torch.as_tensor(value))
    assert state_hash(critic) != critic_before
    assert trainer.ledger.calls == calls + len(r.revision_prompts)
    trainer.actor_update(r)
    assert state_hash(actor) != actor_before


# -- any Hugging Face causal LM ---------------------------------------------------------------------------
def test_tiny_hf_models_train_as_actor_and_critic():
    prompts, refs = problems(4, seed=3)
    actor = CausalLMPolicy(tiny_llama(0), eos_token_id=EOS, max_new_tokens=4)
    critic = CausalLMPolicy(tiny_llama(1), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)
    before = state_hash(actor), state_hash(critic)
    trainer = BiNACTrainer(
        actor, critic, dense_verifier, TEMPLATE, BiNACConfig(actor_lr=1e-2, critic_lr=1e-2)
    )
    for _ in range(3):
        stats = trainer.step(prompts, refs)
    assert state_hash(actor) != before[0] and state_hash(critic) != before[1]
    assert all(np.isfinite(v) for v in stats.values())
    assert {"draft_accuracy", "revision_accuracy", "improvement", "frac_zero_std_critic"} <= stats.keys()
    fb = trainer.critic.generate([TEMPLATE.critic_prompt(p, [5]) for p in prompts]).sequences()
    assert all(len(f) <= 1 and all(t in FEEDBACK for t in f) for f in fb)  # the constrained language
    out = evaluate(actor, critic, verifier, prompts, refs, TEMPLATE)
    assert out["draft"].shape == out["revised"].shape == (4,)


def test_batched_equals_one_at_a_time_and_the_cache_equals_recomputing():
    actor = CausalLMPolicy(tiny_llama(2), eos_token_id=EOS, max_new_tokens=5)
    prompts = [[1, 5, 6], [1, 7, 8, 9, 10, 11], [4]]  # different lengths: left padding
    batch = actor.generate(prompts, greedy=True).sequences()
    assert batch == [actor.generate([p], greedy=True).sequences()[0] for p in prompts]
    comps = Completions.from_sequences([[3, 4], [5], [6, 7, 8]], EOS)
    lp = actor.log_probs(prompts, comps)
    for i, p in enumerate(prompts):
        one = Completions.from_sequences([comps.sequences()[i]], EOS)
        n = int(one.mask.sum())
        torch.testing.assert_close(lp[i, :n], actor.log_probs([p], one)[0, :n], atol=1e-5, rtol=0)
    assert (lp[comps.mask == 0] == 0).all()
    sampled = actor.generate(prompts, torch.Generator().manual_seed(4))
    actor._cache_arg = None  # recompute the whole sequence at every step
    again = actor.generate(prompts, torch.Generator().manual_seed(4))
    assert torch.equal(sampled.tokens, again.tokens) and torch.equal(sampled.mask, again.mask)


def test_log_probs_of_sampled_completions_match_the_sampling_distribution():
    actor = CausalLMPolicy(tiny_llama(3), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)
    c = actor.generate([[1, 2, 3]] * 4000, torch.Generator().manual_seed(0))
    lp = actor.log_probs([[1, 2, 3]] * 1, Completions(c.tokens[:1], c.mask[:1], EOS))
    assert float(lp.detach()[0, 0]) <= 0
    words, counts = np.unique(c.tokens[:, 0].numpy(), return_counts=True)
    assert set(words) <= set(FEEDBACK) | {EOS}
    for w, n in zip(words, counts, strict=True):
        one = Completions(torch.tensor([[w]]), torch.ones(1, 1), EOS)
        p = float(actor.log_probs([[1, 2, 3]], one).detach().exp())
        assert abs(n / 4000 - p) < 4 * np.sqrt(p * (1 - p) / 4000) + 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["bilevel", "after_adaptation", "supervised", "grpo"])
def test_trainer_runs_on_cuda(mode):
    prompts, refs = problems(4, seed=3)
    actor = CausalLMPolicy(tiny_llama(0).cuda(), eos_token_id=EOS, max_new_tokens=4)
    critic = CausalLMPolicy(tiny_llama(1).cuda(), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)
    cfg = {
        "bilevel": BiNACConfig(),
        "after_adaptation": BiNACConfig(critic_reward="after_adaptation"),
        "supervised": BiNACConfig(critic_mode="supervised", supervised_tokens=(OK, WRONG0)),
        "grpo": BiNACConfig(),
    }[mode]
    trainer = BiNACTrainer(actor, None if mode == "grpo" else critic, dense_verifier, TEMPLATE, cfg)
    before = state_hash(actor)
    stats = trainer.step(prompts, refs)
    assert all(np.isfinite(v) for v in stats.values())
    assert state_hash(actor) != before


# -- bad input -------------------------------------------------------------------------------------------------
def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="group_size"):
        BiNACConfig(group_size=1)
    with pytest.raises(ValueError, match="feedbacks_per_draft"):
        BiNACConfig(feedbacks_per_draft=1)
    with pytest.raises(ValueError, match="supervised_tokens"):
        BiNACConfig(critic_mode="supervised")
    trainer = BiNACTrainer(scripted_actor(), table_critic(), verifier, TEMPLATE)
    with pytest.raises(ValueError, match="prompts"):
        trainer.step([], [])
    with pytest.raises(ValueError, match="prompts"):
        trainer.step([[]], [[1]])
    with pytest.raises(ValueError, match="references"):
        trainer.step([[BAD0, 3, EQ]], [])
    with pytest.raises(TypeError, match="verifier"):
        BiNACTrainer(scripted_actor(), None, "exact")
    with pytest.raises(ValueError, match="critic"):
        BiNACTrainer(scripted_actor(), scripted_actor(), verifier)  # a scripted critic cannot be trained
    bad = BiNACTrainer(scripted_actor(), None, lambda ref, comp: float("nan"))
    with pytest.raises(ValueError, match="verifier"):
        bad.step([[BAD0, 3, EQ]], [[3]])
    with pytest.raises(TypeError, match="model"):
        CausalLMPolicy("gpt2", eos_token_id=EOS)
    with pytest.raises(ValueError, match="max_new_tokens"):
        CausalLMPolicy(tiny_llama(), eos_token_id=EOS, max_new_tokens=0)
    with pytest.raises(ValueError, match="allowed_tokens"):
        CausalLMPolicy(tiny_llama(), eos_token_id=EOS, allowed_tokens=[])
    with pytest.raises(ValueError, match="references"):
        Ledger(verifier).verify([[1]], [[1], [2]])


@pytest.mark.usefixtures("one_torch_thread")
def test_float16_trainable_parameters_are_refused():
    """Adam over float16 weights rounds its eps to 0: the weights were NaN after one step."""
    half = CausalLMPolicy(tiny_llama(0).half(), eos_token_id=EOS, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"actor has float16 trainable parameters.*float32"):
        BiNACTrainer(half, None, dense_verifier, TEMPLATE)
    critic = CausalLMPolicy(tiny_llama(1).half(), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK)
    with pytest.raises(ValueError, match="critic has float16 trainable parameters"):
        BiNACTrainer(scripted_actor(), critic, verifier, TEMPLATE)
    # what is not trained may be float16: a fixed critic, a frozen actor
    BiNACTrainer(scripted_actor(), critic, verifier, TEMPLATE, BiNACConfig(critic_mode="fixed"))
    half.model.requires_grad_(False)
    BiNACTrainer(half, table_critic(), verifier, TEMPLATE)


@pytest.mark.usefixtures("one_torch_thread")
def test_bfloat16_trainable_parameters_warn_once():
    actor = CausalLMPolicy(tiny_llama(0).bfloat16(), eos_token_id=EOS, max_new_tokens=4)
    critic = CausalLMPolicy(
        tiny_llama(1).bfloat16(), eos_token_id=EOS, max_new_tokens=1, allowed_tokens=FEEDBACK
    )
    with pytest.warns(RuntimeWarning, match="actor has bfloat16 trainable parameters") as record:
        BiNACTrainer(actor, None, dense_verifier, TEMPLATE)
    assert len(record) == 1
    with pytest.warns(RuntimeWarning, match="actor and critic have bfloat16") as record:
        BiNACTrainer(actor, critic, dense_verifier, TEMPLATE)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float32, or bfloat16 that is not trained: no warning
        BiNACTrainer(CausalLMPolicy(tiny_llama(0), eos_token_id=EOS), None, dense_verifier, TEMPLATE)
        BiNACTrainer(scripted_actor(), critic, verifier, TEMPLATE, BiNACConfig(critic_mode="fixed"))


@pytest.mark.slow
def test_smollm2_runs_the_protocol_as_actor_and_critic():
    from icml_tools.assets import smollm2

    model, tokenizer = smollm2()
    words = [" correct", " wrong", " recheck"]
    allowed = [tokenizer.encode(w)[0] for w in words]
    eos = tokenizer.eos_token_id
    actor = CausalLMPolicy(model, eos_token_id=eos, pad_token_id=eos, max_new_tokens=4)
    critic = CausalLMPolicy(
        copy.deepcopy(model), eos_token_id=eos, pad_token_id=eos, max_new_tokens=1, allowed_tokens=allowed
    )
    template = Template(tuple(tokenizer.encode("\nFeedback:")), tuple(tokenizer.encode("\nRevised answer:")))
    questions = {"2 + 3 =": "5", "4 + 4 =": "8", "7 - 2 =": "5"}
    prompts = [tokenizer.encode(f"Question: {q}\nAnswer:") for q in questions]

    def contains(ref, completion):
        return float(ref in tokenizer.decode(completion))

    cfg = BiNACConfig(group_size=2, feedbacks_per_draft=2, actor_lr=1e-6, critic_lr=1e-6)
    trainer = BiNACTrainer(actor, critic, contains, template, cfg, seed=0)
    r = trainer.rollout(prompts, list(questions.values()))
    assert trainer.ledger.calls == 3 * (2 + 4)
    assert all(set(f) <= set(allowed) and len(f) <= 1 for f in r.feedback.sequences())  # a word or the end
    text = tokenizer.decode(r.revision_prompts[0])
    assert text.startswith("Question: 2 + 3 =") and "Feedback:" in text and text.endswith("Revised answer:")
    before = state_hash(critic)
    stats = {**trainer.critic_update(r), **trainer.actor_update(r)}
    assert all(np.isfinite(v) for v in stats.values())
    assert (
        trainer.ledger.parameters["actor"] == trainer.ledger.parameters["critic"] == count_parameters(model)
    )
    assert stats.get("frac_zero_std_critic", 1.0) == 1.0 or state_hash(critic) != before
    out = evaluate(actor, critic, contains, prompts, list(questions.values()), template)
    assert out["draft"].shape == (3,)
