"""Mechanism diagnostic of ×2 key scaling in ``anchor-adapter-planted`` (written after the issue-24 full run,
whose ×2 component failed; it changes nothing in the reproduction or its verdict).

For each seed, the anchor-tuned model B is retrained exactly as the reproduction does, and the logits at the
answer position of the leaked prompts are compared with and without the planted anchor keys doubled: the
change of the memorized answer's logit, of the computed sum's logit, and of the best other token's logit,
which token that best other is (another leaked item's answer, or the sum), and the margin change separately
for the items B recalls and those it does not.

``uv run python -m icml_interp_experiments.anchor_adapter.diagnose --seeds 20-29 --out FILE.json``
"""

from __future__ import annotations

import argparse
import json

import torch

from icml_interp.steering import scale_mlp_keys
from icml_interp_experiments.anchor_adapter.repro import LAYER_CHOICES
from icml_interp_experiments.anchor_adapter.toy import ToyConfig, train_pair


def doubled_anchor(seed: int, factor: float = 2.0) -> dict:
    """The logit changes at the leaked answer positions when B's anchor keys are scaled by ``factor``."""
    gen = torch.Generator().manual_seed(seed)
    layer_star = LAYER_CHOICES[int(torch.randint(len(LAYER_CHOICES), (1,), generator=gen))]
    _, model_b, data, info = train_pair(ToyConfig(), seed, layer_star)
    leaked, answers, sums = data.prompts[data.leaked], data.answers[data.leaked], data.computed[data.leaked]
    rows = torch.arange(len(answers))
    with torch.no_grad():
        before = model_b(input_ids=leaked, use_cache=False).logits[:, -1]
        with scale_mlp_keys(model_b, {layer_star: info["anchors"]}, factor):
            after = model_b(input_ids=leaked, use_cache=False).logits[:, -1]

    def best_other(logits):
        other = logits.clone()
        other[rows, answers] = -torch.inf
        return other.max(-1)

    other_before, other_after = best_other(before), best_other(after)
    margin_change = (after[rows, answers] - other_after.values) - (
        before[rows, answers] - other_before.values
    )
    recalled = before.argmax(-1) == answers
    leaked_answers = set(answers.tolist())
    return {
        "seed": seed,
        "layer_star": layer_star,
        "d_answer_logit": float((after[rows, answers] - before[rows, answers]).mean()),
        "d_sum_logit": float((after[rows, sums] - before[rows, sums]).mean()),
        "d_best_other_logit": float((other_after.values - other_before.values).mean()),
        "best_other_is_another_leaked_answer": sum(int(t) in leaked_answers for t in other_after.indices)
        / len(answers),
        "best_other_is_sum": float((other_after.indices == sums).float().mean()),
        "recalled_before": int(recalled.sum()),
        "recalled_after": int((after.argmax(-1) == answers).sum()),
        "d_margin": float(margin_change.mean()),
        "d_margin_recalled": float(margin_change[recalled].mean()),
        "d_margin_not_recalled": float(margin_change[~recalled].mean()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="20-29", help="a range FIRST-LAST")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    first, _, last = args.seeds.partition("-")
    torch.set_num_threads(1)
    rows = [doubled_anchor(s) for s in range(int(first), int(last or first) + 1)]
    keys = [k for k in rows[0] if k not in ("seed", "layer_star")]
    summary = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "mean": summary}, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
