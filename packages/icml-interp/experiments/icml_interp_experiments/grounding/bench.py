"""Benchmark ``grounding-analysis``: time per image of each Grounding-ID analysis against one plain forward
pass of the same model on the same batch (the ratio is the cost of the analysis in forward passes).

The model is the ``grounding-ids-toy`` testbed's tiny LLaVA (:mod:`.vlm`, random weights: the cost does not
depend on them) on cluttered scenes (10 objects) with cues; the analyses are :func:`~icml_interp.grounding.binding_by_layer`
(every layer's residual stream cached), :func:`~icml_interp.grounding.attention_mass` (every layer's attention
pattern, through the hooks' eager attention) and :func:`~icml_interp.grounding.swap_test` (a source run, a
clean run and a patched run). Medians over repeats, the methods interleaved within each repeat.
"""

from __future__ import annotations

import statistics
import time

import torch

BUDGETS = {"quick": {"images": 16, "repeats": 3}, "full": {"images": 64, "repeats": 7}}


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    from icml_interp.grounding import attention_mass, binding_by_layer, swap_test
    from icml_interp.hooks import HookedModel
    from icml_interp_experiments.grounding.scenes import (
        SYMBOL_IDS,
        batch,
        exchanged,
        question_layouts,
        scenes,
        touching_patches,
    )
    from icml_interp_experiments.grounding.vlm import Config, make_model

    cfg = BUDGETS[budget]
    model = HookedModel(make_model(Config(), seed).eval())
    sc = scenes(cfg["images"], 800 + seed, 10)
    b = batch(sc, "cue")
    source = batch([exchanged(s, (s.target + 1) % len(s.objects)) for s in sc], "cue")
    inputs, layouts = b.inputs(), question_layouts(b)
    positions = [
        [1 + i for i in sorted({p for c in (s.answer, s.objects[(s.target + 1) % len(s.objects)][2])
                                for p in touching_patches(c)})]
        for s in sc
    ]  # fmt: skip

    @torch.no_grad()
    def forward():
        model(**inputs)

    methods = {
        "plain forward": forward,
        "binding_by_layer": lambda: binding_by_layer(model, inputs, layouts),
        "attention_mass": lambda: attention_mass(model, inputs, layouts),
        "swap_test": lambda: swap_test(model, inputs, source.inputs(), positions, layer=2,
                                       answer_tokens=SYMBOL_IDS, source_answers=source.answers),
    }  # fmt: skip
    for fn in methods.values():  # warm-up
        fn()
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(cfg["repeats"]):
        for name, fn in methods.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    medians = {m: statistics.median(v) for m, v in seconds.items()}
    return [
        {"method": m, "images": cfg["images"], "median_seconds_per_image": medians[m] / cfg["images"],
         "ratio_to_forward": medians[m] / medians["plain forward"], "repeats": cfg["repeats"],
         "threads": torch.get_num_threads()}
        for m in methods
    ]  # fmt: skip
