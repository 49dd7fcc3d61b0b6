"""Head-type scores (Kesten-Pomeranz et al., ICML 2026, "Induction meets biology: repeat detection in
protein language models"; TransformerLens' head detector; Olsson et al. 2022), and head ablations.

Pattern scores (:mod:`icml_interp.heads.scores`) take attention probabilities ``(batch, heads, q, k)`` and
return ``(heads,)``, the mean over the queries that count:

- :func:`previous_token_score`: attention from ``i`` to ``i - 1``.
- :func:`duplicate_token_score`: mass on earlier occurrences of the query's token.
- :func:`induction_score`: causal LMs, mass on the token after an earlier occurrence (TransformerLens'
  pattern); :func:`repeated_sequence_induction_score`: Olsson et al.'s standard on ``[BOS, r, r]``.
- :func:`pattern_matching_score`: masked LMs, attention to the aligned position in the other repeat copy
  (no +1 shift).
- :func:`relative_position_score` (:class:`RelativePosition`): std and mode of ``argmax key - query``.
- :func:`attention_entropy`: normalised entropy of the attention rows.

On a model (a Hugging Face causal LM or a :class:`icml_interp.hooks.HookedModel`):
:func:`attention_patterns`, :func:`head_scores` (:class:`HeadScores`, every score per ``(layer, head)``
from one forward pass), :func:`copy_score` (the paper's copy score), and :func:`mean_ablation_hooks` /
:func:`zero_ablation_hooks` for ``HookedModel.run_with_hooks``.

Example::

    from icml_interp.heads import head_scores, mean_ablation_hooks
    found = head_scores(model, ids)                  # ids: [BOS, r, r]
    best = found.top("induction", k=1)               # [(layer, head, score)]
    hooks = mean_ablation_hooks(model, [best[0][:2]], reference_ids)
"""

from icml_interp.heads.ablate import mean_ablation_hooks, zero_ablation_hooks
from icml_interp.heads.collect import SCORE_NAMES, HeadScores, attention_patterns, copy_score, head_scores
from icml_interp.heads.scores import (
    RelativePosition,
    attention_entropy,
    duplicate_token_score,
    induction_score,
    pattern_matching_score,
    previous_token_score,
    relative_position_score,
    repeated_sequence_induction_score,
)

__all__ = [
    "SCORE_NAMES",
    "HeadScores",
    "RelativePosition",
    "attention_entropy",
    "attention_patterns",
    "copy_score",
    "duplicate_token_score",
    "head_scores",
    "induction_score",
    "mean_ablation_hooks",
    "pattern_matching_score",
    "previous_token_score",
    "relative_position_score",
    "repeated_sequence_induction_score",
    "zero_ablation_hooks",
]
