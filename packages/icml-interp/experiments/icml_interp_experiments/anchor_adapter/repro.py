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
3. MLP-key scaling (:func:`~icml_interp.steering.scale_mlp_keys`) of the 10 top-scored neurons at ℓ* in B
   (score as in the paper, averaged over the leaked prompts; value-vector lens overlap over the top 2 tokens,
   since our vocabulary has 27 tokens where the paper's top 10 are out of 150k), by ×0 and ×2, against 10
   random neurons of the same block (one fixed set for every prompt, as in the authors' ``steering.py``).
   The scorer is not told which neurons are the anchor; ``anchors_in_top`` reports how many it found.

Criterion (fixed before the runs): scan top = (ℓ*, mlp_out) with MLP > attention at ℓ* in at least 80 % of
seeds (4 of 5 in ``full``; the one seed in ``quick``); answer perplexity B < A on leaked items in every seed;
averaged over seeds, ×0 lowers leaked accuracy by ≥ 30 points, ×2 raises it (> 0), the clean accuracy moves
by ≤ 5 points under either, and the random neurons move leaked and clean accuracy by ≤ 2 points under either.
"""

from __future__ import annotations

import time

import torch

from icml_interp.patching import cross_model_layer_patching, logit_diff
from icml_interp.perplexity import split_perplexity
from icml_interp.steering import neuron_scores, random_neurons, scale_mlp_keys, top_neurons
from icml_interp_experiments.anchor_adapter.toy import ToyConfig, accuracy, train_pair
from icml_tools.progress import status

SYSTEM = "anchor-adapter-planted"
CLAIM = (
    "Cross-model layer patching localizes the layer whose MLP a fine-tune changed to recall leaked answers, "
    "the answer perplexity of leaked items falls, and scaling the top-scored MLP keys there steers leaked "
    "accuracy both ways while random keys do little (Yan et al. 2026, Anchor–Adapter; planted toy)."
)
N_SEEDS = {"quick": 1, "full": 5}
LAYER_CHOICES = (1, 2)
K_NEURONS, TOP_TOKENS = 10, 2
SCAN_FRACTION = 0.8
DROP_MIN, CLEAN_MAX, RANDOM_MAX = 0.30, 0.05, 0.02
CRITERION = (
    f"scan top = (l*, mlp_out) and MLP > attn at l* in >= {SCAN_FRACTION:.0%} of seeds; leaked answer PPL "
    f"B < A in every seed; seed means: x0 lowers leaked accuracy by >= {DROP_MIN * 100:g} points, x2 raises "
    f"it, |clean change| <= {CLEAN_MAX * 100:g} points under x0 and x2, random neurons |change| <= "
    f"{RANDOM_MAX * 100:g} points on leaked and clean under x0 and x2"
)


def one_seed(seed: int, cfg: ToyConfig | None = None) -> tuple[dict, dict]:
    """Train the pair for ``seed`` and measure everything; returns ``(row, scan effects by layer)``."""
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
    status(f"seed {seed}: cross-model patching scan, neuron scores, steering")
    scan = cross_model_layer_patching(model_a, model_b, leaked, logit_diff(leaked_ans, computed))
    effects = {(r["component"], r["layer"]): r["effect"] for r in scan.rows}
    top = scan.top(1)[0]
    pairs = [(p.tolist(), [int(a)]) for p, a in zip(leaked, leaked_ans, strict=True)]
    ppl_a, ppl_b = split_perplexity(model_a, pairs), split_perplexity(model_b, pairs)
    scores = neuron_scores(model_b, leaked, layer_star, [[int(a)] for a in leaked_ans], top_tokens=TOP_TOKENS)
    chosen = top_neurons(scores["score"], K_NEURONS)
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
        "anchors": info["anchors"],
        "anchors_in_top": len(set(chosen) & set(info["anchors"])),
        "anchors_in_control": len(set(control) & set(info["anchors"])),
    }
    row["scan_found"] = bool(
        top["layer"] == layer_star
        and top["component"] == "mlp_out"
        and row["effect_mlp_at_l*"] > row["effect_attn_at_l*"]
    )
    for factor in (0.0, 2.0):
        for name, neurons in (("top", chosen), ("random", control)):
            with scale_mlp_keys(model_b, {layer_star: neurons}, factor):
                row[f"d_leaked_{name}_x{factor:g}"] = accuracy(model_b, leaked, leaked_ans) - base_leak
                row[f"d_clean_{name}_x{factor:g}"] = accuracy(model_b, clean, clean_ans) - base_clean
    row["seconds"] = time.perf_counter() - start
    return row, effects


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting other processes
    try:
        results = [one_seed(seed + i) for i in range(N_SEEDS[budget])]
    finally:
        torch.set_num_threads(threads)
    rows = [r for r, _ in results]
    n = len(rows)

    def mean(key):
        return sum(r[key] for r in rows) / n

    found = sum(r["scan_found"] for r in rows)
    ppl_ok = all(r["answer_ppl_B"] < r["answer_ppl_A"] for r in rows)
    drop, raise_ = -mean("d_leaked_top_x0"), mean("d_leaked_top_x2")
    clean_moves = max(abs(mean("d_clean_top_x0")), abs(mean("d_clean_top_x2")))
    random_moves = max(abs(mean(f"d_{s}_random_x{f}")) for s in ("leaked", "clean") for f in ("0", "2"))
    checks = {
        "scan": found >= SCAN_FRACTION * n,
        "perplexity": ppl_ok,
        "x0_drop": drop >= DROP_MIN,
        "x2_raise": raise_ > 0,
        "clean": clean_moves <= CLEAN_MAX,
        "random": random_moves <= RANDOM_MAX,
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
                for (r, eff) in results
                for c in ("mlp_out", "attn_out")
            },
            "kind": "line",
        },
        {
            "name": "key_scaling",
            "title": "Accuracy change under MLP-key scaling at l* (seed means)",
            "xlabel": "intervention",
            "ylabel": "accuracy change (points)",
            "x": ["top x0", "top x2", "random x0", "random x2"],
            "series": {
                s: [
                    100 * mean(f"d_{s}_{w}_x{f}")
                    for w, f in (("top", "0"), ("top", "2"), ("random", "0"), ("random", "2"))
                ]
                for s in ("leaked", "clean")
            },
            "kind": "bar",
        },
    ]
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "seed-mean drop of leaked-set accuracy under x0 key scaling of the top neurons at l* "
        "(higher is better; baseline: the same for random neurons)",
        "ours": drop,
        "baseline": -mean("d_leaked_random_x0"),
        "criterion": CRITERION,
        "passed": bool(all(checks.values())),
        "threads": "1: tiny matrices, where one torch thread is faster than two fighting other processes",
        "rows": rows,
        "figures": figures,
        "notes": (
            f"scan found l* in {found}/{n} seeds; checks {checks}; x2 leaked change {raise_ * 100:+.1f} points, "
            f"max |clean change| {clean_moves * 100:.1f}, max |random change| {random_moves * 100:.1f}. "
            "Toy, task, sizes and the training of A and B are our own design (the paper's models are 7B "
            "LLMs after spurious RLVR)."
        ),
    }
