"""The causal induction toy: a 2-layer attention-only Llama trained on ``[BOS] + r + r`` (Olsson et al. 2022).

The model is a Hugging Face ``LlamaForCausalLM`` (vocabulary 64 + BOS, width 64, one head per layer, RoPE), so
:class:`icml_interp.hooks.HookedModel` and every tool of :mod:`icml_interp.heads` work on it unchanged. It is
attention-only: each layer's MLP has ``intermediate_size`` 4 and a zero, frozen ``down_proj``, so it adds
exactly 0 to the residual stream (the MLP path's parameters are frozen, never trained). ``ToyConfig(n_heads=4,
last_layer_heads=1)`` is revision 2 of ``docs/repeats.md`` (failed; not the registered testbed): Llama fixes
one head count for every layer, so the last layer's other heads are silenced by :func:`silence_heads` (their
q, k, v rows and o columns are zero, which gradient descent keeps exactly zero).

Evaluation data: ``[BOS, r_1..r_T, r_1..r_T]`` with ``T = 32`` tokens drawn uniformly from the 64, from a
seeded generator. The first copy is unpredictable (loss ``ln 64 = 4.16``); the second is predictable by
copying, which the model learns in a phase change. :func:`half_losses` measures both halves on the same
targets of each copy, ``r_2..r_T`` (``r_1`` of the second copy follows ``r_T``, whose earlier occurrence
does not tell it). Training data (:func:`training_sequences`, a fresh batch each step) varies the period
``T`` in ``8..32`` behind a random prefix: with ``T`` fixed, the toy learns to attend 31 positions back by
RoPE alone, an induction pattern with no previous-token head (measured on a development seed: every
layer-1 head at offset -31, ablating all of layer 0 left the second-copy loss at 0.004, and the loss on
``T = 24`` copies was 8.8 nats).

:func:`pretrained` trains once per configuration and caches the model under
``cache_dir() / "induction_toy" / "v2-seed{seed}"`` (``save_pretrained`` and ``train_log.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 64  # the random tokens 0..63
BOS = VOCAB  # id 64
HALF = 32  # T: tokens per copy
SEQ = 1 + 2 * HALF  # 65
CACHE_VERSION = "v2"
MONITOR_SEED = 30_000  # + seed: the training log's fixed batch (the reproduction holds out other seeds)


@dataclass(frozen=True)
class ToyConfig:
    """The toy's architecture and training run; the model's initialisation and its data come from ``seed``."""

    seed: int = 0
    steps: int = 1200
    batch: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    log_every: int = 10
    min_half: int = 8
    monitor: int = 64
    d_model: int = 64
    n_heads: int = 1  # revision 1 (declared in docs/repeats.md): one head per layer, see there
    n_layers: int = 2
    last_layer_heads: int | None = None  # live heads of the last layer (None: all); revision 2 used 1 of 4

    def __post_init__(self) -> None:
        if self.last_layer_heads is not None and not 1 <= self.last_layer_heads <= self.n_heads:
            raise ValueError(
                f"last_layer_heads must be None or in [1, n_heads={self.n_heads}], got {self.last_layer_heads}"
            )

    def live_heads(self, layer: int) -> list[int]:
        """The heads of ``layer`` that are trained: all of them, except the last layer's silenced ones."""
        if layer == self.n_layers - 1 and self.last_layer_heads is not None:
            return list(range(self.last_layer_heads))
        return list(range(self.n_heads))

    def silenced_heads(self) -> list[int]:
        """The last layer's heads that :func:`build_model` silences."""
        return [] if self.last_layer_heads is None else list(range(self.last_layer_heads, self.n_heads))

    def key(self) -> str:
        """The cache folder's name: ``v2-seed{seed}`` for the default run, a hash of the rest otherwise."""
        rest = {k: v for k, v in asdict(self).items() if k != "seed"}
        default = {k: v for k, v in asdict(ToyConfig()).items() if k != "seed"}
        if rest == default:
            return f"{CACHE_VERSION}-seed{self.seed}"
        digest = hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:10]
        return f"{CACHE_VERSION}-seed{self.seed}-{digest}"


def repeated_sequences(n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` sequences ``[BOS, r, r]`` with ``r`` of ``HALF`` uniform tokens, ``(n, SEQ)`` long."""
    if n < 1:
        raise ValueError(f"n must be a positive int, got {n}")
    r = torch.randint(0, VOCAB, (n, HALF), generator=generator)  # (n, T)
    return torch.cat([torch.full((n, 1), BOS), r, r], dim=1)  # (n, 1 + 2T)


def training_sequences(n: int, generator: torch.Generator, min_half: int) -> torch.Tensor:
    """``n`` training sequences ``[BOS, p, r, r]`` of length ``SEQ``: each row's period ``t`` is uniform in
    ``min_half..HALF`` and a prefix ``p`` of ``2 (HALF - t)`` uniform tokens pads it, ``(n, SEQ)`` long.

    A fixed period would let a layer-1 head find the earlier copy by position alone (RoPE offset
    ``-(HALF - 1)``), an induction pattern without a previous-token head; varying it leaves content as the
    only way to find the earlier occurrence.
    """
    if not 1 <= min_half <= HALF:
        raise ValueError(f"min_half must be in [1, {HALF}], got {min_half}")
    t = torch.randint(min_half, HALF + 1, (n,), generator=generator)  # (n,) periods
    tokens = torch.randint(0, VOCAB, (n, SEQ - 1), generator=generator)  # (n, 2T): prefix, then r
    pos = torch.arange(SEQ - 1)  # (2T,)
    start = SEQ - 1 - 2 * t  # (n,) first position of r after the prefix (0-based after BOS)
    second = pos[None] >= (start + t)[:, None]  # (n, 2T): the second copy
    source = torch.where(second, pos[None] - t[:, None], pos[None])  # the second copy repeats the first
    body = tokens.gather(1, source)
    return torch.cat([torch.full((n, 1), BOS), body], dim=1)


def held_out(n: int, seed: int) -> torch.Tensor:
    """``n`` sequences from their own generator seeded with ``seed`` (use seeds the training run does not)."""
    return repeated_sequences(n, torch.Generator().manual_seed(seed))


def build_model(cfg: ToyConfig) -> LlamaForCausalLM:
    """A freshly initialised attention-only Llama (seeded by ``cfg.seed``, global RNG untouched)."""
    config = LlamaConfig(
        vocab_size=VOCAB + 1,
        hidden_size=cfg.d_model,
        intermediate_size=4,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=None,
        pad_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        model = LlamaForCausalLM(config)
    return silence_heads(attention_only(model), cfg.n_layers - 1, cfg.silenced_heads())


def attention_only(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """Zero each layer's ``mlp.down_proj`` and freeze the MLP path (its norm too), so the MLP adds exactly 0."""
    for layer in model.model.layers:
        with torch.no_grad():
            layer.mlp.down_proj.weight.zero_()
        for p in [*layer.mlp.parameters(), *layer.post_attention_layernorm.parameters()]:
            p.requires_grad_(False)
    return model


def _head_slices(model: LlamaForCausalLM, layer: int) -> list[tuple[torch.Tensor, int]]:
    """``(weight, dim)`` of ``layer``'s q, k, v and o projections: the dimension that indexes heads."""
    attn = model.model.layers[layer].self_attn
    return [
        (attn.q_proj.weight, 0),
        (attn.k_proj.weight, 0),
        (attn.v_proj.weight, 0),
        (attn.o_proj.weight, 1),
    ]


def silence_heads(model: LlamaForCausalLM, layer: int, heads: Iterable[int]) -> LlamaForCausalLM:
    """Zero the q, k, v rows and o columns of ``heads`` in ``layer`` (no grouped-query attention). A zero
    head's output, and every gradient into it, is exactly zero, so training (AdamW included) keeps it zero."""
    config = model.config
    if config.num_key_value_heads != config.num_attention_heads:
        raise ValueError("silence_heads needs num_key_value_heads == num_attention_heads")
    d_head = config.hidden_size // config.num_attention_heads
    with torch.no_grad():
        for head in heads:
            for weight, dim in _head_slices(model, layer):
                weight.narrow(dim, head * d_head, d_head).zero_()
    return model


def silenced(model: LlamaForCausalLM, layer: int, head: int) -> bool:
    """Whether ``head`` of ``layer`` is exactly zero (see :func:`silence_heads`)."""
    d_head = model.config.hidden_size // model.config.num_attention_heads
    return all(not bool(w.narrow(dim, head * d_head, d_head).any()) for w, dim in _head_slices(model, layer))


def token_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy per target position, ``(batch, SEQ - 1)``: column ``j`` predicts ``ids[:, j + 1]``."""
    vocab = logits.shape[-1]
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, vocab).float(), ids[:, 1:].reshape(-1), reduction="none"
    ).view(ids.shape[0], -1)


def split_halves(losses: torch.Tensor) -> tuple[float, float]:
    """Mean loss on targets ``r_2..r_T`` of the first copy and of the second, from :func:`token_losses`."""
    first = losses[:, 1:HALF]  # targets at positions 2..T
    second = losses[:, HALF + 1 :]  # targets at positions T+2..2T
    return float(first.mean()), float(second.mean())


@torch.no_grad()
def half_losses(
    model: Any, ids: torch.Tensor, fwd_hooks: Iterable[tuple] = (), batch: int = 256
) -> tuple[float, float]:
    """First- and second-copy loss of ``model`` (an HF model or a ``HookedModel``) on ``ids``, with hooks."""
    from icml_interp.hooks import wrap

    hooked = wrap(model)
    hooks = list(fwd_hooks)
    parts = [token_losses(hooked.run_with_hooks(chunk, hooks), chunk) for chunk in ids.split(batch)]
    return split_halves(torch.cat(parts))


def train(cfg: ToyConfig, progress: bool = True) -> tuple[LlamaForCausalLM, dict]:
    """Train the toy on fresh batches of :func:`training_sequences`; the log holds both halves' loss on a
    fixed monitoring batch of ``[BOS, r, r]`` (its own seed) after every ``log_every`` steps and at the end."""
    from tqdm.auto import tqdm

    model = build_model(cfg).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    monitor = held_out(cfg.monitor, MONITOR_SEED + cfg.seed)  # (monitor, SEQ): canonical [BOS, r, r]
    log: dict[str, list] = {"step": [], "first_half": [], "second_half": []}
    start = time.perf_counter()
    for step in tqdm(range(cfg.steps + 1), desc=f"induction toy seed {cfg.seed}", disable=not progress):
        if step % cfg.log_every == 0 or step == cfg.steps:
            with torch.no_grad():
                first, second = split_halves(
                    token_losses(model(input_ids=monitor, use_cache=False).logits, monitor)
                )
            log["step"].append(step)
            log["first_half"].append(first)
            log["second_half"].append(second)
        if step == cfg.steps:
            break
        ids = training_sequences(cfg.batch, gen, cfg.min_half)  # (batch, SEQ)
        loss = token_losses(model(input_ids=ids, use_cache=False).logits, ids).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    info = {
        "config": asdict(cfg),
        "log": log,
        "train seconds": time.perf_counter() - start,
        "torch threads": torch.get_num_threads(),
    }
    return model.eval(), info


def load(path: str | os.PathLike, cfg: ToyConfig = ToyConfig()) -> LlamaForCausalLM:
    """A cached toy in eval mode (MLP path frozen again; its ``down_proj`` and the last layer's silenced heads
    are checked to be zero)."""
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    for layer in model.model.layers:
        if bool(layer.mlp.down_proj.weight.any()):
            raise ValueError(f"{path}: not an attention-only toy (an mlp.down_proj weight is not zero)")
    last = cfg.n_layers - 1
    for head in cfg.silenced_heads():
        if not silenced(model, last, head):
            raise ValueError(f"{path}: head {head} of layer {last} should be silenced (all zero) but is not")
    return attention_only(model).eval()


def pretrained(
    cfg: ToyConfig = ToyConfig(), root: str | os.PathLike | None = None, progress: bool = True
) -> tuple[LlamaForCausalLM, dict]:
    """The trained toy from ``root / "induction_toy" / cfg.key()`` (default root: ``icml_tools.assets.
    cache_dir()``) if an earlier run saved it, else trained now and saved there atomically. Returns
    ``(model, info)`` with the training log and ``info["trained now"]``."""
    from icml_tools.assets import cache_dir, save_model_folder

    if root is None:
        root = cache_dir()
    target = Path(root).expanduser() / "induction_toy" / cfg.key()
    if (target / "config.json").is_file() and (target / "train_log.json").is_file():
        info = json.loads((target / "train_log.json").read_text())
        return load(target, cfg), {**info, "trained now": False}
    model, info = train(cfg, progress=progress)
    save_model_folder(model, target, {"train_log.json": json.dumps(info)})
    return model, {**info, "trained now": True}


def mlp_outputs(model: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's MLP output on ``ids`` (``blocks.L.hook_mlp_out``), for checking that it is exactly 0."""
    from icml_interp.hooks import act_name, wrap

    hooked = wrap(model)
    names = [act_name("mlp_out", layer) for layer in range(hooked.n_layers)]
    _, cache = hooked.run_with_cache(ids, names)
    return [cache[name] for name in names]
