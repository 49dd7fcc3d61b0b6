"""Reproduction ``crh-geometry``: does the cylinder geometry of difference vectors predict how steerable each
sample is (the Cylindrical Representation Hypothesis, Gao et al. 2026)?

Three testbeds, protocol and criterion fixed in ``packages/icml-interp/docs/crh.md`` (committed before the
first evaluation run) and restated in the returned dict:

1. the planted-geometry simulator (:mod:`.simulator`): the machinery must recover the planted axis and the
   planted angular law, and sectors must not predict sensitivity when the planted sector is sample-specific;
2. a tiny GPT-2 trained here on a word-level language with concept families (:mod:`.tinylm`), three training
   seeds;
3. SmolLM2-135M-Instruct with contrastive prompts written here (:mod:`.concepts`).

On the two language models, for each concept: steering lifts the concept rate by >= 20 points before
gibberish and per-sample steerabilities differ by >= 2x their fit error (headroom); then over half the samples
rise with scale and ``steerability / |d|^2`` correlates positively with ``sin^2 theta / cos theta``
(permutation p < 0.05). Development used the concept ``space``, tiny-LM training seed 0 and pair seed 100,
simulator seeds 100-109 and SmolLM2's ``DEV_QUESTIONS``; none is evaluated.

Script: ``python -m icml_interp_experiments.crh.repro --budget full`` (prints the JSON).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

SYSTEM = "crh-geometry"
CLAIM = (
    "Difference vectors of a concept form a cylinder (central axis, normal plane, sensitive sectors): a sample's "
    "steerability grows with its angle to the axis (steerability / |d|^2 against sin^2 theta / cos theta), while "
    "the sensitive sector cannot be inferred from the difference vector (Gao et al. 2026)."
)
CONCEPTS = ("ocean", "music", "food")
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"sim_seeds": (0,), "tiny_seeds": (1,), "smol_concepts": ("ocean",), "smol_n": 20},
    "full": {"sim_seeds": (0, 1, 2), "tiny_seeds": (1, 2, 3), "smol_concepts": CONCEPTS, "smol_n": 40},
}
TINY: dict[str, Any] = {"n": 40, "pair_seed": 0, "layer": 2, "scale_factors": (0.0, 0.3, 0.6, 0.9, 1.2, 1.5),
        "max_new_tokens": 18, "positions": "all"}  # fmt: skip
SMOL: dict[str, Any] = {
    "layer": 15,
    "scale_factors": (0.0, 1.0, 2.0, 3.0, 4.0, 5.0),
    "max_new_tokens": 32,
    "positions": "prefill",
}
GIBBERISH_FACTOR = 2.0
SIM: dict[str, Any] = {"axis_cos": 0.95, "pearson": 0.5, "chance_p": 0.05}
N_PERMUTATIONS = 9999


def _simulator(seed: int) -> dict:
    from icml_interp.crh import (
        decompose,
        fit_steerability,
        geometry_correlation,
        geometry_features,
        sector_prediction,
    )
    from icml_interp_experiments.crh.simulator import simulate

    out: dict[str, Any] = {}
    for shared in (False, True):
        pl = simulate(shared_sector=shared, seed=seed)
        cyl = decompose(pl.diffs)
        st = fit_steerability(pl.scales, pl.rates)
        target, feature = geometry_features(cyl, st.slope)
        resid = target - np.polyval(np.polyfit(feature, target, 1), feature)
        angles = cyl.sector_angles().numpy()
        half = len(angles) // 2
        sectors = sector_prediction(angles[:half], resid[:half], angles[half:], resid[half:], seed=seed)
        out["shared sector" if shared else "sample-specific sector"] = {
            "axis cos": float(cyl.axis @ pl.axis),
            "pearson(steerability/|d|^2, planted f)": float(np.corrcoef(target, pl.f_theta)[0, 1]),
            "CRH correlation (measured theta)": geometry_correlation(
                cyl, st.slope, n_permutations=N_PERMUTATIONS, seed=seed
            ),
            "steerability sd / mean fit error": float(st.slope.std(ddof=1) / st.slope_se.mean()),
            "sector prediction (held-out half)": sectors,
        }
    own = out["sample-specific sector"]
    out["holds"] = bool(
        own["axis cos"] > SIM["axis_cos"]
        and own["pearson(steerability/|d|^2, planted f)"] > SIM["pearson"]
        and own["sector prediction (held-out half)"]["p_value"] >= SIM["chance_p"]
    )
    return out


def _tiny(seed: int, concepts) -> dict:
    from icml_interp.hooks import HookedModel
    from icml_interp_experiments.crh import tinylm
    from icml_interp_experiments.crh.evaluate import evaluate_concept, tinylm_spec
    from icml_tools.assets import cache_dir

    model, info = tinylm.pretrained(tinylm.TinyLMConfig(seed=seed), cache_dir())
    hooked = HookedModel(model)
    rows = []
    for name in concepts:
        spec = tinylm_spec(name, TINY["n"], TINY["pair_seed"])
        r = evaluate_concept(
            hooked, spec, tinylm.decode, layer=TINY["layer"], scale_factors=TINY["scale_factors"],
            max_new_tokens=TINY["max_new_tokens"], pad_token_id=tinylm.PAD, positions=TINY["positions"],
            gibberish_factor=GIBBERISH_FACTOR, n_permutations=N_PERMUTATIONS, batch_size=40,
        )  # fmt: skip
        rows.append({**r, "model": f"tiny GPT-2 seed {seed}"})
    return {"seed": seed, "train": info, "concepts": rows}


def _smollm2(concepts, n: int) -> list[dict]:
    from icml_interp.hooks import HookedModel
    from icml_interp_experiments.crh.concepts import smollm2_spec
    from icml_interp_experiments.crh.evaluate import evaluate_concept
    from icml_tools.assets import smollm2

    model, tok = smollm2()
    hooked = HookedModel(model)
    rows = []
    for name in concepts:
        spec = smollm2_spec(tok, name, n=n)
        r = evaluate_concept(
            hooked, spec, lambda ids: tok.decode(ids, skip_special_tokens=True), layer=SMOL["layer"],
            scale_factors=SMOL["scale_factors"], max_new_tokens=SMOL["max_new_tokens"],
            pad_token_id=tok.pad_token_id or 0, positions=SMOL["positions"], gibberish_factor=GIBBERISH_FACTOR,
            n_permutations=N_PERMUTATIONS, batch_size=20,
        )  # fmt: skip
        rows.append({**r, "model": "SmolLM2-135M-Instruct"})
    return rows


def _majority(flags: list[bool]) -> bool:
    return sum(flags) * 2 > len(flags)


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`). The seeds are fixed
    by the protocol; ``seed`` is accepted for the runner."""
    start = time.perf_counter()
    cfg = BUDGETS[budget]
    sims = {s: _simulator(s) for s in cfg["sim_seeds"]}
    tiny_runs = [_tiny(s, CONCEPTS) for s in cfg["tiny_seeds"]]
    smol = _smollm2(cfg["smol_concepts"], cfg["smol_n"])
    tiny_holds = [_majority([r["passed"] for r in run_["concepts"]]) for run_ in tiny_runs]
    smol_holds = _majority([r["passed"] for r in smol])
    sim_ok = all(s["holds"] for s in sims.values())
    passed = sim_ok and _majority(tiny_holds) and smol_holds
    concept_rows = [r for run_ in tiny_runs for r in run_["concepts"]] + smol
    table = [{k: v for k, v in r.items() if k not in ("slopes", "examples")} for r in concept_rows]
    counted = [r for r in concept_rows if r["headroom"]]
    figure = {
        "name": "crh-concept-rates",
        "title": "Concept rate against steering scale (x |v|)",
        "xlabel": "scale / |v|", "ylabel": "share labelled 'concept'", "kind": "line",
        "x": list(SMOL["scale_factors"]),
        "series": {f"SmolLM2 {r['concept']}": r["concept rate by scale"] for r in smol},
    }  # fmt: skip
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": (
            "concepts (of those with headroom, both LMs) whose per-sample steerability / |d|^2 correlates "
            "positively with sin^2 theta / cos theta at p < 0.05 (ours) against all concepts run (baseline)"
        ),
        "ours": float(sum(r["passed"] for r in concept_rows)),
        "baseline": float(len(concept_rows)),
        "criterion": (
            f"simulator, every seed (sample-specific sectors): axis cos > {SIM['axis_cos']}, "
            f"Pearson(steerability/|d|^2, planted f(theta)) > {SIM['pearson']}, held-out sector prediction at "
            f"chance (permutation p >= {SIM['chance_p']}). Tiny LM (a majority of training seeds) and SmolLM2: a "
            "majority of the concepts pass, a concept passing when its headroom holds (concept rate lifted >= 20 "
            "points over scale 0 at a scale with <= 25% gibberish; between-sample sd of steerability >= 2x its "
            "mean fit error), over half its samples have a positive slope, and Pearson(steerability/|d|^2, "
            f"sin^2 theta / cos theta) > 0 with permutation p < 0.05 ({N_PERMUTATIONS} permutations)."
        ),
        "passed": bool(passed),
        "headroom": {
            "concepts with headroom": [f"{r['model']}: {r['concept']}" for r in counted],
            "concepts without": [f"{r['model']}: {r['concept']}" for r in concept_rows if not r["headroom"]],
        },
        "simulator": {str(k): v for k, v in sims.items()},
        "simulator holds": sim_ok,
        "tiny LM holds by seed": dict(zip([str(s) for s in cfg["tiny_seeds"]], tiny_holds, strict=True)),
        "SmolLM2 holds": smol_holds,
        "tiny LM training": {str(r["seed"]): r["train"] for r in tiny_runs},
        "rows": table,
        "examples": {f"{r['model']}: {r['concept']}": r["examples"] for r in concept_rows},
        "figures": [figure],
        "config": {"budget": cfg, "tiny": TINY, "smollm2": SMOL, "gibberish factor": GIBBERISH_FACTOR},
        "cache": ("built: tiny LM trained" if any(r["train"]["trained now"] for r in tiny_runs) else "hit"),
        "notes": f"budget={budget}, {time.perf_counter() - start:.0f} s",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("quick", "full"), default="full")
    args = parser.parse_args()
    print(json.dumps(run(args.budget), indent=1, default=float))


if __name__ == "__main__":
    main()
