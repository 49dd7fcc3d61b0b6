"""Reproduction ``lens-smollm2``: the logit lens and activation patching on SmolLM2-135M-Instruct.

Two classic pictures on a real pretrained LM, through :mod:`icml_interp.hooks`:

1. *The logit lens is exact at the top* (nostalgebraist 2020; Belrose et al. 2023): ``hook_resid_post`` of
   the last block through the final norm and unembedding is the model's logits (``ours``: the largest
   absolute difference over the prompts; ``baseline``: the same one block earlier, the error a lens that
   misses a block would make). The answer " Paris" becomes top-1 only late.
2. *Activation patching* (Meng et al. 2022) of ``"The capital of France is"`` with the residual stream of
   ``"The capital of Italy is"``, metric ``logit(" Paris") - logit(" Rome")`` at the last position,
   normalized ``(patched - clean) / (corrupt - clean)``: patching nothing gives 0 and patching the whole
   stream at block 0 gives 1 (checks of the machinery); in block 0 only the subject token matters, in the
   last block only the last position, and the information moves between them in the middle layers.

The full budget adds a 12-token prompt pair (Eiffel Tower / Colosseum) and times its full layer × position
scan. The weights were 4-bit (Q4_1) before loading: the numbers describe this float model, not SmolLM2.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from icml_interp.hooks import HookedModel
from icml_interp.lens.logit_lens import logit_lens
from icml_interp.patching import activation_patching, logit_diff, run_with_patches

SYSTEM = "lens-smollm2"
CLAIM = (
    "The logit lens of the last block reproduces the model's logits, and activation patching of a factual "
    "prompt localizes the answer first at the subject token, then at the last position (nostalgebraist 2020; "
    "Meng et al. 2022)."
)
EXACT_TOL = 1e-4
PAIRS = {  # (clean prompt, corrupt prompt, clean answer, corrupt answer)
    "quick": [("The capital of France is", "The capital of Italy is", " Paris", " Rome")],
}
PAIRS["full"] = PAIRS["quick"] + [
    (
        "We know the Eiffel Tower is located in the city of",
        "We know the Colosseum is located in the city of",
        " Paris",
        " Rome",
    )
]
CRITERION = (
    f"max |lens(last resid_post) - logits| <= {EXACT_TOL:g}; the model's top-1 answer is the expected one; "
    "patching nothing gives effect 0 and the whole stream at block 0 effect 1 (within 1e-4); in block 0 "
    "the subject token is the only position with |effect| > 0.5; in the last block the last position has "
    "effect >= 0.9 and no other position |effect| > 0.1; for every pair"
)


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`).

    Deterministic (no sampling): ``seed`` is accepted for the protocol.
    """
    from icml_tools.assets import smollm2  # test assets: a dev dependency, not a runtime one

    model, tok = smollm2()
    hooked = HookedModel(model)
    n_layers = hooked.n_layers
    rows, checks = [], []
    figures: list[dict[str, Any]] = []
    top_diff = below_diff = 0.0
    for clean_text, corrupt_text, answer, wrong in PAIRS[budget]:
        clean = torch.tensor([tok(clean_text)["input_ids"]])
        corrupt = torch.tensor([tok(corrupt_text)["input_ids"]])
        answer_id, wrong_id = tok(answer)["input_ids"][0], tok(wrong)["input_ids"][0]
        if clean.shape != corrupt.shape:
            raise RuntimeError(
                f"prompt pair tokenizes to different lengths: {clean.shape} vs {corrupt.shape}"
            )
        seq = clean.shape[1]
        subject = int(torch.nonzero(clean[0] != corrupt[0])[0])
        tokens = [tok.decode(t) for t in clean[0]]
        # 1. logit lens
        lens = logit_lens(hooked, clean[0])  # (n_layers + 1, seq, vocab)
        with torch.no_grad():
            logits = hooked(clean)[0]
        top_diff = max(top_diff, float((lens[-1] - logits).abs().max()))
        below_diff = max(below_diff, float((lens[-2] - logits).abs().max()))
        top1 = int(logits[-1].argmax())
        rank = (lens[:, -1] > lens[:, -1, answer_id, None]).sum(-1).tolist()
        # 2. activation patching, layer x position, resid_pre
        metric = logit_diff(answer_id, wrong_id)
        start = time.perf_counter()
        scan = activation_patching(hooked, clean, corrupt, metric, components=("resid_pre",))
        scan_seconds = time.perf_counter() - start
        table, _, _ = scan.grid("resid_pre")  # (n_layers, seq)
        _, cache = hooked.run_with_cache(corrupt, ["blocks.0.hook_resid_pre"])
        all_effect = (float(metric(run_with_patches(hooked, clean, cache))) - scan.clean) / (
            scan.corrupt - scan.clean
        )
        none_effect = (float(metric(run_with_patches(hooked, clean, cache, []))) - scan.clean) / (
            scan.corrupt - scan.clean
        )
        first, last = table[0], table[-1]
        others_first = [abs(v) for p, v in enumerate(first) if p != subject]
        crossover = next(
            (layer for layer in range(n_layers) if table[layer, -1] > table[layer, subject]), None
        )
        ok = bool(
            top1 == answer_id
            and abs(all_effect - 1) <= 1e-4
            and abs(none_effect) <= 1e-4
            and abs(first[subject]) > 0.5
            and max(others_first) <= 0.5
            and last[-1] >= 0.9
            and max(abs(v) for v in last[:-1]) <= 0.1
        )
        checks.append(ok)
        rows.append(
            {
                "prompt": clean_text,
                "corrupt": corrupt_text,
                "n_tokens": seq,
                "answer": tok.decode(top1),
                "answer_correct": top1 == answer_id,
                "first_top1_layer": rank.index(0) if 0 in rank else None,
                "clean_logit_diff": scan.clean,
                "corrupt_logit_diff": scan.corrupt,
                "effect_patch_all": all_effect,
                "effect_patch_none": none_effect,
                "subject_effect_block0": float(first[subject]),
                "max_other_effect_block0": float(max(others_first)),
                "last_position_effect_last_block": float(last[-1]),
                "crossover_layer": crossover,
                "scan_seconds": scan_seconds,
                "scan_forward_passes": n_layers,
                "passed": ok,
            }
        )
        name = "france" if "France" in clean_text else "eiffel"
        figures.append(
            {
                "name": f"patching_{name}",
                "title": f"Activation patching of resid_pre: {clean_text!r}",
                "xlabel": "block",
                "ylabel": "normalized effect",
                "x": list(range(n_layers)),
                "series": {f"{p}:{tokens[p]!r}": table[:, p].tolist() for p in range(seq)},
                "kind": "line",
            }
        )
        figures.append(
            {
                "name": f"lens_rank_{name}",
                "title": f"Rank of {answer!r} under the logit lens",
                "xlabel": "layer (0 = embeddings)",
                "ylabel": "rank + 1",
                "x": list(range(n_layers + 1)),
                "series": {clean_text: [r + 1 for r in rank]},
                "kind": "line",
                "logy": True,
            }
        )
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "max |logit lens of the last block - model logits| (lower is better; baseline: one block earlier)",
        "ours": top_diff,
        "baseline": below_diff,
        "criterion": CRITERION,
        "passed": bool(top_diff <= EXACT_TOL and all(checks)),
        "rows": rows,
        "figures": figures,
        "notes": (
            f"SmolLM2-135M-Instruct ({n_layers} blocks), dequantized from Q4_1, float32, raw prompts without the "
            "chat template; scans are batched over positions (one forward pass per block)."
        ),
    }
