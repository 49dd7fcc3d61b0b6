"""The 20 standard amino acids: background composition, BLOSUM62, substitution probabilities, concept groups.

Every array is in :data:`AMINO_ACIDS` order and read-only.
"""

from __future__ import annotations

import math

import numpy as np

from icml_interp.validation import check_number

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
_ALLOWED = frozenset(AMINO_ACIDS + AMINO_ACIDS.lower())
_LOOKUP = np.full(256, -1, dtype=np.int64)  # ASCII code -> index into AMINO_ACIDS
_LOOKUP[np.frombuffer(AMINO_ACIDS.encode("ascii"), dtype=np.uint8)] = np.arange(20)

# Amino-acid composition of UniProtKB/Swiss-Prot in percent: the release statistics page
# (https://web.expasy.org/docs/relnotes/relstat.html, "amino acid composition"), release 2024_01; the
# releases of the 2020s agree on it to about 0.05 percentage points. Transcribed without network access:
# check the page before quoting a value to the last digit. Renormalized to sum to 1 exactly.
_SWISSPROT_PERCENT = {
    "A": 8.25, "R": 5.53, "N": 4.06, "D": 5.46, "C": 1.38, "Q": 3.93, "E": 6.72, "G": 7.07, "H": 2.27,
    "I": 5.91, "L": 9.65, "K": 5.80, "M": 2.41, "F": 3.86, "P": 4.74, "S": 6.64, "T": 5.35, "W": 1.10,
    "Y": 2.92, "V": 6.86,
}  # fmt: skip
BACKGROUND_FREQUENCIES = np.array([_SWISSPROT_PERCENT[a] for a in AMINO_ACIDS], dtype=np.float64)
BACKGROUND_FREQUENCIES /= BACKGROUND_FREQUENCIES.sum()
BACKGROUND_FREQUENCIES.setflags(write=False)

# NCBI BLOSUM62 (Henikoff & Henikoff 1992) in half-bit units, written in the matrix file's own order
# ARNDCQEGHILKMFPSTWYV and permuted to AMINO_ACIDS order below.
_NCBI_ORDER = "ARNDCQEGHILKMFPSTWYV"
_NCBI_BLOSUM62 = """
 4 -1 -2 -2  0 -1 -1  0 -2 -1 -1 -1 -1 -2 -1  1  0 -3 -2  0
-1  5  0 -2 -3  1  0 -2  0 -3 -2  2 -1 -3 -2 -1 -1 -3 -2 -3
-2  0  6  1 -3  0  0  0  1 -3 -3  0 -2 -3 -2  1  0 -4 -2 -3
-2 -2  1  6 -3  0  2 -1 -1 -3 -4 -1 -3 -3 -1  0 -1 -4 -3 -3
 0 -3 -3 -3  9 -3 -4 -3 -3 -1 -1 -3 -1 -2 -3 -1 -1 -2 -2 -1
-1  1  0  0 -3  5  2 -2  0 -3 -2  1  0 -3 -1  0 -1 -2 -1 -2
-1  0  0  2 -4  2  5 -2  0 -3 -3  1 -2 -3 -1  0 -1 -3 -2 -2
 0 -2  0 -1 -3 -2 -2  6 -2 -4 -4 -2 -3 -3 -2  0 -2 -2 -3 -3
-2  0  1 -1 -3  0  0 -2  8 -3 -3 -1 -2 -1 -2 -1 -2 -2  2 -3
-1 -3 -3 -3 -1 -3 -3 -4 -3  4  2 -3  1  0 -3 -2 -1 -3 -1  3
-1 -2 -3 -4 -1 -2 -3 -4 -3  2  4 -2  2  0 -3 -2 -1 -2 -1  1
-1  2  0 -1 -3  1  1 -2 -1 -3 -2  5 -1 -3 -1  0 -1 -3 -2 -2
-1 -1 -2 -3 -1  0 -2 -3 -2  1  2 -1  5  0 -2 -1 -1 -1 -1  1
-2 -3 -3 -3 -2 -3 -3 -3 -1  0  0 -3  0  6 -4 -2 -2  1  3 -1
-1 -2 -2 -1 -3 -1 -1 -2 -2 -3 -3 -1 -2 -4  7 -1 -1 -4 -3 -2
 1 -1  1  0 -1  0  0  0 -1 -2 -2  0 -1 -2 -1  4  1 -3 -2 -2
 0 -1  0 -1 -1 -1 -1 -2 -2 -1 -1 -1 -1 -2 -1  1  5 -2 -2  0
-3 -3 -4 -4 -2 -2 -3 -2 -2 -3 -2 -3 -1  1 -4 -3 -2 11  2 -3
-2 -2 -2 -3 -2 -1 -2 -3  2 -1 -1 -2 -1  3 -3 -2 -2  2  7 -1
 0 -3 -3 -3 -1 -2 -2 -3 -3  3  1 -2  1 -1 -2 -2  0 -3 -1  4
"""
_perm = [_NCBI_ORDER.index(a) for a in AMINO_ACIDS]
BLOSUM62 = np.array(_NCBI_BLOSUM62.split(), dtype=np.int64).reshape(20, 20)[np.ix_(_perm, _perm)]
BLOSUM62.setflags(write=False)

# Residue groups for labelling neurons (the paper's "biochemical neurons"). Choices, each one standard:
# - hydrophobic: positive Kyte-Doolittle hydropathy (I V L F C M A).
# - charged: D E K R, charged at pH 7; His (pKa ~6) is mostly neutral there and left out.
# - positive: K R; negative: D E (the charged group split by sign).
# - aromatic: F W Y; His's imidazole ring is aromatic but His is usually grouped as basic, so it is left out.
# - polar: the uncharged polar side chains (hydroxyl and amide): S T N Q.
# - small: Taylor's (1986) Venn-diagram group "small": A C D G N P S T V.
CONCEPTS: dict[str, frozenset[str]] = {
    "hydrophobic": frozenset("IVLFCMA"),
    "charged": frozenset("DEKR"),
    "positive": frozenset("KR"),
    "negative": frozenset("DE"),
    "aromatic": frozenset("FWY"),
    "polar": frozenset("STNQ"),
    "small": frozenset("ACDGNPSTV"),
}


def substitution_matrix(temperature: float = 1.0) -> np.ndarray:
    """Probabilities of replacing one amino acid by another, biased by BLOSUM62.

    Row ``a`` is ``P(b | a, b != a)`` proportional to ``BACKGROUND_FREQUENCIES[b] * 2 ** (BLOSUM62[a, b] /
    (2 * temperature))`` (BLOSUM62 scores are half-bit log-odds, so at ``temperature=1`` this is the
    BLOSUM62 target frequency of the pair). Larger temperatures approach the background composition,
    smaller ones the best-scoring substitute.

    Parameters
    ----------
    temperature : float
        Positive, finite.

    Returns
    -------
    np.ndarray
        ``(20, 20)`` float64 in :data:`AMINO_ACIDS` order, zero diagonal, rows summing to 1.
    """
    temperature = check_number(temperature, "temperature", minimum=0, open_min=True)
    log_odds = BLOSUM62 * (math.log(2.0) / 2.0)
    off = ~np.eye(20, dtype=bool)
    log_bg = np.log(BACKGROUND_FREQUENCIES)[None, :]
    # softmax of (T log bg + s) / T without overflow for any positive finite T
    logits = log_bg + log_odds / temperature if temperature >= 1 else temperature * log_bg + log_odds
    logits = np.where(off, logits, -np.inf)
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits if temperature >= 1 else logits / temperature)
    return p / p.sum(axis=1, keepdims=True)


def residue_indices(sequence: str, name: str) -> np.ndarray:
    """A protein string (standard amino acids, either case) as ``(len,)`` int64 indices into AMINO_ACIDS."""
    if not isinstance(sequence, str):
        raise TypeError(f"{name} must be a str of amino acids, got {type(sequence).__name__}")
    if not sequence:
        raise ValueError(f"{name} must be a non-empty str of amino acids, got ''")
    unknown = sorted(set(sequence) - _ALLOWED)  # before upper(): "ß".upper() is "SS"
    if unknown:
        raise ValueError(
            f"{name} holds characters that are not standard amino acids ({AMINO_ACIDS}): {''.join(unknown)!r}"
        )
    return _LOOKUP[np.frombuffer(sequence.upper().encode("ascii"), dtype=np.uint8)]
