"""Benchmark ``proteus-distributed``: ``quantize_model(..., distributed=True)`` on 2 processes of 1 thread
against 1 process of 2 threads, the same cores, both under ``torchrun`` (gloo, CPU).

A random Llama (seeded: every rank builds the same weights; :data:`BUDGETS` gives its shape) is quantized
with Proteus (compensation on) from random calibration token ids. Each measurement is one ``torchrun``
command (``python -m torch.distributed.run --standalone --nproc-per-node N`` this module ``--worker``,
``OMP_NUM_THREADS`` set): its wall time (process start, imports and model building included) and the
seconds of the ``quantize_model`` call itself on rank 0 (after a barrier, until every rank has the whole
model). Modes alternate within each repeat; medians over repeats; speed-ups are 1 process / 2 processes.

Correctness first: every run's SHA-256 over every tensor of the quantized model must equal the first
1-process run's; the speed-ups are left empty otherwise. The 1-minute load average is recorded (this
machine's 2 cores may be shared).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.distill import packed_hash
from icml_compress.quantize.model import bytes_per_token, quantize_model

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {
        "model": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
        },
        "config": {"L": 8, "T": 32, "n_calibration": 4, "seq_len": 32, "n_candidates": 2, "select_rows": 8},
        "repeats": 1,
    },
    "full": {
        "model": {
            "hidden_size": 384,
            "intermediate_size": 1024,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
        },
        "config": {"L": 10, "T": 64, "n_calibration": 16, "seq_len": 128},
        "repeats": 3,
    },
}
VOCAB = 1024
#: (processes, threads each): the same 2 cores
MODES = ((1, 2), (2, 1))
MODULE = "icml_compress_experiments.quantize.distributed_bench"


def build(budget: str, seed: int):
    """``(model, token ids, config)`` of ``budget``: the same on every rank."""
    import transformers

    b = BUDGETS[budget]
    shape = b["model"]
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        num_key_value_heads=shape["num_attention_heads"] // 2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        **shape,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    c = b["config"]
    ids = torch.randint(
        0, VOCAB, (c["n_calibration"] * c["seq_len"],), generator=torch.Generator().manual_seed(seed)
    )
    return model, ids, QuantConfig(method="proteus", compensation=True, seed=seed, **c)


def tensors_sha256(model: torch.nn.Module) -> str:
    """One SHA-256 over every tensor of ``model`` (names, dtypes, shapes and bytes), in state-dict order."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def worker(out: Path, budget: str, seed: int) -> None:
    """One rank of a measured ``torchrun`` command; rank 0 writes ``out`` (JSON)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model, ids, config = build(budget, seed)
    dist.barrier()
    t0 = time.perf_counter()
    quantize_model(model, config, ids, progress=False, distributed=True)
    seconds = time.perf_counter() - t0
    if dist.get_rank() == 0:
        info = model.icml_quantization["distributed"]
        out.write_text(
            json.dumps(
                {
                    "quantize_s": seconds,
                    "packed_hash": packed_hash(model),
                    "tensors_sha256": tensors_sha256(model),
                    "layers_per_rank": info["layers_per_rank"],
                    "weights": bytes_per_token(model)["quantized_weights"],
                }
            )
        )
    dist.destroy_process_group()


def launch(nproc: int, threads: int, budget: str, seed: int, out: Path) -> dict:
    """One ``torchrun`` command; its rank-0 JSON plus ``wall_s``."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        MODULE,  # not __name__: "__main__" when this module runs as a script
        "--worker",
        str(out),
        "--budget",
        budget,
        "--seed",
        str(seed),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"torchrun with {nproc} processes failed:\n{done.stderr[-4000:]}")
    return {**json.loads(out.read_text()), "wall_s": wall}


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    b = BUDGETS[budget]
    runs: dict[tuple[int, int], list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="proteus-distributed-") as tmp:
        for repeat in range(b["repeats"]):
            for nproc, threads in MODES:
                out = Path(tmp) / f"{nproc}x{threads}-{repeat}.json"
                runs[(nproc, threads)].append(launch(nproc, threads, budget, seed, out))
    reference = runs[MODES[0]][0]["tensors_sha256"]
    equal = all(r["tensors_sha256"] == reference for rs in runs.values() for r in rs)
    base = {k: statistics.median(r[k] for r in runs[MODES[0]]) for k in ("wall_s", "quantize_s")}
    shape = b["model"]
    rows = []
    for (nproc, threads), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "quantize_s")}
        rows.append(
            {
                "model": (
                    f"random Llama, hidden {shape['hidden_size']}, MLP {shape['intermediate_size']}, "
                    f"{shape['num_hidden_layers']} blocks"
                ),
                "quantized_weights": rs[0]["weights"],
                "config": "proteus L={L} T={T}, {n_calibration} x {seq_len} tokens".format(**b["config"]),
                "processes": nproc,
                "threads_each": threads,
                "repeats": len(rs),
                "median_wall_s": round(med["wall_s"], 2),
                "median_quantize_s": round(med["quantize_s"], 2),
                "layers_per_rank": "/".join(map(str, rs[0]["layers_per_rank"])),
                "tensors_sha256": rs[0]["tensors_sha256"][:16],
                "equal_to_one_process": equal,
                "speedup_wall": round(base["wall_s"] / med["wall_s"], 3) if equal else None,
                "speedup_quantize": round(base["quantize_s"] / med["quantize_s"], 3) if equal else None,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m icml_compress_experiments.quantize.distributed_bench``: the benchmark (``--out FILE``:
    its rows as JSON), or with ``--worker OUT`` one rank of a measured ``torchrun`` command."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.budget, args.seed)
        return 0
    rows = run(args.budget, args.seed)
    for row in rows:
        print(", ".join(f"{k}={v}" for k, v in row.items()))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
