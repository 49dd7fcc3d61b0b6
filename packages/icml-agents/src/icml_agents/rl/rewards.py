"""Reward functions with TRL's ``reward_funcs`` signature: ``reward(completions, **kwargs) -> list[float]``.

TRL's ``GRPOTrainer`` calls each reward function with the generated ``completions`` (strings, or for
conversational data lists of ``{"role", "content"}`` messages) and every other dataset column as a keyword
argument holding one value per completion (plus ``prompts``, ``completion_ids``, ... which we ignore).
"""

from __future__ import annotations

import re

from icml_agents.validation import check_column, check_list, check_texts


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    last = completion[-1] if isinstance(completion, list) and completion else None
    if isinstance(last, dict) and "content" in last:
        return str(last["content"])  # conversational: the last message is the assistant's answer
    raise TypeError(
        f"a completion must be a string or a list of {{'role', 'content'}} messages, got {completion!r}"
    )


def normalize_answer(text: str) -> str:
    """Case-fold, collapse whitespace and strip surrounding whitespace and ``.``: ``" Paris. "`` -> ``"paris"``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    return re.sub(r"\s+", " ", text).strip().strip(".").strip().casefold()


def exact_match_reward(completions, answer, **kwargs) -> list[float | None]:
    """1.0 where the completion equals the reference ``answer`` after :func:`normalize_answer`, else 0.0.

    ``answer`` holds one reference per completion (the dataset column ``answer``, as TRL passes it). A row
    whose reference is None gets None, "not applicable", which TRL's ``GRPOTrainer`` leaves out of the
    reward (``datasets.concatenate_datasets`` fills the columns a dataset lacks with None).
    """
    texts = check_texts(check_list(completions, "completions"), "completions", _text)
    pairs = zip(texts, check_column(answer, "answer", len(texts), "reference"), strict=True)
    return [None if a is None else float(normalize_answer(c) == normalize_answer(str(a))) for c, a in pairs]
