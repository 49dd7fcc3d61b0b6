"""A tiny word-level language with concept families, and a tiny GPT-2 trained on it here (CRH's "tiny LM").

Documents are chat turns ``user : <question> ? assistant : <three sentences> <eos>``. A response has no topic
(half of them) or one of the concept families below; under a topic each noun slot holds one of the family's
words with probability ``CONCEPT_RATE``, else a neutral noun, so a concept once present tends to continue.
Concepts overlap in the contexts they share, CRH's premise: a question about a family's word (``tell me about
your boat``) sets that family as the likely topic (``QUESTION_TOPIC``), and a response may switch topic after
its first sentence (``SWITCH``), so the model's topic inference mixes what the question and the response so far
suggest. A question about a neutral noun leans towards a random family (a fixed Dirichlet draw per noun). The
model learns to infer the topic from the words so far; steering along a concept's difference of means moves
that inference, against whatever background the question set.

Families ``ocean``, ``music`` and ``food`` are the evaluation concepts; ``space`` is for development only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

FAMILIES = {
    "ocean": ["sea", "wave", "fish", "boat", "shore", "tide", "sail", "beach"],
    "music": ["song", "guitar", "drum", "melody", "piano", "choir", "rhythm", "tune"],
    "food": ["bread", "soup", "cheese", "apple", "rice", "cake", "pasta", "salad"],
    "space": ["star", "planet", "moon", "rocket", "orbit", "comet", "galaxy", "sun"],
}
NEUTRAL_NOUNS = [
    "house", "road", "book", "friend", "garden", "window", "table", "city", "letter", "car", "door", "school",
    "office", "river", "tree", "chair", "market", "bridge", "street", "paper",
]  # fmt: skip
ADJECTIVES = [
    "old",
    "new",
    "small",
    "big",
    "quiet",
    "bright",
    "warm",
    "cold",
    "long",
    "short",
    "green",
    "red",
]
VERBS = ["saw", "liked", "found", "made", "took", "kept", "wanted", "moved", "cleaned", "painted"]
SUBJECTS = ["i", "we", "you", "they", "she", "he"]
QUESTION_STARTS = [["tell", "me", "about"], ["what", "about"], ["describe"], ["how", "was"], ["think", "of"]]
QUESTION_NOUNS = [
    "weekend", "holiday", "morning", "evening", "trip", "party", "day", "visit", "summer", "winter", "walk",
    "dinner", "lunch", "plan", "story", "dream", "week", "journey", "night", "class",
]  # fmt: skip
SPECIAL = ["<pad>", "<eos>", "user", "assistant", ":", "?", ".", "the", "a", "and", "with", "my", "your"]
CONCEPT_RATE = 0.8
TOPIC_PRIOR = 0.5  # the share of responses without a topic
QUESTION_TOPIC = 0.7  # a question about a family's word: the response's topic is that family this often
SWITCH = 0.3  # a response switches to another topic (or none) after its first sentence this often


def vocabulary() -> list[str]:
    words = (
        SPECIAL + [w for ws in QUESTION_STARTS for w in ws] + QUESTION_NOUNS + SUBJECTS + ADJECTIVES + VERBS
    )
    words += NEUTRAL_NOUNS + [w for fam in FAMILIES.values() for w in fam]
    seen: dict[str, None] = {}
    for w in words:
        seen.setdefault(w, None)
    return list(seen)


VOCAB = vocabulary()
INDEX = {w: i for i, w in enumerate(VOCAB)}
PAD, EOS = INDEX["<pad>"], INDEX["<eos>"]


def encode(words: list[str]) -> list[int]:
    return [INDEX[w] for w in words]


def decode(ids) -> str:
    """Token ids as text (the end-of-sequence token and padding dropped)."""
    return " ".join(VOCAB[int(i)] for i in ids if int(i) not in (PAD, EOS))


def _question_leaning(seed: int = 0) -> dict[str, np.ndarray]:
    """Each question noun's topic prior: the no-topic share TOPIC_PRIOR, the rest split over the families
    with a Dirichlet draw (fixed by ``seed``, part of the language)."""
    rng = np.random.default_rng(seed)
    names = list(FAMILIES)
    return {
        q: np.concatenate([[TOPIC_PRIOR], (1 - TOPIC_PRIOR) * rng.dirichlet(np.full(len(names), 1.0))])
        for q in QUESTION_NOUNS
    }


LEANING = _question_leaning()


FAMILY_OF = {w: fam for fam, words in FAMILIES.items() for w in words}


def question(rng: np.random.Generator, noun: str | None = None) -> list[str]:
    """A question about ``noun`` (default: a question noun, or with probability 1/2 a family's word)."""
    start = QUESTION_STARTS[int(rng.integers(len(QUESTION_STARTS)))]
    if noun is None:
        pool = QUESTION_NOUNS if rng.random() < 0.5 else list(FAMILY_OF)
        noun = pool[int(rng.integers(len(pool)))]
    return [*start, "your", noun]


def _topic(rng: np.random.Generator, prior: np.ndarray) -> str | None:
    k = int(rng.choice(len(prior), p=prior))
    return None if k == 0 else list(FAMILIES)[k - 1]


def sentence(rng: np.random.Generator, topic: str | None, rate: float = CONCEPT_RATE) -> list[str]:
    """``subject verb the adj noun and the noun .`` or ``subject verb a noun with my noun .``"""

    def noun() -> str:
        if topic is not None and rng.random() < rate:
            fam = FAMILIES[topic]
            return fam[int(rng.integers(len(fam)))]
        return NEUTRAL_NOUNS[int(rng.integers(len(NEUTRAL_NOUNS)))]

    def pick(xs):
        return xs[int(rng.integers(len(xs)))]

    if rng.random() < 0.5:
        return [pick(SUBJECTS), pick(VERBS), "the", pick(ADJECTIVES), noun(), "and", "the", noun(), "."]
    return [pick(SUBJECTS), pick(VERBS), "a", noun(), "with", "my", noun(), "."]


def document(rng: np.random.Generator) -> list[str]:
    q = question(rng)
    if q[-1] in FAMILY_OF and rng.random() < QUESTION_TOPIC:
        topic: str | None = FAMILY_OF[q[-1]]
    else:
        topic = _topic(rng, LEANING.get(q[-1], LEANING[QUESTION_NOUNS[0]]))
    body = sentence(rng, topic)
    if rng.random() < SWITCH:
        topic = _topic(rng, np.full(len(FAMILIES) + 1, 1 / (len(FAMILIES) + 1)))
    body += sentence(rng, topic) + sentence(rng, topic)
    return ["user", ":", *q, "?", "assistant", ":", *body, "<eos>"]


@dataclass(frozen=True)
class TinyLMConfig:
    n_layer: int = 4
    n_embd: int = 64
    n_head: int = 4
    context: int = 40
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    n_docs: int = 20000
    seed: int = 0

    def key(self) -> str:
        payload = json.dumps({**asdict(self), "vocab": VOCAB, "families": FAMILIES}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def corpus(n_docs: int, seed: int) -> torch.Tensor:
    """``n_docs`` documents concatenated into one token stream."""
    rng = np.random.default_rng(seed)
    ids: list[int] = []
    for _ in range(n_docs):
        ids += encode(document(rng))
    return torch.tensor(ids, dtype=torch.long)


def _model(cfg: TinyLMConfig):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(cfg.seed)
    config = GPT2Config(
        vocab_size=len(VOCAB),
        n_positions=64,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        bos_token_id=EOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return GPT2LMHeadModel(config)


def train(cfg: TinyLMConfig = TinyLMConfig()) -> tuple:
    """Train the tiny GPT-2 on :func:`corpus`; returns ``(model in eval mode, info)``."""
    start = time.perf_counter()
    model = _model(cfg).train()
    stream = corpus(cfg.n_docs, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps, pct_start=0.1)
    losses = []
    for _ in range(cfg.steps):
        starts = torch.randint(0, len(stream) - cfg.context - 1, (cfg.batch_size,), generator=gen)
        batch = torch.stack([stream[s : s + cfg.context] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    info = {"final train loss": float(np.mean(losses[-50:])), "train seconds": time.perf_counter() - start}
    return model.eval(), info


def pretrained(cfg: TinyLMConfig = TinyLMConfig(), cache_dir: str | os.PathLike | None = None) -> tuple:
    """The trained model, loaded from ``cache_dir`` if an earlier run saved it, else trained now (and saved
    there atomically). Returns ``(model, info)`` with ``info["trained now"]``."""
    from transformers import GPT2LMHeadModel

    target = None if cache_dir is None else Path(cache_dir).expanduser() / f"crh-tinylm-{cfg.key()}"
    if target is not None and (target / "config.json").is_file():
        info = json.loads((target / "info.json").read_text())
        return GPT2LMHeadModel.from_pretrained(target).eval(), {**info, "trained now": False}
    model, info = train(cfg)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-crh-"))
        try:
            model.save_pretrained(tmp)
            (tmp / "info.json").write_text(json.dumps(info))
            try:
                os.replace(tmp, target)
            except OSError:  # another process saved it first
                if not (target / "config.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return model, {**info, "trained now": True}
