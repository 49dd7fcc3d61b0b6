"""A fuzz test per public API of icml_compress.merge (issue 40), checked with :mod:`icml_tools.fuzz` against
the bad-input contract of GUIDE "Bad input". Tiny everything: one-block random Llamas of width 32."""

from __future__ import annotations

import copy
import functools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("transformers")

from icml_compress import merge
from icml_compress.merge import (
    MergeReport,
    MergeSettings,
    TensorAction,
    combine,
    combine_checkpoints,
    module_kind,
    plan_merge,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(TensorAction, "a record plan_merge and combine_checkpoints build (fuzzed through them)")
FUZZ.exempt(MergeReport, "a result container plan_merge and combine_checkpoints build (fuzzed through them)")
VOCAB = 64
NOT_A_MODEL = st.sampled_from([None, "model", 3, nn.Linear(2, 2), nn.Sequential()])


def tiny(seed=0, vocab=VOCAB):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, vocab=vocab)


@functools.cache
def models():
    base = tiny(0)
    instruct = tiny(1)
    cpt = copy.deepcopy(base)
    cpt.resize_token_embeddings(VOCAB + 8)
    return cpt, instruct, base


@functools.cache
def saved() -> dict[str, Path]:
    root = Path(tempfile.mkdtemp(prefix="icml-merge-fuzz-"))
    for name, m in zip(("cpt", "instruct", "base"), models(), strict=True):
        m.save_pretrained(root / name)
    return {"root": root, **{n: root / n for n in ("cpt", "instruct", "base")}}


def _merge_kwargs() -> dict:
    return {"lam": 0.5, "per_module": {"norms": 0.0}, "method": "task_arithmetic", "density": 1.0}


@FUZZ.covers(combine)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_combine(data):
    cpt, instruct, base = models()

    def check(m) -> bool:
        return (
            m is not cpt
            and m.model.embed_tokens.weight.shape == (VOCAB + 8, 32)
            and "actions" in m.icml_merge
        )

    fuzz_call(
        data,
        combine,
        {
            "cpt_model": cpt,
            "instruct_model": instruct,
            "base_model": base,
            **_merge_kwargs(),
            "normalize": False,
        },
        check=check,
        strategies={
            "cpt_model": NOT_A_MODEL,
            "instruct_model": NOT_A_MODEL,
            "base_model": st.sampled_from([None, "model", nn.Linear(2, 2), tiny(0, vocab=VOCAB + 20)]),
            "method": st.sampled_from([None, "slerp", 3, "TIES"]),
            "density": st.sampled_from([0.0, -0.5, 1.5, float("nan"), True, "1"]),
        },
        related={
            "cpt_model": ["instruct_model", "base_model"],
            "instruct_model": ["cpt_model"],
            "base_model": ["cpt_model", "instruct_model"],
        },
    )


@FUZZ.covers(plan_merge)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_plan_merge(data):
    cpt, instruct, base = models()
    fuzz_call(
        data,
        plan_merge,
        {"cpt_model": cpt, "instruct_model": instruct, "base_model": base, **_merge_kwargs()},
        check=lambda r: len(r.actions) == len(cpt.state_dict()) and r.counts()["tied"] == 1,
        strategies={
            "cpt_model": NOT_A_MODEL,
            "instruct_model": NOT_A_MODEL,
            "base_model": NOT_A_MODEL,
            "density": st.sampled_from([0.0, 1.5, float("inf"), None]),
        },
        related={
            "cpt_model": ["instruct_model", "base_model"],
            "instruct_model": ["cpt_model"],
            "base_model": ["cpt_model"],
        },
    )


@FUZZ.covers(combine_checkpoints)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_combine_checkpoints(data):
    paths = saved()
    fuzz_call(
        data,
        combine_checkpoints,
        {
            "cpt": paths["cpt"],
            "instruct": paths["instruct"],
            "base": paths["base"],
            "out": paths["root"] / "never",
            **_merge_kwargs(),
            "shard_bytes": 1 << 20,
            "dry_run": True,  # nothing written: every case reads the same inputs
        },
        check=lambda r: len(r.actions) == len(models()[0].state_dict()),
        strategies={
            # strings would be directories relative to the working directory: other bad paths only
            **{
                k: st.sampled_from([None, 3, b"x", paths["root"] / "missing", paths["cpt"] / "config.json"])
                for k in ("cpt", "instruct", "base")
            },
            "out": st.sampled_from([None, 3, b"x"]),
            "dry_run": st.sampled_from([None, 1, "yes"]),
            "shard_bytes": st.sampled_from([0, -1, 1.5, None]),
        },
        related={"cpt": ["instruct", "base"], "instruct": ["cpt"], "base": ["cpt"]},
    )


@FUZZ.covers(module_kind)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_module_kind(data):
    fuzz_call(
        data,
        module_kind,
        {"name": "model.layers.0.mlp.up_proj.weight"},
        check=lambda k: k in merge.MODULE_KINDS,
        strategies={"name": st.sampled_from([None, 3, b"x", ["a"]])},
    )


@FUZZ.covers(MergeSettings)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_merge_settings(data):
    fuzz_call(
        data,
        MergeSettings,
        {
            "lam": 1.0,
            "per_module": {"mlp": 0.5},
            "method": "ties",
            "density": 0.5,
            "normalize": True,
            "seed": 0,
        },
        check=lambda s: (
            isinstance(s.lam, float)
            and s.lam_for("attention") == s.lam
            and all(k in merge.MODULE_KINDS and isinstance(v, float) for k, v in s.per_module.items())
            and 0 < s.density <= 1
            and s.method in merge.METHODS
        ),
        strategies={
            "per_module": st.sampled_from([[1], {"mlp": float("nan")}, {"convs": 1.0}, {3: 1.0}, "mlp"])
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(merge)
