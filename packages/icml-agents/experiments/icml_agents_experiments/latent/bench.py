"""Benchmark ``lt-tuning-decode``: generated positions per second of each latent loop against explicit greedy
decoding, on one tiny untied Llama (random weights: the loops' cost does not depend on what was learned).

Every method generates the same number of positions (``positions``) for a batch of 16 prompts of 24 tokens:
explicit greedy decoding; Coconut (its ``positions`` thoughts in the prompt filled by the multi-pass forward,
then one token); Soft-Thinking (every position a top-8 concept token); LT-Tuning's fused thoughts (every
position a Context-Prediction-Fusion thought; the switch forced to stay latent). Median over the timed
repeats after a warm-up; ``to_explicit`` is the ratio of positions per second to explicit decoding's, measured
in the same run. On a GPU the model is moved there first.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from icml_agents.latent import ConfidenceSwitch, ContextPredictionFusion, HiddenThought, SoftThought, generate
from icml_agents_experiments.latent.tasks import BOT, EOS, EOT, LAT, PAD
from icml_agents_experiments.latent.train import Sizes, build_model

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"warm": 1, "timed": 3, "positions": 16, "hidden": 64},
    "full": {"warm": 2, "timed": 10, "positions": 32, "hidden": 128},
}
BATCH, PROMPT = 16, 24


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    torch.set_num_threads(min(2, torch.get_num_threads()))  # 2, or fewer where the process has fewer
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sizes = Sizes(hidden=cfg["hidden"], layers=4)
    model = build_model(sizes, tied=False, seed=seed).to(device).eval()
    n = cfg["positions"]
    g = torch.Generator().manual_seed(seed)
    vocab = int(model.get_input_embeddings().weight.shape[0])
    prompts = torch.randint(LAT + 1, vocab, (BATCH, PROMPT), generator=g).tolist()
    fusion = ContextPredictionFusion(sizes.hidden, top_k=8).to(device)
    stay = ConfidenceSwitch(enter_below=None, exit_above=None, max_latent=n, start_latent=True)
    never_stop: dict[str, Any] = {"eos_token_id": EOS, "pad_token_id": PAD}
    # each call returns the positions it generated (explicit decoding may stop early at the end token;
    # Coconut's <bot> and slots in the prompt count)
    methods: dict[str, Any] = {
        "explicit (greedy)": lambda: sum(
            generate(model, prompts, max_new_tokens=n, **never_stop).n_positions
        ),
        "coconut": lambda: (
            BATCH * (n + 1)
            + sum(
                generate(
                    model,
                    [p + [BOT] + [LAT] * n for p in prompts],
                    thought=HiddenThought(),
                    latent_token_id=LAT,
                    max_new_tokens=1,
                    **never_stop,
                ).n_positions
            )
        ),
        "soft-thinking": lambda: sum(
            generate(
                model, prompts, thought=SoftThought(top_k=8), switch=stay, max_new_tokens=n, **never_stop
            ).n_positions
        ),
        "lt-tuning (fusion)": lambda: sum(
            generate(
                model,
                prompts,
                thought=fusion,
                switch=stay,
                bot_token_id=BOT,
                eot_token_id=EOT,
                latent_token_id=LAT,
                max_new_tokens=n,
                **never_stop,
            ).n_positions
        ),
    }
    rates: dict[str, list[float]] = {}
    for name, call in methods.items():
        rates[name] = []
        for i in range(cfg["warm"] + cfg["timed"]):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.no_grad():
                positions = call()
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= cfg["warm"]:
                rates[name].append(positions / (time.perf_counter() - start))
    rate = {name: statistics.median(r) for name, r in rates.items()}
    base = rate["explicit (greedy)"]
    return [
        {
            "method": name,
            "device": device,
            "positions_per_second": round(r, 1),
            "to_explicit": round(r / base, 3),
            "batch": BATCH,
            "positions": n,
            "repeats_timed": len(rates[name]),
        }
        for name, r in rate.items()
    ]
