"""The masked protein-LM testbed (:mod:`icml_interp_experiments.repeats.plm`) and the ``plm-repeats``
reproduction (heavy: trains the tiny ESM model on an empty cache; CI leaves it to ``icml-repro``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from icml_interp.bio import MASK_ID
from icml_interp_experiments.repeats import plm

TINY = replace(plm.Config(), steps=3, batch=8, layers=1, hidden=32, intermediate=32, warmup=1)


def test_eval_batch_masks_no_partner_and_scores_the_masked_residues():
    prots = plm.proteins(plm.Config(), 40, seed=5, rate=0.2)
    batch = plm.eval_batch(prots, seed=0)
    assert (batch.input_ids[batch.rows, batch.cols] == MASK_ID).all()
    assert int((batch.input_ids == MASK_ID).sum()) == len(batch.rows)  # nothing else is masked
    assert torch.equal(batch.targets, batch.clean_ids[batch.rows, batch.cols])
    inside = batch.in_repeat
    partners = batch.alignment[batch.rows[inside], batch.cols[inside]]
    assert (partners > 0).all()
    assert (batch.input_ids[batch.rows[inside], partners] != MASK_ID).all()  # the partner stays visible
    for k in range(len(batch.rows)):
        p, col = prots[int(batch.rows[k])], int(batch.cols[k]) - 1
        assert bool(inside[k]) == bool(p.alignment[col] >= 0)
        if inside[k]:  # the alignment in token coordinates is the protein's, shifted past <cls>
            assert int(batch.alignment[batch.rows[k], col + 1]) == int(p.alignment[col]) + 1
    assert 0.3 < float(inside.float().mean()) < 0.7


def test_mlm_batch_masks_only_residues_with_bert_proportions():
    ids = plm.encode([p.sequence for p in plm.proteins(plm.Config(), 200, seed=1)])[0]
    inputs, labels = plm._mlm_batch(ids, 0.15, torch.Generator().manual_seed(0))
    chosen = labels != -100
    assert torch.isin(ids[chosen], plm.AA_IDS).all()  # never <cls>/<eos>
    assert abs(float(chosen[:, 1:-1].float().mean()) - 0.15) < 0.01
    masked = float((inputs[chosen] == MASK_ID).float().mean())
    assert abs(masked - 0.8) < 0.03
    assert torch.equal(inputs[~chosen], ids[~chosen])


def test_untrained_model_accuracy_and_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    model, info = plm.trained(TINY, seed=0)
    assert info["trained now"] and (tmp_path / "plm_repeats" / f"{plm.VERSION}-seed0" / "train.json").exists()
    again, info2 = plm.trained(TINY, seed=0)
    assert not info2["trained now"]
    batch = plm.eval_batch(plm.proteins(TINY, 30, seed=9), seed=0)
    a, b = plm.accuracy(model, batch), plm.accuracy(again, batch)
    assert a == b  # the cached weights are the trained ones
    hits = np.asarray(a["hits"])
    assert a["inside"] == pytest.approx(hits[batch.in_repeat.numpy()].mean())
    assert torch.isin(plm.predictions(model, batch), plm.AA_IDS).all()
    other = replace(TINY, steps=4)  # another config is not served from this cache
    assert plm.trained(other, seed=0)[1]["trained now"]


def test_slope_interval_brackets_a_planted_slope():
    from icml_interp_experiments.repeats.plm_repro import _slope_interval

    rng = np.random.default_rng(0)
    rates = np.repeat([0.0, 0.1, 0.2, 0.3, 0.4], 400)
    hits = (rng.random(rates.size) < 0.8 - rates).astype(float)  # planted slope -1
    out = _slope_interval(rates, hits, np.arange(rates.size) // 4, seed=0)
    lo, hi = out["interval"]
    assert out["slope"] == pytest.approx(np.polyfit(rates, hits, 1)[0])  # least squares
    assert lo < out["slope"] < hi < 0 and hi - lo < 0.5
    flat = _slope_interval(rates, (rng.random(rates.size) < 0.5).astype(float), np.arange(rates.size), seed=0)
    assert flat["interval"][0] < 0 < flat["interval"][1]  # no slope planted: the interval holds 0


@pytest.mark.heavy
def test_plm_repeats_quick_follows_the_protocol():
    from icml_interp_experiments.repeats.plm_repro import run
    from icml_tools.protocol import validate_result

    result = validate_result(run("quick"))
    assert result["system"] == "plm-repeats" and set(result["headroom"]) == {"0"}
