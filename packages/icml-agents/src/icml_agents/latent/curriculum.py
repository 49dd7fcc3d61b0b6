"""Training data for latent reasoning: sequences whose reasoning steps are replaced by latent slots, token
confidences under a model, and the choice of which steps to replace.

Coconut's curriculum replaces the first ``k`` steps at stage ``k`` (``c`` thoughts per step) and trains only
the explicit tokens after the latent span. LT-Tuning's second stage chooses the steps from the explicit-CoT
model's token confidences; our reconstruction (the paper's text was not available) replaces the steps of
lowest mean confidence and trains the switch itself: the begin-of-thought marker where a run starts, a
"keep thinking" latent label inside it, and the end-of-thought marker after its last thought, so that at
generation :class:`~icml_agents.latent.ConfidenceSwitch` can enter on low confidence and leave once the
end-of-thought token is likely.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from icml_agents.latent.loops import LatentLM, left_pad
from icml_agents.validation import check_choice, check_int, check_real

IGNORE = -100
MAX_THOUGHTS = 1 << 10


@dataclass(frozen=True)
class LatentTokens:
    """The ids of the begin-of-thought marker, the end-of-thought marker and the latent slot."""

    bot: int
    eot: int
    latent: int

    def __post_init__(self):
        for name in ("bot", "eot", "latent"):
            check_int(getattr(self, name), name, 0)
        if len({self.bot, self.eot, self.latent}) != 3:
            raise ValueError(f"bot, eot and latent must be three different ids, got {self}")


def _ids(value, name: str, allow_empty: bool = True) -> list[int]:
    if not isinstance(value, (list, tuple)) or (not value and not allow_empty):
        raise ValueError(
            f"{name} must be a {'' if allow_empty else 'non-empty '}list of token ids, got {value!r}"
        )
    return [check_int(t, f"{name} token", 0) for t in value]


def build_sequence(
    question: Sequence[int],
    steps: Sequence[Sequence[int]],
    answer: Sequence[int],
    *,
    tokens: LatentTokens,
    latent_steps: Sequence[int] = (),
    thoughts_per_step: int = 1,
    labels: str = "coconut",
) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` for ``question + steps + answer`` with the steps in ``latent_steps`` replaced by
    latent slots: each maximal run of consecutive replaced steps becomes ``<bot>`` + ``thoughts_per_step`` slots
    per step + ``<eot>``. ``labels="coconut"`` masks the question and the latent span (the released dataset's
    labels); ``labels="switch"`` masks only the question, so the model learns where a run starts and ends."""
    question = _ids(question, "question", allow_empty=False)
    answer = _ids(answer, "answer")
    if not isinstance(steps, (list, tuple)):
        raise ValueError(f"steps must be a list of token-id lists, got {steps!r}")
    steps = [_ids(s, f"steps[{i}]", allow_empty=False) for i, s in enumerate(steps)]
    if not isinstance(tokens, LatentTokens):
        raise TypeError(f"tokens must be a LatentTokens, got {type(tokens).__name__}")
    if not isinstance(latent_steps, (list, tuple, set, frozenset, range)):
        raise ValueError(f"latent_steps must be a collection of step indices, got {latent_steps!r}")
    chosen = {check_int(i, "latent_steps item", 0, max(len(steps) - 1, 0)) for i in latent_steps}
    if chosen and not steps:
        raise ValueError("latent_steps must be empty when there are no steps")
    c = check_int(thoughts_per_step, "thoughts_per_step", 1, MAX_THOUGHTS)
    labels = check_choice(labels, "labels", ("coconut", "switch"))
    ids, lab = list(question), [IGNORE] * len(question)
    span_mask = IGNORE if labels == "coconut" else None
    i = 0
    while i < len(steps):
        if i not in chosen:
            ids += steps[i]
            lab += steps[i]
            i += 1
            continue
        j = i
        while j < len(steps) and j in chosen:
            j += 1
        span = [tokens.bot] + [tokens.latent] * (c * (j - i)) + [tokens.eot]
        ids += span
        lab += [span_mask] * len(span) if span_mask is not None else span
        i = j
    ids += answer
    lab += answer
    return ids, lab


@torch.no_grad()
def token_confidences(model, sequences: Sequence[Sequence[int]], pad_token_id: int = 0) -> list[list[float]]:
    """The probability of each token given the ones before it (teacher forcing), per sequence; the first token
    has none, so sequence ``s`` gives ``len(s) - 1`` numbers."""
    lm = LatentLM(model)
    pad_token_id = check_int(pad_token_id, "pad_token_id", 0, lm.vocab_size - 1)
    ids, mask = left_pad(sequences, pad_token_id, lm.embedding_weight.device)
    if int(ids.max()) >= lm.vocab_size:
        raise ValueError(
            f"sequences must hold token ids below the vocabulary size {lm.vocab_size}, got {int(ids.max())}"
        )
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, _, _ = lm.step(lm.embed(ids), mask, positions, None, use_cache=False)
    probs = torch.softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    out = []
    for i, s in enumerate(sequences):
        out.append(probs[i, ids.shape[1] - len(s) :].tolist())
    return out


def select_latent_steps(
    confidences: Sequence[float], *, threshold: float | None = None, k: int | None = None
) -> list[int]:
    """Which steps to think latently, from one confidence per step: those below ``threshold``, or the ``k`` of
    lowest confidence (ties to the earlier step), or, with both, the ``k`` lowest among those below it."""
    if not isinstance(confidences, (list, tuple)):
        raise ValueError(f"confidences must be a list of numbers, got {confidences!r}")
    conf = [check_real(c, "confidences item", "[0, 1]") for c in confidences]
    if threshold is None and k is None:
        raise ValueError("give threshold, k or both")
    order = sorted(range(len(conf)), key=lambda i: (conf[i], i))
    if threshold is not None:
        threshold = check_real(threshold, "threshold", "(0, 1)")
        order = [i for i in order if conf[i] < threshold]
    if k is not None:
        order = order[: check_int(k, "k", 0, MAX_THOUGHTS)]
    return sorted(order)
