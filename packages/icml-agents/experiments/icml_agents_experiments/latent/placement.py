"""Diagnostic after the full run of ``lt-tuning-reasoning`` (not part of its criterion): which part of our
LT-Tuning reconstruction costs accuracy, the fusion or where the latent spans go?

In the full run LT-Tuning fell below Coconut. Our stage-2 rule puts the spans on the ``k`` steps of lowest mean
token confidence under the explicit-CoT model, but that model is nearly certain of every step on both testbeds,
so the choice rests on tiny differences and the spans land at positions the model cannot predict. This script
separates the two parts, on seed 0 of the full budget, with the reproduction's models, schedules and test
problems:

* ``coconut``: the reproduction's arm;
* ``coconut + fusion``: Coconut's curriculum and labels, its last stage trained with Context-Prediction-Fusion
  in place of hidden-state thoughts (the fusion alone, with Coconut's placement);
* ``lt-tuning, first-k spans``: LT-Tuning's switch labels and stages (hidden-state thoughts, then the fusion),
  the spans on the first ``k`` steps as Coconut's (the switch, without the confidence rule);
* ``lt-tuning``: the reproduction's arm.

Run: ``uv run python -m icml_agents_experiments.latent.placement [out.json]`` (about 8 minutes on 2 cores).
"""

from __future__ import annotations

import copy
import json
import sys
import time

import numpy as np
import torch

from icml_agents.latent import ContextPredictionFusion, HiddenThought
from icml_agents_experiments.latent import repro
from icml_agents_experiments.latent.tasks import TESTBEDS, make_items
from icml_agents_experiments.latent.train import (
    Sizes,
    build_model,
    coconut_steps,
    diagnostics,
    evaluate,
    sequence,
    switch_kwargs,
    train,
)
from icml_tools.progress import status

SEED = 0


def coconut_with_fusion(cot_model, testbed: str, sizes: Sizes, rng: np.random.Generator):
    model = copy.deepcopy(cot_model)
    for stage in range(1, sizes.max_stage + 1):
        train(
            model, testbed, sizes, sizes.stage_steps, rng,
            lambda items, k=stage: [sequence(it, "latent", coconut_steps(it, k), sizes) for it in items],
            thought=HiddenThought(),
        )  # fmt: skip
    fusion = ContextPredictionFusion(sizes.hidden, top_k=8)
    train(
        model, testbed, sizes, sizes.stage_steps, rng,
        lambda items: [sequence(it, "latent", coconut_steps(it, sizes.max_stage), sizes) for it in items],
        thought=fusion, extra=(fusion,),
    )  # fmt: skip
    return model, fusion


def switch_first_k(cot_model, testbed: str, sizes: Sizes, rng: np.random.Generator):
    model = copy.deepcopy(cot_model)

    def pairs(items, k):
        return [sequence(it, "latent", coconut_steps(it, k), sizes, labels="switch") for it in items]

    for stage in range(1, sizes.max_stage + 1):
        train(
            model,
            testbed,
            sizes,
            sizes.stage_steps,
            rng,
            lambda items, k=stage: pairs(items, k),
            thought=HiddenThought(),
        )
    fusion = ContextPredictionFusion(sizes.hidden, top_k=8)
    train(
        model, testbed, sizes, sizes.stage_steps, rng, lambda items: pairs(items, sizes.max_stage),
        thought=fusion, extra=(fusion,),
    )  # fmt: skip
    return model, fusion


def run_testbed(testbed: str) -> list[dict]:
    cfg = repro.BUDGETS["full"]
    sizes = Sizes(n_test=cfg["n_test"], **cfg[testbed])
    test = make_items(testbed, sizes.n_test, np.random.default_rng(20_000 + SEED))
    cot = build_model(sizes, False, SEED)
    train(
        cot,
        testbed,
        sizes,
        sizes.cot_steps,
        np.random.default_rng(SEED),
        lambda items: [sequence(it, "cot") for it in items],
    )
    rows = []

    def record(arm, model, result, t0):
        rows.append(
            {
                "testbed": testbed,
                "arm": arm,
                "accuracy": float(result.correct.mean()),
                "generated_positions": float(result.positions.mean()),
                **{k: v for k, v in diagnostics(result, model).items() if k != "n"},
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        status(f"placement {testbed} {arm}: accuracy {result.correct.mean():.3f}")

    t0 = time.perf_counter()
    record("cot", cot, evaluate(cot, test, max_new_tokens=repro.MAX_NEW), t0)
    prompts = repro.coconut_prompts(test, sizes)
    t0 = time.perf_counter()
    model = repro.coconut_arm(cot, testbed, sizes, np.random.default_rng(SEED + 1))
    record(
        "coconut",
        model,
        evaluate(model, test, prompts=prompts, thought=HiddenThought(), max_new_tokens=repro.MAX_NEW),
        t0,
    )
    t0 = time.perf_counter()
    model, fusion = coconut_with_fusion(cot, testbed, sizes, np.random.default_rng(SEED + 1))
    with torch.no_grad():
        result = evaluate(model, test, prompts=prompts, thought=fusion, max_new_tokens=repro.MAX_NEW)
    record("coconut + fusion", model, result, t0)
    for arm, make in (("lt-tuning, first-k spans", switch_first_k), ("lt-tuning", repro.lt_tuning_arm)):
        t0 = time.perf_counter()
        model, fusion = make(cot, testbed, sizes, np.random.default_rng(SEED + 1))
        with torch.no_grad():
            result = evaluate(model, test, thought=fusion, **switch_kwargs(sizes, repro.MAX_NEW))
        record(arm, model, result, t0)
    return rows


def main(out: str | None = None) -> list[dict]:
    torch.set_num_threads(min(2, torch.get_num_threads()))  # 2, or fewer where the process has fewer
    rows = [row for tb in TESTBEDS for row in run_testbed(tb)]
    text = json.dumps({"seed": SEED, "budget": "full", "rows": rows}, indent=2)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)
    return rows


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
