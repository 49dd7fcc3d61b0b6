"""A tiny Mixtral trained here on a synthetic mixture of tasks, so that its experts specialise (RaGEP, issue 30).

The corpus is our own design (no MoE checkpoint or data set can be downloaded): every sequence is
``<bos> <task>`` followed by material of that one task, ``seq_len`` tokens in all (the last part cut off).
Eight tasks over four token pools, so tasks share some tokens and differ in others:

============  ======================  =====  ===================================================
task          pool (tokens)           k      one episode ``x1..xk > y1..ym |``
============  ======================  =====  ===================================================
copy          letters ``a``-``p``     4      y = x
reverse       letters                 4      y = x reversed
increment     digits ``0``-``9``      5      y_i = x_i + 1 mod 10
sort          digits                  5      y = x sorted ascending
cummax        digits                  4      y_i = max(x_1, ..., x_i)
translate     words ``w0``-``w15``    5      y_i = PERM[x_i], a fixed derangement of the 16 words
double        words                   3      y = x1 x1 x2 x2 x3 x3
markov        text ``t0``-``t15``     -      no episodes: a walk on a fixed chain; states t0-t7 have
                                             one successor, t8-t15 one of three (uniform)
============  ======================  =====  ===================================================

Inputs are uniform random; each task has a fixed number of inputs ``k`` (in our first trials, with ``k``
drawn from 3-6 per episode, copy and reverse stayed near chance within the training budget). Episodes follow each other until the
sequence is full. The answers are the tokens ``y1..ym`` (and in ``markov`` each token after a one-successor
state): they are determined by what came before, and :attr:`Corpus.answer_mask` marks the positions whose
*next* token is one, so that accuracy is measured where a perfect model is right. The rules (PERM, the
chain) are fixed constants, the same for every corpus seed; only the sampled sequences depend on the seed.

The model: ``MixtralForCausalLM`` (4 blocks, width 64, 8 experts of width 128, top-2, 4 heads / 2 KV heads),
tied embeddings, initialised with std 0.1 (transformers' 0.02 left copy and reverse unlearnt in the budget),
trained from scratch with AdamW on fresh sequences (loss on every token, plus transformers' load-balancing
loss via ``output_router_logits=True``), 85-94 s per seed on 2 shared cores (measured), and cached as a ``save_pretrained`` folder under
``icml_tools.assets.cache_dir() / "ragep"``. Calibration and evaluation corpora come from their own seeds
(:func:`heldout`), disjoint streams from the training one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from transformers import MixtralConfig, MixtralForCausalLM

# Bump when the corpus or the training recipe changes: it is part of every cache key.
TESTBED_VERSION = 1

TASKS = ("copy", "reverse", "increment", "sort", "cummax", "translate", "double", "markov")
PAD, BOS, SEP, END = 0, 1, 2, 3  # SEP ">" ends an input, END "|" ends an episode
TASK0 = 4  # task token of task i: TASK0 + i
DIGIT0 = TASK0 + len(TASKS)  # 12: digits 0-9
LETTER0 = DIGIT0 + 10  # 22: letters a-p
WORD0 = LETTER0 + 16  # 38: words w0-w15
TEXT0 = WORD0 + 16  # 54: markov text t0-t15
VOCAB = TEXT0 + 16  # 70
MIN_SEQ_LEN = 16  # room for <bos> <task> and the longest episode (12 tokens)

EPISODE = {  # first token id and size of each episode task's pool, and its number of inputs k
    "copy": (LETTER0, 16, 4),
    "reverse": (LETTER0, 16, 4),
    "increment": (DIGIT0, 10, 5),
    "sort": (DIGIT0, 10, 5),
    "cummax": (DIGIT0, 10, 4),
    "translate": (WORD0, 16, 5),
    "double": (WORD0, 16, 3),
}


def _rules() -> tuple[np.ndarray, list[list[int]]]:
    """The fixed rules: a derangement of the 16 words, and each chain state's successors, drawn once from a
    constant seed. States 0-7 have one successor, of a higher index (no cycle of one-successor states, so a
    walk keeps meeting the random ones), states 8-15 three."""
    rng = np.random.default_rng(20_260_030)
    while True:
        perm = rng.permutation(16)
        if not np.any(perm == np.arange(16)):
            break
    succ = [[int(rng.integers(i + 1, 16))] for i in range(8)]
    succ += [sorted(int(s) for s in rng.choice(16, size=3, replace=False)) for _ in range(8)]
    return perm, succ


PERM, MARKOV_SUCCESSORS = _rules()


def apply_rule(task: str, x: Sequence[int]) -> list[int]:
    """The answer ``y`` of an episode task for inputs ``x`` (indices within the task's pool)."""
    if task == "copy":
        return list(x)
    if task == "reverse":
        return list(x)[::-1]
    if task == "increment":
        return [(v + 1) % 10 for v in x]
    if task == "sort":
        return sorted(x)
    if task == "cummax":
        return [int(v) for v in np.maximum.accumulate(x)]
    if task == "translate":
        return [int(PERM[v]) for v in x]
    if task == "double":
        return [v for v in x for _ in range(2)]
    raise ValueError(f"task must be one of the episode tasks {TASKS[:-1]}, got {task!r}")


def token_names() -> list[str]:
    """The name of every token id (for :func:`decode`)."""
    names = ["<pad>", "<bos>", ">", "|", *(f"<{t}>" for t in TASKS)]
    names += [str(d) for d in range(10)] + [chr(ord("a") + i) for i in range(16)]
    names += [f"w{i}" for i in range(16)] + [f"t{i}" for i in range(16)]
    return names


def decode(ids) -> str:
    """Token ids as space-separated names, e.g. ``<bos> <sort> 3 1 2 > 1 2 3 | ...``."""
    names = token_names()
    return " ".join(names[int(i)] for i in ids)


@dataclass(frozen=True)
class Corpus:
    """``n`` sequences: ``ids`` (n, seq_len) int64; ``answer_mask`` (n, seq_len) bool, True at position t when
    ``ids[:, t + 1]`` is an answer (never in the last column); ``task`` (n,) int64 index into :data:`TASKS`."""

    ids: torch.Tensor
    answer_mask: torch.Tensor
    task: torch.Tensor

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def subset(self, index) -> Corpus:
        """The sequences at ``index`` (a slice, a bool mask or indices)."""
        return Corpus(self.ids[index], self.answer_mask[index], self.task[index])


def _task_index(tasks: Sequence[int | str] | None) -> list[int]:
    if tasks is None:
        return list(range(len(TASKS)))
    out = []
    for t in tasks:
        if isinstance(t, str) and t in TASKS:
            out.append(TASKS.index(t))
        elif isinstance(t, (int, np.integer)) and not isinstance(t, bool) and 0 <= t < len(TASKS):
            out.append(int(t))
        else:
            raise ValueError(f"tasks must hold names from {TASKS} or indices 0-{len(TASKS) - 1}, got {t!r}")
    if not out:
        raise ValueError("tasks must not be empty")
    return out


def make_corpus(n: int, seed: int, *, seq_len: int = 48, tasks: Sequence[int | str] | None = None) -> Corpus:
    """``n`` sequences of the task mixture (tasks uniform over ``tasks``, default all), generated from ``seed``.

    Every sequence holds at least one answer position (its first episode fits; a markov walk starts in a
    one-successor state).
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(seq_len, (int, np.integer)) or isinstance(seq_len, bool) or seq_len < MIN_SEQ_LEN:
        raise ValueError(f"seq_len must be an int >= {MIN_SEQ_LEN}, got {seq_len!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    allowed = _task_index(tasks)
    rng = np.random.default_rng(int(seed))
    task = rng.choice(allowed, size=n)
    # Random numbers drawn in bulk (a Python loop builds the sequences): symbols and chain choices.
    sym16 = rng.integers(0, 16, size=(n, seq_len))
    sym10 = rng.integers(0, 10, size=(n, seq_len))
    branch = rng.integers(0, 3, size=(n, seq_len))
    ids = np.zeros((n, seq_len), dtype=np.int64)
    is_answer = np.zeros((n, seq_len), dtype=bool)  # the token itself is an answer
    for i in range(n):
        name = TASKS[task[i]]
        seq, ans = [BOS, TASK0 + int(task[i])], [False, False]
        if name == "markov":
            state = int(sym16[i, 0]) % 8  # a one-successor state: at least one answer
            seq.append(TEXT0 + state)
            ans.append(False)
            for j in range(seq_len - 3):
                succ = MARKOV_SUCCESSORS[state]
                state = succ[0] if len(succ) == 1 else succ[int(branch[i, j])]
                seq.append(TEXT0 + state)
                ans.append(len(succ) == 1)
        else:
            first, size, k = EPISODE[name]
            sym = sym10[i] if size == 10 else sym16[i]
            pos = 0
            while len(seq) < seq_len:
                x = [int(v) for v in sym[pos : pos + k]]  # fewer than seq_len / 2 inputs in all
                pos += k
                y = apply_rule(name, x)
                seq += [first + v for v in x] + [SEP] + [first + v for v in y] + [END]
                ans += [False] * (k + 1) + [True] * len(y) + [False]
        ids[i] = seq[:seq_len]
        is_answer[i] = ans[:seq_len]
    mask = np.zeros_like(is_answer)
    mask[:, :-1] = is_answer[:, 1:]
    return Corpus(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(task.astype(np.int64)))


@dataclass(frozen=True)
class TestbedConfig:
    """The architecture and training recipe of the tiny MoE; :meth:`digest` keys the cache."""

    __test__ = False  # not a pytest class

    seed: int = 0
    n_layers: int = 4
    hidden: int = 64
    intermediate: int = 128
    n_experts: int = 8
    top_k: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    seq_len: int = 48
    steps: int = 1500
    batch: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 50
    router_aux_loss_coef: float = 0.01
    init_std: float = 0.1
    eval_n: int = 1024  # held-out sequences for the accuracy in the info dict

    def __post_init__(self):
        for name, low in (
            ("seed", 0),
            ("n_layers", 1),
            ("hidden", 1),
            ("intermediate", 1),
            ("n_experts", 1),
            ("top_k", 1),
            ("n_heads", 1),
            ("n_kv_heads", 1),
            ("seq_len", MIN_SEQ_LEN),
            ("steps", 1),
            ("batch", 1),
            ("warmup", 0),
            ("eval_n", 1),
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k must be <= n_experts ({self.n_experts}), got {self.top_k}")
        if self.hidden % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("hidden must be divisible by n_heads, and n_heads by n_kv_heads")
        for name in ("lr", "weight_decay", "router_aux_loss_coef", "init_std"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite float >= 0, got {v!r}")

    def digest(self) -> str:
        """A short sha256 of the fields but the seed, and of :data:`TESTBED_VERSION`."""
        fields = {k: v for k, v in asdict(self).items() if k != "seed"}
        text = json.dumps({"version": TESTBED_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


SPLITS = ("train", "calibration", "evaluation")


def split_seed(seed: int, split: str) -> int:
    """The corpus seed of one split of a testbed seed: distinct for every (seed, split)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return 1000 * seed + 1 + SPLITS.index(split)


def heldout(
    cfg: TestbedConfig, n: int, split: str = "evaluation", *, tasks: Sequence[int | str] | None = None
) -> Corpus:
    """``n`` sequences of the ``"calibration"`` or ``"evaluation"`` split of ``cfg.seed``: streams disjoint from
    the training one and from each other (their own seeds)."""
    if split == "train":
        raise ValueError("split must be 'calibration' or 'evaluation' (held-out), got 'train'")
    return make_corpus(n, split_seed(cfg.seed, split), seq_len=cfg.seq_len, tasks=tasks)


def model_config(cfg: TestbedConfig) -> MixtralConfig:
    from transformers import MixtralConfig

    return MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        num_local_experts=cfg.n_experts,
        num_experts_per_tok=cfg.top_k,
        max_position_embeddings=max(64, cfg.seq_len),
        router_aux_loss_coef=cfg.router_aux_loss_coef,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=END,
        tie_word_embeddings=True,
        initializer_range=cfg.init_std,
    )


def new_model(cfg: TestbedConfig) -> MixtralForCausalLM:
    """A randomly initialised ``MixtralForCausalLM`` of ``cfg`` (initialised from ``cfg.seed``)."""
    from transformers import MixtralForCausalLM

    torch.manual_seed(cfg.seed)
    return MixtralForCausalLM(model_config(cfg))


def cache_path(cfg: TestbedConfig) -> Path:
    from icml_tools.assets import cache_dir

    return cache_dir() / "ragep" / f"tiny-mixtral-s{cfg.seed}-{cfg.digest()}"


INFO_FILE = "testbed_info.json"


def train(model, cfg: TestbedConfig, *, progress: bool = False) -> list[float]:
    """AdamW (warm-up, cosine decay to 10 %) on fresh sequences of the ``"train"`` split; the loss (language
    model + ``router_aux_loss_coef`` x load balancing) of every step."""
    data = make_corpus(cfg.steps * cfg.batch, split_seed(cfg.seed, "train"), seq_len=cfg.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))

    def schedule(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    steps = range(cfg.steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc=f"tiny Mixtral s{cfg.seed}")
    model.train()
    losses = []
    for step in steps:
        ids = data.ids[step * cfg.batch : (step + 1) * cfg.batch]  # (batch, seq_len)
        loss = model(input_ids=ids, labels=ids, output_router_logits=True).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def _check_model_corpus(model, corpus) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a MixtralForCausalLM), got {type(model).__name__}")
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")


@torch.no_grad()
def task_accuracy(model, corpus: Corpus, batch: int = 64) -> torch.Tensor:
    """Per-sequence accuracy (n,) float32: the fraction of answer positions where the greedy next token
    (teacher-forced, one forward pass) is the answer."""
    _check_model_corpus(model, corpus)
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    was_training = model.training
    model.eval()
    out = []
    for s in range(0, len(corpus), batch):
        ids = corpus.ids[s : s + batch]  # (b, L)
        mask = corpus.answer_mask[s : s + batch, :-1]  # (b, L-1)
        pred = model(input_ids=ids).logits[:, :-1].argmax(-1)  # (b, L-1)
        hit = (pred == ids[:, 1:]) & mask
        out.append(hit.sum(1).float() / mask.sum(1).clamp(min=1).float())
    model.train(was_training)
    return torch.cat(out)


def accuracy_by_task(model, corpus: Corpus, batch: int = 64) -> dict[str, float]:
    """Mean :func:`task_accuracy` of each task present in ``corpus``, by task name."""
    acc = task_accuracy(model, corpus, batch)
    return {TASKS[t]: float(acc[corpus.task == t].mean()) for t in sorted(set(corpus.task.tolist()))}


@torch.no_grad()
def top1_experts(model, corpus: Corpus, batch: int = 64) -> torch.Tensor:
    """The top-1 expert of every token in every MoE layer: (n_layers, n, seq_len) int64."""
    _check_model_corpus(model, corpus)
    was_training = model.training
    model.eval()
    out = []
    for s in range(0, len(corpus), batch):
        ids = corpus.ids[s : s + batch]  # (b, L)
        logits = model(input_ids=ids, output_router_logits=True).router_logits  # per layer (b*L, E)
        out.append(torch.stack([g.argmax(-1).view(ids.shape) for g in logits]))  # (layers, b, L)
    model.train(was_training)
    return torch.cat(out, dim=1)


def normalized_mutual_information(a: torch.Tensor, b: torch.Tensor) -> float:
    """I(a; b) / ((H(a) + H(b)) / 2) of two discrete label vectors (scikit-learn's arithmetic normalisation);
    0 when either is constant."""
    a, b = a.reshape(-1).long(), b.reshape(-1).long()
    ai, bi = torch.unique(a, return_inverse=True)[1], torch.unique(b, return_inverse=True)[1]
    joint = torch.zeros(int(ai.max()) + 1, int(bi.max()) + 1, dtype=torch.float64)
    joint.index_put_((ai, bi), torch.ones_like(ai, dtype=torch.float64), accumulate=True)
    p = joint / joint.sum()
    pa, pb = p.sum(1), p.sum(0)

    def entropy(q: torch.Tensor) -> float:
        q = q[q > 0]
        return float(-(q * q.log()).sum())

    ha, hb = entropy(pa), entropy(pb)
    if ha == 0 or hb == 0:
        return 0.0
    nz = p > 0
    mi = float((p[nz] * (p[nz] / (pa[:, None] * pb[None, :])[nz]).log()).sum())
    return max(0.0, mi / ((ha + hb) / 2))


def routing_specialisation(model, corpus: Corpus, batch: int = 64) -> list[float]:
    """Per MoE layer: the normalized mutual information between the task of a token's sequence and the token's
    top-1 expert, over all tokens but ``<bos>`` (position 0, the same in every task). 0: routing ignores the
    task; 1: each task has its own experts."""
    experts = top1_experts(model, corpus, batch)[:, :, 1:]  # (layers, n, L-1)
    task = corpus.task[:, None].expand(-1, experts.shape[2])  # (n, L-1)
    return [normalized_mutual_information(task, layer) for layer in experts]


def _load(path: Path) -> tuple[MixtralForCausalLM, dict]:
    from transformers import MixtralForCausalLM

    model = MixtralForCausalLM.from_pretrained(path, dtype=torch.float32)
    info = json.loads((path / INFO_FILE).read_text())
    return model.eval(), info


def pretrained(
    cfg: TestbedConfig = TestbedConfig(), *, cache: bool = True, progress: bool = False
) -> tuple[MixtralForCausalLM, dict]:
    """The trained tiny Mixtral of ``cfg`` in eval mode, and an info dict.

    With ``cache`` the model is loaded from :func:`cache_path` when there, else trained and saved there
    (atomically: a half-written folder is never used). Info: ``train_seconds`` (float, or ``"cached"`` on a
    load; ``built_seconds`` keeps the training time of the cached copy), ``final_loss`` (mean training loss of
    the last 50 steps), ``accuracy`` (held-out answer accuracy by task, :func:`heldout` evaluation split,
    ``cfg.eval_n`` sequences), ``mean_accuracy`` and ``path``.
    """
    if not isinstance(cfg, TestbedConfig):
        raise TypeError(f"cfg must be a TestbedConfig, got {type(cfg).__name__}")
    path = cache_path(cfg)
    if cache and (path / INFO_FILE).is_file():
        model, info = _load(path)
        return model, {**info, "train_seconds": "cached", "path": str(path)}

    model = new_model(cfg)
    start = time.perf_counter()
    losses = train(model, cfg, progress=progress)
    seconds = time.perf_counter() - start
    acc = accuracy_by_task(model, heldout(cfg, cfg.eval_n, "evaluation"))
    info = {
        "config": asdict(cfg),
        "built_seconds": seconds,
        "final_loss": float(np.mean(losses[-50:])),
        "accuracy": acc,
        "mean_accuracy": float(np.mean(list(acc.values()))),
    }
    if cache:
        _save(model, info, path)
    return model, {**info, "train_seconds": seconds, "path": str(path) if cache else None}


def _save(model, info: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        model.save_pretrained(tmp)
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=1))  # written last: marks a complete folder
        if path.exists() and not (path / INFO_FILE).is_file():  # not ours (we never leave one): replace it
            shutil.rmtree(path)
        try:
            os.replace(tmp, path)
        except OSError:  # another process finished first: its copy is as good as ours
            if not (path / INFO_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
