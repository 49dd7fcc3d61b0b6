"""``quantize_model``: swap the Linear layers of a Hugging Face causal LM for quantized ones;
``save_quantized``/``load_quantized``: safetensors + a JSON config, atomic and exact.

Works on any model whose layers to quantize are ``nn.Linear`` (Llama, Qwen, Mistral, GPT-NeoX ...;
GPT-2's ``Conv1D`` is not ``nn.Linear`` and is left alone). ``lm_head`` is skipped by default
(``QuantConfig.skip``); embeddings are never touched.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import re
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from tqdm.auto import tqdm

from icml_compress.baselines.rtn import rtn_quantize
from icml_compress.proteus.codes import make_code
from icml_compress.quantize.calibration import collect_hessians, encode_texts, make_sequences, regularize
from icml_compress.quantize.compensate import compensate
from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.distill import distill, distillation_set, packed_hash
from icml_compress.quantize.incoherence import random_signs, rotate_hessian, rotate_weight
from icml_compress.quantize.ldlq import block_ldl, proxy_error
from icml_compress.quantize.linear import ProteusLinear, RTNLinear, module_bytes
from icml_compress.quantize.select import pool_code, select_candidate, trellis_quantize
from icml_compress.trellis import BitshiftTrellis
from icml_compress.validation import check_instance

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FORMAT = "icml-compress-quantized"
CONFIG_FILE, WEIGHTS_FILE = "quantization.json", "model.safetensors"
QUANTIZED = (ProteusLinear, RTNLinear)


def _block_index(name: str) -> int | None:
    m = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
    return None if m is None else int(m.group(1))


def find_linears(model: nn.Module, config: QuantConfig) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` layers ``quantize_model`` replaces (skip patterns and ``max_blocks`` applied)."""
    out = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or any(s in name for s in config.skip):
            continue
        if config.max_blocks is not None:
            b = _block_index(name)
            if b is None or b >= config.max_blocks:
                continue
        out[name] = mod
    return out


def set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Replace the submodule ``name`` (dotted) of ``model`` by ``new``."""
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def _check_model(model, config) -> dict[str, nn.Linear]:
    """The Linear layers to quantize of a valid ``model`` and ``config``."""
    check_instance(model, "model", nn.Module, "torch.nn.Module")
    check_instance(config, "config", QuantConfig)
    linears = find_linears(model, config)
    if not linears:
        raise ValueError(
            f"model has no nn.Linear layers to quantize (skip={list(config.skip)}, max_blocks={config.max_blocks})"
        )
    for name, lin in linears.items():
        if lin.weight.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"model weights must be float32, float16 or bfloat16; {name}.weight is {lin.weight.dtype}"
            )
    return linears


def quantize_linear_rtn(lin: nn.Linear, config: QuantConfig) -> RTNLinear:
    """RTN per group: ``bits``-bit codes, float16 scale and offset per group."""
    W = lin.weight.detach().float().cpu()
    q = rtn_quantize(W, config.bits, config.group_size)
    mod = RTNLinear(
        W.shape[1], W.shape[0], bits=config.bits, group_size=config.group_size, bias=lin.bias is not None
    )
    mod.set_codes(q.codes)
    mod.scale.copy_(q.scale.half())
    mod.offset.copy_(q.offset.half())
    if lin.bias is not None:
        assert mod.bias is not None  # built with bias=True
        mod.bias.data.copy_(lin.bias.detach().float().cpu())
    return mod


def quantize_linear_trellis(lin: nn.Linear, H: torch.Tensor, config: QuantConfig, name: str = "layer"):
    """Incoherence + block LDLQ + Viterbi (+ Proteus selection and compensation) of one layer.

    Returns ``(ProteusLinear, stats)``; ``H`` is the layer input's second moment ``(in, in)``.
    """
    W = lin.weight.detach().double().cpu()  # (m, n); quantization runs on the CPU
    m, n = W.shape
    if n % config.T:
        raise ValueError(f"T={config.T} must divide the input size of {name} ({n})")
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + zlib.crc32(name.encode()))
    su, sv = random_signs(n, gen).double(), random_signs(m, gen).double()
    Hreg = regularize(H, config.damping, f"H of {name}")
    Wr = rotate_weight(W, su, sv)
    Hr = rotate_hessian(Hreg, su)
    scale = Wr.pow(2).mean().sqrt().item() / config.scale_override
    if scale == 0:
        raise ValueError(f"{name} has an all-zero weight")
    Wn = Wr / scale
    M = block_ldl(Hr, config.T)
    trellis = BitshiftTrellis(config.L, config.bits, config.V, config.T)
    stats: dict = {}
    candidate = None
    if config.method == "proteus":
        candidate, errors = select_candidate(Wn, Hr, M, trellis, config.n_candidates, config.select_rows, gen)
        code = pool_code(candidate, config.L)
        stats["candidate_errors"] = [round(e, 6) for e in errors]
    else:
        code = make_code(config.code, config.L, config.V, seed=config.seed)
    What, packed = trellis_quantize(Wn, M, code, trellis)
    stats["proxy"] = proxy_error(Wn, What, Hr)
    mod = ProteusLinear(
        n,
        m,
        code=code.name,
        L=config.L,
        K=config.bits,
        V=config.V,
        T=config.T,
        mulbal=None if code.mulbal is None else code.mulbal.triple,
        table_shape=None if code.table is None else tuple(code.table.shape),
        bias=lin.bias is not None,
        candidate=candidate,
    )
    with torch.no_grad():
        mod.packed.copy_(packed)
        if code.table is not None:
            assert mod.table is not None  # built with table_shape
            mod.table.copy_(code.table)
        mod.alpha.fill_(code.alpha)
        mod.beta.fill_(code.beta)
        mod.su.copy_(su.float())
        mod.sv.copy_((sv * scale).float())
        if lin.bias is not None:
            assert mod.bias is not None  # built with bias=True
            mod.bias.copy_(lin.bias.detach().float().cpu())
    if config.compensation:
        compensate(mod, W, Hreg)
        stats["proxy_compensated"] = proxy_error(W, mod.dequantized_weight(), Hreg)
    stats["candidate"] = candidate
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return mod, stats


def quantize_model(
    model: nn.Module, config: QuantConfig, calibration_texts, *, tokenizer=None, progress: bool = True
) -> nn.Module:
    """Quantize the Linear layers of ``model`` in place and return it.

    Args:
        model: a causal LM (``model(ids).logits``), float32/float16/bfloat16 Linear weights.
        config: :class:`QuantConfig` (method, code, bits, L, ...).
        calibration_texts: a str, a list of str (encoded with ``tokenizer``) or integer token ids; cut
            into ``config.n_calibration`` sequences of ``config.seq_len`` tokens (at least one).
        tokenizer: anything with ``encode(text, add_special_tokens=False)`` (a Hugging Face tokenizer).
        progress: show a tqdm bar over layers.

    After it, ``model.icml_quantization`` holds the config and per-layer statistics (proxy error, chosen
    candidate, seconds) and ``generate`` works as before.
    """
    linears = _check_model(model, config)
    if config.distill_chat and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "config.distill_chat needs the model's tokenizer with a chat template (tokenizer=...)"
        )
    ids = encode_texts(calibration_texts, tokenizer)
    sequences = make_sequences(ids, config.n_calibration, config.seq_len)
    device = next(model.parameters()).device
    sequences = sequences.to(device)
    t0 = time.perf_counter()
    teacher = copy.deepcopy(model) if config.distill_steps else None
    hessians = collect_hessians(model, linears, sequences) if config.method != "rtn" else {}
    stats: dict = {}
    for name, lin in tqdm(linears.items(), desc=f"quantize {config.label}", disable=not progress):
        if config.method == "rtn":
            mod, st = quantize_linear_rtn(lin, config), {}
        else:
            mod, st = quantize_linear_trellis(lin, hessians.pop(name).cpu(), config, name)
        set_module(model, name, mod.to(device))
        stats[name] = st
    info: dict = {"config": config.to_dict(), "layers": stats}
    if teacher is not None:
        sequences = distillation_set(sequences, teacher, tokenizer, config)
        before = packed_hash(model)
        losses = distill(model, teacher, sequences, config.distill_steps, config.distill_lr, progress)
        info["distill"] = {
            "kl_first": losses[0],
            "kl_last": losses[-1],
            "hash_before": before,
            "hash_after": packed_hash(model),
        }
        del teacher
    info["seconds"] = round(time.perf_counter() - t0, 2)
    cast(Any, model).icml_quantization = info  # nn.Module.__setattr__ is typed for tensors and modules
    return model


def bytes_per_token(model: nn.Module) -> dict:
    """Bytes read per generated token (batch 1), from the modules' actual tensors.

    ``quantized``: every quantized layer's packed words/codes, side vectors, affine pair, tables and bias;
    ``float16``: the same layers' weights (and biases) in float16; ``rest_float16``: the other layers in
    float16 (a Linear reads its whole weight, an Embedding one row, norms their vectors).
    """
    q = f16 = rest = tables = weights = 0
    for mod in model.modules():
        if isinstance(mod, QUANTIZED):
            q += module_bytes(mod)
            weights += mod.in_features * mod.out_features
            f16 += 2 * (
                mod.in_features * mod.out_features + (mod.out_features if mod.bias is not None else 0)
            )
            table = getattr(mod, "table", None)
            if isinstance(table, torch.Tensor):
                tables += table.numel() * table.element_size()
        elif isinstance(mod, nn.Embedding):
            rest += 2 * mod.embedding_dim
        else:  # Linear layers left in float (lm_head), norms
            rest += 2 * sum(p.numel() for p in mod.parameters(recurse=False))
    return {
        "quantized_bytes": q,
        "float16_bytes": f16,
        "ratio_to_float16": q / f16 if f16 else float("nan"),
        "bits_per_weight": 8 * q / weights if weights else float("nan"),
        "table_bytes": tables,
        "rest_float16_bytes": rest,
        "quantized_weights": weights,
    }


def save_quantized(model: nn.Module, path, *, tokenizer=None, extra: dict | None = None) -> Path:
    """Save a model returned by :func:`quantize_model` to the directory ``path``: ``model.safetensors``
    (every tensor, tied ones once), ``quantization.json`` (config, per-layer module metadata, the model's
    Hugging Face config) and the tokenizer if given.

    Atomic: everything is written to a temporary directory beside ``path`` and moved into place at the
    end; a failure leaves ``path`` as it was. An existing ``path`` must be empty or an earlier save.
    """
    from safetensors.torch import save_model

    info = getattr(model, "icml_quantization", None)
    if info is None:
        raise ValueError("model must come from quantize_model or load_quantized (no icml_quantization info)")
    path = Path(path)
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / CONFIG_FILE).is_file())):
        raise ValueError(
            f"path {path} exists and is not an earlier save_quantized directory; not overwriting"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        layers = {n: m.meta() for n, m in model.named_modules() if isinstance(m, QUANTIZED)}
        first = next(model.parameters())
        doc = {
            "format": FORMAT,
            "version": 1,
            "quantization": info,
            "layers": layers,
            "model_class": type(model).__name__,
            "dtype": str(first.dtype).removeprefix("torch."),
            "model_config": config.to_dict()
            if (config := getattr(model, "config", None)) is not None
            else None,
            "extra": extra or {},
        }
        save_model(model, str(tmp / WEIGHTS_FILE))
        (tmp / CONFIG_FILE).write_text(json.dumps(doc, indent=1, default=str))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_quantization(path) -> dict:
    """The ``quantization.json`` document of a saved model."""
    f = Path(path) / CONFIG_FILE
    if not f.is_file():
        raise FileNotFoundError(f"{path} is not a save_quantized directory (no {CONFIG_FILE})")
    doc = json.loads(f.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{f} has format {doc.get('format')!r}, expected {FORMAT!r}")
    return doc


def load_quantized(path) -> nn.Module:
    """Rebuild a model saved by :func:`save_quantized` (needs transformers); outputs are bit-identical."""
    import transformers
    from safetensors.torch import load_model

    doc = read_quantization(path)
    cfg = dict(doc["model_config"])
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    cls = getattr(transformers, doc["model_class"])
    # transformers 4 can skip the random initialization of the weights loaded next; 5 has no such switch here
    no_init = getattr(importlib.import_module("transformers.modeling_utils"), "no_init_weights", None)
    with no_init() if no_init is not None else contextlib.nullcontext():
        model = cls(config)
    model.tie_weights()  # under transformers 4's no_init_weights the tied embeddings are not tied yet
    model = model.to(getattr(torch, doc["dtype"]))
    for name, meta in doc["layers"].items():
        kind = ProteusLinear if meta["kind"] == "trellis" else RTNLinear
        set_module(model, name, kind.from_meta(meta))
    load_model(model, str(Path(path) / WEIGHTS_FILE), strict=True)
    model.icml_quantization = doc["quantization"]  # a transformers model: attributes are untyped
    return model.eval()


def apply_compensation(
    model: nn.Module, reference: nn.Module, calibration_ids: torch.Tensor, config: QuantConfig
) -> dict:
    """Compensate every ProteusLinear of an already quantized ``model`` against the float ``reference``
    (same names), with Hessians collected on ``reference`` from ``calibration_ids`` exactly as
    :func:`quantize_model` does; equivalent to quantizing with ``compensation=True`` (the packed words are
    the same either way). Returns ``{name: proxy after compensation}``."""
    mods = {n: m for n, m in model.named_modules() if isinstance(m, ProteusLinear)}
    if not mods:
        raise ValueError("model has no ProteusLinear layers to compensate")
    linears = {
        n: check_instance(reference.get_submodule(n), f"reference.{n}", nn.Linear, "torch.nn.Linear")
        for n in mods
    }
    sequences = make_sequences(encode_texts(calibration_ids, None), config.n_calibration, config.seq_len)
    hessians = collect_hessians(reference, linears, sequences)
    out = {}
    for n, mod in mods.items():
        Hreg = regularize(hessians.pop(n), config.damping, f"H of {n}")
        W = linears[n].weight.detach().double()
        compensate(mod, W, Hreg)
        mod.clear_cache()
        out[n] = proxy_error(W, mod.dequantized_weight(), Hreg)
    return out
