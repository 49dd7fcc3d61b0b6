"""icml_interp.bio: alphabet tables, ESM-2 tokens, planted repeats, alignment, neuron concept labels."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch

from icml_interp.bio import (
    AMINO_ACIDS,
    BACKGROUND_FREQUENCIES,
    BLOSUM62,
    CLS_ID,
    CONCEPTS,
    EOS_ID,
    ESM_VOCAB,
    MASK_ID,
    PAD_ID,
    UNK_ID,
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
from icml_tools.fuzz import rejects

IDX = {a: i for i, a in enumerate(AMINO_ACIDS)}


def blosum(a: str, b: str) -> int:
    return int(BLOSUM62[IDX[a], IDX[b]])


# --- alphabet -----------------------------------------------------------------------------------------------


def test_blosum62_is_the_ncbi_matrix():
    assert BLOSUM62.shape == (20, 20) and BLOSUM62.dtype.kind == "i"
    assert (BLOSUM62 == BLOSUM62.T).all()
    scores = [4, 5, 6, 6, 9, 5, 5, 6, 8, 4, 4, 5, 5, 6, 7, 4, 5, 11, 7, 4]
    diagonal = dict(zip("ARNDCQEGHILKMFPSTWYV", scores, strict=True))
    assert {a: blosum(a, a) for a in AMINO_ACIDS} == diagonal
    known = {"LI": 2, "DE": 2, "WC": -2, "IV": 3, "FY": 3, "KR": 2, "ST": 1, "WY": 2, "DL": -4, "GI": -4}
    known |= {"WN": -4, "CE": -4, "HY": 2, "NS": 1, "AS": 1, "MQ": 0, "PF": -4, "EQ": 2, "AW": -3}
    assert {pair: blosum(*pair) for pair in known} == known
    # a log-odds matrix: the expected score of two background residues is negative (about -0.5 bits)
    assert -1.3 < float(BACKGROUND_FREQUENCIES @ BLOSUM62 @ BACKGROUND_FREQUENCIES) < -0.8
    with pytest.raises(ValueError):
        BLOSUM62[0, 0] = 0  # the constant is read-only


def test_background_frequencies():
    assert BACKGROUND_FREQUENCIES.shape == (20,) and BACKGROUND_FREQUENCIES.dtype == np.float64
    assert abs(BACKGROUND_FREQUENCIES.sum() - 1) < 1e-15 and (BACKGROUND_FREQUENCIES > 0).all()
    assert AMINO_ACIDS[BACKGROUND_FREQUENCIES.argmax()] == "L"
    assert AMINO_ACIDS[BACKGROUND_FREQUENCIES.argmin()] == "W"
    assert abs(BACKGROUND_FREQUENCIES[IDX["A"]] - 0.0825) < 2e-3


def test_substitution_matrix_follows_its_definition():
    for temperature in (0.5, 1.0, 3.0):
        p = substitution_matrix(temperature)
        assert np.allclose(p.sum(axis=1), 1, atol=1e-12) and (np.diag(p) == 0).all()
        target = BACKGROUND_FREQUENCIES[None, :] * 2.0 ** (BLOSUM62 / (2 * temperature))
        np.fill_diagonal(target, 0)
        assert np.allclose(p, target / target.sum(axis=1, keepdims=True), rtol=1e-12, atol=0)
    i = IDX["I"]
    p = substitution_matrix()
    assert p[i, IDX["V"]] > 4 * p[i, IDX["D"]] and p[i, IDX["L"]] > 4 * p[i, IDX["D"]]


def test_substitution_matrix_temperature_limits():
    background = np.tile(BACKGROUND_FREQUENCIES, (20, 1))
    np.fill_diagonal(background, 0)
    background /= background.sum(axis=1, keepdims=True)
    assert np.abs(substitution_matrix(1e6) - background).max() < 1e-5
    cold = substitution_matrix(0.01)  # the best-scoring substitute: I -> V (3), W -> Y (2), ...
    assert cold[IDX["I"], IDX["V"]] > 0.999 and cold[IDX["W"], IDX["Y"]] > 0.999
    for t in (1e-300, 1e300):
        assert np.isfinite(substitution_matrix(t)).all()


def test_concepts():
    assert CONCEPTS["hydrophobic"] == frozenset("AVILMFC")
    assert CONCEPTS["charged"] == frozenset("DEKR") and CONCEPTS["aromatic"] == frozenset("FWY")
    assert all(group <= set(AMINO_ACIDS) for group in CONCEPTS.values())


# --- ESM-2 tokens -------------------------------------------------------------------------------------------


def test_encode_uses_esm2_ids():
    assert len(ESM_VOCAB) == 33 and (CLS_ID, PAD_ID, EOS_ID, UNK_ID, MASK_ID) == (0, 1, 2, 3, 32)
    ids, mask = encode("LA<mask>c")
    assert ids.tolist() == [[0, 4, 5, 32, 23, 2]] and mask.tolist() == [[1] * 6]
    assert ids.dtype == torch.long and mask.dtype == torch.long
    ids, mask = encode(["MK", "MKTAY"], pad_to=9)
    assert ids.shape == (2, 9) and mask.sum(1).tolist() == [4, 7]
    assert ids[0, 4:].tolist() == [PAD_ID] * 5 and ids[1, 6] == EOS_ID
    assert encode("MK", add_special_tokens=False)[0].tolist() == [
        [ESM_VOCAB.index("M"), ESM_VOCAB.index("K")]
    ]


def test_decode_round_trips():
    rng = np.random.default_rng(0)
    letters = [t for t in ESM_VOCAB if len(t) == 1]
    seqs = ["".join(rng.choice(letters, rng.integers(1, 40))) for _ in range(20)] + ["MK<mask>t<unk>A"]
    ids, _ = encode(seqs)
    assert decode(ids) == [s.upper().replace("<MASK>", "<mask>").replace("<UNK>", "<unk>") for s in seqs]
    assert decode(ids[0]) == seqs[0] and decode(ids[0].tolist()) == seqs[0]
    assert decode([0, 5, 2, 1], keep_special=True) == "<cls>A<eos><pad>"


def test_encode_matches_transformers_esm_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(ESM_VOCAB) + "\n")
    tokenizer = transformers.EsmTokenizer(vocab_file=str(vocab))
    assert tokenizer.mask_token_id == MASK_ID and tokenizer.pad_token_id == PAD_ID
    rng = np.random.default_rng(1)
    letters = [t for t in ESM_VOCAB if len(t) == 1]
    seqs = ["".join(rng.choice(letters, rng.integers(1, 60))) for _ in range(30)]
    seqs[0] = "MKT<mask>AYIAK"
    reference = tokenizer(seqs, padding=True, return_tensors="pt")
    ids, mask = encode(seqs)
    assert torch.equal(ids, reference["input_ids"]) and torch.equal(mask, reference["attention_mask"])


def test_encode_names_unknown_characters():
    err = rejects(encode, ["MKT", "MK J*"], name="sequences")
    assert "sequences[1]" in str(err) and "' *J'" in str(err)
    rejects(encode, "MKß", name="sequences")  # "ß".upper() == "SS" must not slip through
    rejects(encode, "MKTAY", pad_to=3, name="pad_to")
    rejects(decode, [0, 40], name="ids")


# --- synthetic proteins -------------------------------------------------------------------------------------


def test_exact_repeats_are_planted():
    for seed in range(20):
        p = synthetic_protein(120, repeat_length=25, n_copies=2 + seed % 3, rng=seed)
        assert len(p.sequence) == 120 and set(p.sequence) <= set(AMINO_ACIDS) and p.kind == "exact"
        assert len(p.copies) == 2 + seed % 3
        spans = [p.sequence[s:e] for s, e in p.copies]
        assert all(e - s == 25 for s, e in p.copies) and len(set(spans)) == 1
        assert all(e0 <= s1 for (_, e0), (s1, _) in itertools.pairwise(p.copies))
        inside = np.flatnonzero(p.alignment >= 0)
        assert len(inside) == 25 * len(p.copies) and not p.substituted.any()
        seq = np.array(list(p.sequence))
        assert (seq[inside] == seq[p.alignment[inside]]).all()
        first, second = p.copies[0], p.copies[1]
        assert p.alignment[first[0]] == second[0]  # first copy -> second, later copies -> previous
        assert all(p.alignment[s] == prev for (prev, _), (s, _) in itertools.pairwise(p.copies))


def test_no_repeat():
    p = synthetic_protein(50, rng=0)
    assert p.kind == "none" and p.copies == () and (p.alignment == -1).all() and not p.substituted.any()


def test_substitution_rate_and_blosum_bias():
    rate, length = 0.25, 60
    proteins = synthetic_proteins(400, 150, repeat_length=length, substitution_rate=rate, seed=3)
    n_sub = sum(int(p.substituted.sum()) for p in proteins)
    n = 400 * length
    assert abs(n_sub / n - rate) < 4 * np.sqrt(rate * (1 - rate) / n)
    counts = np.zeros((20, 20))
    for p in proteins:
        (s0, e0), (s1, e1) = p.copies
        src = np.array([IDX[a] for a in p.sequence[s0:e0]])
        dst = np.array([IDX[a] for a in p.sequence[s1:e1]])
        assert ((src != dst) == p.substituted[s1:e1]).all() and p.kind == "approximate"
        np.add.at(counts, (src, dst), 1)
    np.fill_diagonal(counts, 0)
    i = IDX["I"]
    assert counts[i, IDX["V"]] > 3 * counts[i, IDX["D"]] and counts[i, IDX["L"]] > 3 * counts[i, IDX["D"]]
    # the pooled substitutions follow the matrix: total variation of each frequent row is small
    rows = counts.sum(axis=1) > 200
    empirical = counts[rows] / counts[rows].sum(axis=1, keepdims=True)
    assert 0.5 * np.abs(empirical - substitution_matrix()[rows]).sum(axis=1).max() < 0.15


def test_synthetic_proteins_reproducible_and_fraction():
    a = synthetic_proteins(10, 80, repeat_length=(10, 20), fraction_with_repeats=0.3, seed=5)
    b = synthetic_proteins(10, 80, repeat_length=(10, 20), fraction_with_repeats=0.3, seed=5)
    c = synthetic_proteins(10, 80, repeat_length=(10, 20), fraction_with_repeats=0.3, seed=6)
    assert [p.sequence for p in a] == [p.sequence for p in b] != [p.sequence for p in c]
    assert sum(p.kind != "none" for p in a) == 3
    assert all(10 <= e - s <= 20 for p in a for s, e in p.copies)
    g = np.random.default_rng(0)
    assert (
        synthetic_protein(40, repeat_length=5, rng=7).sequence
        == synthetic_protein(40, repeat_length=5, rng=7).sequence
    )
    assert synthetic_protein(40, rng=g).sequence != synthetic_protein(40, rng=g).sequence


def test_synthetic_bad_input():
    rejects(synthetic_protein, 50, repeat_length=10, substitution_rate=1.5, name="substitution_rate")
    rejects(synthetic_protein, 50, repeat_length=10, substitution_rate=-0.1, name="substitution_rate")
    rejects(synthetic_protein, 50, repeat_length=20, n_copies=3, name="repeat_length")
    rejects(synthetic_protein, 50, rng=1.5, name="rng")
    rejects(synthetic_proteins, 5, 50, repeat_length=(10, 5), name="repeat_length")
    rejects(
        synthetic_proteins, 5, 50, repeat_length=10, fraction_with_repeats=2.0, name="fraction_with_repeats"
    )


# --- alignment ----------------------------------------------------------------------------------------------


def _brute_global(a: str, b: str, go: float, ge: float) -> float:
    """Best score over every alignment path (columns: pair, a-gap, b-gap), enumerated."""

    def walk(i, j, prev):
        if i == len(a) and j == len(b):
            yield 0.0
            return
        if i < len(a) and j < len(b):
            for rest in walk(i + 1, j + 1, "M"):
                yield blosum(a[i], b[j]) + rest
        if i < len(a):
            for rest in walk(i + 1, j, "X"):
                yield (ge if prev == "X" else go) + rest
        if j < len(b):
            for rest in walk(i, j + 1, "Y"):
                yield (ge if prev == "Y" else go) + rest

    return max(walk(0, 0, ""))


def _brute_local(a: str, b: str, go: float, ge: float) -> float:
    subs_a = {a[i:j] for i in range(len(a)) for j in range(i + 1, len(a) + 1)}
    subs_b = {b[i:j] for i in range(len(b)) for j in range(i + 1, len(b) + 1)}
    return max(0.0, max(_brute_global(x, y, go, ge) for x in subs_a for y in subs_b))


def _path_score(a: str, b: str, pairs: np.ndarray, go: float, ge: float, local: bool) -> float:
    score = sum(blosum(a[i], b[j]) for i, j in pairs)
    ends = [] if local else [(-1, -1), (len(a), len(b))]
    points = sorted([*map(tuple, pairs.tolist()), *ends])
    for (i0, j0), (i1, j1) in itertools.pairwise(points):
        score += sum(go + (g - 1) * ge for g in (i1 - i0 - 1, j1 - j0 - 1) if g > 0)
    return score


def test_align_matches_brute_force():
    rng = np.random.default_rng(0)
    for k in range(40):
        a = "".join(rng.choice(list(AMINO_ACIDS), rng.integers(1, 5)))
        b = "".join(rng.choice(list(AMINO_ACIDS), rng.integers(1, 5)))
        go, ge = [(-10.0, -1.0), (-3.0, -0.5), (-1.0, -1.0)][k % 3]
        g = align(a, b, gap_open=go, gap_extend=ge)
        assert g.score == pytest.approx(_brute_global(a, b, go, ge), abs=1e-9)
        loc = align(a, b, mode="local", gap_open=go, gap_extend=ge)
        assert loc.score == pytest.approx(_brute_local(a, b, go, ge), abs=1e-9)


def test_align_pairs_reproduce_the_score():
    rng = np.random.default_rng(1)
    for mode in ("global", "local"):
        for _ in range(10):
            a = "".join(rng.choice(list(AMINO_ACIDS), rng.integers(20, 80)))
            b = "".join(rng.choice(list(AMINO_ACIDS), rng.integers(20, 80)))
            r = align(a, b, mode=mode, gap_open=-4, gap_extend=-1)
            assert (np.diff(r.pairs, axis=0) > 0).all()
            assert r.score == pytest.approx(_path_score(a, b, r.pairs, -4, -1, mode == "local"), abs=1e-9)


def test_align_finds_a_planted_motif():
    motif = "WCHYWMKCPW"
    a = "GGGGGG" + motif + "GGGG"
    b = "PPPPPPP" + motif[:5] + "D" + motif[5:] + "PPPP"  # one inserted residue; G-P scores -2
    r = align(a, b, mode="local", gap_open=-5, gap_extend=-1)
    assert r.identity == 1.0 and r.score == sum(blosum(c, c) for c in motif) - 5
    assert r.pairs.tolist() == [[6 + k, 7 + k + (k >= 5)] for k in range(len(motif))]
    same = align(motif, motif)
    assert same.identity == 1.0 and same.pairs.tolist() == [[i, i] for i in range(len(motif))]
    assert same.score == sum(blosum(c, c) for c in motif)


def _agreement(maps, proteins) -> float:
    return float(
        np.mean(
            np.concatenate([(m == p.alignment)[p.in_repeat] for m, p in zip(maps, proteins, strict=True)])
        )
    )


def test_repeat_alignment_map_of_known_copies():
    exact = synthetic_proteins(10, 200, repeat_length=(20, 50), n_copies=3, seed=2)
    for p in exact:
        assert (repeat_alignment_map(p.sequence, p.copies) == p.alignment).all()
    approx = synthetic_proteins(10, 200, repeat_length=(20, 50), substitution_rate=0.3, seed=2)
    assert _agreement([repeat_alignment_map(p.sequence, p.copies) for p in approx], approx) >= 0.9


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.2, 0.3])
def test_find_repeats_recovers_planted_repeats(rate):
    proteins = synthetic_proteins(15, 250, repeat_length=(30, 60), substitution_rate=rate, seed=4)
    matches = [find_repeats(p.sequence)[0] for p in proteins]
    assert _agreement([m.alignment for m in matches], proteins) >= (0.99 if rate == 0 else 0.9)
    for m in matches:
        (_, a1), (b0, _) = m.spans
        assert a1 <= b0 and m.score > 0 and 0 < m.identity <= 1


def test_find_repeats_in_tandem_and_in_random_sequence():
    source = synthetic_protein(30, rng=0).sequence
    flank = synthetic_protein(20, rng=1).sequence
    seq = flank + source * 3 + flank[::-1]
    matches = find_repeats(seq, max_repeats=2)
    assert matches[0].spans == ((20, 50), (50, 80))  # cut where the copies meet, not ((20, 80), (50, 110))
    assert matches[1].spans in (((20, 50), (80, 110)), ((50, 80), (80, 110)))
    assert all(m.identity == 1.0 for m in matches)
    # no repeat: the default threshold (E-value 0.01 by ungapped statistics) rarely passes chance matches
    random = synthetic_proteins(20, 300, repeat_length=10, fraction_with_repeats=0.0, seed=0)
    assert sum(bool(find_repeats(p.sequence)) for p in random) <= 2
    assert find_repeats(random[0].sequence, min_score=80) == []


def test_alignment_bad_input():
    rejects(align, "MKT", "MKZ", name="b")
    rejects(align, "", "MK", name="a")
    rejects(align, "MK", "MK", mode="semi", name="mode")
    rejects(align, "MK", "MK", gap_open=2, name="gap_open")
    rejects(repeat_alignment_map, "MKTAYMKTAY", [(0, 5), (3, 8)], name="copies")
    rejects(repeat_alignment_map, "MKTAYMKTAY", [(0, 5), (5, 11)], name="copies")
    rejects(find_repeats, "MKTAY1", name="sequence")


# --- neurons ------------------------------------------------------------------------------------------------


def test_auroc_equals_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.random(300) < 0.3
    scores = np.column_stack([rng.integers(0, 4, 300), rng.standard_normal(300), y + rng.random(300), y])
    scores = np.column_stack([scores, np.tile(rng.integers(0, 3, (300, 1)), (1, 300))])  # > one rank chunk
    ours = auroc(scores, y)
    assert ours.shape == (scores.shape[1],)
    reference = [roc_auc_score(y, scores[:, k]) for k in range(scores.shape[1])]
    assert np.abs(ours - reference).max() < 1e-12
    assert float(auroc(torch.tensor(scores[:, 0]), torch.tensor(y))) == pytest.approx(reference[0], abs=1e-12)
    assert auroc(scores[:, 3], y) == 1.0 and auroc(-scores[:, 3], y.astype(int)) == 0.0


def test_auroc_bad_input():
    rejects(auroc, np.ones(4), np.ones(4, dtype=bool), name="labels")
    rejects(auroc, np.ones(4), np.array([True, False]), name="labels")
    rejects(auroc, np.array([1.0, np.nan]), np.array([True, False]), name="scores")


def test_concept_labels():
    assert concept_labels("AKWd", "charged").tolist() == [False, True, False, True]
    assert concept_labels(["AK", "W"], "aromatic").tolist() == [False, False, True]
    assert concept_labels("AKW", {"A", "w"}).tolist() == [True, False, True]
    ids, _ = encode(["AKW", "F"])
    labels = concept_labels(ids, "aromatic")
    assert labels.shape == ids.shape and labels.tolist() == [
        [False] * 3 + [True, False],
        [False, True] + [False] * 3,
    ]
    rejects(concept_labels, "AK", "sticky", name="concept")
    rejects(concept_labels, "AKB", "charged", name="sequences")


def test_label_neurons_finds_planted_neurons():
    proteins = synthetic_proteins(20, 100, repeat_length=20, seed=0)
    seq = "".join(p.sequence for p in proteins)
    rng = np.random.default_rng(0)
    hydrophobic = concept_labels(seq, "hydrophobic")
    charged = concept_labels(seq, "charged")
    acts = rng.standard_normal((len(seq), 6))
    acts[:, 2] += 3 * hydrophobic  # a hydrophobic neuron
    acts[:, 4] -= 3 * charged  # an inhibitory charge neuron
    result = label_neurons(
        torch.tensor(acts, dtype=torch.float32), {"hydrophobic": hydrophobic, "charged": charged}
    )
    assert result.auroc.shape == (2, 6) and result.concepts == ("hydrophobic", "charged")
    assert result.positive["hydrophobic"].tolist() == [2] and result.negative["hydrophobic"].tolist() == []
    assert result.positive["charged"].tolist() == [] and result.negative["charged"].tolist() == [4]
    assert result.top("hydrophobic", 1).tolist() == [2] and result.top(
        "charged", 1, negative=True
    ).tolist() == [4]
    assert np.allclose(result.auroc[0], auroc(acts, hydrophobic), atol=1e-6)
    rejects(label_neurons, acts, {"x": hydrophobic[:-1]}, name="labels")
    rejects(label_neurons, acts, {"x": hydrophobic}, threshold=0.5, name="threshold")


def test_label_neurons_negative_boundary_is_inclusive():
    # A neuron whose AUROC is exactly 1 - threshold is inhibitory: its negated activation has AUROC exactly
    # threshold. Before, the AUROC was compared with 1 - threshold, which rounds below it (1 - 0.8 =
    # 0.19999999999999996 < 0.2), and such neurons were left out of `negative`.
    y = np.array([True] * 5 + [False] * 5)
    boundary = np.array([0, 1, 2, 3, 9, 4, 5, 6, 7, 8], dtype=float)  # U = 5 of 25 pairs: AUROC 0.2
    assert auroc(boundary, y) == 0.2 and auroc(-boundary, y) == 0.8
    found = label_neurons(np.stack([boundary, -boundary, np.zeros(10), boundary], 1), {"c": y})
    assert found.negative["c"].tolist() == [0, 3] and found.positive["c"].tolist() == [1]
    # against exact rational AUROCs (pair counts, ties 1/2) of 0/1 activations, 10 positives and 10
    # negatives: many AUROCs fall on 1 - threshold. Before: 1 of the 3 neurons found at 0.8, 0 of 1 at 0.9.
    labels = np.arange(20) % 2 == 0
    acts = np.random.default_rng(0).integers(0, 2, size=(20, 400)).astype(float)
    pos, neg = acts[labels], acts[~labels]
    twice_u = ((pos[:, None] < neg[None]) * 2 + (pos[:, None] == neg[None])).sum((0, 1))  # of -acts
    for threshold in (0.6, 0.7, 0.8, 0.9):
        exact = [j for j, v in enumerate(twice_u) if Fraction(int(v), 200) >= Fraction(str(threshold))]
        found = label_neurons(acts, {"c": labels}, threshold=threshold)
        assert sorted(found.negative["c"].tolist()) == exact, threshold
        up = label_neurons(-acts, {"c": labels}, threshold=threshold).positive["c"]
        assert sorted(up.tolist()) == exact, threshold
