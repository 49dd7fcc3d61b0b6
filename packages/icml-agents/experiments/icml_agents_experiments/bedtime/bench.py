"""Benchmark ``bedtime-throughput``: items per second of each describer on BEDTime recognition items
(120-step series, ``evaluate(..., batch_size=64)``), against the feature describer measured in the same
run: random guesses, the feature describer, the three small networks of the reproduction (untrained
weights: the cost does not depend on them), a scripted language-model backend (scripted log-likelihoods)
and a tiny random-initialised Llama with SmolLM2's tokenizer (2 layers, hidden 64) through
:class:`~icml_agents.backends.HFLocalBackend`, both on the numeric text. Medians over repeats.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import torch

from icml_agents.backends import HFLocalBackend, ScriptedBackend
from icml_agents.bedtime import (
    BackendDescriber,
    FeatureDescriber,
    RandomDescriber,
    build_recognition,
    evaluate,
)
from icml_agents_experiments.bedtime.nets import PlotCNN, SeriesCNN, TextCNN

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"items": 64, "repeats": 2, "lm_items": 8},
    "full": {"items": 256, "repeats": 5, "lm_items": 32},
}


def _describers() -> dict[str, Any]:
    from transformers import AutoTokenizer

    from icml_tools.assets import smollm2_dir, tiny_llama

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    torch.manual_seed(0)
    scripted = ScriptedBackend(lambda request: "", logprobs=lambda prompt, cont: [-1.0] * len(cont.split()))
    return {
        "random": RandomDescriber(0),
        "feature describer": FeatureDescriber(),
        "1-D CNN (array)": SeriesCNN().eval(),
        "plot CNN (plot)": PlotCNN().eval(),
        "character CNN (text)": TextCNN().eval(),
        "scripted backend (text)": BackendDescriber(scripted, name="scripted"),
        "tiny random Llama (text)": BackendDescriber(
            HFLocalBackend(tiny_llama(vocab=len(tokenizer)), tokenizer, batch_size=16), name="tiny-llama"
        ),
    }


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    describers = _describers()
    rates = {}
    for name, describer in describers.items():
        n = cfg["lm_items"] if "Llama" in name else cfg["items"]
        items = build_recognition(n, seed)
        evaluate(describer, items[:8], batch_size=64)  # warm-up
        rates[name] = statistics.median(
            evaluate(describer, items, batch_size=64)["items_per_second"] for _ in range(cfg["repeats"])
        )
    base = rates["feature describer"]
    return [
        {
            "describer": name,
            "items_per_second": rate,
            "ratio to feature describer (medians)": rate / base,
            "items": cfg["lm_items"] if "Llama" in name else cfg["items"],
            "repeats": cfg["repeats"],
            "torch_threads": torch.get_num_threads(),
            "load_average_1min": load,
        }
        for name, rate in rates.items()
    ]
