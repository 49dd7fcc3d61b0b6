"""Perplexity split into prompt-side and answer-side tokens (Yan et al. 2026, the "perplexity paradox":
under spurious RLVR the answer perplexity falls while prompt-side coherence degrades).

For a (prompt, answer) pair the text is ``prompt + answer``; every token after the first is scored by the
model's next-token log-probability. *Answer* tokens are those at positions ``>= len(prompt)`` (predicted from
position ``len(prompt) - 1`` on, as in the authors' ``calculate_perplexity.py``); *prompt* tokens are positions
``1 .. len(prompt) - 1``. Perplexities pool the token NLLs over all pairs (``exp`` of the mean token NLL, our
choice; per-pair values are returned too).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import torch

from icml_interp.hooks import wrap
from icml_interp.validation import eval_mode


def _as_ids(x, tokenizer, what: str, special: bool, vocab: int) -> list[int]:
    if isinstance(x, str):
        if tokenizer is None:
            raise TypeError(f"{what} is a string: pass a tokenizer, or give token ids")
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be a callable tokenizer, got {type(tokenizer).__name__}")
        ids: list | None = list(tokenizer(x, add_special_tokens=special)["input_ids"])
    elif isinstance(x, torch.Tensor):
        ids = x.tolist() if x.ndim == 1 else None
    elif isinstance(x, (list, tuple, range)):
        ids = list(x)
    else:
        ids = None
    if ids is None or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise TypeError(f"{what} must be a string or a sequence of int token ids")
    if any(not 0 <= t < vocab for t in ids):
        raise ValueError(f"{what} must hold token ids in [0, {vocab}) (the model's vocabulary), got {ids}")
    return ids


def token_nll(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Next-token NLL of every token after the first: ``(batch, seq - 1)`` for ``(batch, seq)`` ids.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the NLLs would be one sample of it."""
    hooked = wrap(model)
    ids = hooked.token_ids(input_ids)
    with torch.no_grad(), eval_mode(hooked.model):
        logp = torch.log_softmax(hooked(ids)[:, :-1].float(), dim=-1)
    return -logp.gather(-1, ids[:, 1:, None])[..., 0]


def split_perplexity(model, pairs: Sequence[tuple], tokenizer=None) -> dict:
    """Prompt, answer and full perplexity of ``model`` on ``(prompt, answer)`` pairs (strings with a
    ``tokenizer``, or token-id sequences; the prompt gets the tokenizer's special tokens, the answer none).

    Returns ``{"prompt_ppl", "answer_ppl", "full_ppl", "items": [{"prompt_ppl", "answer_ppl",
    "answer_nll", ...} per pair]}``.

    Runs the model in eval mode (:func:`token_nll`); every submodule's mode is restored.
    """
    hooked = wrap(model)
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(f"pairs must be a list of (prompt, answer) pairs, got {type(pairs).__name__}")
    if not pairs:
        raise ValueError("pairs must hold at least one (prompt, answer) pair")
    sums = {"prompt": [0.0, 0], "answer": [0.0, 0]}
    items = []
    for j, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"pairs[{j}] must be a (prompt, answer) pair, got {pair!r}")
        prompt = _as_ids(pair[0], tokenizer, f"pairs[{j}][0]", True, hooked.d_vocab)
        answer = _as_ids(pair[1], tokenizer, f"pairs[{j}][1]", False, hooked.d_vocab)
        if len(prompt) < 1 or len(answer) < 1:
            raise ValueError(f"pairs[{j}]: prompt and answer must each have at least one token")
        ids = torch.tensor([prompt + answer], device=hooked.embed.weight.device)  # where the model reads ids
        nll = token_nll(hooked, ids)[0]  # (len - 1,): nll[t] scores token t + 1
        p_nll, a_nll = nll[: len(prompt) - 1], nll[len(prompt) - 1 :]
        item = {
            "n_prompt_tokens": len(prompt),
            "n_answer_tokens": len(answer),
            "answer_nll": float(a_nll.mean()),
            "answer_ppl": math.exp(float(a_nll.mean())),
            "prompt_ppl": math.exp(float(p_nll.mean())) if len(p_nll) else math.nan,
        }
        items.append(item)
        for side, values in (("prompt", p_nll), ("answer", a_nll)):
            sums[side][0] += float(values.sum())
            sums[side][1] += len(values)

    short = [j for j, item in enumerate(items) if item["n_prompt_tokens"] == 1]
    if short:
        warnings.warn(
            f"pairs {short} have one-token prompts: no prompt token is scored, so their prompt_ppl is NaN"
            + (" (and so is the pooled prompt_ppl)" if sums["prompt"][1] == 0 else ""),
            RuntimeWarning,
            stacklevel=2,
        )

    def ppl(total, count):
        return math.exp(total / count) if count else math.nan

    return {
        "prompt_ppl": ppl(*sums["prompt"]),
        "answer_ppl": ppl(*sums["answer"]),
        "full_ppl": ppl(sums["prompt"][0] + sums["answer"][0], sums["prompt"][1] + sums["answer"][1]),
        "items": items,
    }


def split_perplexity_over_checkpoints(
    models: Mapping[str, object] | Sequence, pairs: Sequence[tuple], tokenizer=None
) -> list[dict]:
    """:func:`split_perplexity` for each checkpoint (a ``{name: model}`` mapping or a list): one row per
    checkpoint with ``checkpoint``, ``prompt_ppl``, ``answer_ppl``, ``full_ppl``.

    Runs each model in eval mode (:func:`token_nll`); every submodule's mode is restored."""
    if isinstance(models, (str, bytes)) or not isinstance(models, (Mapping, Sequence)):
        raise TypeError(
            f"models must be a {{name: model}} mapping or a list of models, got {type(models).__name__}"
        )
    if not models:
        raise ValueError("models must hold at least one checkpoint")
    named = list(models.items() if isinstance(models, Mapping) else enumerate(models))
    hooked = {}
    for name, model in named:
        try:
            hooked[name] = wrap(model)
        except (TypeError, ValueError) as err:
            raise type(err)(f"models[{name!r}]: {err}") from None
    rows = []
    for name, _ in named:
        result = split_perplexity(hooked[name], pairs, tokenizer)
        rows.append({"checkpoint": name, **{k: result[k] for k in ("prompt_ppl", "answer_ppl", "full_ppl")}})
    return rows
