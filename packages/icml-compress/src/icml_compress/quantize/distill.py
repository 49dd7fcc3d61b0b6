"""Few-shot distillation: train only the per-layer affine pairs and sign/scale vectors against the float
model's next-token distributions (KL(float || quantized), mean per token), packed indices fixed.

Trainable: ``alpha``, ``beta`` (the Gaussianizer), ``su`` and ``sv`` of every :class:`ProteusLinear`;
everything else is frozen. Adam with a learning rate relative to each tensor's RMS (``su`` is about 1,
``sv`` about the weight scale). Our design following QTIP's fine-tuning of ``SU``/``SV`` with fixed
trellis bits (the Proteus paper text was not available).

Chat data (our design): a chat model distilled on prose only can lose its chat behaviour at 2 bits (the
fully quantized SmolLM2 answered a question with ``<|im_end|>`` at once). :func:`chat_transcripts` makes
self-distillation chat data without any download: questions about the stdlib ``pydoc_data`` topics,
answered greedily by the float model in the tokenizer's chat template; :func:`interleave` alternates them
with the calibration sequences.
"""

from __future__ import annotations

import hashlib
from typing import Any, cast

import torch
from torch import nn
from tqdm.auto import tqdm

from icml_compress.quantize.calibration import eval_mode, make_sequences
from icml_compress.quantize.linear import ProteusLinear
from icml_compress.validation import check_instance, check_int


def packed_hash(model: nn.Module) -> str:
    """SHA-256 of every quantized module's packed words (or RTN codes), in module order."""
    check_instance(model, "model", nn.Module, "torch.nn.Module")
    h = hashlib.sha256()
    for name, mod in model.named_modules():
        for attr in ("packed", "codes"):
            t = getattr(mod, attr, None)
            if isinstance(t, torch.Tensor):
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


CHAT_QUESTIONS = ("What is {} in Python?", "Explain {} in Python briefly.", "How is {} used in Python?")


def chat_questions(n: int) -> list[str]:
    """``n`` questions about the first ``n`` sorted ``pydoc_data`` topics, the templates taken in turn."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    check_int(n, "n (questions, one per pydoc_data topics entry)", 1, len(names))
    return [
        CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)].format(t.replace("-", " ")) for i, t in enumerate(names[:n])
    ]


def chat_prompt_ids(tokenizer, question: str) -> torch.Tensor:
    """``(1, n)`` ids of ``question`` as one user turn in ``tokenizer``'s chat template, ready to generate."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template (needed for chat prompts and distill_chat)")
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt"
    )
    return ids if isinstance(ids, torch.Tensor) else ids["input_ids"]  # transformers 5: a BatchEncoding


@torch.no_grad()
def chat_transcripts(
    model: nn.Module, tokenizer, questions: list[str], max_new_tokens: int = 48, batch_size: int = 16
) -> torch.Tensor:
    """Token ids (1-D) of the chat transcripts of ``questions`` answered greedily by ``model``, concatenated;
    each transcript is the prompt and the answer up to and including the end-of-sequence token.

    Generated ``batch_size`` questions at a time, left-padded and masked (one decoding step reads the
    weights once for the whole batch: 16 questions take as long as two alone). Padding can change the
    floating-point rounding and so, rarely, a greedy token: on SmolLM2 the 48 transcripts of the
    ``proteus-smollm2`` reproduction are token-identical to generating one question at a time (checked on
    2026-12-04)."""
    check_int(max_new_tokens, "max_new_tokens", 1)
    check_int(batch_size, "batch_size", 1)
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    stops = getattr(getattr(model, "generation_config", None), "eos_token_id", None)  # where generate stops
    stops = {eos, *(stops if isinstance(stops, list) else [] if stops is None else [stops])}
    out = []
    for start in range(0, len(questions), batch_size):
        prompts = [chat_prompt_ids(tokenizer, q)[0] for q in questions[start : start + batch_size]]
        width = max(p.numel() for p in prompts)
        ids = torch.full((len(prompts), width), eos, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            ids[row, width - p.numel() :] = p
            mask[row, width - p.numel() :] = 1
        gen = (
            cast(Any, model)
            .generate(
                ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=eos,
            )
            .cpu()
        )
        for row, p in enumerate(prompts):
            answer = gen[row, width:]
            end = torch.isin(answer, torch.tensor(sorted(stops))).nonzero()
            out += [p, answer[: int(end[0, 0]) + 1] if len(end) else answer]
    return torch.cat(out)


def interleave(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rows of ``a`` and ``b`` (same width) alternately, then the rest of the longer one."""
    n = min(a.shape[0], b.shape[0])
    mixed = torch.stack([a[:n], b[:n]], dim=1).reshape(2 * n, -1)
    return torch.cat([mixed, a[n:], b[n:]])


def distillation_set(sequences: torch.Tensor, teacher: nn.Module, tokenizer, config) -> torch.Tensor:
    """The distillation sequences of ``config`` (a QuantConfig): the calibration ``sequences``, alternated with
    ``config.distill_chat`` chat transcripts of ``teacher`` (the float model) cut the same way."""
    if not config.distill_chat:
        return sequences
    chat = chat_transcripts(teacher, tokenizer, chat_questions(config.distill_chat))
    return interleave(
        sequences, make_sequences(chat, config.n_calibration, config.seq_len).to(sequences.device)
    )


def kl_per_token(ref_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(ref || q) of each position, ``(..., )`` from logits ``(..., vocab)``."""
    lp = torch.log_softmax(ref_logits.float(), -1)
    lq = torch.log_softmax(logits.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def distill(
    model: nn.Module,
    teacher: nn.Module,
    sequences: torch.Tensor,
    steps: int,
    lr: float,
    progress: bool = True,
) -> list[float]:
    """Train the affine statistics of ``model``'s ProteusLinear layers for ``steps`` steps (one sequence
    of ``sequences (n, seq_len)`` per step, cycling). Returns the training KL of each step."""
    mods = [m for m in model.modules() if isinstance(m, ProteusLinear)]
    if not mods:
        raise ValueError("model has no ProteusLinear layers to distill")
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    groups = []
    for m in mods:
        for p in (m.alpha, m.beta, m.su, m.sv):
            p.requires_grad_(True)
        scale = max(m.alpha.abs().item(), 1e-8)
        groups += [
            {"params": [m.alpha, m.beta], "lr": lr * scale},
            {"params": [m.su], "lr": lr * m.su.detach().pow(2).mean().sqrt().item()},
            {"params": [m.sv], "lr": lr * m.sv.detach().pow(2).mean().sqrt().item()},
        ]
    opt = torch.optim.Adam(groups)
    losses = []
    try:
        # grad on whatever the caller's mode (a quantize_model under torch.no_grad() trains here too)
        with eval_mode(model), torch.enable_grad():
            for step in tqdm(range(steps), desc="distill", disable=not progress):
                seq = sequences[step % sequences.shape[0]].unsqueeze(0)  # (1, seq_len)
                with torch.no_grad():
                    ref = teacher(seq).logits
                loss = kl_per_token(ref, model(seq).logits).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
    finally:
        for m in mods:
            for p in (m.alpha, m.beta, m.su, m.sv):
                p.requires_grad_(False)
            m.__dict__.pop("_raw", None)
            m.clear_cache()
        for p in frozen:
            p.requires_grad_(True)
    return losses
