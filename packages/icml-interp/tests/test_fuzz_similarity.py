"""Fuzz tests (GUIDE "Bad input") of icml_interp.similarity: every public callable gets hostile inputs and
either returns a checked result or raises ValueError/TypeError naming the argument."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_interp.similarity
from icml_interp.similarity import (
    PermutationBaseline,
    ProcrustesResult,
    StreamingCKA,
    cka,
    cknna,
    depth_buckets,
    gram_linear,
    gram_rbf,
    hsic,
    layer_representations,
    linear_cka,
    match_layers_by_depth,
    mutual_knn,
    pair_similarity,
    permutation_baseline,
    plot_similarity_matrix,
    procrustes,
    pwcca,
    rbf_cka,
    rsa,
    similarity_matrix,
    svcca,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(PermutationBaseline, "the result container permutation_baseline (fuzzed) returns")
FUZZ.exempt(ProcrustesResult, "the result container procrustes (fuzzed) returns")

CHEAP = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=15, deadline=None)
_G = np.random.default_rng(0)
_Z = _G.standard_normal((24, 3))
X = _Z @ _G.standard_normal((3, 6)) + 0.3 * _G.standard_normal((24, 6))
Y = torch.tensor(_Z @ _G.standard_normal((3, 5)) + 0.3 * _G.standard_normal((24, 5)))
K, L = gram_linear(X), gram_linear(Y)
PAIR = {"X": ["Y"], "Y": ["X"]}  # a hostile X of another row count breaks the pairing: naming Y is fine too
REPS_A = [X + 0.1 * i for i in range(4)]
REPS_B = [Y.numpy() * (i + 1) for i in range(5)]
SMALL_COUNTS = st.sampled_from([0, 1, 3, -1, 2**63, 0.5, None, "x", True])


def finite(x) -> bool:
    return bool(np.isfinite(np.asarray(x, dtype=float)).all())


def unit_interval(v) -> bool:
    return -1 - 1e-9 <= v <= 1 + 1e-9


@FUZZ.covers(linear_cka)
@CHEAP
@given(st.data())
def test_linear_cka(data):
    fuzz_call(data, linear_cka, {"X": X, "Y": Y, "debiased": True}, related=PAIR, check=unit_interval)


@FUZZ.covers(rbf_cka)
@CHEAP
@given(st.data())
def test_rbf_cka(data):
    sigma = data.draw(st.sampled_from([None, 2.0]))
    fuzz_call(
        data,
        rbf_cka,
        {"X": X, "Y": Y, "sigma": sigma, "fraction": 0.8, "debiased": False},
        mutate=["X", "Y", "fraction", "debiased"] + (["sigma"] if sigma is not None else []),
        related={**PAIR, "sigma": ["X", "Y"], "fraction": ["X", "Y"]},
        check=unit_interval,
    )


@FUZZ.covers(gram_linear, gram_rbf)
@CHEAP
@given(st.data())
def test_grams(data):
    if data.draw(st.booleans()):
        fuzz_call(data, gram_linear, {"X": X}, check=lambda k: k.shape[0] == k.shape[1] and finite(k))
    else:
        fuzz_call(
            data,
            gram_rbf,
            {"X": X, "sigma": 1.5, "fraction": 1.0},
            check=lambda k: k.shape[0] == k.shape[1] and finite(k) and float(k.max()) <= 1.0,
        )


@FUZZ.covers(cka, hsic)
@CHEAP
@given(st.data())
def test_cka_and_hsic(data):
    fn = data.draw(st.sampled_from([cka, hsic]))
    check = unit_interval if fn is cka else (lambda v: math.isfinite(v))
    fuzz_call(data, fn, {"K": K, "L": L, "debiased": True}, related={"K": ["L"], "L": ["K"]}, check=check)


@FUZZ.covers(StreamingCKA)
@CHEAP
@given(st.data())
def test_streaming_cka(data):
    stream = fuzz_call(data, StreamingCKA, {"estimator": "debiased"}, check=lambda s: s.n_samples_ == 0)
    if not isinstance(stream, StreamingCKA):
        return
    stream.update(X[:12], Y[:12])
    fuzz_call(
        data,
        stream.update,
        {"X_batch": X[12:], "Y_batch": Y[12:]},
        related={"X_batch": ["Y_batch"], "Y_batch": ["X_batch"]},
        check=lambda s: s is stream,
    )
    value = stream.value()  # after a refused batch, the batches accepted before still give a valid value
    assert unit_interval(value)


@FUZZ.covers(mutual_knn, cknna)
@CHEAP
@given(st.data())
def test_neighbours(data):
    fn = data.draw(st.sampled_from([mutual_knn, cknna]))
    check = (lambda v: 0 <= v <= 1) if fn is mutual_knn else (lambda v: math.isfinite(v))
    fuzz_call(data, fn, {"X": X, "Y": Y, "k": 5}, related={**PAIR, "k": ["X", "Y"]}, check=check)


@FUZZ.covers(svcca, pwcca)
@CHEAP
@given(st.data())
def test_cca(data):
    if data.draw(st.booleans()):
        fuzz_call(data, svcca, {"X": X, "Y": Y, "keep": 0.99}, related=PAIR, check=lambda v: 0 <= v <= 1)
    else:
        fuzz_call(data, pwcca, {"X": X, "Y": Y}, related=PAIR, check=lambda v: 0 <= v <= 1 + 1e-12)


@FUZZ.covers(procrustes)
@CHEAP
@given(st.data())
def test_procrustes(data):
    fuzz_call(
        data,
        procrustes,
        {"X": X, "Y": Y, "center": True, "normalize": False},
        related=PAIR,
        check=lambda r: isinstance(r, ProcrustesResult) and 0 <= r.similarity <= 1 and r.residual >= 0,
    )


@FUZZ.covers(rsa)
@CHEAP
@given(st.data())
def test_rsa(data):
    fuzz_call(
        data,
        rsa,
        {"X": X, "Y": Y, "metric": "correlation", "method": "spearman"},
        related=PAIR,
        check=unit_interval,
    )


@FUZZ.covers(permutation_baseline)
@FEW
@given(st.data())
def test_permutation_baseline(data):
    fuzz_call(
        data,
        permutation_baseline,
        {"metric": linear_cka, "X": X, "Y": Y, "n_permutations": 9, "seed": 0, "quantiles": (0.05, 0.95)},
        related=PAIR,
        strategies={"n_permutations": SMALL_COUNTS},
        check=lambda b: isinstance(b, PermutationBaseline) and 0 < b.p_value <= 1,
    )


@FUZZ.covers(depth_buckets, match_layers_by_depth)
@CHEAP
@given(st.data())
def test_depth(data):
    if data.draw(st.booleans()):
        fuzz_call(
            data,
            depth_buckets,
            {"n_layers": 30, "buckets": 3},
            related={"n_layers": ["buckets"], "buckets": ["n_layers"]},
            check=lambda b: (
                all(b.values())
                and [i for layers in b.values() for i in layers] == [*range(sum(map(len, b.values())))]
            ),
        )
    else:
        fuzz_call(data, match_layers_by_depth, {"n_a": 4, "n_b": 8}, check=lambda p: len(p) >= 1)


@FUZZ.covers(pair_similarity)
@FEW
@given(st.data())
def test_pair_similarity(data):
    fuzz_call(
        data,
        pair_similarity,
        {
            "reps_a": REPS_A,
            "reps_b": REPS_B,
            "metric": linear_cka,
            "buckets": 3,
            "reduce": "mean",
            "n_permutations": 2,
            "seed": 0,
        },
        related={"reps_a": ["reps_b"], "reps_b": ["reps_a"], "buckets": ["reps_a", "reps_b"]},
        strategies={"n_permutations": SMALL_COUNTS},
        check=lambda r: all(unit_interval(v["similarity"]) for v in r.values()),
    )


@FUZZ.covers(similarity_matrix)
@FEW
@given(st.data())
def test_similarity_matrix(data):
    fuzz_call(
        data,
        similarity_matrix,
        {
            "representations": {"a": REPS_A, "b": REPS_B},
            "metric": linear_cka,
            "bucket": "late",
            "buckets": 3,
            "reduce": "max",
        },
        related={"buckets": ["bucket", "representations"]},
        check=lambda r: r[1].shape == (2, 2) and np.allclose(r[1], r[1].T),
    )


@FUZZ.covers(plot_similarity_matrix)
@FEW
@given(st.data())
def test_plot_similarity_matrix(data):
    import matplotlib.pyplot as plt

    fig = fuzz_call(
        data,
        plot_similarity_matrix,
        {"names": ["a", "b"], "matrix": np.array([[1.0, 0.4], [0.4, 1.0]]), "path": None, "title": "t"},
        mutate=["names", "matrix", "title"],  # a path is a file written: tested in test_similarity.py
        related={"names": ["matrix"], "matrix": ["names"]},
    )
    if not isinstance(fig, Exception):
        plt.close(fig)


@FUZZ.covers(layer_representations)
@FEW
@given(st.data())
def test_layer_representations(zoo, data):
    model = zoo.gpt2(0, layers=1)
    fuzz_call(
        data,
        layer_representations,
        {
            "model": model,
            "tokenizer": None,
            "texts": [[1, 2, 3], [4, 5]],
            "pooling": "mean",
            "batch_size": 2,
            "layers": [0, -1],
            "max_length": 8,
            "progress": False,
        },
        mutate=["model", "texts", "pooling", "batch_size", "layers", "max_length", "progress"],
        check=lambda reps: len(reps) >= 1 and all(r.ndim == 2 and r.shape[1] == 64 for r in reps),
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_interp.similarity)
