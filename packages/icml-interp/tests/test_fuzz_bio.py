"""Fuzz tests (GUIDE "Bad input") of icml_interp.bio: every public callable gets hostile inputs and either
returns a checked result or raises ValueError/TypeError naming the argument."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_interp.bio
from icml_interp.bio import (
    AMINO_ACIDS,
    Alignment,
    NeuronLabels,
    Protein,
    RepeatMatch,
    align,
    auroc,
    concept_labels,
    decode,
    encode,
    find_repeats,
    label_neurons,
    repeat_alignment_map,
    substitution_matrix,
    synthetic_protein,
    synthetic_proteins,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Alignment, "the result container align (fuzzed) returns")
FUZZ.exempt(RepeatMatch, "the result container find_repeats (fuzzed) returns")
FUZZ.exempt(Protein, "the result container synthetic_protein (fuzzed) returns")
FUZZ.exempt(NeuronLabels, "the result container label_neurons (fuzzed) returns; its top() is fuzzed there")

CHEAP = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=25, deadline=None)
SEQ = "MKTAYIAKQRQISFVKSHFSRQMKTAYIAKQR"
COPIES = [(0, 10), (22, 32)]
_G = np.random.default_rng(0)
ACTS = _G.standard_normal((40, 5))
LABELS = np.arange(40) % 3 == 0
SCORES = np.column_stack([_G.integers(0, 3, 40), ACTS[:, 0] + LABELS])


def is_protein(p, length: int) -> bool:
    in_copies = sum(e - s for s, e in p.copies)
    return (
        len(p.sequence) == length
        and set(p.sequence) <= set(AMINO_ACIDS)
        and int((p.alignment >= 0).sum()) == in_copies
        and p.kind in ("exact", "approximate", "none")
    )


@FUZZ.covers(substitution_matrix)
@CHEAP
@given(st.data())
def test_substitution_matrix(data):
    fuzz_call(
        data,
        substitution_matrix,
        {"temperature": 1.0},
        check=lambda p: np.allclose(p.sum(axis=1), 1) and (np.diag(p) == 0).all(),
    )


@FUZZ.covers(encode)
@CHEAP
@given(st.data())
def test_encode(data):
    fuzz_call(
        data,
        encode,
        {"sequences": ["MKTAY", "mk<mask>"], "add_special_tokens": True, "pad_to": 12},
        related={"pad_to": ["sequences"], "sequences": ["pad_to"]},
        check=lambda r: r[0].shape == r[1].shape and r[0].dtype == torch.long,
    )


@FUZZ.covers(decode)
@CHEAP
@given(st.data())
def test_decode(data):
    ids, _ = encode(["MKTAY", "MK"])
    fuzz_call(data, decode, {"ids": ids, "keep_special": False}, check=lambda r: isinstance(r, (str, list)))


@FUZZ.covers(synthetic_protein)
@CHEAP
@given(st.data())
def test_synthetic_protein(data):
    valid = {
        "length": 60,
        "repeat_length": 12,
        "n_copies": 3,
        "substitution_rate": 0.2,
        "rng": 0,
        "temperature": 1.0,
    }
    result = fuzz_call(
        data,
        synthetic_protein,
        valid,
        related={k: ["length", "repeat_length", "n_copies"] for k in ("length", "repeat_length", "n_copies")},
    )
    if isinstance(result, Protein):
        assert is_protein(result, len(result.sequence))


@FUZZ.covers(synthetic_proteins)
@FEW
@given(st.data())
def test_synthetic_proteins(data):
    shape = ["n", "length", "repeat_length", "n_copies"]
    valid = {
        "n": 4,
        "length": 50,
        "repeat_length": data.draw(st.sampled_from([10, (5, 12)])),
        "n_copies": 2,
        "substitution_rate": 0.1,
        "fraction_with_repeats": 0.5,
        "seed": 1,
        "temperature": 2.0,
    }
    result = fuzz_call(data, synthetic_proteins, valid, related={k: shape for k in shape})
    if isinstance(result, list):
        assert all(is_protein(p, len(result[0].sequence)) for p in result)


@FUZZ.covers(align)
@CHEAP
@given(st.data())
def test_align(data):
    fuzz_call(
        data,
        align,
        {
            "a": SEQ[:15],
            "b": SEQ[10:],
            "mode": data.draw(st.sampled_from(["global", "local"])),
            "gap_open": -10,
            "gap_extend": -1.0,
        },
        check=lambda r: r.pairs.ndim == 2 and r.pairs.shape[1] == 2 and 0 <= r.identity <= 1,
    )


@FUZZ.covers(repeat_alignment_map)
@CHEAP
@given(st.data())
def test_repeat_alignment_map(data):
    fuzz_call(
        data,
        repeat_alignment_map,
        {"sequence": SEQ, "copies": COPIES, "gap_open": -10.0, "gap_extend": -1},
        related={"sequence": ["copies"], "copies": ["sequence"]},
        check=lambda m: m.shape == (len(SEQ),) and m.dtype == np.int64,
    )


@FUZZ.covers(find_repeats)
@CHEAP
@given(st.data())
def test_find_repeats(data):
    fuzz_call(
        data,
        find_repeats,
        {
            "sequence": SEQ,
            "min_length": 8,
            "min_score": 20.0,
            "max_repeats": 2,
            "gap_open": -10,
            "gap_extend": -1,
        },
        check=lambda ms: all(m.spans[0][1] <= m.spans[1][0] for m in ms),
    )


@FUZZ.covers(auroc)
@CHEAP
@given(st.data())
def test_auroc(data):
    scores = SCORES if data.draw(st.booleans()) else torch.tensor(SCORES[:, 1])
    fuzz_call(
        data,
        auroc,
        {"scores": scores, "labels": LABELS},
        related={"scores": ["labels"]},
        check=lambda a: ((a >= 0) & (a <= 1)).all(),
    )


@FUZZ.covers(concept_labels)
@CHEAP
@given(st.data())
def test_concept_labels(data):
    sequences = data.draw(st.sampled_from([SEQ, [SEQ[:5], SEQ[5:9]], encode(["MKW", "FY"])[0]]))
    concept = data.draw(st.sampled_from(["hydrophobic", "aromatic", {"K", "r"}]))
    fuzz_call(
        data, concept_labels, {"sequences": sequences, "concept": concept}, check=lambda y: y.dtype == bool
    )


@FUZZ.covers(label_neurons)
@FEW
@given(st.data())
def test_label_neurons(data):
    labels = {"a": LABELS, "b": ~LABELS}
    result = fuzz_call(
        data,
        label_neurons,
        {"activations": torch.tensor(ACTS), "labels": labels, "threshold": 0.6},
        related={"activations": ["labels"]},
        check=lambda r: r.auroc.shape == (2, 5) and ((r.auroc >= 0) & (r.auroc <= 1)).all(),
    )
    if isinstance(result, NeuronLabels):
        fuzz_call(
            data,
            result.top,
            {"concept": "a", "k": 3, "negative": True},
            check=lambda idx: len(idx) <= 5 and set(idx.tolist()) <= set(range(5)),
        )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_interp.bio)
