"""CRH end to end: the simulator's must-holds and the language-model pipeline on a briefly trained tiny LM
(slow), and the ``crh-geometry`` reproduction at the quick budget (heavy: trains the tiny LM on a fresh cache
and sweeps SmolLM2)."""

from __future__ import annotations

import numpy as np
import pytest

from icml_tools.repro import run_reproduction


@pytest.mark.slow
def test_simulator_must_holds_and_the_lm_pipeline_end_to_end():
    from icml_interp.hooks import HookedModel
    from icml_interp_experiments.crh import tinylm
    from icml_interp_experiments.crh.evaluate import evaluate_concept, tinylm_spec
    from icml_interp_experiments.crh.repro import SIM, _simulator

    sim = _simulator(0)
    own = sim["sample-specific sector"]
    assert own["axis cos"] > SIM["axis_cos"]
    assert own["pearson(steerability/|d|^2, planted f)"] > SIM["pearson"]
    assert own["sector prediction (held-out half)"]["p_value"] >= SIM["chance_p"]
    assert sim["holds"]

    model, info = tinylm.train(tinylm.TinyLMConfig(steps=60, n_docs=500, n_layer=2))
    assert info["final train loss"] < np.log(len(tinylm.VOCAB))  # it learned something
    spec = tinylm_spec("ocean", 6, seed=0)
    scales = (0.0, 0.5, 1.0)
    r = evaluate_concept(HookedModel(model), spec, tinylm.decode, layer=1, scale_factors=scales,
                         max_new_tokens=6, pad_token_id=tinylm.PAD, n_permutations=19)  # fmt: skip
    assert len(r["concept rate by scale"]) == len(r["gibberish share by scale"]) == len(scales)
    assert all(0 <= x <= 1 for x in r["concept rate by scale"] + r["gibberish share by scale"])
    assert r["fitted scales"][0] == 0.0 and r["n samples"] == 6
    assert isinstance(r["headroom"], bool) and isinstance(r["passed"], bool)
    expected = r["headroom"] and r["rising share"] > 0.5 and r["geometry r"] > 0 and r["geometry p"] < 0.05
    assert r["passed"] == expected


@pytest.mark.slow
def test_steering_smollm2_generate():
    """SmolLM2: scale 0 reproduces plain greedy generation token for token; the difference of means of two
    answers about the ocean and two neutral ones, added at prefill, changes the continuation."""
    import torch

    from icml_interp.hooks import HookedModel
    from icml_interp.steering import generate_steered, steering_vector
    from icml_interp_experiments.crh.concepts import CONCEPTS, NEUTRAL, QUESTIONS, chat
    from icml_tools.assets import smollm2

    model, tok = smollm2()
    hooked = HookedModel(model)
    prompts = [tok(chat(q))["input_ids"] for q in QUESTIONS[:2]]
    pos = [tok(chat(q, CONCEPTS["ocean"]["responses"][i]))["input_ids"] for i, q in enumerate(QUESTIONS[:4])]
    neg = [tok(chat(q, NEUTRAL[i]))["input_ids"] for i, q in enumerate(QUESTIONS[:4])]
    v = steering_vector(hooked, pos, neg, 15)
    kw = {"max_new_tokens": 8, "pad_token_id": tok.pad_token_id or 0}
    plain = generate_steered(hooked, prompts, v, 15, 0.0, **kw)
    for p, out in zip(prompts, plain, strict=True):
        ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             do_sample=False, **kw)[0, len(p):]  # fmt: skip
        assert out.tolist() == ref.tolist()[: len(out)]
    steered = generate_steered(hooked, prompts, v, 15, 4.0, **kw)
    assert [s.tolist() for s in steered] != [p.tolist() for p in plain]


@pytest.mark.heavy
def test_crh_geometry_quick_reproduction_follows_the_protocol():
    result = run_reproduction("crh-geometry", "quick", 0)
    assert result["system"] == "crh-geometry" and isinstance(result["passed"], bool)
    assert result["simulator holds"] is True
    assert {row["model"] for row in result["rows"]} == {"tiny GPT-2 seed 1", "SmolLM2-135M-Instruct"}
    assert result["baseline"] == len(result["rows"]) == 4
