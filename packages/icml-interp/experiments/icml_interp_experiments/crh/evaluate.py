"""One concept's CRH measurement on a language model: difference vectors from contrastive pairs, a scale
sweep along the central axis, judge labels, per-sample steerability and its correlation with the geometry.

The protocol (fixed with the criterion in ``packages/icml-interp/docs/crh.md``):

1. ``d_i = act(question_i + response with the concept) - act(question_i + response without)`` at the last
   token of ``blocks.L.hook_resid_post``; the axis ``v`` is their mean, steering adds ``s v / |v|`` at the
   same hook during the prompt's pass (CRH's prefill-only setting), ``s = c |v|`` for ``c`` in
   ``scale_factors``.
2. Each greedy continuation of ``question_i`` is judged: the keyword share (the concept judge), and
   gibberish when its perplexity under the unsteered model exceeds ``gibberish_factor`` x the 95th
   percentile of the positive responses' perplexity (texts that carry the concept legitimately).
   Labels 1/2/3 as in CRH.
3. Headroom: the concept rate (share labelled 2) rises by >= ``MIN_LIFT`` over scale 0 at some scale whose
   gibberish share is <= ``MAX_GIBBERISH``; the scales up to the last such scale are the fitted range.
4. Per-sample score = keyword share (0 when gibberish); steerability = slope of the score against ``c``.
5. The concept passes with headroom, over half the samples rising, and a positive CRH correlation
   (``steerability / |d|^2`` against ``sin^2 theta / cos theta``) with permutation p < 0.05.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from icml_interp.crh import (
    CONCEPT,
    GIBBERISH,
    KeywordJudge,
    continuation_perplexity,
    decompose,
    fit_steerability,
    geometry_correlation,
    label_outputs,
)
from icml_interp.steering import difference_vectors, generate_steered

MIN_LIFT = 0.20
MAX_GIBBERISH = 0.25
SD_OVER_SE = 2.0


@dataclass(frozen=True)
class ConceptSpec:
    name: str
    keywords: Sequence[str]
    prompts: list[list[int]]  # the questions, as generation prompts
    positive: list[list[int]]  # question + response with the concept
    negative: list[list[int]]  # question + response without it


def evaluate_concept(
    model,
    spec: ConceptSpec,
    decode: Callable[[Sequence[int]], str],
    *,
    layer: int,
    scale_factors: Sequence[float],
    max_new_tokens: int,
    pad_token_id: int,
    gibberish_factor: float = 2.0,
    positions: str = "prefill",
    samples: int = 1,
    temperature: float = 1.0,
    seed: int = 0,
    n_permutations: int = 9999,
    batch_size: int = 20,
) -> dict:
    diffs = difference_vectors(model, spec.positive, spec.negative, layer)
    cyl = decompose(diffs)
    axis_norm = float(diffs.mean(0).norm())
    unit = cyl.axis.float()
    judge = KeywordJudge(spec.keywords)
    # the gibberish reference: the positive responses' perplexity given their questions
    responses = [p[len(q) :] for p, q in zip(spec.positive, spec.prompts, strict=True)]
    ref = continuation_perplexity(model, spec.prompts, responses)
    threshold = gibberish_factor * float(np.percentile(ref, 95))
    n = len(spec.prompts)
    prompts = [p for p in spec.prompts for _ in range(samples)]  # each prompt's draws side by side
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if samples > 1 else {}
    )
    scores, labels, texts = [], [], []
    for k, c in enumerate(scale_factors):
        torch.manual_seed(seed * 1000 + k)
        outs = generate_steered(
            model,
            prompts,
            unit,
            layer,
            c * axis_norm,
            positions=positions,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_token_id,
            batch_size=batch_size,
            **sampling,
        )
        text = [decode(o.tolist()) for o in outs]
        ppl = continuation_perplexity(model, prompts, outs)
        lab = label_outputs(judge.present(text), ppl, threshold)
        share = np.where(lab == GIBBERISH, 0.0, np.array(judge(text)))
        scores.append(share.reshape(n, samples).mean(1))  # a prompt's score: the mean over its draws
        labels.append(lab)
        texts.append(text[::samples])
    labels_arr = np.array(labels)  # (n_scales, n * samples)
    rate = (labels_arr == CONCEPT).mean(1)
    gib = (labels_arr == GIBBERISH).mean(1)
    ok = [k for k in range(len(scale_factors)) if gib[k] <= MAX_GIBBERISH]
    lift = max((rate[k] - rate[0] for k in ok), default=float("nan"))
    # fitted range: the scales up to the last one still below the gibberish limit (scale 0 always included)
    last = max(ok) if ok else 0
    fit_scales = np.asarray(scale_factors[: last + 1], dtype=float)
    score_arr = np.array(scores).T[:, : last + 1]  # (n, n_fit)
    if len(fit_scales) >= 3:
        st = fit_steerability(fit_scales, score_arr)
        sd, se = float(st.slope.std(ddof=1)), float(np.nanmean(st.slope_se))
        geo = geometry_correlation(cyl, st.slope, n_permutations=n_permutations)
        rising = float((st.slope > 0).mean())
        slopes = st.slope.tolist()
    else:
        sd = se = rising = float("nan")
        geo = {"r": float("nan"), "p_value": float("nan"), "n": 0, "dropped": 0}
        slopes = []
    headroom = bool(lift >= MIN_LIFT and sd >= SD_OVER_SE * se)
    return {
        "concept": spec.name,
        "n samples": len(spec.prompts),
        "axis norm": axis_norm,
        "cos theta (mean, sd)": [float(cyl.cos.mean()), float(cyl.cos.std())],
        "concept rate by scale": rate.tolist(),
        "gibberish share by scale": gib.tolist(),
        "gibberish threshold (perplexity)": threshold,
        "lift before gibberish": float(lift),
        "fitted scales": fit_scales.tolist(),
        "steerability sd": sd,
        "mean slope standard error": se,
        "headroom": headroom,
        "rising share": rising,
        "geometry r": geo["r"],
        "geometry p": geo["p_value"],
        "geometry n": geo["n"],
        "passed": bool(headroom and rising > 0.5 and geo["r"] > 0 and geo["p_value"] < 0.05),
        "slopes": slopes,
        "examples": {f"{c:g}": texts[k][:3] for k, c in enumerate(scale_factors)},
    }


def tinylm_spec(name: str, n: int, seed: int) -> ConceptSpec:
    """``n`` contrastive pairs for family ``name`` of the tiny language: the same question and the same
    sentence frame cut before its last noun (where the next word depends on the topic), the first noun a
    neutral one in the negative response and one of the family's words in the positive one. The questions
    cycle through backgrounds: a neutral question noun, then a word of each other family in turn."""
    from icml_interp_experiments.crh import tinylm as T

    rng = np.random.default_rng(seed)
    others = [f for f in T.FAMILIES if f != name]
    prompts, pos, neg = [], [], []
    for i in range(n):
        background = i % (len(others) + 1)
        pool = T.QUESTION_NOUNS if background == 0 else T.FAMILIES[others[background - 1]]
        q = T.question(rng, pool[int(rng.integers(len(pool)))])
        head = ["user", ":", *q, "?", "assistant", ":"]
        without = T.sentence(rng, None)[:-2]  # up to "... and the" / "... with my"
        fam = T.FAMILIES[name]
        with_ = [fam[int(rng.integers(len(fam)))] if w in T.NEUTRAL_NOUNS else w for w in without]
        prompts.append(T.encode(head))
        pos.append(T.encode(head + with_))
        neg.append(T.encode(head + without))
    return ConceptSpec(name, T.FAMILIES[name], prompts, pos, neg)
