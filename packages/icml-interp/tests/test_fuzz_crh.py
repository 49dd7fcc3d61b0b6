"""Fuzz tests (GUIDE "Bad input") of icml_interp.crh: every public callable gets hostile inputs and either
returns a checked result or raises ValueError/TypeError naming the argument."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_interp.crh
from icml_interp.crh import (
    Cylinder,
    KeywordJudge,
    LMJudge,
    SpiralProbe,
    Steerability,
    continuation_perplexity,
    decompose,
    exponent_search,
    fit_spiral_probe,
    fit_steerability,
    geometry_correlation,
    geometry_features,
    label_outputs,
    sector_bins,
    sector_prediction,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Cylinder, "built by decompose (fuzzed), whose result's methods are fuzzed in test_decompose")
FUZZ.exempt(SpiralProbe, "built by fit_spiral_probe (fuzzed)")
FUZZ.exempt(Steerability, "the result container fit_steerability (fuzzed) returns")

CHEAP = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=15, deadline=None)
G = torch.Generator().manual_seed(0)
DIFFS = torch.randn(12, 6, generator=G, dtype=torch.float64) + torch.tensor([3.0, 0, 0, 0, 0, 0]).double()
CYL = decompose(DIFFS)
STEER = np.linspace(0.1, 1.0, 12)


def finite(x) -> bool:
    return bool(np.isfinite(np.asarray(x, dtype=float)).all())


@FUZZ.covers(decompose)
@CHEAP
@given(st.data())
def test_decompose(data):
    fuzz_call(
        data,
        decompose,
        {"diffs": DIFFS, "axis": torch.ones(6, dtype=torch.float64)},
        check=lambda c: isinstance(c, Cylinder) and finite(c.cos) and finite(c.sin),
    )
    cyl = CYL  # the methods are fuzzed on a valid cylinder of 12 samples in 6 dimensions
    method = data.draw(st.sampled_from(["normal_basis", "sector_angles", "penalty_vectors"]))
    if method == "normal_basis":
        fuzz_call(data, cyl.normal_basis, {"k": 2}, check=lambda b: b.ndim == 2 and b.shape[1] == 6)
    elif method == "sector_angles":
        fuzz_call(
            data,
            cyl.sector_angles,
            {"basis": cyl.normal_basis(2), "diffs": DIFFS[:3]},
            check=lambda a: a.ndim == 1 and finite(a),  # one angle per held-out row (diffs=None: the 12 own)
        )
    else:
        fuzz_call(
            data,
            cyl.penalty_vectors,
            {"scale": 2.0, "lam": 0.5},
            check=lambda v: v.shape == (12, 6) and finite(v),
        )


@FUZZ.covers(sector_bins)
@CHEAP
@given(st.data())
def test_sector_bins(data):
    fuzz_call(
        data,
        sector_bins,
        {"angles": torch.tensor([-3.0, 0.0, 3.0], dtype=torch.float64), "n_sectors": 8},
        check=lambda b: b.ndim == 1 and int(b.min()) >= 0,
    )


@FUZZ.covers(fit_spiral_probe)
@FEW
@given(st.data())
def test_fit_spiral_probe(data):
    fuzz_call(
        data,
        fit_spiral_probe,
        {"diffs": DIFFS, "k": 3, "n_rots": (0.5, 1.0), "radii": (1.0,)},
        check=lambda p: isinstance(p, SpiralProbe) and finite(p.point(torch.tensor([0.0, 0.5]))),
    )


@FUZZ.covers(fit_steerability)
@CHEAP
@given(st.data())
def test_fit_steerability(data):
    fuzz_call(
        data,
        fit_steerability,
        {"scales": np.array([0.0, 1.0, 2.0, 3.0]), "scores": np.arange(12.0).reshape(3, 4) ** 0.5},
        related={"scales": ["scores"], "scores": ["scales"]},
        check=lambda s: s.slope.ndim == 1 and finite(s.slope),
    )


@FUZZ.covers(geometry_correlation, geometry_features, exponent_search)
@FEW
@given(st.data())
def test_geometry_correlation(data):
    fn = data.draw(st.sampled_from([geometry_correlation, geometry_features, exponent_search]))
    valid = {"cylinder": CYL, "steerability": STEER}
    if fn is geometry_correlation:
        valid.update(a=2.0, p=2.0, t=-1.0, n_permutations=49, seed=0)
    elif fn is geometry_features:
        valid.update(a=2.0, p=2.0, t=-1.0)
    else:
        valid.update(a_grid=(1.0, 2.0), p_grid=(2.0,), t_grid=(-1.0,))
    fuzz_call(
        data,
        fn,
        valid,
        strategies={"cylinder": st.sampled_from([None, DIFFS, "x"])},
        allow_non_finite=fn is not geometry_correlation,  # features mark unusable samples as nan
    )


@FUZZ.covers(sector_prediction)
@FEW
@given(st.data())
def test_sector_prediction(data):
    a = np.linspace(-3, 3, 20)
    fuzz_call(
        data,
        sector_prediction,
        {
            "train_angles": a,
            "train_values": np.cos(a),
            "test_angles": a[::-1].copy(),
            "test_values": np.cos(a),
            "n_sectors": 4,
            "n_permutations": 19,
            "seed": 0,
        },
        related={
            "train_angles": ["train_values"],
            "train_values": ["train_angles"],
            "test_angles": ["test_values"],
            "test_values": ["test_angles"],
        },
        check=lambda r: 0 <= r["accuracy"] <= 1 and 0 < r["p_value"] <= 1,
    )


@FUZZ.covers(KeywordJudge)
@CHEAP
@given(st.data())
def test_keyword_judge(data):
    judge = fuzz_call(
        data, KeywordJudge, {"keywords": ["sea", "wave"]}, check=lambda j: isinstance(j, KeywordJudge)
    )
    if isinstance(judge, KeywordJudge):
        fuzz_call(
            data,
            judge,
            {"texts": ["the sea", "nothing"]},
            check=lambda s: isinstance(s, list) and all(0 <= x <= 1 for x in s),
        )


class _Backend:
    def generate(self, prompts, max_new_tokens=4, temperature=0.0):
        return [type("C", (), {"text": "2"})() for _ in prompts]


@FUZZ.covers(LMJudge)
@CHEAP
@given(st.data())
def test_lm_judge(data):
    judge = fuzz_call(
        data,
        LMJudge,
        {"backend": _Backend(), "concept": "ocean", "max_new_tokens": 4},
        check=lambda j: isinstance(j, LMJudge),
    )
    if isinstance(judge, LMJudge):
        fuzz_call(data, judge.labels, {"texts": ["a", "b"]}, check=lambda r: set(r) <= {2})


@FUZZ.covers(label_outputs)
@CHEAP
@given(st.data())
def test_label_outputs(data):
    fuzz_call(
        data,
        label_outputs,
        {
            "concept_present": np.array([True, False]),
            "perplexity": np.array([2.0, 50.0]),
            "gibberish_threshold": 10.0,
        },
        related={"concept_present": ["perplexity"], "perplexity": ["concept_present"]},
        check=lambda r: set(r.tolist()) <= {1, 2, 3},
        allow_non_finite=True,  # a nan perplexity is a valid input: nothing generated, labelled gibberish
    )


@FUZZ.covers(continuation_perplexity)
@FEW
@given(st.data())
def test_continuation_perplexity(zoo, data):
    model = zoo.gpt2(0)
    fuzz_call(
        data,
        continuation_perplexity,
        {"model": model, "prompts": [[5, 6, 7], [8, 9]], "continuations": [[1, 2], [3]], "batch_size": 1},
        related={"prompts": ["continuations"], "continuations": ["prompts"]},
        check=lambda r: r.shape == (2,) and finite(r),
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_interp.crh)
    assert math.isfinite(float(CYL.cos.mean()))
