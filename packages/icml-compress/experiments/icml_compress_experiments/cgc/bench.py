"""Benchmark ``cgc-latency``: forward latency of SmolLM2-135M compressed by per-layer SVD, Basis Sharing and
CGC, against the original model measured in the same run (ratios of medians).

Each compressed model computes every Linear as ``(x B) C``: sharing a basis saves parameters, not work, and
at 20-30% removed each low-rank pair of products costs about as much as the dense product it replaces, so
no speed-up is expected on a CPU; the benchmark reports what it measures. CGC uses the ``overlap``
surrogate cost here (its groups only change the ranks, which is what latency sees; the exact costs belong
to the reproduction). Two timings per model, interleaved with the original's: a 256-token prefill
(batch 1) and one decode step after a 255-token cache (batch 1). Medians over ``repeats`` with the
machine's torch threads; the 1-minute load average is recorded.
"""

from __future__ import annotations

import copy
import os
import statistics
import time

import torch

from icml_compress.cgc import ShareConfig, collect_statistics, compress_model, sharing_record

REPEATS = {"quick": 5, "full": 21}
RATIOS = {"quick": (0.3,), "full": (0.2, 0.3)}
SEQ = 256


@torch.no_grad()
def _prefill(model, ids) -> float:
    t0 = time.perf_counter()
    model(ids)
    return time.perf_counter() - t0


@torch.no_grad()
def _decode(model, ids) -> float:
    out = model(ids[:, :-1], use_cache=True)
    t0 = time.perf_counter()
    model(ids[:, -1:], past_key_values=out.past_key_values, use_cache=True)
    return time.perf_counter() - t0


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    from icml_compress_experiments.quantize.repro import corpus_ids
    from icml_tools.assets import smollm2

    reference, tokenizer = smollm2()
    calib_ids, held_ids = corpus_ids(tokenizer)
    g = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, held_ids.numel() - SEQ, (1,), generator=g))
    ids = held_ids[start : start + SEQ].unsqueeze(0)
    stats = collect_statistics(
        reference, calib_ids, config=ShareConfig(ratio=0.2, n_calibration=8), progress=False
    )
    rows = []
    for ratio in RATIOS[budget]:
        for method in ("svd", "basis-sharing", "cgc"):
            cfg = ShareConfig(
                ratio=ratio,
                method=method,
                max_group=2 if method == "basis-sharing" else 4,
                cost="overlap",
                seed=seed,
            )
            model = compress_model(copy.deepcopy(reference), stats, cfg, progress=False).eval()
            times: dict[str, list[float]] = {"prefill": [], "decode": [], "prefill_ref": [], "decode_ref": []}
            for _ in range(REPEATS[budget]):
                times["prefill_ref"].append(_prefill(reference, ids))
                times["prefill"].append(_prefill(model, ids))
                times["decode_ref"].append(_decode(reference, ids))
                times["decode"].append(_decode(model, ids))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append(
                {
                    "ratio": ratio,
                    "method": method,
                    "removed_fraction": round(sharing_record(model)["parameters"]["removed_fraction"], 4),
                    "prefill_ms": round(1e3 * med["prefill"], 2),
                    "prefill_original_ms": round(1e3 * med["prefill_ref"], 2),
                    "prefill_ratio": round(med["prefill"] / med["prefill_ref"], 3),
                    "decode_ms": round(1e3 * med["decode"], 3),
                    "decode_original_ms": round(1e3 * med["decode_ref"], 3),
                    "decode_ratio": round(med["decode"] / med["decode_ref"], 3),
                    "repeats": REPEATS[budget],
                    "threads": torch.get_num_threads(),
                    "load_avg_1min": round(os.getloadavg()[0], 2),
                }
            )
            del model
    return rows
