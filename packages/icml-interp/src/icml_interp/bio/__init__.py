"""Repeat detection in protein language models: the toolkit of "Induction meets biology" (Kesten-Pomeranz et
al., ICML 2026), who find that PLMs detect repeats by aligning the copies with relative-position heads and
biochemical neurons, then copying the aligned residue with induction heads.

- Alphabet: :data:`AMINO_ACIDS`, :data:`BACKGROUND_FREQUENCIES` (Swiss-Prot composition), :data:`BLOSUM62`,
  :func:`substitution_matrix` (BLOSUM-biased ``P(b | a, b != a)``), :data:`CONCEPTS` (residue groups).
- ESM-2 tokens: :data:`ESM_VOCAB` in the facebook/esm2 order, :func:`encode`, :func:`decode` and the ids
  :data:`CLS_ID`, :data:`PAD_ID`, :data:`EOS_ID`, :data:`UNK_ID`, :data:`MASK_ID`.
- Synthetic data: :func:`synthetic_protein`, :func:`synthetic_proteins` plant exact or approximate repeats
  (BLOSUM-sampled substitutions) and return a :class:`Protein` with each copy position's aligned partner.
- Alignment: :func:`align` (BLOSUM62, affine gaps, global or local) giving an :class:`Alignment`,
  :func:`repeat_alignment_map` (the partner map of known copies), :func:`find_repeats` (self-alignment off
  the diagonal, each match a :class:`RepeatMatch`).
- Neurons: :func:`auroc` (per column, ties averaged), :func:`concept_labels`, :func:`label_neurons`
  (positive and inhibitory neurons per concept, :class:`NeuronLabels`).

Example::

    from icml_interp.bio import encode, find_repeats, synthetic_protein

    protein = synthetic_protein(200, repeat_length=30, substitution_rate=0.2, rng=0)
    match = find_repeats(protein.sequence)[0]
    agree = (match.alignment == protein.alignment)[protein.in_repeat].mean()
    input_ids, attention_mask = encode(protein.sequence)  # for a facebook/esm2 checkpoint
"""

from icml_interp.bio.align import Alignment, RepeatMatch, align, find_repeats, repeat_alignment_map
from icml_interp.bio.alphabet import (
    AMINO_ACIDS,
    BACKGROUND_FREQUENCIES,
    BLOSUM62,
    CONCEPTS,
    substitution_matrix,
)
from icml_interp.bio.concepts import NeuronLabels, auroc, concept_labels, label_neurons
from icml_interp.bio.synthetic import Protein, synthetic_protein, synthetic_proteins
from icml_interp.bio.tokens import CLS_ID, EOS_ID, ESM_VOCAB, MASK_ID, PAD_ID, UNK_ID, decode, encode

__all__ = [
    "AMINO_ACIDS",
    "BACKGROUND_FREQUENCIES",
    "BLOSUM62",
    "CLS_ID",
    "CONCEPTS",
    "EOS_ID",
    "ESM_VOCAB",
    "MASK_ID",
    "PAD_ID",
    "UNK_ID",
    "Alignment",
    "NeuronLabels",
    "Protein",
    "RepeatMatch",
    "align",
    "auroc",
    "concept_labels",
    "decode",
    "encode",
    "find_repeats",
    "label_neurons",
    "repeat_alignment_map",
    "substitution_matrix",
    "synthetic_protein",
    "synthetic_proteins",
]
