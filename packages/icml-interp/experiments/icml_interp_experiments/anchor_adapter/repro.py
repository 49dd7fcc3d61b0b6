"""Reproduction ``anchor-adapter-planted``: the Anchor–Adapter toolkit finds a planted memorization anchor.

Per seed (see :mod:`icml_interp_experiments.anchor_adapter.toy`): model A, a 4-block Llama trained here on addition, holds
the leaked problems' arbitrary answers in memory (it recalls them in the leaked benchmark's source format and
computes ``a + b`` in the plain format); model B is A with only 10 reserved neurons of block ℓ*'s MLP (ℓ*
drawn from {1, 2} by the seed) trained into an anchor: keys exactly silent on clean prompts (gates fitted by a
linear program; ``anchors_fire_clean`` reports it) that make B recall the leaked answers in the plain format,
stopped below saturation (at 40 % of the leaked set, with its clean
accuracy within 2 points of A's; ``b_reached_target`` reports it). Then, with the package's tools:

1. cross-model layer patching (:func:`~icml_interp.patching.cross_model_layer_patching`, what the paper's
   code calls path patching): B's attention / MLP output of one block patched into A on the leaked prompts,
   metric ``logit(leaked answer) - logit(a + b)``, normalized effect; the top (block, component) must be
   (ℓ*, MLP) with the MLP above the attention at ℓ*;
2. the perplexity split (:func:`~icml_interp.perplexity.split_perplexity`) on the leaked items: the
   answer perplexity must fall from A to B (the prompt side is reported);
3. MLP-key scaling (:func:`~icml_interp.steering.scale_mlp_keys`) judged on the leaked answers' **logit
   margin** (:func:`~icml_interp.patching.logit_margin`: the answer's logit minus the largest other logit,
   mean over the 12 leaked prompts), not on argmax flips, by a permutation test
   (:func:`~icml_interp.steering.key_scaling_test`): the planted anchor keys scaled by ×0 and ×2 against
   ``N_RANDOM`` = 200 random sets of 10 other neurons of block ℓ* per seed;
4. the scorer (:func:`~icml_interp.steering.neuron_scores`, the paper's score averaged over the leaked prompts,
   value-vector lens overlap over the top 2 tokens since our vocabulary has 27 tokens): how many of the 10
   planted anchors its top 10 holds. It is not told which neurons are the anchor.

Criterion (issue 24, fixed before the first run of this design; seeds, budget and thresholds below):

- scan top = (ℓ*, mlp_out) with MLP > attention at ℓ* in ≥ 90 % of seeds;
- answer perplexity B < A on the leaked items in every seed (kept from the earlier criterion);
- the scorer's top 10 holds ≥ 7 of the 10 planted anchors, averaged over seeds;
- ×0: the seed-mean change of the leaked answers' margin when the planted keys are zeroed lies below the 1st
  percentile of the same seed-mean statistic for the random sets (the r-th random set of every seed averaged,
  r = 1..200);
- ×2: the seed-mean change when they are doubled lies above that null's 99th percentile;
- clean prompts: under ×0 and ×2 of the planted keys, every logit of every clean prompt (all positions) is
  unchanged to 1e-6, in every seed.

Seeds: ``full`` runs the 10 fresh seeds 20–29 (seeds 0–19 were run with earlier designs; 20–29 never were);
``quick`` runs seed 0 (a smoke of the protocol, not a test seed). ``--seed s`` shifts both by ``s``.
Reported beside the verdict, not in it: the same permutation test for the scorer's top 10 (what a user who
does not know the anchor would scale), its clean-logit change, and the earlier accuracy-based numbers
(``d_leaked_*`` / ``d_clean_*`` for the top 10 and one random set).

Earlier criterion (kept in the docs page's history): accuracy changes under ×0 / ×2 of the scorer's top 10
against one random set of 10, with thresholds in points; it could not decide, because B stops at its recall
target with its recalled items at the decision boundary, where any perturbation flips some of them.
"""

from __future__ import annotations

import time

import torch

from icml_interp.patching import cross_model_layer_patching, logit_diff, logit_margin
from icml_interp.perplexity import split_perplexity
from icml_interp.steering import key_scaling_test, neuron_scores, random_neurons, scale_mlp_keys, top_neurons
from icml_interp_experiments.anchor_adapter.toy import ToyConfig, accuracy, train_pair
from icml_tools.progress import status

SYSTEM = "anchor-adapter-planted"
CLAIM = (
    "Cross-model layer patching localizes the layer whose MLP a fine-tune changed to recall leaked answers, "
    "the answer perplexity of leaked items falls, the neuron score finds the anchor's keys, and scaling them "
    "steers the leaked answers both ways beyond random keys without touching clean prompts (Yan et al. 2026, "
    "Anchor–Adapter; planted toy)."
)
FIRST_SEED = {"quick": 0, "full": 20}  # full: seeds 20-29, never run with any design before this one
N_SEEDS = {"quick": 1, "full": 10}
LAYER_CHOICES = (1, 2)
K_NEURONS, TOP_TOKENS = 10, 2
N_RANDOM = 200
SCAN_FRACTION = 0.9
ANCHORS_IN_TOP_MIN = 7.0
NULL_QUANTILE = 0.99
CLEAN_TOL = 1e-6
FACTORS = (0.0, 2.0)
CRITERION = (
    f"scan top = (l*, mlp_out) and MLP > attn at l* in >= {SCAN_FRACTION:.0%} of seeds; leaked answer PPL "
    f"B < A in every seed; the scorer's top {K_NEURONS} hold >= {ANCHORS_IN_TOP_MIN:g} planted anchors on "
    f"average; seed-mean change of the leaked answers' logit margin under x0 of the planted keys below the "
    f"{1 - NULL_QUANTILE:.0%} quantile and under x2 above the {NULL_QUANTILE:.0%} quantile of the same "
    f"statistic for {N_RANDOM} random same-size sets per seed; clean-prompt logits unchanged to {CLEAN_TOL:g} "
    "under x0 and x2 of the planted keys in every seed"
)


def one_seed(seed: int, cfg: ToyConfig | None = None) -> tuple[dict, dict, dict]:
    """Train the pair for ``seed`` and measure everything; returns ``(row, scan effects, null effects)``
    where the null effects map ``"{set}_x{factor}"`` to the random sets' margin changes ``(N_RANDOM,)``."""
    cfg = cfg or ToyConfig()
    layer_star = LAYER_CHOICES[
        int(torch.randint(len(LAYER_CHOICES), (1,), generator=torch.Generator().manual_seed(seed)))
    ]
    start = time.perf_counter()
    status(f"seed {seed}: training the anchor and the adapter-tuned model")
    model_a, model_b, data, info = train_pair(cfg, seed, layer_star)
    leaked, clean = data.prompts[data.leaked], data.prompts[~data.leaked]
    leaked_ans, clean_ans = data.answers[data.leaked], data.answers[~data.leaked]
    computed = data.computed[data.leaked]  # what the arithmetic answers
    status(f"seed {seed}: cross-model patching scan, neuron scores, key-scaling permutation tests")
    scan = cross_model_layer_patching(model_a, model_b, leaked, logit_diff(leaked_ans, computed))
    effects = {(r["component"], r["layer"]): r["effect"] for r in scan.rows}
    top = scan.top(1)[0]
    pairs = [(p.tolist(), [int(a)]) for p, a in zip(leaked, leaked_ans, strict=True)]
    ppl_a, ppl_b = split_perplexity(model_a, pairs), split_perplexity(model_b, pairs)
    scores = neuron_scores(model_b, leaked, layer_star, [[int(a)] for a in leaked_ans], top_tokens=TOP_TOKENS)
    chosen = top_neurons(scores["score"], K_NEURONS)
    anchors = info["anchors"]
    control = random_neurons(cfg.intermediate, K_NEURONS, exclude=chosen, seed=seed)
    base_leak, base_clean = accuracy(model_b, leaked, leaked_ans), accuracy(model_b, clean, clean_ans)
    row = {
        "seed": seed,
        "layer_star": layer_star,
        "steps_a": info["steps_a"],
        "steps_b": info["steps_b"],
        "b_reached_target": info["b_reached_target"],
        "anchors_fire_clean": info["anchors_fire_clean"],
        "anchors_fire_leaked": info["anchors_fire_leaked"],
        "acc_leaked_A": accuracy(model_a, leaked, leaked_ans),
        "acc_leaked_A_source_format": accuracy(model_a, data.in_source_format(leaked), leaked_ans),
        "acc_leaked_B": base_leak,
        "acc_clean_A": accuracy(model_a, clean, clean_ans),
        "acc_clean_B": base_clean,
        "scan_top_layer": top["layer"],
        "scan_top_component": top["component"],
        "effect_mlp_at_l*": effects["mlp_out", layer_star],
        "effect_attn_at_l*": effects["attn_out", layer_star],
        "answer_ppl_A": ppl_a["answer_ppl"],
        "answer_ppl_B": ppl_b["answer_ppl"],
        "prompt_ppl_A": ppl_a["prompt_ppl"],
        "prompt_ppl_B": ppl_b["prompt_ppl"],
        "neurons": chosen,
        "anchors": anchors,
        "anchors_in_top": len(set(chosen) & set(anchors)),
        "anchors_in_control": len(set(control) & set(anchors)),
    }
    row["scan_found"] = bool(
        top["layer"] == layer_star
        and top["component"] == "mlp_out"
        and row["effect_mlp_at_l*"] > row["effect_attn_at_l*"]
    )
    margin = logit_margin(leaked_ans)
    row["margin_leaked_B"] = float(margin(model_b(input_ids=leaked, use_cache=False).logits.detach()))
    nulls = {}
    for name, neurons in (("planted", anchors), ("top", chosen)):
        tests = key_scaling_test(
            model_b, leaked, {layer_star: neurons}, margin, factors=FACTORS, n_random=N_RANDOM, seed=seed
        )
        for factor, test in tests.items():
            tag = f"{name}_x{factor:g}"
            nulls[tag] = test.null.tolist()
            row[f"d_margin_{tag}"] = test.observed
            row[f"p_lower_{tag}"], row[f"p_upper_{tag}"] = test.p_lower, test.p_upper
            with torch.no_grad():
                before = model_b(input_ids=clean, use_cache=False).logits
                with scale_mlp_keys(model_b, {layer_star: neurons}, factor):
                    after = model_b(input_ids=clean, use_cache=False).logits
            row[f"max_clean_logit_change_{tag}"] = float((after - before).abs().max())
    for factor in FACTORS:  # the earlier, accuracy-based numbers (reported, not judged)
        for name, neurons in (("top", chosen), ("random", control)):
            with scale_mlp_keys(model_b, {layer_star: neurons}, factor):
                row[f"d_leaked_{name}_x{factor:g}"] = accuracy(model_b, leaked, leaked_ans) - base_leak
                row[f"d_clean_{name}_x{factor:g}"] = accuracy(model_b, clean, clean_ans) - base_clean
    row["seconds"] = time.perf_counter() - start
    return row, effects, nulls


def seed_mean_test(rows: list[dict], nulls: list[dict], tag: str) -> dict:
    """The seed-mean margin change for ``tag`` against the seed means of the random sets (the r-th set of
    every seed averaged): the observed value, the null's 1 % and 99 % quantiles and one-sided p-values."""
    observed = sum(r[f"d_margin_{tag}"] for r in rows) / len(rows)
    null = torch.tensor([n[tag] for n in nulls], dtype=torch.float64).mean(0)  # (N_RANDOM,)
    return {
        "observed": observed,
        "null_q01": float(torch.quantile(null, 1 - NULL_QUANTILE)),
        "null_q99": float(torch.quantile(null, NULL_QUANTILE)),
        "null_mean": float(null.mean()),
        "p_lower": (1 + int((null <= observed).sum())) / (len(null) + 1),
        "p_upper": (1 + int((null >= observed).sum())) / (len(null) + 1),
    }


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting other processes
    try:
        results = [one_seed(FIRST_SEED[budget] + seed + i) for i in range(N_SEEDS[budget])]
    finally:
        torch.set_num_threads(threads)
    rows = [r for r, _, _ in results]
    nulls = [n for _, _, n in results]
    n = len(rows)

    def mean(key):
        return sum(r[key] for r in rows) / n

    found = sum(r["scan_found"] for r in rows)
    ppl_ok = all(r["answer_ppl_B"] < r["answer_ppl_A"] for r in rows)
    tests = {
        tag: seed_mean_test(rows, nulls, tag) for tag in ("planted_x0", "planted_x2", "top_x0", "top_x2")
    }
    clean_max = max(r[f"max_clean_logit_change_planted_x{f:g}"] for r in rows for f in FACTORS)
    checks = {
        "scan": found >= SCAN_FRACTION * n,
        "perplexity": ppl_ok,
        "scorer": mean("anchors_in_top") >= ANCHORS_IN_TOP_MIN,
        "x0_beyond_random": tests["planted_x0"]["observed"] < tests["planted_x0"]["null_q01"],
        "x2_beyond_random": tests["planted_x2"]["observed"] > tests["planted_x2"]["null_q99"],
        "clean_unchanged": clean_max <= CLEAN_TOL,
    }
    per_seed = {  # seeds in which the planted keys alone are beyond the per-seed null (reported)
        "x0": sum(r["p_lower_planted_x0"] <= 1 - NULL_QUANTILE for r in rows),
        "x2": sum(r["p_upper_planted_x2"] <= 1 - NULL_QUANTILE for r in rows),
    }
    layers = list(range(ToyConfig().layers))
    figures = [
        {
            "name": "cross_model_scan",
            "title": "Cross-model layer patching (B into A), leaked prompts",
            "xlabel": "block",
            "ylabel": "normalized effect",
            "x": layers,
            "series": {
                f"seed {r['seed']} (l*={r['layer_star']}) {c}": [eff[c, layer] for layer in layers]
                for (r, eff, _) in results
                for c in ("mlp_out", "attn_out")
            },
            "kind": "line",
        },
        {
            "name": "key_scaling",
            "title": "Seed-mean change of the leaked answers' logit margin under key scaling at l*",
            "xlabel": "intervention",
            "ylabel": "margin change (logits)",
            "x": ["x0", "x2"],
            "series": {
                "planted anchors": [tests["planted_x0"]["observed"], tests["planted_x2"]["observed"]],
                "scorer's top 10": [tests["top_x0"]["observed"], tests["top_x2"]["observed"]],
                "random sets, 1% quantile": [
                    tests["planted_x0"]["null_q01"],
                    tests["planted_x2"]["null_q01"],
                ],
                "random sets, 99% quantile": [
                    tests["planted_x0"]["null_q99"],
                    tests["planted_x2"]["null_q99"],
                ],
            },
            "kind": "bar",
        },
    ]
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "seed-mean drop of the leaked answers' logit margin when the planted anchor keys at l* are "
        "zeroed (higher is better); baseline: the 99th percentile of the same drop for random same-size sets",
        "ours": -tests["planted_x0"]["observed"],
        "baseline": -tests["planted_x0"]["null_q01"],
        "criterion": CRITERION,
        "passed": bool(all(checks.values())),
        "threads": "1: tiny matrices, where one torch thread is faster than two fighting other processes",
        "rows": rows,
        "permutation_tests": tests,
        "seeds_beyond_per_seed_null": per_seed,
        "checks": checks,
        "figures": figures,
        "notes": (
            f"seeds {rows[0]['seed']}-{rows[-1]['seed']}; scan found l* in {found}/{n} seeds; checks {checks}; "
            f"anchors in the scorer's top {K_NEURONS}: {mean('anchors_in_top'):.1f} on average; planted keys x0 "
            f"margin change {tests['planted_x0']['observed']:+.3f} (random 1% quantile "
            f"{tests['planted_x0']['null_q01']:+.3f}), x2 {tests['planted_x2']['observed']:+.3f} (random 99% "
            f"quantile {tests['planted_x2']['null_q99']:+.3f}); max clean logit change {clean_max:.2g}. "
            "Toy, task, sizes and the training of A and B are our own design (the paper's models are 7B "
            "LLMs after spurious RLVR)."
        ),
    }
