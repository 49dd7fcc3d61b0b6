"""The games' scorers: pure functions of text (or of the listener's scores), checked against hand counts.

Tokens are :func:`words`: lower-cased runs of letters and digits (any script; punctuation, apostrophes and
underscores split). Content words (:func:`content_words`) are the words with a letter that are not in
:data:`STOPWORDS`, a fixed list of 126 English function words. Every scorer returns a float in a stated
range and returns 0.0 (never NaN) where there is nothing to count; that choice is stated per function.
"""

from __future__ import annotations

import math
import numbers
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from icml_agents.validation import check_int

__all__ = [
    "STOPWORDS",
    "acceptance_rate",
    "agreement",
    "consistency",
    "content_words",
    "distinct_n",
    "distinct_share",
    "embedding_spread",
    "first_word",
    "novel_share",
    "parse_offer",
    "parse_response",
    "rarity",
    "referential_accuracy",
    "self_bleu",
    "sentence_bleu",
    "split_ideas",
    "trigram_embedding",
    "unigram_counts",
    "words",
]

_WORD = re.compile(r"[^\W_]+")
_LETTER = re.compile(r"[^\W\d_]")
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself
    no nor not now of off on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your yours yourself
    also""".split()
)
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b")
_ACCEPT_WORDS = frozenset({"yes", "deal", "ok", "okay"})
_REJECT_WORDS = frozenset({"no"})
_NEGATORS = frozenset({"not", "never", "cannot", "t"})  # "t" is what words() leaves of "n't"
_IDEA_SPLIT = re.compile(r"[\n;,]+")
_BULLET = re.compile(r"^\s*(?:[-*•]+|\(?\d+[.)]|\(?[a-z][.)](?=\s))\s*", re.IGNORECASE)


# validation ---------------------------------------------------------------------------------------------
def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def _texts(values: Any, name: str, *, optional: bool = False) -> list[Any]:
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, got {type(values).__name__}")
    for i, v in enumerate(values):
        if not (isinstance(v, str) or (optional and v is None)):
            kind = "a str or None" if optional else "a str"
            raise TypeError(f"{name}[{i}] must be {kind}, got {type(v).__name__}")
    return list(values)


def _real(value: Any, name: str, *, allow_minus_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or v == math.inf or (v == -math.inf and not allow_minus_inf):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


# tokens -------------------------------------------------------------------------------------------------
def words(text: str) -> list[str]:
    """The lower-cased runs of letters and digits of ``text`` (``"Don't stop!"`` → ``["don", "t", "stop"]``)."""
    return _WORD.findall(_text(text, "text").lower())


def content_words(text: str, stopwords: frozenset[str] | set[str] = STOPWORDS) -> list[str]:
    """The :func:`words` of ``text`` that hold a letter and are not in ``stopwords``, in order, repeats kept."""
    if not isinstance(stopwords, (set, frozenset)) or not all(isinstance(w, str) for w in stopwords):
        raise TypeError(f"stopwords must be a set of strings, got {type(stopwords).__name__}")
    return [w for w in words(text) if w not in stopwords and _LETTER.search(w)]


def first_word(text: str) -> str:
    """The normalized first word of an answer (``" Apple, I think"`` → ``"apple"``); ``""`` if it has none."""
    found = _WORD.search(_text(text, "text").lower())
    return found.group() if found else ""


def split_ideas(text: str) -> list[str]:
    """The ideas of a list answer: ``text`` split at newlines, semicolons and commas, a leading bullet or
    number (``-``, ``*``, ``•``, ``1.``, ``2)``, ``a)``) removed, whitespace collapsed, empty pieces dropped."""
    out = []
    for piece in _IDEA_SPLIT.split(_text(text, "text")):
        idea = " ".join(_BULLET.sub("", piece).split())
        if idea:
            out.append(idea)
    return out


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


# novelty --------------------------------------------------------------------------------------------------
def distinct_n(texts: Sequence[str], n: int = 1) -> float:
    """Distinct-n (Li et al. 2016): the number of distinct word n-grams over the number of n-grams, counted
    within each text (no n-gram spans two texts). In [0, 1]; 0.0 when the texts hold no n-gram."""
    items = _texts(texts, "texts")
    n = check_int(n, "n", minimum=1, maximum=16)
    grams = [g for t in items for g in _ngrams(words(t), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def sentence_bleu(candidate: str, references: Sequence[str], max_n: int = 4) -> float:
    """BLEU of one candidate against several references (Papineni et al. 2002), on :func:`words` tokens.

    Modified precision p_k (k = 1..``max_n``): candidate k-gram counts clipped by their largest count in
    any one reference. Smoothing (Lin & Och 2004, "add one"): p_k = (matches + 1) / (k-grams + 1) for
    k >= 2, so a short candidate or one missing 4-gram match does not zero the score; p_1 is not smoothed
    (no word in common gives 0). Brevity penalty exp(1 - r/c) when c < r, with r the reference length
    closest to the candidate's c (the shorter on a tie). BLEU = BP * exp(mean_k log p_k), in [0, 1].
    A candidate without words, or references without words, scores 0.0.
    """
    cand = words(_text(candidate, "candidate"))
    refs = [words(r) for r in _texts(references, "references")]
    max_n = check_int(max_n, "max_n", minimum=1, maximum=8)
    refs = [r for r in refs if r]
    if not cand or not refs:
        return 0.0
    log_sum = 0.0
    for k in range(1, max_n + 1):
        counts = Counter(_ngrams(cand, k))
        best: Counter[tuple[str, ...]] = Counter()
        for r in refs:
            best |= Counter(_ngrams(r, k))
        matches = sum(min(c, best[g]) for g, c in counts.items())
        total = sum(counts.values())
        if k == 1:
            if matches == 0:
                return 0.0
            log_sum += math.log(matches / total)
        else:
            log_sum += math.log((matches + 1) / (total + 1))
    c = len(cand)
    closest = min((len(ref) for ref in refs), key=lambda length: (abs(length - c), length))
    penalty = 0.0 if c >= closest else 1.0 - closest / c
    return math.exp(penalty + log_sum / max_n)


def self_bleu(texts: Sequence[str], others: Sequence[str] | None = None, max_n: int = 4) -> float:
    """Self-BLEU (Zhu et al. 2018): the mean :func:`sentence_bleu` of each text against the others.

    Without ``others``: each of ``texts`` against all the other ``texts``. With ``others`` (the partner's
    turns): each of ``texts`` against all of ``others`` and each of ``others`` against all of ``texts``.
    Texts without words are not candidates (an empty turn is not counted as novel). In [0, 1]; 0.0 when no
    candidate has both words and a reference with words.
    """
    items = _texts(texts, "texts")
    partner = None if others is None else _texts(others, "others")
    max_n = check_int(max_n, "max_n", minimum=1, maximum=8)
    if partner is None:
        pairs = [(t, items[:i] + items[i + 1 :]) for i, t in enumerate(items)]
    else:
        pairs = [(t, partner) for t in items] + [(o, items) for o in partner]
    scored = [sentence_bleu(t, refs, max_n) for t, refs in pairs if words(t) and any(words(r) for r in refs)]
    return float(np.mean(scored)) if scored else 0.0


def trigram_embedding(texts: Sequence[str]) -> np.ndarray:
    """Bag-of-character-trigram vectors: ``(len(texts), V)`` float64 counts over the V distinct trigrams of
    the texts (columns in sorted order). A text is lower-cased, its whitespace collapsed to single spaces
    and padded with one space on each side, so ``"ab"`` gives ``" ab"`` and ``"ab "``; an empty text is a
    zero row. No model is needed; any callable ``texts -> (n, d) array`` can replace it in the games."""
    items = _texts(texts, "texts")
    grams = []
    for t in items:
        norm = " ".join(t.lower().split())
        padded = f" {norm} " if norm else ""
        grams.append(Counter(padded[i : i + 3] for i in range(len(padded) - 2)))
    vocab = sorted(set().union(*grams)) if grams else []
    column = {g: j for j, g in enumerate(vocab)}
    out = np.zeros((len(items), len(vocab)), dtype=np.float64)
    for i, counts in enumerate(grams):
        for g, c in counts.items():
            out[i, column[g]] = c
    return out


def embedding_spread(vectors: Any) -> float:
    """The mean pairwise cosine distance 1 - cos(u, v) over the rows of ``vectors`` (an ``(n, d)`` real
    array). Zero rows (texts without trigrams) are left out; fewer than two rows left gives 0.0. In [0, 1]
    for non-negative vectors such as :func:`trigram_embedding`'s, in [0, 2] in general."""
    if not isinstance(vectors, np.ndarray):
        raise TypeError(f"vectors must be a numpy array, got {type(vectors).__name__}")
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be a 2-D (texts, dims) array, got shape {vectors.shape}")
    if vectors.dtype.kind not in "fiu":
        raise TypeError(f"vectors must hold real numbers, got dtype {vectors.dtype}")
    x = vectors.astype(np.float64)
    if not np.isfinite(x).all():
        raise ValueError("vectors must be finite, got NaN or inf")
    scale = np.abs(x).max(axis=1) if x.shape[1] else np.zeros(len(x))
    keep = scale > 0
    if keep.sum() < 2:
        return 0.0
    x = x[keep] / scale[keep, None]  # rows scaled to max |x| = 1 first: huge values cannot overflow
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    upper = np.triu_indices(len(u), k=1)
    return float(np.clip(1.0 - (u @ u.T)[upper], 0.0, 2.0).mean())


# cooperation -------------------------------------------------------------------------------------------
def agreement(answers_a: Sequence[str], answers_b: Sequence[str]) -> float:
    """The share of rounds whose two answers have the same non-empty :func:`first_word`, in [0, 1]."""
    a = _texts(answers_a, "answers_a")
    b = _texts(answers_b, "answers_b")
    if not a:
        raise ValueError("answers_a must hold at least one answer, got []")
    if len(b) != len(a):
        raise ValueError(f"answers_b must hold one answer per answer of answers_a ({len(a)}), got {len(b)}")
    return sum(
        1 for x, y in zip(a, b, strict=True) if first_word(x) and first_word(x) == first_word(y)
    ) / len(a)


def _credit(scores: Sequence[float], target: int) -> float:
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    return 1.0 / len(tied) if target in tied else 0.0


def referential_accuracy(
    candidate_scores: Sequence[Sequence[float]], targets: Sequence[int], valid: Sequence[bool] | None = None
) -> float:
    """The listener's accuracy: per round, the credit is 1/k when the target is among the k candidates with
    the highest score (a tie is broken at random, in expectation) and 0 otherwise, or 0 when the round's clue
    was not ``valid``; the mean over rounds, in [0, 1]. A listener that scores all candidates equally gets
    1/(number of candidates): chance. Scores are log-probabilities (-inf allowed)."""
    if isinstance(candidate_scores, (str, bytes)) or not isinstance(candidate_scores, (list, tuple)):
        raise TypeError(
            f"candidate_scores must be a list of score lists, got {type(candidate_scores).__name__}"
        )
    if not candidate_scores:
        raise ValueError("candidate_scores must hold at least one round, got []")
    rows = []
    for i, row in enumerate(candidate_scores):
        if not isinstance(row, (list, tuple)) or not row:
            raise ValueError(f"candidate_scores[{i}] must be a non-empty list of scores, got {row!r:.60}")
        rows.append([_real(s, f"candidate_scores[{i}]", allow_minus_inf=True) for s in row])
    if isinstance(targets, (str, bytes)) or not isinstance(targets, (list, tuple)):
        raise TypeError(f"targets must be a list of candidate indices, got {type(targets).__name__}")
    if len(targets) != len(rows):
        raise ValueError(
            f"targets must hold one index per round of candidate_scores ({len(rows)}), got {len(targets)}"
        )
    for i, t in enumerate(targets):
        check_int(t, f"targets[{i}]", minimum=0, maximum=len(rows[i]) - 1)
    if valid is None:
        ok = [True] * len(rows)
    else:
        if not isinstance(valid, (list, tuple)) or len(valid) != len(rows):
            raise ValueError(
                f"valid must be None or a list of one bool per round of candidate_scores ({len(rows)}), got {valid!r:.60}"
            )
        if not all(isinstance(v, (bool, np.bool_)) for v in valid):
            raise TypeError("valid must hold True or False for each round")
        ok = [bool(v) for v in valid]
    credits = [_credit(r, int(t)) if v else 0.0 for r, t, v in zip(rows, targets, ok, strict=True)]
    return float(np.mean(credits))


def parse_offer(text: str, pot: int = 10) -> int | None:
    """The proposer's offer: the first number in ``text``, digits or a word from ``zero`` to ``ten``
    (lower-cased). ``None`` (an unparseable offer, a failed round) when there is none, or the first one is
    negative, has a fractional part (``3.5``, ``3,5``) or exceeds ``pot``."""
    text = _text(text, "text")
    pot = check_int(pot, "pot", minimum=1, maximum=10**6)
    found = _NUMBER.search(text.lower())
    if found is None:
        return None
    token = found.group()
    if token in _NUMBER_WORDS:
        value = _NUMBER_WORDS.index(token)
    elif token.startswith("-") or "." in token or "," in token:
        return None
    else:
        value = int(token)
    return value if value <= pot else None


def parse_response(text: str) -> str | None:
    """The responder's decision: the first decision word of ``text`` (:func:`words`) decides. Accept words:
    ``accept*``, ``agree*``, ``yes``, ``deal``, ``ok``, ``okay``; reject words: ``reject*``, ``refus*``,
    ``declin*``, ``no``. A decision word right after ``not``, ``never``, ``cannot`` or ``n't`` is flipped
    (``"I won't accept"`` rejects). Returns ``"accept"``, ``"reject"`` or ``None`` (unparseable: a fail)."""
    tokens = words(_text(text, "text"))
    for i, w in enumerate(tokens):
        if w.startswith(("accept", "agree")) or w in _ACCEPT_WORDS:
            decision = "accept"
        elif w.startswith(("reject", "refus", "declin")) or w in _REJECT_WORDS:
            decision = "reject"
        else:
            continue
        if i > 0 and tokens[i - 1] in _NEGATORS:
            decision = "reject" if decision == "accept" else "accept"
        return decision
    return None


def acceptance_rate(offers: Sequence[str], responses: Sequence[str | None], pot: int = 10) -> float:
    """The share of ultimatum rounds whose deal was made: the offer text parses (:func:`parse_offer`) and
    the response text (``None``: no response was asked) parses as ``"accept"``. In [0, 1]."""
    offer_texts = _texts(offers, "offers")
    response_texts = _texts(responses, "responses", optional=True)
    pot = check_int(pot, "pot", minimum=1, maximum=10**6)
    if not offer_texts:
        raise ValueError("offers must hold at least one round, got []")
    if len(response_texts) != len(offer_texts):
        raise ValueError(
            f"responses must hold one entry per entry of offers ({len(offer_texts)}), got {len(response_texts)}"
        )
    made = [
        parse_offer(o, pot) is not None and r is not None and parse_response(r) == "accept"
        for o, r in zip(offer_texts, response_texts, strict=True)
    ]
    return sum(made) / len(made)


def _turns(turns: Any, name: str) -> list[tuple[str, str]]:
    if isinstance(turns, str) or not isinstance(turns, (list, tuple)):
        raise TypeError(f"{name} must be a list of (player, text) pairs, got {type(turns).__name__}")
    out = []
    for i, pair in enumerate(turns):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"{name}[{i}] must be a (player, text) pair, got {pair!r:.60}")
        out.append((_text(pair[0], f"{name}[{i}][0]"), _text(pair[1], f"{name}[{i}][1]")))
    return out


def consistency(turns: Sequence[tuple[str, str]]) -> float:
    """How much each player's story turns reuse the partner's words: over every turn that has an earlier turn
    by the other player, the share of its content-word tokens (:func:`content_words`, repeats counted) that
    occur among the content words of the partner's earlier turns. ``turns`` is a list of ``(player, text)``
    pairs in story order (the opening is not a turn). In [0, 1]; 0.0 when no such turn has content words."""
    items = _turns(turns, "turns")
    hits = total = 0
    for i, (player, text) in enumerate(items):
        partner = [t for p, t in items[:i] if p != player]
        if not partner:
            continue
        seen = {w for t in partner for w in content_words(t)}
        mine = content_words(text)
        hits += sum(w in seen for w in mine)
        total += len(mine)
    return hits / total if total else 0.0


def novel_share(proposal: str, response: str) -> float:
    """The share of the response's content-word tokens (repeats counted) that are not content words of the
    proposal: how much the builder added. In [0, 1]; 0.0 when the response has no content word."""
    seen = set(content_words(_text(proposal, "proposal")))
    mine = content_words(_text(response, "response"))
    return sum(w not in seen for w in mine) / len(mine) if mine else 0.0


def distinct_share(chain: Sequence[str], exclude: Sequence[str] = ()) -> float:
    """The share of distinct words in a word chain: the number of distinct non-empty :func:`first_word` of
    ``chain`` that are not in ``exclude`` (the start word), over ``len(chain)``, so an empty or repeated
    answer lowers it. In [0, 1]; 0.0 for an empty chain."""
    items = [first_word(w) for w in _texts(chain, "chain")]
    banned = {first_word(w) for w in _texts(exclude, "exclude")}
    return len({w for w in items if w} - banned) / len(items) if items else 0.0


def unigram_counts(texts: Sequence[str]) -> dict[str, int]:
    """Word counts (:func:`words`) over ``texts``: a reference frequency list for :func:`rarity`."""
    return dict(Counter(w for t in _texts(texts, "texts") for w in words(t)))


def _reference(reference: Any) -> tuple[dict[str, float], float]:
    if not isinstance(reference, Mapping):
        raise TypeError(f"reference must be a mapping of word -> count, got {type(reference).__name__}")
    counts = {}
    for word, count in reference.items():
        if not isinstance(word, str):
            raise TypeError(f"reference keys must be words (str), got {word!r}")
        c = _real(count, f"reference[{word!r}]")
        if c < 0:
            raise ValueError(f"reference[{word!r}] must be a count >= 0, got {count!r}")
        counts[word] = c
    return counts, sum(counts.values()) + len(counts) + 1.0


def rarity(chain: Sequence[str], reference: Mapping[str, float]) -> float:
    """The mean rarity of the non-empty :func:`first_word` of ``chain`` under a reference unigram frequency
    list ``reference`` (word -> count >= 0, keys as :func:`words` writes them; e.g. :func:`unigram_counts`).

    With N the total count and V the number of words of the reference, p(w) = (count(w) + 1) / (N + V + 1)
    (add-one over the reference vocabulary and one slot for unseen words) and rarity(w) = -log p(w) /
    log(N + V + 1): 1 for a word the reference never saw, near 0 for its most common words. In [0, 1];
    0.0 when the chain has no word; every word has rarity 1 under an empty reference."""
    items = [first_word(w) for w in _texts(chain, "chain")]
    counts, denominator = _reference(reference)
    if not math.isfinite(denominator):
        raise ValueError("reference counts must sum to a finite number, got an overflow")
    items = [w for w in items if w]
    if not items:
        return 0.0
    if denominator <= 1.0:
        return 1.0
    scale = math.log(denominator)
    values = [-math.log((counts.get(w, 0.0) + 1.0) / denominator) / scale for w in items]
    return float(np.clip(np.mean(values), 0.0, 1.0))
