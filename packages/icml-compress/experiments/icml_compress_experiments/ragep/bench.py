"""Benchmark ``ragep-calibration-memory``: peak memory of RaGEP's streaming calibration (``calibrate(...,
route_all=True)``: every expert measured on every token) against holding all activations, the way an
observer that stores each MoE layer's token inputs and every expert's gate-weighted outputs and reduces them
at the end would, on the same model and tokens, measured in the same run.

The model is the reproduction's tiny Mixtral (random weights: memory does not depend on training). Each mode
runs in a fresh Python process whose peak resident set (``VmHWM``) is read at its end; a process that does
everything but calibrate (imports, model, token ids) gives the base line, and rows report the peak above it
and the ratio hold-all / streaming. Linux and macOS (``resource``).
"""

from __future__ import annotations

import json
import subprocess
import sys

from icml_compress_experiments.merge.bench import PEAK

SEQUENCES = {"quick": (256,), "full": (256, 1024)}

_SETUP = (
    PEAK
    + """
import json, sys, time
import torch
from icml_compress.ragep import calibrate, find_moe_layers, route
from icml_compress_experiments.ragep.testbed import TestbedConfig, new_model, make_corpus
torch.set_num_threads(1)
cfg = TestbedConfig()
model = new_model(cfg).eval()
ids = make_corpus(int(sys.argv[2]), 7, seq_len=cfg.seq_len).ids
mode = sys.argv[1]
t = time.perf_counter()
"""
)
_MODES = {
    "base line": "pass",
    "streaming": "calibrate(model, ids, batch_size=32, route_all=True)",
    "hold all": """
held = {layer.name: [] for layer in find_moe_layers(model)}
def hook(layer):
    def fn(module, args):
        x = args[0].reshape(-1, args[0].shape[-1])
        probs = route(layer, x)[0]
        held[layer.name].append((x.clone(), probs.T[:, :, None] * layer.expert_outputs(x)))  # (E, tokens, hidden)
    return fn
handles = [layer.block.register_forward_pre_hook(hook(layer)) for layer in find_moe_layers(model)]
with torch.no_grad():
    for i in range(0, len(ids), 32):
        model(ids[i : i + 32], use_cache=False)
for name, parts in held.items():
    outputs = torch.cat([p[1] for p in parts], dim=1).double()
    grams = torch.einsum("etd,etf->edf", outputs, outputs)
""",
}


def _child(mode: str, sequences: int) -> dict:
    code = (
        _SETUP + _MODES[mode] + '\nprint(json.dumps({"seconds": time.perf_counter() - t, "peak": peak()}))\n'
    )
    out = subprocess.run(
        [sys.executable, "-c", code, mode, str(sequences)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    del seed  # deterministic: fixed model and tokens
    from icml_compress_experiments.ragep.testbed import TestbedConfig

    cfg = TestbedConfig()
    rows = []
    for n in SEQUENCES[budget]:
        base = _child("base line", n)["peak"]
        got = {mode: _child(mode, n) for mode in ("streaming", "hold all")}
        above = {mode: max(r["peak"] - base, 1) for mode, r in got.items()}
        for mode, r in got.items():
            rows.append(
                {
                    "mode": mode,
                    "tokens": n * cfg.seq_len,
                    "seconds": round(r["seconds"], 2),
                    "peak_rss_mb": round(r["peak"] / 2**20, 1),
                    "above_base_line_mb": round(above[mode] / 2**20, 1),
                    "hold_all_to_streaming": round(above["hold all"] / above["streaming"], 2),
                }
            )
    return rows
