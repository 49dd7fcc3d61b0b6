"""Text tier: a tiny vision-language policy that writes ``<answer>...</answer>``, trained with GRPO.

The images pass through a small CNN whose feature map, average-pooled to 2x2, gives 4 image tokens per
image (plus a learned per-image embedding); for two images, the connector adds one comparison token built
from both images' pooled features ``[a, b, |a - b|, a * b]`` (like the fast tier's pair heads). They prefix a small causal transformer (pre-norm) over
characters, with the ``<answer>``/``</answer>``/``<think>``/``</think>`` tags as single tokens, that
generates the answer text. Training: a brief *format warm-up* (teacher forcing on
``<answer>{random angle}</answer>``, the angle drawn independently of the image, so the policy learns the
format but nothing about the task and its reward stays at chance), then GRPO with the official rotation
reward on sampled completions. No digit label and no rotation label enters the RL phase; only the reward.
The architecture and the warm-up are our design (the paper trains Qwen2.5-VL-3B).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from icml_agents.rl.grpo import GRPOConfig, compute_advantages, grpo_loss
from icml_agents.ssl4rl import rewards as R
from icml_agents_experiments.ssl4rl.cnn import conv_layers, make_task

TAGS = (
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
)  # one token each, like the tags of reasoning tokenizers
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789,- "
PAD, BOS, EOS = 0, 1, 2
VOCAB = ["<pad>", "<bos>", "<eos>", *TAGS, *CHARS]
STOI = {t: i for i, t in enumerate(VOCAB) if i > EOS}


def encode(text: str) -> list[int]:
    """Text to token ids: the four tags are single tokens, everything else one token per character
    (characters outside the vocabulary raise ``ValueError``)."""
    ids, i = [], 0
    while i < len(text):
        tag = next((t for t in TAGS if text.startswith(t, i)), None)
        if tag is not None:
            ids.append(STOI[tag])
            i += len(tag)
        elif text[i] in STOI:
            ids.append(STOI[text[i]])
            i += 1
        else:
            raise ValueError(f"text has a character outside the vocabulary at {i}: {text[i]!r}")
    return ids


def decode(ids) -> str:
    """Token ids to text, stopping at the first EOS (PAD and BOS are dropped)."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i > EOS:
            out.append(VOCAB[i])
    return "".join(out)


@dataclass
class TinyVLMConfig:
    in_channels: int = 1
    image_size: int = 16
    n_images: int = 2
    width: int = 16  # CNN channels of the first layer (x4 at the output)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_new_tokens: int = 10
    grid: int = 2  # image tokens per side


class TinyVLM(nn.Module):
    """Image tokens ``(B, n_images * grid^2, d)`` prefix a causal transformer over characters and tags."""

    def __init__(self, config: TinyVLMConfig | None = None):
        super().__init__()
        c = self.config = config or TinyVLMConfig()
        w = c.width
        self.cnn = nn.Sequential(*conv_layers(c.in_channels, w), nn.AdaptiveAvgPool2d(c.grid))
        self.n_patches = c.grid**2
        self.img_proj = nn.Linear(4 * w, c.d_model)
        self.pair_proj = nn.Linear(
            16 * w, c.d_model
        )  # the connector's comparison token for two-image prompts
        self.img_emb = nn.Parameter(torch.zeros(c.n_images, 1, c.d_model))
        self.tok_emb = nn.Embedding(len(VOCAB), c.d_model)
        n_ctx = c.n_images * self.n_patches + 1 + c.max_new_tokens + 1
        self.pos_emb = nn.Parameter(torch.randn(n_ctx, c.d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            c.d_model, c.n_heads, 4 * c.d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, len(VOCAB))

    def image_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, V, C, S, S)`` -> ``(B, V * P [+ 1], d)``: ``grid^2`` tokens per image and, for two images, one
        comparison token from the pooled features ``[a, b, |a - b|, a * b]``."""
        b, v = images.shape[:2]
        fmap = self.cnn(images.flatten(0, 1))  # (B*V, 4w, grid, grid)
        tokens = self.img_proj(fmap.flatten(2).transpose(1, 2)).view(b, v, self.n_patches, -1)
        tokens = (tokens + self.img_emb[:v]).flatten(1, 2)  # (B, V*P, d)
        if v != 2:
            return tokens
        pooled = fmap.mean(dim=(2, 3)).view(b, 2, -1)  # (B, 2, 4w)
        a, c = pooled[:, 0], pooled[:, 1]
        pair = self.pair_proj(torch.cat([a, c, (a - c).abs(), a * c], dim=1))  # (B, d)
        return torch.cat([tokens, pair[:, None]], dim=1)

    def logits(self, prefix: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(B, T, vocab)`` after ``BOS, ids[:, :-1]``-style inputs ``ids`` ``(B, T)``."""
        x = torch.cat([prefix, self.tok_emb(ids)], dim=1)  # (B, P + T, d)
        n = x.shape[1]
        x = x + self.pos_emb[:n]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=x.device), diagonal=1)
        h = self.ln_f(self.blocks(x, mask=mask, is_causal=True))
        return self.lm_head(h[:, prefix.shape[1] :])  # (B, T, vocab)

    def completion_logp(self, prefix: torch.Tensor, completion: torch.Tensor) -> torch.Tensor:
        """Per-token log-probabilities ``(B, T)`` of ``completion`` ``(B, T)`` given the image prefix."""
        bos = torch.full((completion.shape[0], 1), BOS, dtype=torch.long)
        inputs = torch.cat([bos, completion[:, :-1]], dim=1)
        logp = torch.log_softmax(self.logits(prefix, inputs), -1)
        return logp.gather(2, completion.unsqueeze(2)).squeeze(2)

    @torch.no_grad()
    def generate(
        self, prefix: torch.Tensor, generator: torch.Generator | None = None, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample completions: token ids ``(B, T)`` (PAD after EOS) and their mask ``(B, T)`` (EOS included)."""
        b = prefix.shape[0]
        ids = torch.full((b, 1), BOS, dtype=torch.long)
        done = torch.zeros(b, dtype=torch.bool)
        out, mask = [], []
        for _ in range(self.config.max_new_tokens):
            logits = self.logits(prefix, ids)[:, -1]  # (B, vocab)
            logits[:, PAD] = -float("inf")
            logits[:, BOS] = -float("inf")
            nxt = (
                logits.argmax(-1)
                if greedy
                else torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(1)
            )
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            mask.append(~done)
            out.append(nxt)
            done = done | (nxt == EOS)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            if done.all():
                break
        return torch.stack(out, 1), torch.stack(mask, 1).float()


def warm_up(
    model: TinyVLM,
    images: torch.Tensor,
    answers: list[str],
    steps: int,
    seed: int = 0,
    batch: int = 64,
    lr: float = 3e-3,
    progress: bool = True,
) -> None:
    """Format warm-up: teacher forcing on ``<answer>{a}</answer>`` with ``a`` drawn uniformly from
    ``answers`` independently of the image, so only the format (not the task) is learned."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in tqdm(range(steps), desc="format warm-up", disable=not progress, leave=False):
        idx = torch.randint(len(images), (batch,), generator=gen)
        picks = torch.randint(len(answers), (batch,), generator=gen).tolist()
        targets = [[*encode(f"<answer>{answers[k]}</answer>"), EOS] for k in picks]
        length = max(map(len, targets))
        tgt = torch.tensor([t + [PAD] * (length - len(t)) for t in targets])
        logp = model.completion_logp(model.image_tokens(images[idx]), tgt)  # (B, T)
        loss = -(logp * (tgt != PAD)).sum() / (tgt != PAD).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def grpo_text(
    model: TinyVLM,
    images: torch.Tensor,
    truths: list[str],
    steps: int,
    seed: int = 0,
    batch: int = 16,
    lr: float = 1e-3,
    config: GRPOConfig | None = None,
    log_every: int = 5,
    reward_fn=R.answer_match_reward,
    progress: bool = True,
) -> dict:
    """GRPO on sampled text completions with a TRL-signature reward; returns the reward curve."""
    cfg = config or GRPOConfig(num_generations=8, beta=0.01)
    g = cfg.num_generations
    gen = torch.Generator().manual_seed(seed)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    curve: dict[str, list] = {"step": [], "reward": [], "format": [], "frac_zero_std": []}
    for step in tqdm(range(steps + 1), desc="GRPO (text)", disable=not progress, leave=False):
        idx = torch.randint(len(images), (batch,), generator=gen)
        imgs = images[idx]
        with torch.no_grad():
            prefix = model.image_tokens(imgs).repeat_interleave(g, 0)
        completion, mask = model.generate(prefix, gen)
        texts = [decode(c) for c in completion]
        answer = [truths[i] for i in idx.tolist() for _ in range(g)]
        r = torch.tensor(reward_fn(texts, answer=answer), dtype=torch.float64)
        if step % log_every == 0 or step == steps:
            curve["step"].append(step)
            curve["reward"].append(float(r.mean()))
            curve["format"].append(float(np.mean(R.format_reward(texts))))
        if step == steps:
            break
        adv, frac = compute_advantages(r, g, scale=cfg.scale_rewards, eps=cfg.std_eps)
        if step % log_every == 0:
            curve["frac_zero_std"].append(frac)
        old = None
        for _ in range(cfg.num_iterations):
            logp = model.completion_logp(model.image_tokens(imgs).repeat_interleave(g, 0), completion)
            ref_logp = None
            if cfg.beta > 0:
                with torch.no_grad():
                    ref_logp = ref.completion_logp(ref.image_tokens(imgs).repeat_interleave(g, 0), completion)
            old = logp.detach() if old is None else old
            loss, _ = grpo_loss(
                logp,
                old,
                adv.float(),
                mask,
                ref_logp,
                epsilon=cfg.epsilon,
                epsilon_high=cfg.epsilon_high,
                beta=cfg.beta,
                loss_type=cfg.loss_type,
                max_completion_length=model.config.max_new_tokens,
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    return curve


class TextBudget(TypedDict):
    """The text tier's settings: warm-up and GRPO steps, images per step, group size G, learning rate, KL
    weight beta and GRPO's reward scaling."""

    warmup: int
    steps: int
    batch: int
    group: int
    lr: float
    beta: float
    scale: str


TEXT_BUDGETS: dict[str, TextBudget] = {
    "quick": {
        "warmup": 40,
        "steps": 120,
        "batch": 16,
        "group": 16,
        "lr": 2e-3,
        "beta": 0.01,
        "scale": "none",
    },
    "full": {"warmup": 40, "steps": 240, "batch": 16, "group": 16, "lr": 2e-3, "beta": 0.01, "scale": "none"},
}


def run_text_tier(budget: str = "quick", seed: int = 0) -> dict:
    """Warm up and GRPO-train the tiny VLM on rotation (digits); the post-warm-up and final mean rewards are
    the means over the first and last three logged points of the curve (each point: batch x G samples)."""
    from sklearn.datasets import load_digits  # lazy: dev / repro only

    cfg = TEXT_BUDGETS[budget]
    images = load_digits().images / 16.0
    task = make_task(
        "rotation", images[np.random.default_rng(0).permutation(len(images))[:1297]], seed=seed, n_per_image=4
    )
    torch.manual_seed(seed)
    model = TinyVLM()
    warm_up(model, task.images, ["0", "90", "180", "270"], cfg["warmup"], seed=seed)
    curve = grpo_text(
        model,
        task.images,
        task.answers,
        cfg["steps"],
        seed=seed,
        batch=cfg["batch"],
        lr=cfg["lr"],
        config=GRPOConfig(num_generations=cfg["group"], beta=cfg["beta"], scale_rewards=cfg["scale"]),
    )
    k = 3
    return {
        "curve": curve,
        "post_warmup_reward": float(np.mean(curve["reward"][:k])),
        "final_reward": float(np.mean(curve["reward"][-k:])),
        "final_format": curve["format"][-1],
    }
