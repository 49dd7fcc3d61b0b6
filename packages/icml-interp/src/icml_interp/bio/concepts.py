"""Neuron concept labels: the AUROC of each neuron's activation as a predictor of a residue concept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata

from icml_interp.bio.alphabet import AMINO_ACIDS, CONCEPTS, residue_indices
from icml_interp.bio.tokens import ESM_VOCAB
from icml_interp.validation import check_bool, check_int, check_number

_CHUNK = 256  # columns ranked at once: bounds the float64 rank buffer


def _array(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = (value.to(torch.float64) if value.is_floating_point() else value).numpy()
    try:
        return np.asarray(value)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular array: {err}") from err


def _labels(labels, name: str, n: int | None = None) -> np.ndarray:
    """A ``(n,)`` bool vector with both classes (bools, or integers 0/1)."""
    arr = _array(labels, name)
    if arr.dtype.kind == "b":
        out = arr
    elif arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all():
        out = arr.astype(bool)
    else:
        raise TypeError(f"{name} must be a bool (or 0/1) array, got {arr.dtype}")
    if out.ndim != 1 or (n is not None and out.shape[0] != n):
        expected = f"({n},)" if n is not None else "(n,)"
        raise ValueError(f"{name} must have shape {expected} (one label per row), got {out.shape}")
    if out.all() or not out.any():
        raise ValueError(f"{name} must hold both classes (True and False), got only {bool(out[0])}")
    return out


def _scores(scores, name: str) -> np.ndarray:
    arr = _array(scores, name)
    if arr.dtype.kind not in "biuf" or arr.ndim not in (1, 2) or arr.size == 0:
        raise TypeError(f"{name} must be a non-empty (n,) or (n, k) real array, got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must hold finite values, got NaN or inf")
    return arr


def auroc(scores, labels) -> np.ndarray:
    """Area under the ROC curve of each score column as a predictor of ``labels`` (Mann-Whitney U).

    Ties get average ranks, so this equals ``sklearn.metrics.roc_auc_score(labels, column)`` up to
    rounding: ours is the exact rank statistic divided once (correctly rounded), scikit-learn's a
    trapezoid sum that can differ in the last bit (148 of 400 tied 0/1/2 columns over 10 + 10 tokens,
    at most 1.1e-16).

    Parameters
    ----------
    scores : array-like or torch.Tensor
        ``(n,)`` or ``(n, k)``, finite.
    labels : array-like of bool
        ``(n,)``, both classes present (0/1 integers are accepted).

    Returns
    -------
    np.ndarray
        float64, shape ``()`` for 1-d scores, ``(k,)`` for 2-d.
    """
    x = _scores(scores, "scores")
    y = _labels(labels, "labels", x.shape[0])
    u, pairs = _mann_whitney_u(x, y)
    return u / pairs


def _mann_whitney_u(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    """``(U, n_pos * n_neg)`` of each column of checked scores ``x`` against checked labels ``y``: ``U`` is
    the number of (positive, negative) pairs the column orders correctly, ties counting 1/2, shape
    ``x.shape[1:]``. ``U`` is a multiple of 1/2 computed exactly (rank sums of average ranks are), so the
    negated scores' ``U`` is exactly ``n_pos * n_neg - U``."""
    cols = x.reshape(x.shape[0], -1)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    out = np.empty(cols.shape[1])
    for start in range(0, cols.shape[1], _CHUNK):
        ranks = rankdata(cols[:, start : start + _CHUNK], axis=0)  # average ranks for ties
        out[start : start + _CHUNK] = ranks[y].sum(axis=0) - n_pos * (n_pos + 1) / 2
    return out.reshape(x.shape[1:]), n_pos * n_neg


def _members(concept) -> frozenset[str]:
    if isinstance(concept, str):
        if concept not in CONCEPTS:
            raise ValueError(
                f"concept must be one of {tuple(CONCEPTS)} or a set of amino acids, got {concept!r}"
            )
        return CONCEPTS[concept]
    if not isinstance(concept, Iterable):
        raise TypeError(f"concept must be a name in CONCEPTS or a set of amino acids, got {concept!r}")
    members = list(concept)
    if not members or not all(
        isinstance(a, str) and a.upper() in AMINO_ACIDS and len(a) == 1 for a in members
    ):
        raise ValueError(f"concept must be a non-empty set of one-letter amino acids, got {concept!r:.80}")
    return frozenset(a.upper() for a in members)


def concept_labels(sequences, concept) -> np.ndarray:
    """Which residues belong to a concept (e.g. ``"hydrophobic"``), one label per residue or token.

    Parameters
    ----------
    sequences : str, list of str, or torch.Tensor
        A protein string (one label per residue); a list of strings (labels concatenated in order, matching
        activations of the residues stacked in the same order); or ESM-2 token ids ``(seq,)`` or
        ``(batch, seq)`` (labels of the same shape; special tokens, X and other non-standard tokens False).
    concept : str or set of str
        A name in :data:`CONCEPTS` or a set of one-letter amino acids.

    Returns
    -------
    np.ndarray
        bool.
    """
    members = _members(concept)
    if isinstance(sequences, torch.Tensor):
        if sequences.dtype != torch.long or sequences.ndim not in (1, 2) or sequences.numel() == 0:
            raise TypeError(
                f"sequences must be a non-empty (seq,) or (batch, seq) LongTensor of ESM-2 token ids, "
                f"got {sequences.dtype} {tuple(sequences.shape)}"
            )
        ids = sequences.detach().cpu().numpy()
        if ids.min() < 0 or ids.max() >= len(ESM_VOCAB):
            raise ValueError(f"sequences must hold ESM-2 token ids in [0, {len(ESM_VOCAB)})")
        table = np.array([t in members for t in ESM_VOCAB])
        return table[ids]
    table = np.array([a in members for a in AMINO_ACIDS])
    if isinstance(sequences, str):
        return table[residue_indices(sequences, "sequences")]
    if not isinstance(sequences, (list, tuple)) or not sequences:
        raise TypeError(
            f"sequences must be a str, a non-empty list of str or a LongTensor of token ids, "
            f"got {type(sequences).__name__}"
        )
    return np.concatenate([table[residue_indices(s, f"sequences[{i}]")] for i, s in enumerate(sequences)])


@dataclass(frozen=True, eq=False)
class NeuronLabels:
    """Concept labels of neurons from :func:`label_neurons`.

    Attributes
    ----------
    concepts : tuple of str
        Row order of ``auroc``.
    auroc : np.ndarray
        ``(n_concepts, n_neurons)``: AUROC of each neuron's activation predicting each concept.
    threshold : float
        A neuron is ``positive`` for a concept at AUROC >= threshold, ``negative`` (inhibitory: its
        activation falls on the concept, i.e. its negated activation has AUROC >= threshold) at AUROC <=
        1 - threshold, boundary included: the comparison is of the negated activation's AUROC, computed
        exactly as ``auroc(-activations, labels)``, with ``threshold``.
    positive, negative : dict of str to np.ndarray
        Neuron indices per concept, strongest first.
    """

    concepts: tuple[str, ...]
    auroc: np.ndarray
    threshold: float
    positive: dict[str, np.ndarray]
    negative: dict[str, np.ndarray]

    def top(self, concept: str, k: int = 10, *, negative: bool = False) -> np.ndarray:
        """The ``k`` neurons with the highest AUROC for ``concept`` (lowest if ``negative``), strongest first,
        whatever the threshold."""
        if concept not in self.concepts:
            raise ValueError(f"concept must be one of {self.concepts}, got {concept!r}")
        k = check_int(k, "k", minimum=1)
        check_bool(negative, "negative")
        row = self.auroc[self.concepts.index(concept)]
        order = np.argsort(row if negative else -row, kind="stable")
        return order[:k]


def label_neurons(activations, labels: Mapping[str, object], *, threshold: float = 0.8) -> NeuronLabels:
    """Label neurons by the concepts their activations predict (the paper's AUROC criterion).

    Parameters
    ----------
    activations : torch.Tensor or np.ndarray
        ``(n_tokens, n_neurons)``, finite.
    labels : dict of str to bool array
        Concept name to ``(n_tokens,)`` labels (e.g. from :func:`concept_labels`), each with both classes.
    threshold : float
        In ``(0.5, 1]``.

    Returns
    -------
    NeuronLabels
    """
    x = _scores(activations, "activations")
    if x.ndim != 2:
        raise ValueError(f"activations must be (n_tokens, n_neurons), got shape {x.shape}")
    if not isinstance(labels, Mapping) or not labels:
        raise TypeError(f"labels must be a non-empty dict of concept name to bool array, got {labels!r:.80}")
    threshold = check_number(threshold, "threshold", minimum=0.5, maximum=1, open_min=True)
    names, rows, flipped = [], [], []
    for name, y in labels.items():
        if not isinstance(name, str):
            raise TypeError(f"labels keys must be concept names (str), got {name!r}")
        names.append(name)
        u, pairs = _mann_whitney_u(x, _labels(y, f"labels[{name!r}]", x.shape[0]))
        rows.append(u / pairs)
        # the negated activations' AUROC, exactly as auroc(-activations, y) gives it: comparing the AUROC
        # with 1 - threshold instead misses the boundary (1 - 0.8 rounds to 0.19999999999999996 < 0.2)
        flipped.append((pairs - u) / pairs)
    table = np.stack(rows)  # (n_concepts, n_neurons)
    table.setflags(write=False)
    positive, negative = {}, {}
    for name, row, inverse in zip(names, table, flipped, strict=True):
        up = np.flatnonzero(row >= threshold)
        down = np.flatnonzero(inverse >= threshold)
        positive[name] = up[np.argsort(-row[up], kind="stable")]
        negative[name] = down[np.argsort(row[down], kind="stable")]
    return NeuronLabels(tuple(names), table, threshold, positive, negative)
