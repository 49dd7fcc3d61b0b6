"""The sparse-reward testbed of ``binac-arithmetic``: char-level addition with a forgotten carry.

A problem is a multi-digit addition given as its column sums, least-significant column first: the prompt
``s0 s1 s2 s3 =`` holds one token per column for ``a_k + b_k`` (0..18), so the digit facts are given and
the carrying is the task. The answer is the ``n + 1`` digits of the sum, least significant first, scored by
exact match. Every problem has **exactly one carrying column** (``s_c >= 10``) and the column receiving the
carry does not carry on (``s_{c+1} <= 8``). The actor is a tiny Llama trained here from scratch by a
supervised *warm-up* on two things only: carry-free answers (``s_k mod 10``, the systematic error of a model
that never learned to carry) and the revision format (copy the draft, and where the feedback names digit
``k``, rewrite that digit with a uniformly random one). So every draft starts wrong at exactly one digit,
the verifier's reward is 0 on every draft (the zero-advantage stall), and feedback helps only by naming the
digit that is wrong.

The feedback language has ``n + 3`` words: ``ok``, ``?`` (a generic "check your work") and ``d0``..``dn``
("digit ``k`` is wrong"). The critic is a tiny Llama of the actor's size, constrained to those words. The
testbed's design (column sums, the single carry, the warm-up, the language) is ours.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from icml_agents.binac import CausalLMPolicy, Completions, ScriptedPolicy, Template

N_COLUMNS = 4  # columns of the sum; answers have N_COLUMNS + 1 digits
PAD, BOS, EOS = 0, 1, 2
DIGIT0 = 3  # token of digit 0; digits are 3..12
COLUMN0 = 13  # token of column sum 0; column sums 0..18 are 13..31
EQUALS, FB_SEP, REV_SEP = 32, 33, 34
OK, CHECK = 35, 36
WRONG0 = 37  # "digit k is wrong": WRONG0 + k, k = 0..N_COLUMNS
VOCAB_SIZE = WRONG0 + N_COLUMNS + 1
FEEDBACK = (OK, CHECK, *range(WRONG0, WRONG0 + N_COLUMNS + 1))
WORDS = {OK: "ok", CHECK: "?", **{WRONG0 + k: f"d{k}" for k in range(N_COLUMNS + 1)}}
TEMPLATE = Template(feedback_prefix=(FB_SEP,), revision_prefix=(REV_SEP,))


def prompt_tokens(columns: tuple[int, ...]) -> list[int]:
    return [BOS, *(COLUMN0 + s for s in columns), EQUALS]


def total(columns: tuple[int, ...]) -> int:
    return sum(s * 10**k for k, s in enumerate(columns))


def answer_tokens(columns: tuple[int, ...]) -> list[int]:
    t = total(columns)
    return [DIGIT0 + (t // 10**k) % 10 for k in range(len(columns) + 1)]


def carry_free_tokens(columns: tuple[int, ...]) -> list[int]:
    """Column sums mod 10, the top digit 0: the answer of a model that forgot to carry."""
    return [DIGIT0 + s % 10 for s in columns] + [DIGIT0]


def one_carry_problems(n: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` problems (column sums of two random digits each) with exactly one carrying column ``c``
    (uniform) whose next column sums to <= 8."""
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        c = int(rng.integers(N_COLUMNS))
        cols = []
        for j in range(N_COLUMNS):
            while True:
                s = int(rng.integers(10)) + int(rng.integers(10))  # a_j + b_j
                if (j == c and s >= 10) or (j == c + 1 and s <= 8) or (j not in (c, c + 1) and s <= 9):
                    break
            cols.append(s)
        out.append(tuple(cols))
    return out


def random_columns(n: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` problems with column sums of uniform random digits (any number of carries)."""
    return [
        tuple(int(v) for v in rng.integers(10, size=N_COLUMNS) + rng.integers(10, size=N_COLUMNS))
        for _ in range(n)
    ]


def verifier(reference: list[int], completion: list[int]) -> float:
    """Exact match of the answer digits."""
    return float(list(completion) == list(reference))


def tiny_llama(hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0):
    """A tiny untied Llama over the testbed's vocabulary, randomly initialised from ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    return LlamaForCausalLM(cfg)


def actor_policy(model) -> CausalLMPolicy:
    return CausalLMPolicy(model, eos_token_id=EOS, pad_token_id=PAD, max_new_tokens=N_COLUMNS + 2)


def critic_policy(model) -> CausalLMPolicy:
    """The critic writes one word of the feedback language."""
    return CausalLMPolicy(
        model, eos_token_id=EOS, pad_token_id=PAD, max_new_tokens=1, allowed_tokens=FEEDBACK
    )


def split(prompt: list[int]) -> tuple[tuple[int, ...], list[int], int | None]:
    """``(column sums, draft tokens, feedback token)`` of a prompt (no draft: ``[]``; no feedback: ``None``)."""
    eq = prompt.index(EQUALS)
    columns = tuple(t - COLUMN0 for t in prompt[1:eq])
    rest = prompt[eq + 1 :]
    if FB_SEP not in rest:
        return columns, rest, None
    draft = rest[: rest.index(FB_SEP)]
    after = rest[rest.index(FB_SEP) + 1 :]
    return columns, draft, (after[0] if after else None)


def oracle_feedback(prompt: list[int], generator=None) -> list[int]:
    """The oracle critic: names the lowest wrong digit of the draft, ``ok`` if there is none."""
    columns, draft, _ = split(prompt)
    truth = answer_tokens(columns)
    if len(draft) != len(truth):
        return [CHECK]
    wrong = [k for k, (d, t) in enumerate(zip(draft, truth, strict=True)) if d != t]
    return [WRONG0 + wrong[0]] if wrong else [OK]


def oracle_critic() -> ScriptedPolicy:
    return ScriptedPolicy(oracle_feedback, eos_token_id=EOS)


def constant_critic(word: int) -> ScriptedPolicy:
    """A fixed critic that says ``word`` to every draft."""
    return ScriptedPolicy(lambda prompt, generator: [word], eos_token_id=EOS)


def generic_critic() -> ScriptedPolicy:
    """A fixed generic critic: always "check your work"."""
    return constant_critic(CHECK)


def scripted_reviser(prompt: list[int], generator=None) -> list[int]:
    """A rule-based actor for tests: drafts the carry-free answer; revising, it fixes the digit the
    feedback names (to the true digit) and copies the others."""
    columns, draft, fb = split(prompt)
    if fb is None:
        return carry_free_tokens(columns)
    out = list(draft)
    k = fb - WRONG0
    if 0 <= k < len(out):
        out[k] = answer_tokens(columns)[k]
    return out


def warm_up(
    policy: CausalLMPolicy, steps: int, seed: int, batch: int = 128, lr: float = 3e-3, progress: bool = False
) -> list[float]:
    """Supervised warm-up on carry-free drafts and the revision format (no carry is ever shown)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=lr)
    losses = []
    for _ in tqdm(range(steps), desc="warm-up", disable=not progress, leave=False):
        prompts, targets = [], []
        for _ in range(batch):
            cols = random_columns(1, rng)[0]
            draft = carry_free_tokens(cols)
            if rng.random() < 0.5:
                prompts.append(prompt_tokens(cols))
                targets.append(draft)
                continue
            fb = int(rng.choice(FEEDBACK))
            target = list(draft)
            if fb >= WRONG0:
                target[fb - WRONG0] = DIGIT0 + int(rng.integers(10))
            prompts.append(TEMPLATE.revision_prompt(prompt_tokens(cols), draft, [fb]))
            targets.append(target)
        comp = Completions.from_sequences(targets, EOS, PAD)
        logp = policy.log_probs(prompts, comp)
        mask = comp.mask.to(logp.device)
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
