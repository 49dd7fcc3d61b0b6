"""Benchmark ``ca-spectra`` (``uv run icml-bench --only ca-spectra``): the cost of exact Boolean spectra.

Rows:

- ``spectrum-14``: the Fourier coefficients of 16 random Boolean functions of 14 inputs by
  ``fourier_coefficients`` (one ``icml_kernels.fwht``) against the dense product with the explicit
  ``2^14 x 2^14`` Hadamard matrix (float32, 1 GiB, built once outside the timing), median milliseconds
  and the ratio; both are checked against each other first (a wrong one gets no ratio).
- ``spectrum-25``: the exact spectrum of Life's 2-step map (25 inputs) in float32 and float64: building the
  truth table, the transform, and the peak resident memory of a fresh process doing both (each measured in
  its own subprocess, so earlier rows do not raise the high-water mark: ``VmHWM``), next to the process's memory
  after importing torch.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from icml_kernels import hadamard_matrix
from icml_theory.boolean import fourier_coefficients

REPEATS = {"quick": 5, "full": 15}
FUNCTIONS = 16


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _peak_rss_mib() -> float:
    """This process's peak resident memory: ``VmHWM`` of ``/proc/self/status`` (reset at exec, unlike
    ``ru_maxrss``, which keeps the forking parent's peak on Linux), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _spectrum_child(dtype_name: str) -> None:
    """Run in a subprocess: print JSON with the seconds and the peak memory of one exact 25-input spectrum."""
    from icml_theory.ca import Rule, as_pm1, local_table

    dtype = getattr(torch, dtype_name)
    fourier_coefficients(torch.ones(8))  # load the op (the first call imports torch's compiler stack)
    base_mib = _peak_rss_mib()
    start = time.perf_counter()
    table = local_table(Rule.life_like("B3/S23"), 2)
    built = time.perf_counter()
    coeffs = fourier_coefficients(as_pm1(table), dtype=dtype)
    done = time.perf_counter()
    peak_mib = _peak_rss_mib()
    print(
        json.dumps(
            {
                "table_s": built - start,
                "transform_s": done - built,
                "peak_mib": peak_mib,
                "base_mib": base_mib,
                "parseval": float(coeffs.double().pow(2).sum()),
            }
        )
    )


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    rows: list[dict] = []
    repeats = REPEATS[budget]
    gen = torch.Generator().manual_seed(seed)
    tables = torch.where(torch.rand(FUNCTIONS, 1 << 14, generator=gen) < 0.5, -1.0, 1.0)  # (16, 2^14)
    h = hadamard_matrix(1 << 14, torch.float32) / (1 << 14)  # (2^14, 2^14)
    fast = fourier_coefficients(tables, dtype=torch.float32)
    dense = tables @ h
    correct = bool((fast - dense).abs().max() <= 1e-6)
    t_fwht = _median_ms(lambda: fourier_coefficients(tables, dtype=torch.float32), repeats)
    t_dense = _median_ms(lambda h=h: tables @ h, repeats)
    common = {"case": "spectrum-14", "inputs": 14, "functions": FUNCTIONS, "correct": correct}
    rows.append(
        {
            **common,
            "impl": "fwht",
            "median_ms": round(t_fwht, 3),
            "speedup_vs_dense": round(t_dense / t_fwht, 1) if correct else None,
        }
    )
    rows.append(
        {**common, "impl": "hadamard-matmul", "median_ms": round(t_dense, 3), "speedup_vs_dense": 1.0}
    )
    del h, dense

    for dtype_name in ("float32", "float64"):
        out = subprocess.run(
            [sys.executable, "-m", "icml_theory_experiments.ca.bench", dtype_name],
            check=True,
            capture_output=True,
            text=True,
        )
        child = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "case": "spectrum-25",
                "inputs": 25,
                "impl": f"local_table + fwht {dtype_name}",
                "table_s": round(child["table_s"], 3),
                "transform_s": round(child["transform_s"], 3),
                "peak_rss_mib": round(child["peak_mib"]),
                "rss_after_imports_mib": round(child["base_mib"]),
                "correct": abs(child["parseval"] - 1.0) < 1e-9,  # a ±1 function has sum f^(S)^2 = 1
            }
        )
    return rows


if __name__ == "__main__":
    _spectrum_child(sys.argv[1])
