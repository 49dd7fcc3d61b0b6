"""BLOSUM62 alignment with affine gaps (Gotoh), repeat alignment maps and repeat detection by self-alignment.

A gap of ``L`` residues scores ``gap_open + (L - 1) * gap_extend`` (Biopython's ``open_gap_score`` /
``extend_gap_score`` convention). The dynamic programme runs row by row with numpy: the in-row gap state is
a running maximum, so a 600 x 600 alignment takes a few tens of milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml_interp.bio.alphabet import BLOSUM62, residue_indices
from icml_interp.validation import check_choice, check_int, check_number

_M, _X, _Y = 0, 1, 2
_KA_LAMBDA, _KA_K = (
    0.3176,
    0.134,
)  # ungapped Karlin-Altschul parameters of BLOSUM62 (half-bit scores)  # match, gap in b (a residue against '-'), gap in a


@dataclass(frozen=True, eq=False)
class Alignment:
    """An alignment of ``a`` and ``b``.

    Attributes
    ----------
    score : float
        BLOSUM62 plus gap scores.
    pairs : np.ndarray
        ``(k, 2)`` int64 aligned index pairs ``(i in a, j in b)``, increasing in both; gaps are not listed.
    identity : float
        Fraction of the pairs with identical residues (0 when there are none).
    """

    score: float
    pairs: np.ndarray
    identity: float


@dataclass(frozen=True, eq=False)
class RepeatMatch:
    """Two copies of a repeat found by :func:`find_repeats`.

    Attributes
    ----------
    spans : ((int, int), (int, int))
        Half-open spans of the two copies, the left one first.
    alignment : np.ndarray
        ``(len(sequence),)`` int64 map: each aligned position of one copy to its partner in the other, -1
        elsewhere (the convention of ``Protein.alignment`` for two copies).
    score : float
        Local alignment score of the pairs (substitutions and the gaps between them).
    identity : float
        Fraction of identical aligned pairs.
    """

    spans: tuple[tuple[int, int], tuple[int, int]]
    alignment: np.ndarray
    score: float
    identity: float


def _gaps(gap_open, gap_extend) -> tuple[float, float]:
    """Gap scores in [-1e6, 0] (bounded so that no sum of them overflows to -inf)."""
    return (
        check_number(gap_open, "gap_open", minimum=-1e6, maximum=0),
        check_number(gap_extend, "gap_extend", minimum=-1e6, maximum=0),
    )


def _fill(
    s: np.ndarray, local: bool, gap_open: float, gap_extend: float, allowed: np.ndarray | None = None
) -> np.ndarray:
    """Gotoh score tables ``(3, n + 1, m + 1)`` for the substitution scores ``s`` ``(n, m)``; cells where
    ``allowed`` ``(n, m)`` is False are forbidden in every state."""
    n, m = s.shape
    t = np.full((3, n + 1, m + 1), -np.inf)
    ramp = gap_extend * np.arange(m + 1)
    if not local:
        t[_M, 0, 0] = 0.0
        t[_Y, 0, 1:] = gap_open + ramp[:-1]
    for i in range(1, n + 1):
        prev = t[:, i - 1]
        best = prev.max(axis=0)  # (m + 1,)
        t[_M, i, 1:] = s[i - 1] + (np.maximum(best[:-1], 0.0) if local else best[:-1])
        t[_X, i] = np.maximum(np.maximum(prev[_M], prev[_Y]) + gap_open, prev[_X] + gap_extend)
        if allowed is not None:
            t[_M, i, 1:][~allowed[i - 1]] = -np.inf
            t[_X, i, 1:][~allowed[i - 1]] = -np.inf
        # Y[i, j] = max_k<j (max(M, X)[i, k] + open + (j - 1 - k) * extend): a running maximum
        opened = np.maximum.accumulate(np.maximum(t[_M, i], t[_X, i]) - ramp)
        t[_Y, i, 1:] = gap_open + ramp[:-1] + opened[:-1]
        if allowed is not None:
            t[_Y, i, 1:][~allowed[i - 1]] = -np.inf
    return t


def _close(x: float, y: float) -> bool:
    return x == y or abs(x - y) <= 1e-9 * max(1.0, abs(y))  # y is a finite score on the path


def _traceback(t: np.ndarray, s: np.ndarray, state: int, i: int, j: int, local: bool, go: float, ge: float):
    """Aligned pairs of the path ending in ``state`` at cell ``(i, j)``, following the first predecessor
    whose score reproduces the cell's."""
    pairs = []
    while i > 0 or j > 0:
        v = t[state, i, j]
        if state == _M:
            pairs.append((i - 1, j - 1))
            prev = v - s[i - 1, j - 1]
            i, j = i - 1, j - 1
            if local and _close(prev, 0.0):
                break
            state = next(k for k in (_M, _X, _Y) if _close(t[k, i, j], prev))
        elif state == _X:
            i -= 1
            state = next(k for k, g in ((_X, ge), (_M, go), (_Y, go)) if _close(t[k, i, j] + g, v))
        else:
            j -= 1
            state = next(k for k, g in ((_Y, ge), (_M, go), (_X, go)) if _close(t[k, i, j] + g, v))
    return np.array(pairs[::-1], dtype=np.int64).reshape(-1, 2)


def _identity(x: np.ndarray, y: np.ndarray, pairs: np.ndarray) -> float:
    return float(np.mean(x[pairs[:, 0]] == y[pairs[:, 1]])) if len(pairs) else 0.0


def align(
    a: str, b: str, *, mode: str = "global", gap_open: float = -10, gap_extend: float = -1
) -> Alignment:
    """Align two proteins with BLOSUM62 and affine gaps (Needleman-Wunsch/Smith-Waterman with Gotoh's states).

    Parameters
    ----------
    a, b : str
        Standard amino acids (either case).
    mode : {"global", "local"}
        End to end, or the best-scoring pair of segments (empty, score 0, if no pair scores above 0).
    gap_open, gap_extend : float
        Scores (in ``[-1e6, 0]``) of a gap's first and each further residue.

    Returns
    -------
    Alignment
    """
    x, y = residue_indices(a, "a"), residue_indices(b, "b")
    check_choice(mode, "mode", ("global", "local"))
    go, ge = _gaps(gap_open, gap_extend)
    s = BLOSUM62[x[:, None], y[None, :]].astype(np.float64)  # (n, m)
    local = mode == "local"
    t = _fill(s, local, go, ge)
    if local:
        i, j = np.unravel_index(int(np.argmax(t[_M])), t[_M].shape)
        score = float(t[_M, i, j])
        if score <= 0:
            return Alignment(0.0, np.zeros((0, 2), dtype=np.int64), 0.0)
        pairs = _traceback(t, s, _M, int(i), int(j), True, go, ge)
    else:
        state = int(np.argmax(t[:, -1, -1]))
        score = float(t[state, -1, -1])
        pairs = _traceback(t, s, state, len(x), len(y), False, go, ge)
    pairs.setflags(write=False)
    return Alignment(score, pairs, _identity(x, y, pairs))


def _check_copies(copies, length: int) -> list[tuple[int, int]]:
    if not isinstance(copies, Sequence) or isinstance(copies, str) or len(copies) < 2:
        raise TypeError(f"copies must be a sequence of at least two (start, end) spans, got {copies!r:.80}")
    spans: list[tuple[int, int]] = []
    for k, span in enumerate(copies):
        if not isinstance(span, Sequence) or isinstance(span, str) or len(span) != 2:
            raise TypeError(f"copies[{k}] must be a (start, end) pair of ints, got {span!r:.80}")
        start = check_int(span[0], f"copies[{k}] start", minimum=0)
        end = check_int(span[1], f"copies[{k}] end", minimum=start + 1, maximum=length)
        if spans and start < spans[-1][1]:
            raise ValueError(
                f"copies must be sorted and non-overlapping, got {spans[-1]} then {(start, end)}"
            )
        spans.append((start, end))
    return spans


def repeat_alignment_map(
    sequence: str, copies, *, gap_open: float = -10, gap_extend: float = -1
) -> np.ndarray:
    """The ``Protein.alignment`` map of known repeat copies, from global alignments of consecutive copies.

    Parameters
    ----------
    sequence : str
        Standard amino acids.
    copies : sequence of (int, int)
        At least two half-open spans, sorted and non-overlapping.
    gap_open, gap_extend : float
        As in :func:`align`.

    Returns
    -------
    np.ndarray
        ``(len(sequence),)`` int64: for a position of copy ``c > 0`` its aligned position in copy ``c - 1``,
        for the first copy its partner in the second; -1 outside the copies and at gapped positions.
    """
    residue_indices(sequence, "sequence")
    spans = _check_copies(copies, len(sequence))
    go, ge = _gaps(gap_open, gap_extend)
    out = np.full(len(sequence), -1, dtype=np.int64)
    for c in range(1, len(spans)):
        (s0, e0), (s1, e1) = spans[c - 1], spans[c]
        pairs = align(sequence[s0:e0], sequence[s1:e1], gap_open=go, gap_extend=ge).pairs
        out[s1 + pairs[:, 1]] = s0 + pairs[:, 0]
        if c == 1:
            out[s0 + pairs[:, 0]] = s1 + pairs[:, 1]
    return out


def _path_score(pairs: np.ndarray, s: np.ndarray, go: float, ge: float) -> float:
    """Score of a local alignment given by its pairs: substitutions plus the gaps between the pairs."""
    steps = np.diff(pairs, axis=0) - 1  # (k - 1, 2) residues skipped in a and in b
    gaps = steps[steps > 0]
    return float(s[pairs[:, 0], pairs[:, 1]].sum() + (go + (gaps - 1) * ge).sum())


def _split(pairs: np.ndarray, s: np.ndarray, go: float, ge: float) -> np.ndarray:
    """The part of a self-alignment whose two spans do not overlap: of the cuts ``c`` that keep the pairs
    with ``i < c <= j``, the one keeping the highest score. (Periodic or chance-extended repeats align
    a span with an overlapping one; a position would then have two partners.)"""
    (_, b0), (a1, _) = pairs[0], pairs[-1]
    if a1 < b0:
        return pairs
    best, keep = -np.inf, pairs[:0]
    for c in range(int(b0), int(a1) + 2):
        kept = pairs[np.searchsorted(pairs[:, 1], c) : np.searchsorted(pairs[:, 0], c)]
        score = _path_score(kept, s, go, ge) if len(kept) else -np.inf
        if score > best:
            best, keep = score, kept
    return keep


def find_repeats(
    sequence: str,
    *,
    min_length: int = 8,
    min_score: float | None = None,
    max_repeats: int = 1,
    gap_open: float = -10,
    gap_extend: float = -1,
) -> list[RepeatMatch]:
    """Repeats found without their spans: Smith-Waterman of ``sequence`` against itself off the diagonal.

    Only cells ``(i, j)`` with ``j - i >= min_length`` may align, so a residue never pairs with itself or a
    close neighbour. Where the best alignment's two spans overlap (tandem copies, or a chance extension
    into the other copy), it is cut where the higher-scoring part with disjoint spans remains. After each
    match its block of cells is forbidden and the search repeats (Waterman-Eggert style), up to
    ``max_repeats`` matches.

    Parameters
    ----------
    sequence : str
        Standard amino acids.
    min_length : int
        Smallest offset between copies and fewest aligned pairs of a match (>= 1).
    min_score : float or None
        Smallest local alignment score of a match. None: the larger of ``4 * min_length`` and the score
        that chance reaches with E-value 0.01 in the ``n (n - 1) / 2`` cells searched, by the ungapped
        Karlin-Altschul statistics of BLOSUM62 (``lambda = 0.3176``, ``K = 0.134``): about 42 for 300
        residues, 46 for 600 (an exact copy scores about 5.3 per residue).
    max_repeats : int
        Most matches returned (>= 1).
    gap_open, gap_extend : float
        As in :func:`align`.

    Returns
    -------
    list of RepeatMatch
        Best first; empty when nothing reaches ``min_score``.
    """
    x = residue_indices(sequence, "sequence")
    min_length = check_int(min_length, "min_length", minimum=1)
    n = len(x)
    if min_score is None:
        chance = math.log(max(_KA_K * n * (n - 1) / 2 / 0.01, 1.0)) / _KA_LAMBDA
        threshold = max(4.0 * min_length, chance)
    else:
        threshold = check_number(min_score, "min_score")
    max_repeats = check_int(max_repeats, "max_repeats", minimum=1)
    go, ge = _gaps(gap_open, gap_extend)
    s = BLOSUM62[x[:, None], x[None, :]].astype(np.float64)  # (n, n)
    idx = np.arange(n)
    allowed = idx[None, :] - idx[:, None] >= min_length
    found: list[RepeatMatch] = []
    while len(found) < max_repeats and allowed.any():
        t = _fill(s, True, go, ge, allowed)
        i, j = np.unravel_index(int(np.argmax(t[_M])), t[_M].shape)
        score = float(t[_M, i, j])
        if not score >= threshold or score <= 0:
            break
        path = _traceback(t, s, _M, int(i), int(j), True, go, ge)
        allowed[path[:, 0], path[:, 1]] = False  # progress even if the trim below drops the whole path
        pairs = _split(path, s, go, ge)
        score = _path_score(pairs, s, go, ge)
        if len(pairs) < min_length or not score >= threshold:
            continue
        (a0, b0), (a1, b1) = pairs[0], pairs[-1]
        allowed[a0 : a1 + 1, b0 : b1 + 1] = False
        amap = np.full(n, -1, dtype=np.int64)
        amap[pairs[:, 0]] = pairs[:, 1]
        amap[pairs[:, 1]] = pairs[:, 0]
        amap.setflags(write=False)
        spans = ((int(a0), int(a1) + 1), (int(b0), int(b1) + 1))
        found.append(RepeatMatch(spans, amap, score, _identity(x, x, pairs)))
    return found
