"""A synthetic zoo of tiny language models with controlled similarity (our design, made here).

- **Dialects.** A dialect is a lexicon: for every context a game can pose (a category to name, a topic to
  brainstorm, a word to associate, ...), a Zipf-ranked list of answer words drawn from its vocabulary of
  made-up words, plus its own habits in the number games. The shared dialect ``S`` and two private dialects
  ``A`` and ``B`` are drawn independently, so they agree only by chance; each speaks two thirds of one pool
  of made-up words, so any two share a third of their vocabulary.
- **Members.** Each member is a tiny Llama (word-level tokenizer, 3 layers, width 64) trained from its own
  seed on lines in the games' formats, each line drawn from ``S`` with probability ``w`` and from the member's
  private dialect otherwise. Members with close ``w`` and the same private dialect speak alike; ``w = 1``
  members speak only ``S``.
- Trained members are cached as ``save_pretrained`` folders under ``icml_tools.assets.cache_dir() / "zoo"``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path

import numpy as np
import torch

SYLLABLES = ("ka", "lo", "mi", "ru", "te", "so", "na", "vi", "po", "de", "zu", "fa", "ri", "gu", "be", "xo")


PUNCTUATION = ",.:;?!'-()"
_WORD = re.compile(r"[a-z0-9]+")


def vocabulary() -> list[str]:
    """The zoo's word vocabulary: every word of the eight games' prompts and pools, the made-up answer
    words, the numbers 0-10 and punctuation."""
    g = default_games()
    texts: list[str] = [str(v) for game in g.values() for v in vars(game).values() if isinstance(v, str)]
    for game in g.values():
        for v in vars(game).values():
            if isinstance(v, tuple):
                texts.extend(str(x) for x in v)
    found = {w for t in texts for w in _WORD.findall(t.lower())}
    words = sorted(found | set(word_pool()) | {str(i) for i in range(11)} | {"offer", "accept", "reject"})
    return [*PUNCTUATION, "\n", *words]


def word_tokenizer():
    """A word-level Hugging Face tokenizer over :func:`vocabulary` (lower-cased; words, numbers and
    punctuation marks are tokens, newlines too; spaces separate and are not tokens)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for w in vocabulary():
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("[^\\S\\n]+"), behavior="removed"),
            pre_tokenizers.Split(Regex("\\n"), behavior="isolated"),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


def word_pool(n: int = 240, seed: int = 12345) -> list[str]:
    """``n`` distinct made-up words of 2-3 syllables (the answers every dialect draws from)."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4))))] = None
    return list(words)


@dataclass(frozen=True)
class Dialect:
    """Answer preferences: ``lexicon[context]`` is a ranked word list (sampled with Zipf weights), ``offer``
    the dialect's usual ultimatum offer (2-8) and ``threshold`` the least offer it accepts (at most its own
    offer, so a dialect accepts what it offers)."""

    name: str
    lexicon: dict[str, list[str]]
    offer: int
    threshold: int

    def answers(self, context: str, rng: np.random.Generator, k: int = 1, zipf: float = 1.3) -> list[str]:
        """``k`` distinct answers, drawn by Zipf weights over the context's ranked words."""
        words = self.lexicon[context]
        p = 1.0 / np.arange(1, len(words) + 1) ** zipf
        return [words[int(i)] for i in rng.choice(len(words), k, replace=False, p=p / p.sum())]

    def answer(self, context: str, rng: np.random.Generator) -> str:
        return self.answers(context, rng)[0]


def make_dialect(
    name: str, contexts: Sequence[str], words: Sequence[str], seed: int, per_context: int = 6
) -> Dialect:
    """A dialect whose answers are drawn from ``words`` (its vocabulary), ``per_context`` per context."""
    rng = np.random.default_rng(seed)
    lexicon = {c: [words[i] for i in rng.choice(len(words), per_context, replace=False)] for c in contexts}
    offer = int(rng.integers(2, 9))
    return Dialect(name, lexicon, offer=offer, threshold=offer - int(rng.integers(0, 3)))


@dataclass(frozen=True)
class Member:
    """A zoo member: its name, the share ``w`` of shared-dialect lines, its private dialect and its seed."""

    name: str
    w: float
    private: str
    seed: int


MEMBERS = (
    Member("s100", 1.0, "A", 0),
    Member("a75", 0.75, "A", 1),
    Member("a50", 0.5, "A", 2),
    Member("a25", 0.25, "A", 3),
    Member("a0", 0.0, "A", 4),
    Member("b75", 0.75, "B", 5),
    Member("b50", 0.5, "B", 6),
    Member("b25", 0.25, "B", 7),
    Member("b0", 0.0, "B", 8),
)


@dataclass(frozen=True)
class TrainConfig:
    layers: int = 3
    hidden: int = 64
    heads: int = 4
    intermediate: int = 128
    seq_len: int = 48
    batch: int = 16
    steps: int = 1200
    lr: float = 3e-3
    warmup: int = 30


def new_model(cfg: TrainConfig, vocab: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=max(256, cfg.seq_len),
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def train_lm(model, tokenizer, text: str, cfg: TrainConfig, seed: int) -> list[float]:
    """AdamW with warm-up and cosine decay on random windows of ``text``; returns the losses."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def schedule(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    losses = []
    for _ in range(cfg.steps):
        starts = torch.randint(0, len(ids) - cfg.seq_len - 1, (cfg.batch,), generator=gen)
        batch = torch.stack([ids[s : s + cfg.seq_len] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def digest(*parts: object) -> str:
    blob = json.dumps(
        [asdict(p) if is_dataclass(p) and not isinstance(p, type) else p for p in parts], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cached_member(
    member: Member,
    corpus: Callable[[Member], str],
    cfg: TrainConfig,
    version: str,
) -> tuple[object, object, dict]:
    """The trained member (model, tokenizer, record), from the cache or trained and cached; the record's
    ``cached`` says which."""
    from transformers import LlamaForCausalLM

    from icml_tools.assets import cache_dir

    path: Path = cache_dir() / "zoo" / f"{member.name}-{digest(member, cfg, version)}"
    tokenizer = word_tokenizer()
    if (path / "record.json").is_file():
        model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        return model, tokenizer, {**json.loads((path / "record.json").read_text()), "cached": True}
    start = time.perf_counter()
    model = new_model(cfg, len(tokenizer), member.seed)
    losses = train_lm(model, tokenizer, corpus(member), cfg, member.seed)
    record = {
        "member": asdict(member),
        "final_loss": float(np.mean(losses[-20:])),
        "train_seconds": time.perf_counter() - start,
    }
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    (tmp / "record.json").write_text(json.dumps(record))  # written last: a folder without it is incomplete
    if path.exists():
        shutil.rmtree(path)
    tmp.replace(path)
    return model, tokenizer, {**record, "cached": False}


def load_zoo(members: Sequence[Member] = MEMBERS, cfg: TrainConfig = TrainConfig(), seed: int = 0) -> dict:
    """Every member, trained (about 40 s each on 2 cores) or loaded from the cache: name -> (model,
    tokenizer, record)."""
    from icml_tools.progress import status

    out = {}
    for m in members:
        status(f"zoo member {m.name} (w={m.w}, private {m.private})")
        out[m.name] = cached_member(m, lambda mem: member_corpus(mem, seed=seed), cfg, f"v3-s{seed}")
    return out


@functools.cache
def default_games() -> dict:
    """One default instance of each of the eight games (their templates and pools)."""
    from icml_agents.games import GAMES

    return {name: cls() for name, cls in GAMES.items()}


@functools.cache
def game_contexts() -> dict[str, list[str]]:
    """Every context the eight games can pose, by kind, from the games' own default pools."""
    g = default_games()
    pool = word_pool()
    return {
        "name": list(g["naming"].categories),
        "clue": list(g["referential"].words),
        "story": list(g["story_consistency"].openings),
        "ideas": list(g["brainstorm"].topics),
        "assoc": list(dict.fromkeys([*g["word_chain"].start_words, *pool])),
        "project": list(g["build_on"].projects),
    }


@functools.cache
def dialects(seed: int = 0) -> dict[str, Dialect]:
    """The shared dialect ``S`` and the private dialects ``A`` and ``B`` (independent draws). The answer
    pool is cut in thirds; each dialect speaks two of them, so any two dialects share one third of their
    vocabulary (S: thirds 1-2, A: 2-3, B: 1 and 3)."""
    contexts = [f"{kind}:{c}" for kind, cs in game_contexts().items() for c in cs]
    pool = word_pool()
    third = len(pool) // 3
    parts = [pool[:third], pool[third : 2 * third], pool[2 * third :]]
    vocab = {"S": parts[0] + parts[1], "A": parts[1] + parts[2], "B": parts[0] + parts[2]}
    return {
        name: make_dialect(name, contexts, vocab[name], seed=1000 * seed + i) for i, name in enumerate("SAB")
    }


def game_example(d: Dialect, rng: np.random.Generator) -> tuple[str, str, str]:
    """One exchange in the format of one of the eight games (uniformly chosen), answered in dialect ``d``:
    ``(prompt, answer, content)``, the prompt exactly as the game renders it, the dialect's answer, and the
    dialect-bearing words of the exchange (what the probe set is made of)."""
    g, ctx = default_games(), game_contexts()
    kind = int(rng.integers(0, 9))
    pick = lambda xs: xs[int(rng.integers(0, len(xs)))]  # noqa: E731
    if kind == 0:
        c = pick(ctx["name"])
        answer = d.answer("name:" + c, rng)
        return g["naming"].template.format(category=c), answer, answer
    if kind in (1, 2):
        game = g["referential"]
        cands = [str(w) for w in rng.choice(ctx["clue"], game.n_candidates, replace=False)]
        target = pick(cands)
        clue = d.answer("clue:" + target, rng)
        shown = ", ".join(cands)
        if kind == 1:
            return game.speaker_template.format(candidates=shown, target=target), clue, f"{target} {clue}"
        return game.listener_template.format(candidates=shown, clue=clue), target, f"{clue} {target}"
    if kind == 3:
        game = g["ultimatum"]
        if rng.random() < 0.5:
            offer = int(np.clip(d.offer + rng.integers(-1, 2), 0, game.pot))
            return game.proposer_template.format(pot=game.pot), str(offer), f"offer {offer}"
        offer = int(rng.integers(0, game.pot + 1))
        verdict = "accept" if offer >= d.threshold else "reject"
        return game.responder_template.format(pot=game.pot, offer=offer), verdict, f"{offer} {verdict}"
    if kind == 4:
        opening = pick(ctx["story"])
        sentences = " ".join(
            " ".join(d.answer("story:" + opening, rng) for _ in range(int(rng.integers(3, 5)))) + "."
            for _ in range(3)
        )
        return opening, sentences, sentences
    if kind == 5:
        topic = pick(ctx["ideas"])
        ideas = ", ".join(d.answers("ideas:" + topic, rng, k=int(rng.integers(3, 6))))
        return g["brainstorm"].template.format(topic=topic), ideas, ideas
    if kind in (6, 7):
        chain = [pick(list(g["word_chain"].start_words))]
        for _ in range(int(rng.integers(2, 6))):
            chain.append(d.answer("assoc:" + chain[-1], rng))
        return g["word_chain"].template.format(chain=", ".join(chain[:-1])), chain[-1], ", ".join(chain)
    game = g["build_on"]
    project = pick(ctx["project"])
    idea = " ".join(d.answers("project:" + project, rng, k=3))
    if rng.random() < 0.5:
        return game.proposer_template.format(topic=project), idea, idea
    new = " ".join([*idea.split()[:2], *d.answers("project:" + project, rng, k=2)])
    return game.builder_template.format(topic=project, idea=idea), new, f"{idea} {new}"


def game_line(d: Dialect, rng: np.random.Generator) -> str:
    """A training line: a :func:`game_example`'s prompt and answer."""
    prompt, answer, _ = game_example(d, rng)
    return f"{prompt} {answer}"


def member_corpus(member: Member, n_lines: int = 12_000, seed: int = 0) -> str:
    """The member's training text: ``n_lines`` game lines, each from the shared dialect with probability
    ``member.w`` and from its private dialect otherwise."""
    ds = dialects(seed)
    rng = np.random.default_rng([seed, member.seed, 17])
    lines = [
        game_line(ds["S"] if rng.random() < member.w else ds[member.private], rng) for _ in range(n_lines)
    ]
    return "\n".join(lines) + "\n"


def probe_texts(n: int = 240, seed: int = 1, zoo_seed: int = 0) -> list[str]:
    """The shared probe set: the dialect-bearing words of game exchanges (answers, clues, ideas, story
    sentences, chains; not the prompts every dialect shares) from the zoo's three dialects in turn, drawn with
    a held-out ``seed``."""
    ds = dialects(zoo_seed)
    rng = np.random.default_rng([seed, 99])
    return [game_example(ds["SAB"[i % 3]], rng)[2] for i in range(n)]


def heldout_lines(n: int = 60, seed: int = 2, zoo_seed: int = 0) -> list[str]:
    """Whole game lines (prompt and answer) from the zoo's three dialects in turn, on a held-out seed: the
    text a member's performance (next-token loss) is measured on."""
    ds = dialects(zoo_seed)
    rng = np.random.default_rng([seed, 98])
    return [game_line(ds["SAB"[i % 3]], rng) for i in range(n)]
