"""Benchmark ``proteus-viterbi``: weights per second of Viterbi quantization on CPU at L = 8, 10, 12.

K = 2, V = 1, T = 256, the ``mulbal`` code. Two modes: ``tail-biting`` (:func:`quantize_tiles`, two
Viterbi passes, the encoder Proteus uses) and ``free`` (one unconstrained pass). Correctness first: the
tail-biting states must be tail-biting paths, and both results must beat the 2-bit Lloyd-Max MSE; the
rate is left empty otherwise. Each configuration runs with torch's default threads (since 2026-12-04 as
many Viterbi worker processes, see ``icml_compress.trellis.viterbi``) and with one thread, each timed
after one warm-up call. The 1-minute load average is recorded with each row.
"""

from __future__ import annotations

import itertools
import os
import time

import torch

from icml_compress.proteus.codes import make_code
from icml_compress.proteus.gaussian import LLOYD_MAX_MSE
from icml_compress.trellis import BitshiftTrellis, quantize_tiles

TILES = {"quick": 256, "full": 1024}
LS = (8, 10, 12)
TARGET_L10 = 100_000  # weights per second at L = 10 (the target on 2 cores)


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    n = TILES[budget]
    x = torch.randn(n, 256, generator=torch.Generator().manual_seed(seed))
    rows = []
    default_threads = torch.get_num_threads()
    for L, threads, mode in itertools.product(
        LS, sorted({default_threads, 1}, reverse=True), ("tail-biting", "free")
    ):
        trellis = BitshiftTrellis(L, 2, 1, 256)
        values = make_code("mulbal", L).values()
        torch.set_num_threads(threads)
        try:  # a warm-up call first: the first call on several threads starts the Viterbi's worker processes
            quantize_tiles(x, values, trellis, tail_biting=mode == "tail-biting")
            start = time.perf_counter()
            states = quantize_tiles(x, values, trellis, tail_biting=mode == "tail-biting")
            seconds = time.perf_counter() - start
        finally:
            torch.set_num_threads(default_threads)
        mse = (values[states, 0] - x).pow(2).mean().item()
        correct = mse < LLOYD_MAX_MSE[2] and (mode == "free" or bool(trellis.is_tail_biting(states).all()))
        rate = x.numel() / seconds
        rows.append(
            {
                "L": L,
                "K": 2,
                "V": 1,
                "T": 256,
                "mode": mode,
                "tiles": n,
                "threads": threads,
                "seconds": round(seconds, 3),
                "mse": round(mse, 5),
                "correct": correct,
                "weights_per_s": round(rate) if correct else None,
                "meets_100k_at_L10": (rate >= TARGET_L10) if (L == 10 and correct) else None,
                "load_avg_1min": round(os.getloadavg()[0], 2),
            }
        )
    return rows
