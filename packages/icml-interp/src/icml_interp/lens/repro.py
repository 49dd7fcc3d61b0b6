"""Placeholder reproduction ``logit-lens``: the logit lens on SmolLM2-135M-Instruct.

Two checks on a real pretrained LM (nostalgebraist 2020; Belrose et al. 2023, Sec. 2):

1. the lens is exact at the top: decoding the last block's output through the final norm and unembedding
   gives the model's own logits (``ours``: the largest absolute difference over all prompts and
   positions). ``baseline`` is the same difference one block earlier, the size of error a lens that
   misses a block (or reads a post-norm hidden state) would make; it shows the check can fail;
2. the classic curve: where the model answers a factual prompt correctly, the answer is top-1 under the
   lens only in the last third of the layers (it is not decodable from the early residual stream). Wrong
   answers are reported but not checked: they are often frequent function words (" a"), which the lens
   decodes from early layers on, a different phenomenon.

The weights were 4-bit (Q4_1) before loading: the numbers describe this float model, not SmolLM2 itself.
"""

from __future__ import annotations

import torch

from icml_interp.lens.logit_lens import logit_lens

SYSTEM = "logit-lens"
CLAIM = ("Placeholder until the interpretability systems (patching, SAEs, steering geometry) land: the logit "
         "lens reproduces the model's logits at the last layer, and a factual answer becomes the top-1 "
         "lens prediction only in the last third of the layers (nostalgebraist 2020).")
EXACT_TOL = 1e-4  # float32 logits of magnitude ~30: a few ulps, far below any one-block difference
LATE_FRACTION = 2 / 3
CRITERION = (f"max |lens[last] - model logits| <= {EXACT_TOL:g} over all prompts and positions; the model answers "
             "at least half of the prompts correctly (its top-1 next token is the expected word); and for every "
             f"correctly answered prompt the answer is top-1 under the lens at no layer <= {LATE_FRACTION:.3g} "
             "n_layers")
PROMPTS = {  # prompt -> the expected answer's first word (the next token, stripped of its leading space)
    "quick": {"The capital of France is": "Paris", "The capital of Japan is": "Tokyo",
              "The largest planet in the solar system is": "Jupiter",
              "The Eiffel Tower is located in the city of": "Paris", "The opposite of hot is": "cold"},
}
PROMPTS["full"] = {**PROMPTS["quick"], "The chemical symbol for gold is": "Au",
                   "The first president of the United States was": "George",
                   "The currency of the United Kingdom is the": "pound", "Monday, Tuesday, Wednesday,": "Thursday",
                   "The author of Romeo and Juliet is": "William"}


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`).

    Deterministic (one forward pass per prompt, no sampling): ``seed`` is accepted for the protocol.
    """
    if budget not in PROMPTS:
        raise ValueError(f"budget must be one of {tuple(PROMPTS)}, got {budget!r}")
    from icml_tools.assets import smollm2  # test assets: a dev dependency, not a runtime one

    torch.manual_seed(seed)
    model, tokenizer = smollm2()
    n_layers = len(model.model.layers)
    rows, ranks, probs = [], {}, {}
    top_diff = below_diff = 0.0
    for prompt, expected in PROMPTS[budget].items():
        ids = torch.tensor(tokenizer(prompt)["input_ids"], dtype=torch.long)  # (seq,)
        lens = logit_lens(model, ids)  # (n_layers + 1, seq, vocab)
        with torch.no_grad():
            logits = model(input_ids=ids[None], use_cache=False).logits[0]  # (seq, vocab)
        top_diff = max(top_diff, (lens[-1] - logits).abs().max().item())
        below_diff = max(below_diff, (lens[-2] - logits).abs().max().item())
        answer = int(logits[-1].argmax())
        last = lens[:, -1, :]  # (n_layers + 1, vocab): the lens at the prediction position
        rank = (last > last[:, answer : answer + 1]).sum(-1)  # (n_layers + 1,), 0 = top-1
        prob = torch.softmax(last, dim=-1)[:, answer]  # (n_layers + 1,)
        top1 = torch.nonzero(rank == 0).flatten()
        first_top1 = int(top1.min()) if len(top1) else n_layers + 1  # n_layers + 1: never top-1
        label = f"{prompt} →{tokenizer.decode(answer)!r}"
        ranks[label], probs[label] = rank.tolist(), prob.tolist()
        rows.append({"prompt": prompt, "expected": expected, "answer": tokenizer.decode(answer),
                     "correct": tokenizer.decode(answer).strip() == expected, "answer_prob": prob[-1].item(),
                     "first_top1_layer": first_top1, "n_layers": n_layers,
                     "rank_at_two_thirds": int(rank[int(LATE_FRACTION * n_layers)])})

    correct = [r for r in rows if r["correct"]]
    late = all(r["first_top1_layer"] > LATE_FRACTION * n_layers for r in correct)
    layers = list(range(n_layers + 1))
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": ("max |logit-lens logits - model logits| at the last layer "
                   "(lower is better; baseline: the same one block earlier)"),
        "ours": top_diff,
        "baseline": below_diff,
        "criterion": CRITERION,
        "passed": bool(top_diff <= EXACT_TOL and 2 * len(correct) >= len(rows) and late),
        "rows": rows,
        "figures": [
            {"name": "logit_lens_rank", "title": "Rank of the model's answer under the logit lens (SmolLM2-135M)",
             "xlabel": "layer (0 = embeddings)", "ylabel": "rank + 1 (1 = top-1)", "x": layers,
             "series": {label: [r + 1 for r in rank] for label, rank in ranks.items()}, "kind": "line", "logy": True},
            {"name": "logit_lens_prob", "title": "Probability of the model's answer under the logit lens",
             "xlabel": "layer (0 = embeddings)", "ylabel": "probability", "x": layers, "series": probs,
             "kind": "line"},
        ],
        "notes": (f"SmolLM2-135M-Instruct ({n_layers} layers), dequantized from Q4_1, float32, raw prompts without "
                  f"the chat template. The model answers {len(correct)} of {len(rows)} prompts correctly; the "
                  "emergence check covers those (a wrong top-1 is often a frequent function word such as ' a', "
                  "which the lens decodes from early layers on). Disclosure: the criterion was revised once, "
                  "after a full-budget run failed the first version (emergence required for every prompt, "
                  "including the wrongly answered ones)."),
    }
