"""BEDTime's three tasks over generated series, and the scores of open descriptions.

- **Recognition**: a series and a description; is the description true? Half the items carry the series'
  own description, half a hard negative's (:func:`~icml_agents.bedtime.series.hard_negative`: exactly one
  attribute differs), in random order.
- **Differentiation**: a series and ``k`` descriptions (its own and ``k − 1`` hard negatives, all distinct);
  which one is true?
- **Generation**: a series; write its description. Scored by :func:`attribute_scores` (the parser's
  attributes against the truth: precision, recall, F1 over applicable attributes), with :func:`bleu` and
  :func:`rouge_l` against the reference as secondary metrics.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from icml_agents.bedtime.series import (
    Attributes,
    describe,
    generate_series,
    hard_negative,
    parse_description,
    random_attributes,
)
from icml_agents.validation import check_int, check_seed

MAX_ITEMS = 10**7


@dataclasses.dataclass(frozen=True)
class Item:
    """One task item: the series, its true attributes, the candidate descriptions and the answer.

    Recognition: one candidate, ``answer`` 1 (true) or 0 (false). Differentiation: ``k`` candidates,
    ``answer`` the index of the true one. Generation: no candidates, ``answer`` -1; ``reference`` holds the
    true description.
    """

    task: str
    series: np.ndarray
    attributes: Attributes
    candidates: tuple[str, ...]
    answer: int
    reference: str
    changed: str | None = None  # recognition negatives: the attribute the description got wrong


def check_items(items: object, task: str | None = None) -> list[Item]:
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"items must be a non-empty list of bedtime Items, got {type(items).__name__}")
    for i, it in enumerate(items):
        if not isinstance(it, Item):
            raise TypeError(f"items[{i}] must be a bedtime Item, got {type(it).__name__}")
        if task is not None and it.task != task:
            raise ValueError(f"items[{i}] is a {it.task} item, expected {task}")
    return list(items)


def _sample(rng: np.random.Generator, length: int) -> tuple[np.ndarray, Attributes, str]:
    attrs = random_attributes(rng)
    return generate_series(attrs, length, rng), attrs, describe(attrs, rng)


def build_recognition(n: int, seed: int = 0, length: int = 120) -> list[Item]:
    """``n`` true/false items, exactly ``n // 2`` true (shuffled), negatives hard (one attribute off)."""
    check_int(n, "n", 1, MAX_ITEMS)
    rng = check_seed(seed)
    truths = rng.permutation(np.arange(n) < n // 2)
    items = []
    for truth in truths:
        x, attrs, ref = _sample(rng, length)
        if truth:
            items.append(Item("recognition", x, attrs, (ref,), 1, ref))
        else:
            wrong, changed = hard_negative(attrs, rng)
            items.append(Item("recognition", x, attrs, (describe(wrong, rng),), 0, ref, changed))
    return items


def build_differentiation(n: int, k: int = 4, seed: int = 0, length: int = 120) -> list[Item]:
    """``n`` multiple-choice items with ``k`` candidate descriptions (distinct attribute sets), the true one
    at a uniform position."""
    check_int(n, "n", 1, MAX_ITEMS)
    check_int(k, "k", 2, 8)
    rng = check_seed(seed)
    items = []
    for _ in range(n):
        x, attrs, ref = _sample(rng, length)
        options = {attrs}
        while len(options) < k:
            options.add(hard_negative(attrs, rng)[0])
        wrong = sorted(options - {attrs}, key=lambda a: str(a.as_dict()))
        answer = int(rng.integers(k))
        order = [*wrong[:answer], attrs, *wrong[answer:]]
        candidates = tuple(ref if a == attrs else describe(a, rng) for a in order)
        items.append(Item("differentiation", x, attrs, candidates, answer, ref))
    return items


def build_generation(n: int, seed: int = 0, length: int = 120) -> list[Item]:
    """``n`` open-description items (the reference is the template description)."""
    check_int(n, "n", 1, MAX_ITEMS)
    rng = check_seed(seed)
    return [Item("generation", x, a, (), -1, ref) for x, a, ref in (_sample(rng, length) for _ in range(n))]


def attribute_scores(text: str, attributes: Attributes) -> dict[str, float]:
    """Attribute-level precision, recall and F1 of a description: the parser's stated attributes against
    the truth over the applicable ones (a stated position without an event counts as wrong)."""
    if not isinstance(attributes, Attributes):
        raise TypeError(f"attributes must be an Attributes, got {type(attributes).__name__}")
    stated = {k: v for k, v in parse_description(text).items() if v is not None}
    truth = {k: getattr(attributes, k) for k in attributes.applicable()}
    correct = sum(1 for k, v in stated.items() if truth.get(k) == v)
    precision = correct / len(stated) if stated else 0.0
    recall = correct / len(truth)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _words(text: str, name: str) -> list[str]:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def bleu(candidate: str, reference: str, max_n: int = 4) -> float:
    """Sentence BLEU (Papineni et al. 2002) with add-one smoothing of the n-gram precisions for ``n ≥ 2``
    (Lin & Och 2004) and the brevity penalty; 0 to 1, on lower-cased word tokens."""
    check_int(max_n, "max_n", 1, 8)
    cand, ref = _words(candidate, "candidate"), _words(reference, "reference")
    if not cand or not ref:
        return 0.0
    logs = []
    for n in range(1, max_n + 1):
        c = Counter(tuple(cand[i : i + n]) for i in range(len(cand) - n + 1))
        r = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
        overlap, total = sum((c & r).values()), max(sum(c.values()), 0)
        smooth = 0 if n == 1 else 1
        if overlap + smooth == 0:
            return 0.0
        logs.append(math.log((overlap + smooth) / (total + smooth)))
    penalty = min(0.0, 1 - len(ref) / len(cand))
    return math.exp(penalty + sum(logs) / max_n)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 (Lin 2004): longest common subsequence of word tokens, harmonic mean of its precision and
    recall."""
    cand, ref = _words(candidate, "candidate"), _words(reference, "reference")
    if not cand or not ref:
        return 0.0
    prev = [0] * (len(ref) + 1)
    for a in cand:
        cur = [0]
        for j, b in enumerate(ref):
            cur.append(prev[j] + 1 if a == b else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(cand), lcs / len(ref)
    return 2 * p * r / (p + r)


def chance(items: Sequence[Item]) -> float:
    """The accuracy of uniform guessing on ``items``: 1/2 for recognition, 1/k for differentiation."""
    items = check_items(items)
    return float(np.mean([0.5 if it.task == "recognition" else 1 / len(it.candidates) for it in items]))
