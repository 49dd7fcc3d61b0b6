"""Issue 22, "Must hold": a fuzz test per public API of icml_compress (baselines, proteus, quantize,
trellis), checked with :mod:`icml_tools.fuzz` against the bad-input contract of GUIDE "Bad input".

Tiny everything: ``L = 8`` trellises with 8-weight tiles, a one-block random Llama of width 32 (the
``tiny_llama`` of the other tests, smaller), RTN or ``1mad`` quantization. Arguments whose every valid
value is legitimate but may be arbitrarily costly (a model size, a count of tiles or tables) are fuzzed
with bad values only (``strategies=``), so no case allocates terabytes or loops for hours."""

from __future__ import annotations

import copy
import functools
import math
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import icml_compress.proteus.vetting as vetting
from icml_compress import baselines, proteus, quantize, trellis
from icml_compress.baselines import LloydMaxResult, RTNQuantized, lloyd_max, rtn_quantize
from icml_compress.proteus import (
    MULBAL_POOL,
    MulBal,
    TrellisCode,
    distortion_rate_bound,
    gaussian_mse,
    gaussian_tile_mse,
    hyb_table,
    make_code,
    overlap_stats,
    reference_stats,
    vet,
    vet_all,
)
from icml_compress.quantize import (
    ProteusLinear,
    QuantConfig,
    RTNLinear,
    apply_compensation,
    bytes_per_token,
    evaluate,
    load_quantized,
    model_hessians,
    packed_hash,
    plot_layer_errors,
    quantize_model,
    register_hf_quantizer,
    save_quantized,
    split_corpus,
)
from icml_compress.trellis import BitshiftTrellis, default_chunk, parallel_viterbi, quantize_tiles, viterbi
from icml_kernels.trellis import TrellisFormat
from icml_tools.fuzz import Coverage, fuzz_call, hostile, rejects

FUZZ = Coverage()
FUZZ.exempt(LloydMaxResult, "a NamedTuple result only lloyd_max builds (fuzzed through lloyd_max)")
FUZZ.exempt(RTNQuantized, "a NamedTuple result only rtn_quantize builds (fuzzed through rtn_quantize)")
FUZZ.exempt(register_hf_quantizer, "takes no argument (test_hf_from_pretrained.py tests it)")

GEN = torch.Generator().manual_seed(0)
W = torch.randn(4, 16, generator=GEN)  # a weight (out, in): 4 rows of 2 groups of 8
NOT_A_MODULE = st.sampled_from([None, "model", 3, object(), nn.Linear, [nn.Linear(2, 2)]])
NOT_A_SIZE = st.sampled_from([0, -1, 1.5, True, None, "32", math.nan])


def with_inputs(fn):
    """``fn`` returning ``(its arguments, its result)``, so a check sees the (possibly mutated) input."""

    def call(**kwargs):
        return kwargs, fn(**kwargs)

    call.__qualname__ = getattr(fn, "__qualname__", repr(fn))
    return call


# --- baselines ----------------------------------------------------------------------------------------
@FUZZ.covers(rtn_quantize)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rtn_quantize(data):
    weight = data.draw(st.sampled_from([W, W.double(), W.half()]), label="dtype of weight")

    def check(case) -> bool:
        kw, q = case
        w, bits, g = kw["weight"], kw["bits"], kw["group_size"]
        groups = (*w.shape[:-1], w.shape[-1] // g)
        expanded = (
            q.offset.unsqueeze(-1) + q.scale.unsqueeze(-1) * q.codes.reshape(*groups, g).double()
        ).reshape(w.shape)
        return (
            isinstance(q, RTNQuantized)
            and q.dequantized.shape == w.shape
            and q.dequantized.dtype == w.dtype
            and (q.codes.numel() == 0 or int(q.codes.max()) < 2**bits)
            and q.scale.shape == groups
            and torch.allclose(
                expanded, q.dequantized.double(), rtol=1e-2, atol=1e-2 * (1 + float(w.abs().max()))
            )
        )

    fuzz_call(
        data,
        with_inputs(rtn_quantize),
        {"weight": weight, "bits": 2, "group_size": 8},
        check=check,
        related={"weight": ["group_size"], "group_size": ["weight"]},
    )


@FUZZ.covers(lloyd_max)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_lloyd_max(data):
    init = torch.linspace(-1, 1, 4).expand(4, 4).contiguous()
    x = data.draw(st.sampled_from([W, W.double()]), label="dtype of x")  # float64: computed in float64

    def check(case) -> bool:
        kw, r = case
        x, levels = kw["x"], kw["levels"]
        mse = r.mse
        return (
            isinstance(r, LloydMaxResult)
            and r.levels.shape == (*x.shape[:-1], levels)
            and r.dequantized.shape == x.shape
            and mse.shape == (kw["iters"] + 1, *x.shape[:-1])
            and bool((mse[1:] <= mse[:-1] * (1 + 1e-9) + 1e-12).all() or not torch.isfinite(mse).all())
            and bool((mse >= 0).all())  # Lloyd never raises the error (an overflow warned: infinite)
        )

    fuzz_call(
        data,
        with_inputs(lloyd_max),
        {"x": x, "levels": 4, "iters": 3, "init": init},
        check=check,
        # any iters >= 0 is valid and costs in proportion: bad values only
        strategies={"iters": st.sampled_from([-1, 1.5, True, None, "3", math.nan])},
        related={"x": ["init"], "levels": ["init"], "init": ["x", "levels"]},
    )


# --- trellis ------------------------------------------------------------------------------------------
TRELLIS = BitshiftTrellis(8, 2, 1, 8)  # tiles of 8 weights: 8 steps of 2 new bits
CODE = make_code("1mad", 8)
VALUES = CODE.values()  # (256, 1)
XT = torch.randn(2, 8, generator=GEN)
BAD_TRELLIS = st.sampled_from([None, "trellis", (8, 2, 1, 8), BitshiftTrellis(9, 2, 1, 8), BitshiftTrellis])


@FUZZ.covers(BitshiftTrellis)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_bitshift_trellis(data):
    def check(t) -> bool:
        s = torch.arange(t.n_states)
        succ = t.successors(s)  # (2^L, 2^KV)
        back = t.predecessors(succ[:, 0])
        return (
            isinstance(t, TrellisFormat)
            and succ.shape == (t.n_states, 1 << t.kv)
            and bool((back == s.unsqueeze(-1)).any(-1).all())  # s leads to its successors
            and t.steps * t.V == t.T
        )

    fuzz_call(
        data,
        BitshiftTrellis,
        {"L": 8, "K": 2, "V": 1, "T": 8},
        check=check,
        related={"K": ["L", "V", "T"], "V": ["K", "L", "T"], "L": ["K", "V"], "T": ["V"]},
    )


@FUZZ.covers(default_chunk)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_default_chunk(data):
    fuzz_call(
        data,
        default_chunk,
        {"trellis": TRELLIS, "steps": 8},
        check=lambda c: isinstance(c, int) and c >= 1,
        strategies={"trellis": BAD_TRELLIS},
    )


def _inside_parallel_viterbi(workers):
    with parallel_viterbi(workers) as n:
        return n, torch.get_num_threads()


@FUZZ.covers(parallel_viterbi)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_parallel_viterbi(data):
    fuzz_call(
        data,
        _inside_parallel_viterbi,
        {"workers": 2},
        check=lambda r: isinstance(r[0], int) and r[0] >= 1 and r[1] == 1,
    )


def _is_constrained_path(case) -> bool:
    kw, states = case
    t, x = kw["trellis"], kw["x"]
    ok = (
        states.dtype == torch.int64
        and states.shape == (x.shape[0], x.shape[1] // t.V)
        and bool(t.is_path(states).all())
        and (states.numel() == 0 or (int(states.min()) >= 0 and int(states.max()) < t.n_states))
    )
    low = (1 << t.overlap_bits) - 1
    if kw.get("start_overlap") is not None and states.numel():
        ok = ok and torch.equal(states[:, 0] >> t.kv, kw["start_overlap"].to(torch.int64))
    if kw.get("end_overlap") is not None and states.numel():
        ok = ok and torch.equal(states[:, -1] & low, kw["end_overlap"].to(torch.int64))
    return ok


@FUZZ.covers(viterbi)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_viterbi(data):
    overlap = torch.tensor([3, 60])
    fuzz_call(
        data,
        with_inputs(viterbi),
        {
            "x": XT,
            "values": VALUES,
            "trellis": TRELLIS,
            "start_overlap": overlap,
            "end_overlap": overlap,
            "chunk": 1,
            "workers": 1,
        },
        check=_is_constrained_path,
        strategies={"trellis": BAD_TRELLIS},
        related={
            "x": ["start_overlap", "end_overlap"],
            "trellis": ["values", "start_overlap", "end_overlap"],
        },
    )


@FUZZ.covers(quantize_tiles)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_quantize_tiles(data):
    def check(case) -> bool:
        kw, states = case
        t = kw["trellis"]
        tb = kw["tail_biting"]
        return _is_constrained_path(case) and (not tb or bool(t.is_tail_biting(states).all()))

    fuzz_call(
        data,
        with_inputs(quantize_tiles),
        {"x": XT, "values": VALUES, "trellis": TRELLIS, "tail_biting": True, "chunk": 1},
        check=check,
        strategies={"trellis": BAD_TRELLIS},
        related={"trellis": ["values", "x"]},
    )


# --- proteus: codes -----------------------------------------------------------------------------------
@FUZZ.covers(MulBal)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mulbal(data):
    p = MULBAL_POOL[0]
    fuzz_call(
        data,
        with_inputs(MulBal),
        {"a": p.a, "b": p.b, "m": p.m},
        check=lambda c: c[1].triple == (c[0]["a"], c[0]["b"], c[0]["m"]) and c[1].a % 2 == 1,
    )


CODE_VARIANTS = {
    "1mad": {"name": "1mad", "L": 8, "V": 1, "mulbal": None, "table": None},
    "mulbal": {"name": "mulbal", "L": 8, "V": 1, "mulbal": MULBAL_POOL[1], "table": None},
    "lut": {"name": "lut", "L": 8, "V": 2, "mulbal": None, "table": make_code("lut", 8, 2).table},
    "hyb": {"name": "hyb", "L": 8, "V": 2, "mulbal": None, "table": make_code("hyb", 8, 2).table},
}


def _is_unit_code(c) -> bool:
    v = c.values().double()
    return (
        isinstance(c, TrellisCode)
        and v.shape == (1 << c.L, c.V)
        and abs(v.mean().item()) < 1e-6
        and abs(v.std(unbiased=False).item() - 1) < 1e-6
    )


@FUZZ.covers(TrellisCode)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_trellis_code(data):
    name = data.draw(st.sampled_from(sorted(CODE_VARIANTS)), label="code")
    kw = {**CODE_VARIANTS[name], "alpha": 0.5, "beta": 0.25}

    def check(c) -> bool:
        v = c.values()
        return isinstance(c, TrellisCode) and v.shape == (1 << c.L, c.V) and v.dtype == torch.float32

    fuzz_call(
        data,
        TrellisCode,
        kw,
        check=check,
        strategies={"mulbal": st.sampled_from([None, "x", (1, 2, 3), MULBAL_POOL[0], 7])},
        related={
            "name": ["V", "mulbal", "table"],
            "V": ["name", "table"],
            "L": ["table"],
            "mulbal": ["name"],
            "table": ["name"],
        },
    )


@FUZZ.covers(make_code)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_make_code(data):
    name = data.draw(st.sampled_from(sorted(CODE_VARIANTS)), label="code")
    kw = {k: v for k, v in CODE_VARIANTS[name].items() if k != "table"}
    fuzz_call(
        data,
        make_code,
        {**kw, "seed": 1},
        check=_is_unit_code,
        strategies={"mulbal": st.sampled_from([None, "x", (1, 2, 3), MULBAL_POOL[0], 7])},
        related={"name": ["V", "mulbal"], "V": ["name"], "mulbal": ["name"]},
    )


@FUZZ.covers(hyb_table)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_hyb_table(data):
    def check(t) -> bool:
        return (
            t.dtype == torch.float32
            and t.dim() == 2
            and t.shape[1] == 2
            and torch.unique(t, dim=0).shape[0] == t.shape[0]
        )

    fuzz_call(data, hyb_table, {"bits": 3, "seed": 1}, check=check)


@FUZZ.covers(distortion_rate_bound)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_distortion_rate_bound(data):
    fuzz_call(
        data,
        with_inputs(distortion_rate_bound),
        {"K": 2},
        check=lambda c: c[1] == 2.0 ** (-2 * c[0]["K"]) and 0 < c[1] < 1,
    )


# the Gaussian benchmark's arguments: any n_tiles >= 1 is valid and costs in proportion, so bad values only
GAUSSIAN_FUZZ = {
    "strategies": {
        "n_tiles": NOT_A_SIZE,
        "code": st.sampled_from(["", "1MAD", "mulbal-99", "mulbal-x", None, 1]),
    },
    "related": {"V": ["code"], "K": ["L"], "L": ["K"]},
}


@FUZZ.covers(gaussian_mse)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_gaussian_mse(data):
    fuzz_call(
        data,
        gaussian_mse,
        {"code": "1mad", "L": 8, "K": 2, "V": 1, "n_tiles": 1, "seed": 0, "tail_biting": True},
        check=lambda mse: isinstance(mse, float) and 0 < mse < 1,  # below the unit source's variance
        **GAUSSIAN_FUZZ,
    )


@FUZZ.covers(gaussian_tile_mse)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_gaussian_tile_mse(data):
    fuzz_call(
        data,
        gaussian_tile_mse,
        {"code": "3inst", "L": 8, "K": 2, "V": 1, "n_tiles": 2, "seed": 0, "tail_biting": True},
        check=lambda t: isinstance(t, torch.Tensor) and t.ndim == 1 and bool(((t > 0) & (t < 1)).all()),
        **GAUSSIAN_FUZZ,
    )


# --- proteus: vetting ---------------------------------------------------------------------------------
@functools.cache
def lut_values() -> torch.Tensor:
    return make_code("lut", 8, seed=3).values()[:, 0]


@functools.cache
def references() -> dict:
    return {8: reference_stats(8, 2, 2)}


def _finite_stats(stats) -> bool:
    return isinstance(stats, dict) and all(math.isfinite(v) for v in stats.values())


@FUZZ.covers(overlap_stats)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_overlap_stats(data):
    fuzz_call(
        data,
        with_inputs(overlap_stats),
        {"values": lut_values(), "L": 8, "K": 2},
        check=lambda c: _finite_stats(c[1]) and c[1]["L"] == c[0]["L"] and 0 < c[1]["distinct_fraction"] <= 1,
        related={"L": ["values", "K"], "values": ["L"], "K": ["L"]},
    )


@FUZZ.covers(reference_stats)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_reference_stats(data):
    fuzz_call(
        data,
        reference_stats,
        {"L": 8, "K": 2, "tables": 2},
        check=lambda s: _finite_stats(s) and abs(s["skew"]) < 1,
        # any L in 8..16 and tables >= 1 is valid, and a large L with many tables costs seconds: bad values only
        strategies={"L": st.sampled_from([7, 17, 0, -1, 8.0, True, None, "8"]), "tables": NOT_A_SIZE},
        related={"K": ["L"]},
    )


@FUZZ.covers(vet)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_vet(data):
    refs = references()
    bad_refs = st.sampled_from([{}, {8: {}}, {7: refs[8]}, {8: "x"}, {"8": refs[8]}, "x", None, [refs[8]]])

    def check(r) -> bool:
        return (
            isinstance(r["passed"], bool)
            and math.isfinite(r["score"])
            and r["score"] > 0
            and set(r["per_L"]) == {8}
        )

    fuzz_call(
        data,
        vet,
        {"candidate": MULBAL_POOL[0], "references": refs, "K": 2},
        check=check,
        strategies={
            "candidate": st.sampled_from([None, (1, 2, 3), "x", MULBAL_POOL]),
            "references": bad_refs,
        },
        related={"K": ["references"]},
    )


@FUZZ.covers(vet_all)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_vet_all(data):
    def check(r) -> bool:
        results, pool = r
        scores = [x["score"] for x in results]
        return (
            scores == sorted(scores)
            and len(pool) <= 2
            and all(isinstance(p, MulBal) for p in pool)
            and len({p.a for p in pool}) == len(pool)
        )

    with mock.patch.object(vetting, "VET_LS", (8,)):  # the module's choice of L; one keeps this cheap
        fuzz_call(
            data,
            vet_all,
            {"pool_size": 2, "n_multipliers": 1, "seed": 5},
            check=check,
            # every n_multipliers >= 0 is valid and costs in proportion: bad values only
            strategies={"n_multipliers": st.sampled_from([-1, 1.5, True, None, "1", math.nan])},
        )


# --- quantize: configuration and modules --------------------------------------------------------------
@FUZZ.covers(QuantConfig)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_quant_config(data):
    method = data.draw(st.sampled_from(["rtn", "trellis", "proteus"]), label="method")
    valid = QuantConfig(
        method=method,
        code="mulbal" if method == "proteus" else "1mad",
        L=8,
        T=32,
        compensation=method != "rtn",
        distill_steps=0 if method == "rtn" else 2,
        max_blocks=1,
    ).to_dict()
    valid["distill_chat"] = 0
    valid["device"] = "cpu"

    def check(c) -> bool:
        return (
            isinstance(c, QuantConfig) and QuantConfig.from_dict(c.to_dict()) == c and len(c.digest()) == 12
        )

    fuzz_call(
        data,
        QuantConfig,
        {**valid, "skip": tuple(valid["skip"])},
        check=check,
        related={
            "method": ["code", "bits", "compensation", "distill_steps"],
            "code": ["method", "V", "T", "L"],
            "bits": ["K", "L", "T"],
            "L": ["K", "V"],
            "T": ["K", "V"],
            "compensation": ["method"],
            "distill_steps": ["method", "distill_chat"],
            "distill_chat": ["distill_steps"],
        },
    )


@FUZZ.covers(ProteusLinear)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_proteus_linear(data):
    name = data.draw(st.sampled_from(["1mad", "mulbal", "hyb"]), label="code")
    variant = CODE_VARIANTS[name]
    kw = {
        "in_features": 32,
        "out_features": 16,
        "code": name,
        "L": 8,
        "K": 2,
        "V": variant["V"],
        "T": 32,
        "mulbal": None if variant["mulbal"] is None else variant["mulbal"].triple,
        "table_shape": None if variant["table"] is None else tuple(variant["table"].shape),
        "bias": True,
        "candidate": None,
    }

    def check(mod) -> bool:
        y = mod(torch.ones(2, mod.in_features))
        return mod.packed.shape == (
            mod.out_features,
            mod.in_features // mod.T,
            mod.K * mod.T // 32,
        ) and y.shape == (
            2,
            mod.out_features,
        )

    fuzz_call(
        data,
        ProteusLinear,
        kw,
        check=check,
        # any positive size that T divides is valid and costs memory in proportion: bad values only
        strategies={
            "in_features": st.sampled_from([0, -1, 1.5, True, None, "32", 33]),
            "out_features": NOT_A_SIZE,
        },
        related={
            "code": ["V", "mulbal", "table_shape"],
            "V": ["code", "table_shape", "T"],
            "L": ["table_shape", "K"],
            "K": ["T", "L"],
            "T": ["in_features", "K", "V"],
        },
    )


@FUZZ.covers(RTNLinear)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rtn_linear(data):
    def check(mod) -> bool:
        y = mod(torch.ones(2, mod.in_features))
        return mod.codes.shape == (mod.out_features, mod.in_features * mod.bits // 8) and y.shape == (
            2,
            mod.out_features,
        )

    fuzz_call(
        data,
        RTNLinear,
        {"in_features": 32, "out_features": 16, "bits": 2, "group_size": 8, "bias": True},
        check=check,
        strategies={
            "in_features": st.sampled_from([0, -1, 1.5, True, None, "32", 33]),
            "out_features": NOT_A_SIZE,
        },
        related={"bits": ["in_features"], "group_size": ["in_features"]},
    )


# --- quantize: models ---------------------------------------------------------------------------------
VOCAB = 64
RTN_CONFIG = QuantConfig(method="rtn", group_size=32, n_calibration=2, seq_len=8)
TRELLIS_CONFIG = QuantConfig(method="trellis", code="1mad", L=8, T=32, n_calibration=2, seq_len=8)
IDS = torch.randint(0, VOCAB, (64,), generator=GEN)
SEQS = torch.randint(0, VOCAB, (2, 8), generator=GEN)


def tiny(seed=0):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, vocab=VOCAB)


@functools.cache
def float_model():
    return tiny()


@functools.cache
def rtn_model():
    return quantize_model(tiny(), RTN_CONFIG, IDS, progress=False)


@functools.cache
def trellis_model():
    return quantize_model(tiny(), TRELLIS_CONFIG, IDS, progress=False)


@functools.cache
def saved_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="icml-compress-fuzz-")) / "saved"
    return save_quantized(rtn_model(), path)


def _quantize_fresh(model, config, calibration_texts, tokenizer=None, progress=False, distributed=False):
    """quantize_model on a copy of ``model`` (it quantizes in place)."""
    if isinstance(model, nn.Module):
        model = copy.deepcopy(model)
    return quantize_model(
        model, config, calibration_texts, tokenizer=tokenizer, progress=progress, distributed=distributed
    )


_quantize_fresh.__qualname__ = "quantize_model"


@FUZZ.covers(quantize_model)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_quantize_model(data):
    def check(model) -> bool:
        with torch.no_grad():
            logits = model(SEQS[:1]).logits
        layers = [m for m in model.modules() if isinstance(m, RTNLinear)]
        return (
            len(layers) == 7  # q, k, v, o, gate, up, down of the one block; lm_head skipped
            and "config" in model.icml_quantization
            and logits.shape == (1, 8, VOCAB)
            and bool(torch.isfinite(logits).all())
        )

    fuzz_call(
        data,
        _quantize_fresh,
        {
            "model": float_model(),
            "config": RTN_CONFIG,
            "calibration_texts": IDS,
            "tokenizer": None,
            "progress": False,
            "distributed": False,
        },
        check=check,
        strategies={
            "model": st.sampled_from(
                [None, "model", nn.Sequential(nn.Embedding(10, 4)), tiny().double(), nn.Linear]
            ),
            "config": st.sampled_from([None, "rtn", RTN_CONFIG.to_dict(), QuantConfig(T=48)]),
            # True without a process group (test_distributed.py runs torchrun) or not a bool
            "distributed": st.one_of(st.just(True), hostile(False)),
        },
        related={"calibration_texts": ["tokenizer"], "tokenizer": ["calibration_texts"]},
    )


@FUZZ.covers(model_hessians)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_model_hessians(data):
    def check(H) -> bool:
        sizes = {n: m.in_features for n, m in float_model().named_modules() if isinstance(m, nn.Linear)}
        return len(H) == 7 and all(
            h.dtype == torch.float64 and h.shape == (sizes[n], sizes[n]) and torch.allclose(h, h.T)
            for n, h in H.items()
        )

    fuzz_call(
        data,
        model_hessians,
        {
            "model": float_model(),
            "config": TRELLIS_CONFIG,
            "calibration_texts": IDS,
            "tokenizer": None,
            "progress": False,
        },
        check=check,
        strategies={
            "model": st.sampled_from([None, "model", nn.Sequential(nn.Embedding(10, 4)), nn.Linear]),
            "config": st.sampled_from([None, "trellis", TRELLIS_CONFIG.to_dict(), QuantConfig(T=48)]),
        },
        related={"calibration_texts": ["tokenizer"], "tokenizer": ["calibration_texts"]},
    )


@FUZZ.covers(apply_compensation)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_apply_compensation(data):
    model = trellis_model()
    names = {n for n, m in model.named_modules() if isinstance(m, ProteusLinear)}

    def check(out) -> bool:
        return set(out) == names and all(math.isfinite(v) and v >= 0 for v in out.values())

    fuzz_call(
        data,
        apply_compensation,
        {"model": model, "reference": float_model(), "calibration_ids": IDS, "config": TRELLIS_CONFIG},
        check=check,
        strategies={
            "model": st.sampled_from([None, "model", float_model(), nn.Linear(2, 2)]),
            "reference": st.sampled_from([None, "reference", nn.Linear(2, 2), nn.Sequential()]),
            "config": st.sampled_from([None, "trellis", TRELLIS_CONFIG.to_dict()]),
        },
    )


@FUZZ.covers(bytes_per_token)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_bytes_per_token(data):
    def check(b) -> bool:
        return (
            b["quantized_bytes"] > 0
            and 0 < b["ratio_to_float16"] < 1
            and b["bits_per_weight"] == pytest.approx(8 * b["quantized_bytes"] / b["quantized_weights"])
        )

    fuzz_call(
        data,
        bytes_per_token,
        {"model": rtn_model()},
        check=check,
        strategies={"model": NOT_A_MODULE},
    )
    # the float baseline: nothing quantized, the ratios undefined (None, never NaN)
    b = bytes_per_token(float_model())
    assert b["quantized_bytes"] == 0 and b["rest_float16_bytes"] > 0
    assert b["ratio_to_float16"] is None and b["bits_per_weight"] is None


@FUZZ.covers(packed_hash)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_packed_hash(data):
    fuzz_call(
        data,
        packed_hash,
        {"model": trellis_model()},
        check=lambda h: isinstance(h, str) and len(h) == 64 and int(h, 16) >= 0,
        strategies={"model": NOT_A_MODULE},
    )
    assert packed_hash(trellis_model()) == packed_hash(trellis_model()) != packed_hash(rtn_model())


@FUZZ.covers(save_quantized)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_save_quantized(data):
    target = saved_dir().parent / "again"

    def check(path) -> bool:
        return (
            isinstance(path, Path)
            and (path / "quantization.json").is_file()
            and (path / "model.safetensors").is_file()
        )

    fuzz_call(
        data,
        save_quantized,
        {"model": rtn_model(), "path": target, "tokenizer": None, "extra": {"note": "fuzz"}},
        check=check,
        strategies={
            "model": st.sampled_from([None, "model", float_model(), nn.Linear(2, 2)]),
            # strings would be directories relative to the working directory: other bad paths only
            "path": st.sampled_from([None, 3, object(), b"bytes", "", saved_dir() / "model.safetensors"]),
            "extra": st.sampled_from(["x", 3, [1], ("a",), object()]),
        },
    )


@FUZZ.covers(load_quantized)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_load_quantized(data):
    def check(model) -> bool:
        with torch.no_grad():
            return torch.equal(model(SEQS[:1]).logits, rtn_model()(SEQS[:1]).logits)

    fuzz_call(
        data,
        load_quantized,
        {"path": saved_dir()},
        check=check,
        strategies={
            "path": st.sampled_from(
                [None, 3, object(), b"bytes", saved_dir() / "missing", saved_dir() / "model.safetensors"]
            )
        },
    )


@FUZZ.covers(evaluate)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_evaluate(data):
    def check(case) -> bool:
        kw, r = case
        seqs = kw["sequences"]
        return (
            r["kl"] >= -1e-6
            and len(r["kl_per_sequence"]) == seqs.shape[0]
            and 1 <= r["ppl"] < math.inf
            and 1 <= r["ppl_reference"] < math.inf
            and r["tokens"] == seqs.numel()
        )

    fuzz_call(
        data,
        with_inputs(evaluate),
        {"model": rtn_model(), "sequences": SEQS, "reference": float_model(), "reference_lp": None},
        check=check,
        strategies={"model": NOT_A_MODULE, "reference": NOT_A_MODULE},
        related={"reference": ["reference_lp"], "reference_lp": ["reference"], "sequences": ["model"]},
    )


def test_evaluate_with_reference_logprobs():
    from icml_compress.quantize.evaluate import reference_logprobs

    lp = reference_logprobs(float_model(), SEQS)
    r = evaluate(rtn_model(), SEQS, reference_lp=lp)
    assert r["kl"] == pytest.approx(evaluate(rtn_model(), SEQS, reference=float_model())["kl"], abs=1e-3)
    rejects(evaluate, rtn_model(), SEQS, reference_lp=lp[:1], name="reference_lp")
    rejects(evaluate, rtn_model(), SEQS, reference_lp=lp.float() * math.nan, name="reference_lp")
    # a wrong vocabulary size (last dimension) is refused by name, not by torch deep inside the KL
    padded = torch.cat([lp, torch.full((*lp.shape[:2], 10), -1e4, dtype=lp.dtype)], -1)
    for bad in (lp[..., : VOCAB // 2], padded):
        with pytest.raises(ValueError, match=f"reference_lp must have the model's vocabulary size {VOCAB}"):
            evaluate(rtn_model(), SEQS, reference_lp=bad)


@FUZZ.covers(split_corpus)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_split_corpus(data):
    text = "First paragraph.\n\nSecond one, a bit longer.\n\nThird."

    def check(case) -> bool:
        kw, (a, b) = case
        # both parts non-empty; the held-out part starts at a paragraph break when there is one after the cut
        cut = int(len(kw["text"]) * kw["calibration_fraction"])
        at_break = b.startswith("\n\n") or "\n\n" not in kw["text"][cut:]
        return a + b == kw["text"] and len(a) >= 1 and len(b) >= 1 and at_break

    fuzz_call(data, with_inputs(split_corpus), {"text": text, "calibration_fraction": 0.5}, check=check)


@FUZZ.covers(plot_layer_errors)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_plot_layer_errors(data):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    layers = trellis_model().icml_quantization["layers"]

    def check(fig) -> bool:
        heights = [b.get_height() for b in fig.axes[0].patches]
        plt.close(fig)
        return heights == [layers[n]["proxy"] for n in layers]

    fuzz_call(
        data,
        plot_layer_errors,
        {"model_or_stats": trellis_model(), "path": None, "title": "fuzz"},
        check=check,
        strategies={
            "model_or_stats": st.sampled_from(
                [
                    None,
                    3,
                    "model",
                    float_model(),
                    rtn_model(),
                    {},
                    {"layers": {}},
                    [layers],
                    {"a": {"proxy": math.nan}},
                ]
            ),
            "path": st.sampled_from([3, b"x.png", "", object()]),
            "title": st.sampled_from([3, None, b"t"]),
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(baselines, proteus, quantize, trellis)
