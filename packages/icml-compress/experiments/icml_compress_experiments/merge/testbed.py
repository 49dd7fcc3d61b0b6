"""A synthetic "second modality" for SpeechCombine (issue 40; our design: no speech data can be downloaded).

Text: a character vocabulary (letters ``a``-``j``, digits, space, ``>``, ``|`` and four task tokens); procedurally
generated sentences of random words. Units (the "speech"): 16 tokens the base vocabulary lacks; every text
token is re-encoded as a pair of units (a random code per seed, like a speech tokenizer's units, twice as long
as the text). Four models per seed, all tiny Llamas (2 blocks, width 64) trained here in seconds:

- **base**: pre-trained on text sentences;
- **instruct**: the base fine-tuned on text instructions ``<task> x1..xn > answer`` (loss on the answer):
  ``fst`` (first letter), ``sec`` (second letter), ``lst`` (last letter), ``cnt`` (length, a digit); words
  of 2-5 letters;
- **cpt**: the base with the 16 unit rows added, continually pre-trained on unit-encoded sentences, paired
  data (``units | text`` and ``text | units``) and some text, **no instructions**;
- **oracle**: the CPT model fine-tuned on unit-space instructions (the upper bound a merge cannot beat).

Evaluation: instructions whose task token and input arrive as units, the answer marker ``>`` and the answer in
text (as a speech LM answers a spoken question in text); exact match of the greedy answer. The same items in
text space measure what the merge keeps of the instruct model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

LETTERS = "abcdefghij"
DIGITS = "0123456789"
TASKS = ("fst", "sec", "lst", "cnt")
SPECIALS = ("<pad>", "<bos>", "<eos>")
TEXT_TOKENS = (*SPECIALS, *LETTERS, *DIGITS, " ", ">", "|", *(f"<{t}>" for t in TASKS))
PAD, BOS, EOS = 0, 1, 2
TEXT_VOCAB = len(TEXT_TOKENS)  # 30
N_UNITS = 16
UNIT_VOCAB = TEXT_VOCAB + N_UNITS  # the CPT model's vocabulary: 46
TOK = {t: i for i, t in enumerate(TEXT_TOKENS)}
SEP = TOK[">"]


@dataclass(frozen=True)
class Steps:
    """Training steps of each model (batch 32, AdamW)."""

    base: int
    instruct: int
    cpt: int
    oracle: int


def answer(task: str, word: str) -> str:
    if task == "sec":
        return word[1]
    if task == "fst":
        return word[0]
    if task == "lst":
        return word[-1]
    return str(len(word))


class Modality:
    """The unit code of one seed: every text token but the specials is a distinct ordered pair of units."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        pairs = rng.choice(N_UNITS * N_UNITS, size=TEXT_VOCAB - len(SPECIALS), replace=False)
        self.code = {
            tok: (TEXT_VOCAB + int(p) // N_UNITS, TEXT_VOCAB + int(p) % N_UNITS)
            for tok, p in zip(range(len(SPECIALS), TEXT_VOCAB), pairs, strict=True)
        }

    def units(self, ids: list[int]) -> list[int]:
        return [u for i in ids for u in self.code[i]]


def text_ids(text: list[str]) -> list[int]:
    return [TOK[t] for t in text]


def sentence(rng: np.random.Generator) -> list[str]:
    """Random words of letters (sometimes digits), space-separated; now and then a task token, ``>`` or ``|``
    (so the base knows every token)."""
    out: list[str] = []
    for _ in range(int(rng.integers(3, 7))):
        if out:
            out.append(" ")
        alphabet = DIGITS if rng.random() < 0.15 else LETTERS
        out += list(rng.choice(list(alphabet), size=int(rng.integers(1, 6))))
        if rng.random() < 0.1:
            out += [" ", str(rng.choice([">", "|", *(f"<{t}>" for t in TASKS)]))]
    return out


def instruction(rng: np.random.Generator) -> tuple[str, str, str]:
    task = str(rng.choice(TASKS))
    word = "".join(rng.choice(list(LETTERS), size=int(rng.integers(2, 6))))
    return task, word, answer(task, word)


def prompt_ids(task: str, word: str, modality: Modality | None) -> list[int]:
    """``<bos> <task> x1..xn >`` with the task token and input as units when ``modality`` is given."""
    ids = text_ids([f"<{task}>", *word])
    return [BOS, *(modality.units(ids) if modality is not None else ids), SEP]


def batch(seqs: list[list[int]], masks: list[list[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and labels (-100 on padding and where ``masks`` is 0)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD)
    labels = torch.full((len(seqs), width), -100)
    for k, s in enumerate(seqs):
        ids[k, : len(s)] = torch.tensor(s)
        m = torch.tensor(masks[k]) if masks is not None else torch.ones(len(s), dtype=torch.long)
        labels[k, : len(s)] = torch.where(m.bool(), torch.tensor(s), torch.tensor(-100))
    return ids, labels


def pretrain_batch(rng, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return batch([[BOS, *text_ids(sentence(rng)), EOS] for _ in range(n)])


def cpt_batch(rng, modality: Modality, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit sentences (half), paired ``units | text`` / ``text | units`` (a third), text (the rest)."""
    seqs = []
    for _ in range(n):
        s = text_ids(sentence(rng))
        r = rng.random()
        if r < 0.5:
            seqs.append([BOS, *modality.units(s), EOS])
        elif r < 0.67:
            seqs.append([BOS, *modality.units(s), TOK["|"], *s, EOS])
        elif r < 0.84:
            seqs.append([BOS, *s, TOK["|"], *modality.units(s), EOS])
        else:
            seqs.append([BOS, *s, EOS])
    return batch(seqs)


def instruction_batch(rng, n: int, modality: Modality | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Instructions with the loss on the answer and ``<eos>`` only."""
    seqs, masks = [], []
    for _ in range(n):
        task, word, ans = instruction(rng)
        p = prompt_ids(task, word, modality)
        a = [*text_ids(list(ans)), EOS]
        seqs.append(p + a)
        masks.append([0] * len(p) + [1] * len(a))
    return batch(seqs, masks)


def new_model(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=TEXT_VOCAB,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def train(model, make_batch, steps: int, lr: float, seed: int) -> list[float]:
    """AdamW with linear warm-up (5 %) and cosine decay; returns the loss of each step."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 20)

    def schedule(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + np.cos(np.pi * (step - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        ids, labels = make_batch(rng)
        loss = model(input_ids=ids, attention_mask=(ids != PAD).long(), labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def build(seed: int, steps: Steps, lr: float = 3e-3) -> dict:
    """The base, instruct, CPT and oracle models of one seed (trained here), and the seed's unit code."""
    modality = Modality(seed)
    base = new_model(seed)
    train(base, lambda r: pretrain_batch(r, 32), steps.base, lr, seed * 10 + 1)
    instruct = copy.deepcopy(base)
    train(instruct, lambda r: instruction_batch(r, 32, None), steps.instruct, lr, seed * 10 + 2)
    cpt = copy.deepcopy(base)
    torch.manual_seed(seed * 10 + 3)
    cpt.resize_token_embeddings(UNIT_VOCAB, mean_resizing=False)
    train(cpt, lambda r: cpt_batch(r, modality, 32), steps.cpt, lr, seed * 10 + 3)
    oracle = copy.deepcopy(cpt)
    train(oracle, lambda r: instruction_batch(r, 32, modality), steps.oracle, lr, seed * 10 + 4)
    return {"modality": modality, "base": base, "instruct": instruct, "cpt": cpt, "oracle": oracle}


def test_items(seed: int, per_task: int) -> list[tuple[str, str, str]]:
    """``per_task`` distinct (task, word, answer) items per task, drawn from their own stream."""
    rng = np.random.default_rng(10_000 + seed)
    items: list[tuple[str, str, str]] = []
    for task in TASKS:
        seen: set[str] = set()
        while len(seen) < per_task:
            word = "".join(rng.choice(list(LETTERS), size=int(rng.integers(2, 6))))
            if word not in seen:
                seen.add(word)
                items.append((task, word, answer(task, word)))
    return items


@torch.no_grad()
def score(model, items, modality: Modality | None) -> np.ndarray:
    """1/0 per item: the greedy answer (up to ``<eos>``, at most 6 tokens) equals the expected one. Prompts of
    one length are decoded together."""
    model.eval()
    out = np.zeros(len(items))
    groups: dict[int, list[int]] = {}
    prompts = [prompt_ids(t, w, modality) for t, w, _ in items]
    for k, p in enumerate(prompts):
        groups.setdefault(len(p), []).append(k)
    for idx in groups.values():
        ids = torch.tensor([prompts[k] for k in idx])
        gen = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=PAD,
            eos_token_id=EOS,
        )[:, ids.shape[1] :]
        for row, k in enumerate(idx):
            toks = gen[row].tolist()
            toks = toks[: toks.index(EOS)] if EOS in toks else None
            want = text_ids(list(items[k][2]))
            out[k] = float(toks == want)
    return out
