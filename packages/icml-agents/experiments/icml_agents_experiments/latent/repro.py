"""Reproduction ``lt-tuning-reasoning``: latent thoughts with Context-Prediction-Fusion and confidence-driven
switching (LT-Tuning) against Coconut, Soft-Thinking, explicit chain of thought and no chain of thought, on
two testbeds made here (:mod:`icml_agents_experiments.latent.tasks`), with tiny Llamas trained from scratch.

Per seed and testbed, on fresh problems every step (AdamW, batch 64, 2 layers, width 64, untied input/output
embeddings; lr 3e-3 for stage 1 and no-CoT, 1e-3 and a fresh optimizer for every latent stage):

* ``no-cot``: trained on question -> answer; ``cot``: trained on question -> steps -> answer (stage 1);
* ``soft-thinking``: the ``cot`` model, training-free: every reasoning position is fed the probability-weighted
  embedding of its top-8 prediction instead of a token, until the answer marker ``#`` is likely (p >= 0.5);
* ``coconut``: from ``cot``, the released curriculum: stage ``k`` replaces the first ``k`` steps by ``k``
  continuous thoughts (``c = 1``), up to ``K`` (3 for arithmetic, 2 for the graph: every problem has at least
  that many steps), then one more stage at ``K``; labels mask the latent span; evaluation feeds
  ``<bot>`` + ``K`` slots + ``<eot>`` and decodes greedily;
* ``lt-tuning``: from ``cot``, stage 2: the same number of stages and steps as Coconut, but at stage ``k`` the
  ``k`` steps of lowest mean token confidence under the ``cot`` model become latent, with the switch's labels
  (:func:`icml_agents.latent.build_sequence` ``labels="switch"``) and hidden-state thoughts; stage 3 (the last
  stage, in place of Coconut's extra one): Context-Prediction-Fusion (top-8, scalar gate) trained with the
  model. Evaluation: :func:`icml_agents.latent.generate` from the question alone, entering latent mode when
  the largest ordinary-token probability is below 0.5 and leaving when ``p(<eot>) >= 0.5`` (at most ``K``
  thoughts a run).

The tied contrast repeats ``cot``, ``coconut`` and ``lt-tuning`` with tied embeddings on the arithmetic
testbed. Generated positions count thoughts, markers and written tokens (Coconut's slots included).
Collapse diagnostics (:func:`icml_agents.latent.collapse_diagnostics`) are taken over every latent input fed
on the test problems.

Criterion, fixed before the full run (issue 49). Headroom: on both testbeds ``cot`` beats ``no-cot`` by >= 20
points (mean over seeds), and in the untied ``coconut`` arm the norm ratio of latent inputs to token
embeddings is >= 2 or <= 0.5 on both. Comparison, on each testbed, paired per problem over seeds (nested
bootstrap, 2,000 resamples): ``lt-tuning`` minus ``coconut`` accuracy has its 95 % interval above -2 points
and ``lt-tuning``'s collapse score (mean pairwise cosine of latent inputs) is below ``coconut``'s;
``lt-tuning`` minus ``cot`` has its interval above -5 points with fewer generated positions on average.
``passed`` needs the headroom and every comparison on both testbeds.

How the settings were chosen, before this criterion was committed: the model size, learning rates and step
counts on pilot runs (seed 0, test problems drawn from a seed the full run does not use) of ``cot`` and
``no-cot`` on both testbeds, then of ``coconut`` and ``lt-tuning`` at a few stage settings (both arms always
at the same ones: latent lr 1e-3 against 3e-3, ``c`` = 1 or 2, 200 or 300 steps a stage), and the switch's
``min_explicit`` rule after a pilot where the switch re-entered latent mode right after every run. The pilots
had Coconut and LT-Tuning far below explicit CoT on arithmetic (about 0.25 against 1.0) and near chance on
the graph (about 0.55): the criterion above was written knowing that.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch

from icml_agents.latent import ContextPredictionFusion, HiddenThought
from icml_agents_experiments.latent.tasks import BOT, EOT, LAT, TESTBEDS, make_items
from icml_agents_experiments.latent.train import (
    ArmResult,
    Sizes,
    build_model,
    coconut_steps,
    diagnostics,
    evaluate,
    least_confident_steps,
    sequence,
    soft_kwargs,
    switch_kwargs,
    train,
)
from icml_tools.claims import nested_bootstrap_interval
from icml_tools.progress import status

SYSTEM = "lt-tuning-reasoning"
CLAIM = (
    "LT-Tuning: latent thoughts built by Context-Prediction-Fusion, with confidence-driven switching between "
    "latent and explicit reasoning, match Coconut's accuracy with less feature collapse and stay close to "
    "explicit chain of thought with fewer generated positions."
)
CRITERION = (
    "headroom: CoT - no-CoT >= 20 points on both testbeds and the untied Coconut latents' norm ratio to token "
    "embeddings >= 2 or <= 0.5; then on each testbed, paired bootstrap over seeds and problems: LT-Tuning - "
    "Coconut interval above -2 points with a lower mean pairwise cosine, LT-Tuning - CoT interval above -5 "
    "points with fewer generated positions"
)
MAX_NEW = 40
BOOTSTRAP = 2000
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {
        "seeds": [0],
        "n_test": 100,
        "arithmetic": {"cot_steps": 300, "stage_steps": 40, "max_stage": 3},
        "graph": {"cot_steps": 500, "stage_steps": 40, "max_stage": 2},
        "tied": False,
    },
    "full": {
        "seeds": [0, 1, 2],
        "n_test": 200,
        "arithmetic": {"cot_steps": 800, "stage_steps": 250, "max_stage": 3},
        "graph": {"cot_steps": 2000, "stage_steps": 250, "max_stage": 2},
        "tied": True,
    },
}


def coconut_arm(cot_model, testbed: str, sizes: Sizes, rng: np.random.Generator):
    model = copy.deepcopy(cot_model)
    for stage in [*range(1, sizes.max_stage + 1), sizes.max_stage]:
        train(
            model,
            testbed,
            sizes,
            sizes.stage_steps,
            rng,
            lambda items, k=stage: [sequence(it, "latent", coconut_steps(it, k), sizes) for it in items],
            thought=HiddenThought(),
        )
    return model


def coconut_prompts(items, sizes: Sizes) -> list[list[int]]:
    slots = [BOT] + [LAT] * (sizes.thoughts_per_step * sizes.max_stage) + [EOT]
    return [it.question + slots for it in items]


def lt_tuning_arm(cot_model, testbed: str, sizes: Sizes, rng: np.random.Generator):
    model = copy.deepcopy(cot_model)

    def pairs(items, k):
        chosen = least_confident_steps(cot_model, items, k)
        return [
            sequence(it, "latent", c, sizes, labels="switch") for it, c in zip(items, chosen, strict=False)
        ]

    for stage in range(1, sizes.max_stage + 1):  # stage 2: where to think latently, hidden-state thoughts
        train(
            model,
            testbed,
            sizes,
            sizes.stage_steps,
            rng,
            lambda items, k=stage: pairs(items, k),
            thought=HiddenThought(),
        )
    fusion = ContextPredictionFusion(sizes.hidden, top_k=8)  # stage 3: Context-Prediction-Fusion
    train(
        model,
        testbed,
        sizes,
        sizes.stage_steps,
        rng,
        lambda items: pairs(items, sizes.max_stage),
        thought=fusion,
        extra=(fusion,),
    )
    return model, fusion


def run_testbed(testbed: str, seed: int, cfg: dict, tied_contrast: bool) -> dict[str, Any]:
    sizes = Sizes(n_test=cfg["n_test"], **cfg[testbed])
    test = make_items(testbed, sizes.n_test, np.random.default_rng(20_000 + seed))
    out: dict[str, Any] = {}

    def record(arm: str, result: ArmResult, model, seconds: float) -> None:
        out[arm] = {
            "correct": result.correct,
            "positions": result.positions,
            "diagnostics": diagnostics(result, model),
            "seconds": seconds,
        }
        status(
            f"{SYSTEM} seed {seed} {testbed} {arm}: accuracy {result.correct.mean():.3f}, positions "
            f"{result.positions.mean():.1f} ({seconds:.0f} s)"
        )

    for tied in (False, True) if tied_contrast else (False,):
        tag = "-tied" if tied else ""
        t0 = time.perf_counter()
        cot = build_model(sizes, tied, seed)
        train(
            cot,
            testbed,
            sizes,
            sizes.cot_steps,
            np.random.default_rng(seed),
            lambda items: [sequence(it, "cot") for it in items],
        )
        record("cot" + tag, evaluate(cot, test, max_new_tokens=MAX_NEW), cot, time.perf_counter() - t0)
        if not tied:
            t0 = time.perf_counter()
            nocot = build_model(sizes, tied, seed)
            train(
                nocot,
                testbed,
                sizes,
                sizes.cot_steps,
                np.random.default_rng(seed),
                lambda items: [sequence(it, "nocot") for it in items],
            )
            record("no-cot", evaluate(nocot, test, max_new_tokens=MAX_NEW), nocot, time.perf_counter() - t0)
            t0 = time.perf_counter()
            soft = evaluate(cot, test, **soft_kwargs(MAX_NEW))
            record("soft-thinking", soft, cot, time.perf_counter() - t0)
        t0 = time.perf_counter()
        coconut = coconut_arm(cot, testbed, sizes, np.random.default_rng(seed + 1))
        result = evaluate(
            coconut,
            test,
            prompts=coconut_prompts(test, sizes),
            thought=HiddenThought(),
            max_new_tokens=MAX_NEW,
        )
        record("coconut" + tag, result, coconut, time.perf_counter() - t0)
        t0 = time.perf_counter()
        lt, fusion = lt_tuning_arm(cot, testbed, sizes, np.random.default_rng(seed + 1))
        with torch.no_grad():
            result = evaluate(lt, test, thought=fusion, **switch_kwargs(sizes, MAX_NEW))
        record("lt-tuning" + tag, result, lt, time.perf_counter() - t0)
        out["lt-tuning" + tag]["gate_alpha"] = float(fusion.alpha(torch.zeros(1, sizes.hidden)).item())
    return out


FIGURE_ARMS = ("no-cot", "cot", "soft-thinking", "coconut", "lt-tuning")


def accuracy_figure(rows: list[dict]) -> dict:
    """Grouped bars: accuracy of each untied arm on each testbed (mean over seeds), from the result rows."""
    acc = {row["method"]: row["accuracy"] for row in rows if "ci95" not in row}
    return {
        "name": "lt_tuning_accuracy",
        "title": "Accuracy on held-out problems (mean over seeds)",
        "xlabel": "testbed",
        "ylabel": "accuracy",
        "x": list(TESTBEDS),
        "series": {arm: [acc[f"{tb}: {arm}"] for tb in TESTBEDS] for arm in FIGURE_ARMS},
        "kind": "bar",
    }


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`)."""
    cfg = BUDGETS[budget]
    torch.set_num_threads(min(2, torch.get_num_threads()))  # 2, or fewer where the process has fewer
    t0 = time.perf_counter()
    seeds = [seed + s for s in cfg["seeds"]]
    runs = {
        tb: [run_testbed(tb, s, cfg, tied_contrast=cfg["tied"] and tb == "arithmetic") for s in seeds]
        for tb in TESTBEDS
    }
    rows, headroom, checks, summary = [], {}, {}, {}
    for tb in TESTBEDS:
        r = runs[tb]
        acc = {arm: np.stack([x[arm]["correct"] for x in r]) for arm in r[0]}  # (seeds, items)
        pos = {arm: float(np.mean([x[arm]["positions"].mean() for x in r])) for arm in r[0]}

        def diag(arm: str, key: str, r=r) -> float | None:
            vals = [x[arm]["diagnostics"][key] for x in r]
            return None if any(v is None for v in vals) else float(np.mean(vals))

        lift = float(acc["cot"].mean() - acc["no-cot"].mean())
        ratio = diag("coconut", "norm_ratio")
        headroom[f"{tb}_cot_lift"] = lift >= 0.20
        headroom[f"{tb}_coconut_norm_mismatch"] = ratio is not None and (ratio >= 2 or ratio <= 0.5)
        vs_coconut = acc["lt-tuning"] - acc["coconut"]
        vs_cot = acc["lt-tuning"] - acc["cot"]
        ci_coconut = nested_bootstrap_interval(vs_coconut, BOOTSTRAP)
        ci_cot = nested_bootstrap_interval(vs_cot, BOOTSTRAP)
        cos_lt, cos_coconut = diag("lt-tuning", "mean_cosine"), diag("coconut", "mean_cosine")
        checks[f"{tb}_noninferior_to_coconut"] = ci_coconut[0] > -0.02
        checks[f"{tb}_less_collapse_than_coconut"] = (
            cos_lt is not None and cos_coconut is not None and cos_lt < cos_coconut
        )
        checks[f"{tb}_within_5_of_cot"] = ci_cot[0] > -0.05
        checks[f"{tb}_fewer_positions_than_cot"] = pos["lt-tuning"] < pos["cot"]
        summary[tb] = {"cot_minus_nocot": lift, "coconut_norm_ratio": ratio}
        for arm in acc:
            rows.append(
                {
                    "method": f"{tb}: {arm}",
                    "accuracy": float(acc[arm].mean()),
                    "accuracy_per_seed": [float(a) for a in acc[arm].mean(1)],
                    "generated_positions": pos[arm],
                    "mean_cosine": diag(arm, "mean_cosine"),
                    "effective_rank": diag(arm, "effective_rank"),
                    "norm_ratio": diag(arm, "norm_ratio"),
                    "train_and_eval_seconds": float(np.mean([x[arm]["seconds"] for x in r])),
                    **(
                        {"gate_alpha": [x[arm]["gate_alpha"] for x in r]} if "gate_alpha" in r[0][arm] else {}
                    ),
                }
            )
        for name, diff, ci in (("coconut", vs_coconut, ci_coconut), ("cot", vs_cot, ci_cot)):
            rows.append(
                {"method": f"{tb}: lt-tuning - {name} (paired)", "accuracy": float(diff.mean()), "ci95": ci}
            )
    figures = [accuracy_figure(rows)]
    passed = all(headroom.values()) and all(checks.values())
    lt = np.mean(
        [float(runs[tb][i]["lt-tuning"]["correct"].mean()) for tb in TESTBEDS for i in range(len(seeds))]
    )
    coco = np.mean(
        [float(runs[tb][i]["coconut"]["correct"].mean()) for tb in TESTBEDS for i in range(len(seeds))]
    )
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "accuracy on held-out problems (mean over both testbeds and seeds; higher is better)",
        "ours": float(lt),
        "baseline": float(coco),
        "criterion": CRITERION,
        "passed": bool(passed),
        "headroom": {
            "holds": bool(all(headroom.values())),
            **{k: bool(v) for k, v in headroom.items()},
            **summary,
        },
        "checks": {k: bool(v) for k, v in checks.items()},
        "threads": "2",
        "rows": rows,
        "figures": figures,
        "notes": (
            f"{len(seeds)} seed(s), {time.perf_counter() - t0:.0f} s."
            + ("" if all(headroom.values()) else " NO HEADROOM: the comparison does not decide.")
        ),
    }
