"""Synthetic proteins with planted exact or approximate repeats, and their ground-truth alignment."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icml_interp.bio.alphabet import AMINO_ACIDS, BACKGROUND_FREQUENCIES, substitution_matrix
from icml_interp.validation import check_int, check_number

_LETTERS = np.frombuffer(AMINO_ACIDS.encode("ascii"), dtype=np.uint8)
_MAX_RESIDUES = 10**8  # per call: far beyond any real protein set that fits a test, and no overflow


@dataclass(frozen=True, eq=False)
class Protein:
    """A synthetic protein and where its repeat copies align (arrays are read-only; equality is identity).

    Attributes
    ----------
    sequence : str
        Residues from :data:`AMINO_ACIDS`.
    copies : tuple of (int, int)
        Half-open ``[start, end)`` spans of the repeat copies, left to right; the first is the source.
        Empty for ``kind == "none"``.
    alignment : np.ndarray
        ``(len(sequence),)`` int64: for a position in copy ``c > 0`` the aligned position in copy ``c - 1``;
        for a position in the first copy the aligned position in the second; -1 outside the copies.
    substituted : np.ndarray
        ``(len(sequence),)`` bool: positions of copies ``c > 0`` whose residue was replaced (it differs from
        the source copy's residue; with two copies, from its aligned residue).
    substitution_rate : float
        The per-residue substitution probability the copies were made with.
    kind : str
        ``"exact"`` (rate 0), ``"approximate"`` (rate > 0) or ``"none"`` (no repeat).
    """

    sequence: str
    copies: tuple[tuple[int, int], ...]
    alignment: np.ndarray
    substituted: np.ndarray
    substitution_rate: float
    kind: str

    @property
    def in_repeat(self) -> np.ndarray:
        """``(len(sequence),)`` bool: positions inside a repeat copy."""
        return self.alignment >= 0


def _generator(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng()
    return np.random.default_rng(check_int(rng, "rng", minimum=0))


def _substitute(
    residues: np.ndarray, rate: float, probs_cdf: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each residue index replaced with probability ``rate`` by a draw from its substitution row."""
    hit = rng.random(residues.shape) < rate
    out = residues.copy()
    u = rng.random(int(hit.sum()))[:, None]  # in [0, 1)
    # the first index whose CDF exceeds u: the zero diagonal leaves the CDF flat at the residue itself,
    # so the residue is never drawn again
    out[hit] = (probs_cdf[residues[hit]] <= u).sum(axis=1)
    return out, hit


def _placements(length: int, repeat_length: int, n_copies: int, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random starts of ``n_copies`` non-overlapping segments of ``repeat_length`` in ``length``."""
    free = length - n_copies * repeat_length
    slots = np.sort(rng.choice(free + n_copies, size=n_copies, replace=False))
    return slots + np.arange(n_copies) * (repeat_length - 1)


def _make(length, repeat_length, n_copies, rate, cdf, rng) -> Protein:
    residues = rng.choice(20, size=length, p=BACKGROUND_FREQUENCIES)
    alignment = np.full(length, -1, dtype=np.int64)
    substituted = np.zeros(length, dtype=bool)
    copies: tuple[tuple[int, int], ...] = ()
    if repeat_length is not None:
        starts = _placements(length, repeat_length, n_copies, rng)
        source = residues[starts[0] : starts[0] + repeat_length]
        offsets = np.arange(repeat_length)
        for c in range(1, n_copies):
            copy, hit = _substitute(source, rate, cdf, rng)
            span = slice(starts[c], starts[c] + repeat_length)
            residues[span], substituted[span] = copy, hit
            alignment[span] = starts[c - 1] + offsets
        alignment[starts[0] : starts[0] + repeat_length] = starts[1] + offsets
        copies = tuple((int(s), int(s) + repeat_length) for s in starts)
    alignment.setflags(write=False)
    substituted.setflags(write=False)
    kind = "none" if repeat_length is None else ("exact" if rate == 0 else "approximate")
    return Protein(_LETTERS[residues].tobytes().decode("ascii"), copies, alignment, substituted, rate, kind)


def _check_shape(length: int, repeat_length: int | None, n_copies: int) -> None:
    if repeat_length is not None and repeat_length * n_copies > length:
        raise ValueError(
            f"repeat_length * n_copies must be <= length, got {repeat_length} * {n_copies} > {length}"
        )


def synthetic_protein(
    length: int,
    *,
    repeat_length: int | None = None,
    n_copies: int = 2,
    substitution_rate: float = 0.0,
    rng: int | np.random.Generator | None = None,
    temperature: float = 1.0,
) -> Protein:
    """A random protein with ``n_copies`` copies of one segment planted at random non-overlapping positions.

    Residues are i.i.d. from :data:`BACKGROUND_FREQUENCIES`. The leftmost copy is the source; every other
    copy repeats it with each residue replaced, with probability ``substitution_rate``, by a different
    residue drawn from ``substitution_matrix(temperature)`` (BLOSUM62-biased). Copies may be adjacent
    (tandem repeats). No insertions or deletions.

    Parameters
    ----------
    length : int
        Residues, in ``[1, 1e8]``.
    repeat_length : int or None
        Residues per copy; None plants no repeat (``kind == "none"``).
    n_copies : int
        Copies, >= 2; ``repeat_length * n_copies <= length``.
    substitution_rate : float
        In ``[0, 1]``.
    rng : int, np.random.Generator or None
        Seed or generator.
    temperature : float
        Of the substitution matrix (positive).

    Returns
    -------
    Protein
    """
    length = check_int(length, "length", minimum=1, maximum=_MAX_RESIDUES)
    if repeat_length is not None:
        repeat_length = check_int(repeat_length, "repeat_length", minimum=1)
    n_copies = check_int(n_copies, "n_copies", minimum=2)
    rate = check_number(substitution_rate, "substitution_rate", minimum=0, maximum=1)
    cdf = np.cumsum(substitution_matrix(temperature), axis=1)
    cdf /= cdf[:, -1:]
    _check_shape(length, repeat_length, n_copies)
    return _make(length, repeat_length, n_copies, rate, cdf, _generator(rng))


def synthetic_proteins(
    n: int,
    length: int,
    *,
    repeat_length: int | tuple[int, int],
    n_copies: int = 2,
    substitution_rate: float = 0.0,
    fraction_with_repeats: float = 1.0,
    seed: int = 0,
    temperature: float = 1.0,
) -> list[Protein]:
    """``n`` proteins as :func:`synthetic_protein` makes them, reproducible from ``seed``.

    Parameters
    ----------
    n, length : int
        Proteins and residues per protein (>= 1, ``n * length <= 1e8``).
    repeat_length : int or (int, int)
        Residues per copy, or an inclusive range drawn uniformly per protein.
    n_copies, substitution_rate, temperature
        As in :func:`synthetic_protein`.
    fraction_with_repeats : float
        In ``[0, 1]``: ``round(fraction_with_repeats * n)`` proteins, chosen at random, carry a repeat; the
        others have ``kind == "none"``.
    seed : int
        Non-negative.

    Returns
    -------
    list of Protein
    """
    n = check_int(n, "n", minimum=1, maximum=_MAX_RESIDUES)
    length = check_int(length, "length", minimum=1, maximum=_MAX_RESIDUES // n)
    if isinstance(repeat_length, tuple):
        if len(repeat_length) != 2:
            raise ValueError(f"repeat_length must be an int or a (low, high) pair, got {repeat_length!r}")
        low = check_int(repeat_length[0], "repeat_length", minimum=1)
        high = check_int(repeat_length[1], "repeat_length", minimum=low)
    else:
        low = high = check_int(repeat_length, "repeat_length", minimum=1)
    n_copies = check_int(n_copies, "n_copies", minimum=2)
    rate = check_number(substitution_rate, "substitution_rate", minimum=0, maximum=1)
    fraction = check_number(fraction_with_repeats, "fraction_with_repeats", minimum=0, maximum=1)
    seed = check_int(seed, "seed", minimum=0)
    cdf = np.cumsum(substitution_matrix(temperature), axis=1)
    cdf /= cdf[:, -1:]
    _check_shape(length, high, n_copies)
    rng = np.random.default_rng(seed)
    with_repeat = np.zeros(n, dtype=bool)
    with_repeat[rng.permutation(n)[: round(fraction * n)]] = True
    sizes = rng.integers(low, high + 1, size=n)
    return [
        _make(length, int(size) if planted else None, n_copies, rate, cdf, rng)
        for size, planted in zip(sizes, with_repeat, strict=True)
    ]
