"""Models, training stages and evaluation of ``lt-tuning-reasoning``: tiny Llamas trained here from scratch
(untied input/output embeddings unless ``tied``), on fresh problems every step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from icml_agents.latent import (
    ConfidenceSwitch,
    LatentTokens,
    SoftThought,
    build_sequence,
    collapse_diagnostics,
    generate,
    latent_forward,
    select_latent_steps,
    token_confidences,
)
from icml_agents_experiments.latent.tasks import (
    BOT,
    EOS,
    EOT,
    INDEX,
    LAT,
    PAD,
    VOCAB_SIZE,
    Item,
    answer_of,
    make_items,
)

TOKENS = LatentTokens(bot=BOT, eot=EOT, latent=LAT)


@dataclass(frozen=True)
class Sizes:
    """Model and schedule sizes (``quick`` and ``full`` in the reproduction)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    batch: int = 64
    cot_steps: int = 800  # stage 1 (and the no-CoT model)
    stage_steps: int = 200  # each latent curriculum stage
    max_stage: int = 3  # steps replaced at the last stage (Coconut's max_latent_stage)
    thoughts_per_step: int = 1  # Coconut's c_thought
    lr: float = 3e-3  # stage 1 and no-CoT
    latent_lr: float = 1e-3  # every latent stage (Coconut's and LT-Tuning's alike)
    n_test: int = 200


def build_model(sizes: Sizes, tied: bool, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=sizes.hidden,
        intermediate_size=2 * sizes.hidden,
        num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.heads,
        max_position_embeddings=256,
        tie_word_embeddings=tied,
        pad_token_id=PAD,
        bos_token_id=None,
        eos_token_id=EOS,
    )
    return LlamaForCausalLM(config)


def _pad_batch(pairs: list[tuple[list[int], list[int]]]):
    width = max(len(i) for i, _ in pairs)
    ids = torch.full((len(pairs), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    for r, (i, lab) in enumerate(pairs):
        ids[r, width - len(i) :] = torch.tensor(i)
        mask[r, width - len(i) :] = 1
        labels[r, width - len(lab) :] = torch.tensor([-100 if v is None else v for v in lab])
    return ids, mask, labels


def sequence(item: Item, mode: str, latent_steps=(), sizes: Sizes | None = None, labels: str = "coconut"):
    """``(ids, labels)`` of ``item`` for ``mode`` "nocot", "cot" or "latent" (the steps in ``latent_steps``
    replaced by thoughts)."""
    if mode == "nocot":
        return build_sequence(item.question, [], item.answer, tokens=TOKENS)
    if mode == "cot":
        return build_sequence(item.question, item.steps, item.answer, tokens=TOKENS)
    c = 1 if sizes is None else sizes.thoughts_per_step
    return build_sequence(
        item.question,
        item.steps,
        item.answer,
        tokens=TOKENS,
        latent_steps=latent_steps,
        thoughts_per_step=c,
        labels=labels,
    )


def coconut_steps(item: Item, stage: int) -> list[int]:
    """Coconut's stage ``k``: the first ``k`` steps."""
    return list(range(min(stage, len(item.steps))))


def least_confident_steps(model, items: list[Item], stage: int) -> list[list[int]]:
    """LT-Tuning's stage-2 rule (our reconstruction): per item, the ``stage`` steps of lowest mean token
    confidence under the explicit-CoT ``model``."""
    seqs = [sequence(it, "cot")[0] for it in items]
    conf = token_confidences(model, seqs, PAD)
    out = []
    for it, c in zip(items, conf, strict=False):
        start = len(it.question) - 1  # confidences[j] is of token j + 1
        per_step = []
        for s in it.steps:
            per_step.append(float(np.mean(c[start : start + len(s)])))
            start += len(s)
        out.append(select_latent_steps(per_step, k=min(stage, len(it.steps))))
    return out


def train(
    model,
    testbed: str,
    sizes: Sizes,
    steps: int,
    rng: np.random.Generator,
    make_pairs,
    thought=None,
    extra=(),
):
    """``steps`` AdamW steps on fresh problems (a fresh optimizer, as Coconut resets it at every stage);
    ``make_pairs(items)`` gives their ``(ids, labels)``; with a ``thought`` the multi-pass latent forward is
    used, at ``sizes.latent_lr``. ``extra`` modules are trained too (the fusion)."""
    params = [*model.parameters(), *(p for m in extra for p in m.parameters())]
    lr = sizes.lr if thought is None else sizes.latent_lr
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    model.train()
    losses = []
    for _ in range(steps):
        items = make_items(testbed, sizes.batch, rng)
        ids, mask, labels = _pad_batch(make_pairs(items))
        if thought is None:
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos)
            logits = out.logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        else:
            latent_loss = latent_forward(
                model, ids, mask, latent_token_id=LAT, thought=thought, labels=labels
            ).loss
            assert latent_loss is not None
            loss = latent_loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


@dataclass
class ArmResult:
    correct: np.ndarray  # per test item, 0/1
    positions: np.ndarray  # generated positions per item (thoughts + explicit tokens)
    latents: torch.Tensor  # (N, D) the latent inputs fed


def evaluate(model, items: list[Item], *, prompts=None, batch: int = 100, **gen_kwargs) -> ArmResult:
    prompts = prompts or [it.question for it in items]
    correct, positions, latents = [], [], []
    for lo in range(0, len(items), batch):
        out = generate(
            model,
            prompts[lo : lo + batch],
            eos_token_id=EOS,
            latent_token_id=LAT,
            pad_token_id=PAD,
            **gen_kwargs,
        )
        for j, it in enumerate(items[lo : lo + batch]):
            correct.append(float(answer_of(out.tokens[j]) == it.gold))
            extra = len(prompts[lo + j]) - len(it.question)  # Coconut's slots and markers sit in the prompt
            positions.append(out.n_positions[j] + extra)
        latents.append(out.latents)
    return ArmResult(np.array(correct), np.array(positions, dtype=float), torch.cat(latents))


def soft_kwargs(max_new: int) -> dict:
    return dict(
        thought=SoftThought(top_k=8),
        switch=ConfidenceSwitch(
            enter_below=None, exit_above=0.5, max_latent=max_new, min_latent=1, start_latent=True
        ),
        eot_token_id=INDEX["#"],
        special_token_ids=(BOT, EOT),
        max_new_tokens=max_new + 3,
    )


def switch_kwargs(sizes: Sizes, max_new: int) -> dict:
    return dict(
        switch=ConfidenceSwitch(
            enter_below=0.5, exit_above=0.5, max_latent=sizes.thoughts_per_step * sizes.max_stage
        ),
        bot_token_id=BOT,
        eot_token_id=EOT,
        max_new_tokens=max_new,
    )


def diagnostics(result: ArmResult, model) -> dict:
    if result.latents.shape[0] < 2:
        return {
            "mean_cosine": None,
            "effective_rank": None,
            "norm_ratio": None,
            "n": int(result.latents.shape[0]),
        }
    d = collapse_diagnostics(result.latents.float(), model.get_input_embeddings().weight)
    return {
        "mean_cosine": d.mean_cosine,
        "effective_rank": d.effective_rank,
        "norm_ratio": d.norm_ratio,
        "n": d.n,
    }
