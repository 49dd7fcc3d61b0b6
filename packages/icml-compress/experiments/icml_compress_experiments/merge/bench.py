"""Benchmark ``merge-memory``: peak memory of SpeechCombine's streaming merge (``combine_checkpoints``) of
SmolLM2-135M-sized checkpoints, against one model's size, beside the in-memory ``combine`` of the same
models measured in the same run.

The three checkpoints are made here from the bundled SmolLM2 (float32, 538 MB): the base is SmolLM2, the
instruct model SmolLM2 plus small noise, the CPT model SmolLM2 with 64 new vocabulary rows plus noise. Each
merge runs in a fresh Python process, whose peak resident set (``VmHWM``) is read at its end; a process
that does everything but merge (imports, reading the headers: ``dry_run=True``) gives the base line, and the
ratio is (peak - base line) / the CPT checkpoint's bytes. Linux and macOS (``resource``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SHARDS = {"quick": (128 << 20,), "full": (64 << 20, 128 << 20, 1 << 30)}
NEW_ROWS = 64

PEAK = """
import resource, sys
def peak():
    # the high-water mark of this process's own memory (VmHWM, reset by exec); ru_maxrss on Linux also counts
    # the parent's resident set at fork time, so it is used only where /proc is missing (macOS: bytes)
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""
_STREAM = (
    PEAK
    + """
import json, sys, time
from icml_compress.merge import combine_checkpoints
cpt, inst, base, out, shard, dry = sys.argv[1:7]
t = time.perf_counter()
combine_checkpoints(cpt, inst, base, out, lam=1.0, shard_bytes=int(shard), dry_run=dry == "1")
print(json.dumps({"seconds": time.perf_counter() - t, "peak": peak()}))
"""
)
_MEMORY = (
    PEAK
    + """
import json, sys, time
from transformers import AutoModelForCausalLM
from icml_compress.merge import combine
t = time.perf_counter()
cpt, inst, base = (AutoModelForCausalLM.from_pretrained(p) for p in sys.argv[1:4])
combine(cpt, inst, base, lam=1.0, inplace=True)
print(json.dumps({"seconds": time.perf_counter() - t, "peak": peak()}))
"""
)


def _child(code: str, *args) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, check=True
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return {"seconds": doc["seconds"], "peak": doc["peak"]}


def make_checkpoints(root: Path, seed: int) -> dict[str, Path]:
    """Base, instruct and CPT directories of SmolLM2's size under ``root`` (see the module docstring)."""
    from safetensors.torch import load_file, save_file

    from icml_tools.assets import smollm2_dir

    src = smollm2_dir()
    state = load_file(str(src / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    gen = torch.Generator().manual_seed(seed)
    dirs = {}
    for name in ("base", "instruct", "cpt"):
        d = root / name
        d.mkdir()
        cfg = dict(config)
        if name == "base":
            os.symlink(src / "model.safetensors", d / "model.safetensors")
        else:
            tensors = {k: v + 1e-3 * torch.randn(v.shape, generator=gen) for k, v in state.items()}
            if name == "cpt":
                emb = "model.embed_tokens.weight"
                extra = 0.02 * torch.randn(NEW_ROWS, tensors[emb].shape[1], generator=gen)
                tensors[emb] = torch.cat([tensors[emb], extra])
                cfg["vocab_size"] = config["vocab_size"] + NEW_ROWS
            save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
            del tensors
        (d / "config.json").write_text(json.dumps(cfg))
        dirs[name] = d
    return dirs


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix="icml-merge-bench-"))
    try:
        d = make_checkpoints(root, seed)
        model_bytes = (d["cpt"] / "model.safetensors").stat().st_size
        args = (d["cpt"], d["instruct"], d["base"])
        base_line = _child(_STREAM, *args, root / "dry", 1 << 30, 1)["peak"]
        rows = []

        def row(mode: str, r: dict) -> dict:
            return {
                "mode": mode,
                "seconds": round(r["seconds"], 2),
                "peak_rss_mb": round(r["peak"] / 2**20, 1),
                "base_line_mb": round(base_line / 2**20, 1),
                "model_mb": round(model_bytes / 2**20, 1),
                "above_base_line_to_model": round((r["peak"] - base_line) / model_bytes, 3),
            }

        for shard in SHARDS[budget]:
            out = root / f"merged-{shard}"
            rows.append(row(f"streaming, shards <= {shard >> 20} MiB", _child(_STREAM, *args, out, shard, 0)))
            shutil.rmtree(out)
        rows.append(row("in memory (from_pretrained x 3, combine inplace)", _child(_MEMORY, *args)))
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)
