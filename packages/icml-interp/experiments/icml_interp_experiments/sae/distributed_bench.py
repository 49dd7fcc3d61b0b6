"""Benchmark ``sae-distributed``: TopK SAE training with ``train_sae(..., distributed=True)`` on two torchrun
processes of one thread each against one process of two threads (``distributed=False``), on the same two
cores; and against one process of one thread, since on shared (oversubscribed) cores two OpenMP threads can
be slower than one.

Each configuration is launched as ``python -m torch.distributed.run --standalone --nproc-per-node N -m
icml_interp_experiments.sae.distributed_bench ...`` (this module is also the worker; gloo backend, CPU).
Data: Gaussian tokens (the speed does not depend on their content) generated from the seed; the global batch
of step ``s`` is the same in both runs (rank ``r`` of ``N`` reads rows ``[r * b, (r + 1) * b)`` of it).

Reported per configuration, medians over the repeats: ``launch_seconds`` (the whole torchrun command:
process start, imports, process group, data, training), ``train_seconds`` (``TrainLog.seconds``: the training
steps only, initialization excluded), ``tokens_per_second`` (global tokens over ``train_seconds``) and the
speed-ups over one process of two threads on both times (and over one thread on the training time).
Correctness first: every layout's SAE must match the baseline's (largest parameter difference relative to
each tensor's largest entry, ``max_param_rel_diff``, at most ``PARAM_RTOL``, the tolerance that
``tests/test_sae_distributed.py`` justifies); the speed-ups are left empty otherwise. The machine's load
average is recorded, since other processes share the cores.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from icml_interp.sae import ActivationSource, SAEConfig, train_sae

PARAM_RTOL = 1e-3
# (processes, threads each): one process on both cores (the baseline), one thread alone, two processes
LAYOUTS = [(1, 2), (1, 1), (2, 1)]
BUDGETS = {
    "quick": {"d_in": 64, "d_sae": 1024, "k": 16, "batch_size": 1024, "steps": 12, "repeats": 1},
    "full": {"d_in": 256, "d_sae": 4096, "k": 32, "batch_size": 2048, "steps": 16, "repeats": 3},
}


def _config(spec: dict, seed: int) -> SAEConfig:
    return SAEConfig(
        d_in=spec["d_in"],
        d_sae=spec["d_sae"],
        architecture="topk",
        k=spec["k"],
        batch_size=spec["batch_size"],
        total_tokens=spec["batch_size"] * spec["steps"],
        dead_steps=4,
        seed=seed,
    )


def worker(out: str, spec: dict, seed: int, threads: int) -> None:
    """One torchrun process: train on this rank's rows of every global batch; rank 0 saves the result."""
    import torch.distributed as dist

    torch.set_num_threads(threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    cfg = _config(spec, seed)
    tokens = torch.randn(cfg.total_tokens, cfg.d_in, generator=torch.Generator().manual_seed(seed))
    local = tokens.reshape(cfg.steps, world, -1, cfg.d_in)[:, rank].reshape(-1, cfg.d_in)
    b = cfg.batch_size // world
    src = ActivationSource.from_activations(local, shuffle=False, buffer_tokens=2 * b, chunk_tokens=b)
    sae, log = train_sae(src, cfg, progress=False, distributed=distributed)
    if rank == 0:
        torch.save({"params": sae.state_dict(), "seconds": log.seconds, "steps": len(log.loss)}, out)
    if distributed:
        dist.destroy_process_group()


def _launch(nproc: int, threads: int, spec: dict, seed: int, out: Path) -> tuple[float, dict]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        __name__,
        str(out),
        json.dumps(spec),
        str(seed),
        str(threads),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"torchrun --nproc-per-node {nproc} failed:\n{run.stderr[-4000:]}")
    return seconds, torch.load(out, weights_only=False)


def _max_rel_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    """One row per launch layout (processes x threads): 1 x 2 (the baseline), 1 x 1 and 2 x 1."""
    spec = {k: v for k, v in BUDGETS[budget].items() if k != "repeats"}
    repeats = BUDGETS[budget]["repeats"]
    load_before = os.getloadavg()[0]
    timings: dict[tuple[int, int], list[tuple[float, float]]] = {layout: [] for layout in LAYOUTS}
    params: dict[tuple[int, int], dict] = {}
    with tempfile.TemporaryDirectory(prefix="sae-distributed-") as folder:
        for repeat in range(repeats):
            for nproc, threads in LAYOUTS:  # interleaved, so that a load change hits every layout alike
                out = Path(folder) / f"{nproc}x{threads}-{repeat}.pt"
                launch, result = _launch(nproc, threads, spec, seed, out)
                timings[nproc, threads].append((launch, result["seconds"]))
                params[nproc, threads] = result["params"]
    baseline = LAYOUTS[0]
    diffs = {layout: _max_rel_diff(params[layout], params[baseline]) for layout in LAYOUTS}
    correct = all(d <= PARAM_RTOL for d in diffs.values())
    medians = {
        layout: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
        for layout, ts in timings.items()
    }
    tokens = spec["batch_size"] * spec["steps"]
    rows = []
    for nproc, threads in LAYOUTS:
        launch, train = medians[nproc, threads]
        rows.append(
            {
                "architecture": "topk",
                **spec,
                "processes": nproc,
                "threads_per_process": threads,
                "repeats": repeats,
                "launch_seconds": launch,
                "train_seconds": train,
                "tokens_per_second": tokens / train,
                # speed-ups over one process of two threads (the same cores) and of one thread
                "speedup_train": medians[baseline][1] / train if correct else None,
                "speedup_launch": medians[baseline][0] / launch if correct else None,
                "speedup_train_vs_1_thread": medians[1, 1][1] / train if correct else None,
                "max_param_rel_diff": diffs[nproc, threads],
                "correct": correct,
                "load_1min_before": load_before,
                "load_1min_after": os.getloadavg()[0],
            }
        )
    return rows


if __name__ == "__main__":
    worker(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
