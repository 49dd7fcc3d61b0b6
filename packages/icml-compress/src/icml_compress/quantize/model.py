"""``quantize_model``: swap the Linear layers of a Hugging Face causal LM for quantized ones;
``save_quantized``/``load_quantized``: safetensors + a JSON config, atomic and exact. A save also holds a
Hugging Face ``config.json`` whose ``quantization_config`` lets ``AutoModelForCausalLM.from_pretrained`` load it
through :mod:`.hf_quantizer` (``quantization.json`` stays what :func:`load_quantized` reads, so saves from
before ``config.json`` was written load as before).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from tqdm.auto import tqdm

from icml_compress.baselines.rtn import rtn_quantize
from icml_compress.proteus.codes import make_code
from icml_compress.quantize.calibration import (
    check_token_ids,
    collect_hessians,
    encode_texts,
    make_sequences,
    regularize,
)
from icml_compress.quantize.compensate import compensate
from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.distill import distill, distillation_set, packed_hash
from icml_compress.quantize.distributed import (
    assign_layers,
    check_same_call,
    collect_hessians_sharded,
    distributed_record,
    fingerprint,
    gather_layers,
    process_group,
)
from icml_compress.quantize.incoherence import random_signs, rotate_hessian, rotate_weight
from icml_compress.quantize.ldlq import block_ldl, proxy_error
from icml_compress.quantize.linear import ProteusLinear, RTNLinear, module_bytes
from icml_compress.quantize.select import pool_code, select_candidate, trellis_quantize
from icml_compress.trellis import BitshiftTrellis, parallel_viterbi
from icml_compress.validation import check_bool, check_instance

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FORMAT = "icml-compress-quantized"
CONFIG_FILE, WEIGHTS_FILE, HF_CONFIG_FILE = "quantization.json", "model.safetensors", "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"  # transformers' name: from_pretrained reads it too
# quantization_config.quant_method in config.json: the key of the quantizer in transformers' registry
HF_QUANT_METHOD = "icml-proteus"
QUANTIZED = (ProteusLinear, RTNLinear)
LAYER_KINDS: dict[str, type[ProteusLinear] | type[RTNLinear]] = {"trellis": ProteusLinear, "rtn": RTNLinear}


# safetensors' dtype names (the header's "dtype") as torch dtypes
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


class CorruptQuantizedModelError(ValueError):
    """A directory that :func:`load_quantized` (or :func:`read_quantization`) cannot load: a missing,
    truncated or corrupted ``quantization.json`` or ``model.safetensors``, or metadata that disagrees with
    the stored tensors. The message names the file."""


def block_index(name: str) -> int | None:
    """The first number among the dotted parts of a module name (its transformer block), or None."""
    m = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
    return None if m is None else int(m.group(1))


def find_linears(model: nn.Module, config: QuantConfig) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` layers ``quantize_model`` replaces (skip patterns and ``max_blocks`` applied)."""
    return linears_by_name(model, config.skip, config.max_blocks)


def linears_by_name(model: nn.Module, skip, max_blocks: int | None) -> dict[str, nn.Linear]:
    """``{name: module}`` of the model's ``nn.Linear`` layers whose name contains none of ``skip``, and, when
    ``max_blocks`` is given, that sit in a numbered block below ``max_blocks``."""
    out = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or any(s in name for s in skip):
            continue
        if max_blocks is not None:
            b = block_index(name)
            if b is None or b >= max_blocks:
                continue
        out[name] = mod
    return out


def float_linears(model: nn.Module, skip, max_blocks: int | None, verb: str) -> dict[str, nn.Linear]:
    """:func:`linears_by_name`, checked: at least one layer (``verb``: what is done to them, for the message)
    and every weight float32, float16 or bfloat16."""
    linears = linears_by_name(model, skip, max_blocks)
    if not linears:
        raise ValueError(
            f"model has no nn.Linear layers to {verb} (skip={list(skip)}, max_blocks={max_blocks})"
        )
    for name, lin in linears.items():
        if lin.weight.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"model weights must be float32, float16 or bfloat16; {name}.weight is {lin.weight.dtype}"
            )
    return linears


def set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Replace the submodule ``name`` (dotted) of ``model`` by ``new``."""
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def vocab_size(model: nn.Module) -> int | None:
    """Rows of the model's input embedding (``get_input_embeddings()``, else ``config.vocab_size``); None
    when the model has neither."""
    get = getattr(model, "get_input_embeddings", None)
    if callable(get):
        with contextlib.suppress(NotImplementedError):
            emb = get()
            if isinstance(emb, nn.Embedding):
                return emb.num_embeddings
    n = getattr(getattr(model, "config", None), "vocab_size", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _check_model(model, config) -> dict[str, nn.Linear]:
    """The Linear layers to quantize of a valid ``model`` and ``config``: float weights, and for the
    trellis methods ``config.T`` dividing every input size (checked here, before calibration, instead of
    when the layer's turn comes)."""
    check_instance(model, "model", nn.Module, "torch.nn.Module")
    check_instance(config, "config", QuantConfig)
    linears = float_linears(model, config.skip, config.max_blocks, "quantize")
    for name, lin in linears.items():
        if config.method != "rtn" and lin.in_features % config.T:
            raise ValueError(f"config.T={config.T} must divide the input size of {name} ({lin.in_features})")
    return linears


def quantize_linear_rtn(lin: nn.Linear, config: QuantConfig, name: str = "layer") -> RTNLinear:
    """RTN per group: ``bits``-bit codes, float16 scale and offset per group. A group whose offset (its
    minimum) or grid step does not fit float16 (beyond ±65504) raises ``ValueError`` naming the layer
    ``name``: stored as infinity, it would make the layer's outputs infinite or NaN."""
    W = lin.weight.detach().float().cpu()
    q = rtn_quantize(W, config.bits, config.group_size)
    for what, t in (("offset (minimum)", q.offset), ("grid step (max - min) / (2^bits - 1)", q.scale)):
        if not bool(torch.isfinite(t.half()).all()):
            worst = float(t.abs().max())
            raise ValueError(
                f"{name}: a group's {what} is {worst:.4g}, beyond float16's largest value 65504, which "
                f"RTNLinear stores its scales and offsets in (bits={config.bits}, "
                f"group_size={config.group_size}): the layer's weights are too large for RTN: skip it "
                "(QuantConfig.skip)"
            )
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
    """Incoherence + block LDLQ + Viterbi (+ Proteus selection and compensation) of one layer, on
    ``config.device`` (default: the layer's device); the returned module is on the CPU.

    Returns ``(ProteusLinear, stats)``; ``H`` is the layer input's second moment ``(in, in)``. On the CPU the
    layer is quantized inside :func:`~icml_compress.trellis.parallel_viterbi`: the Viterbi's worker processes
    get torch's threads and the products between its calls run on one thread here (measured on two
    SmolLM2 blocks, 2 cores: 17.5-18.4 s against 20.4-20.7 s when only the Viterbi calls hand over).
    """
    device = quantization_device(config, lin.weight.device)
    with parallel_viterbi() if device.type == "cpu" else contextlib.nullcontext():
        return _quantize_linear_trellis(lin, H, config, name, device)


def _quantize_linear_trellis(lin: nn.Linear, H: torch.Tensor, config: QuantConfig, name: str, device):
    W = lin.weight.detach().to(device, torch.float64)  # (m, n)
    m, n = W.shape
    if n % config.T:
        raise ValueError(f"T={config.T} must divide the input size of {name} ({n})")
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + zlib.crc32(name.encode()))
    su, sv = (random_signs(k, gen).to(device, torch.float64) for k in (n, m))  # drawn on the CPU
    Hreg = regularize(H.to(device), config.damping, f"H of {name}")
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
    W, Hreg, su, sv, packed = (t.cpu() for t in (W, Hreg, su, sv, packed))
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


HESSIAN_BYTES = 1 << 30  # the float64 Hessians held at once while quantizing (layer streaming; twice
# that while a group calibrates: each is a double-double sum then)


def calibration_groups(linears: dict[str, nn.Linear], budget: int | None) -> list[dict[str, nn.Linear]]:
    """``linears`` cut into groups of whole transformer blocks (consecutive, in the model's order) whose
    Hessians (``in_features^2`` float64 each, an upper bound: layers reading one input share one) fit in
    ``budget`` bytes; a block larger than the budget is a group of its own. ``budget=None``: one group.

    :func:`quantize_model` calibrates and quantizes one group at a time (layer streaming): peak memory is
    the model, its quantized layers so far and one group's Hessians. Each group's calibration runs the
    float model up to the group's last layer (:func:`collect_hessians` stops there), so the Hessians are
    those of one calibration of the whole model; ``k`` groups cost about ``k/2`` calibrations.
    """
    if budget is None:
        return [dict(linears)]
    blocks: dict[object, dict[str, nn.Linear]] = {}
    for name, lin in linears.items():
        key = block_index(name)
        blocks.setdefault(name if key is None else key, {})[name] = lin
    groups: list[dict[str, nn.Linear]] = []
    used = budget + 1  # the first block opens a group
    for block in blocks.values():
        size = sum(8 * lin.in_features**2 for lin in block.values())
        if used + size > budget:
            groups.append({})
            used = 0
        groups[-1].update(block)
        used += size
    return groups


def quantization_device(config: QuantConfig, default: torch.device) -> torch.device:
    """Where the trellis methods quantize: ``config.device``, else ``default`` (the model's device); a CUDA
    device without CUDA is refused naming ``config.device``."""
    device = default if config.device is None else torch.device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"config.device={config.device!r} asks for CUDA, which this machine does not have")
    return device


def model_hessians(
    model: nn.Module, config: QuantConfig, calibration_texts, *, tokenizer=None, progress: bool = True
) -> dict[str, torch.Tensor]:
    """``{name: H}``, ``H = E[x x^T]`` (float64 ``(in, in)``, on the model's device) of the input of every
    layer that ``quantize_model(model, config, calibration_texts)`` would quantize, from the same
    calibration sequences (``config.n_calibration`` of ``config.seq_len`` tokens; arguments as there).

    Computed once, they can be given to :func:`quantize_model` and :func:`apply_compensation`
    (``hessians=``) to quantize one model with several configs without calibrating again, as QuIP# and
    QTIP users keep offline Hessians; the results are identical to calibrating each time. Layers that read
    one input share one tensor. All of them are held at once, where ``quantize_model`` alone holds one
    group of blocks' Hessians at a time."""
    linears = _check_model(model, config)
    check_bool(progress, "progress")
    ids = check_token_ids(encode_texts(calibration_texts, tokenizer), "calibration_texts", vocab_size(model))
    sequences = make_sequences(ids, config.n_calibration, config.seq_len)
    return collect_hessians(model, linears, sequences.to(next(model.parameters()).device), progress=progress)


def check_hessians(hessians: Any, linears: dict[str, nn.Linear]) -> dict[str, torch.Tensor]:
    """The given ``hessians`` (a dict, as :func:`model_hessians` returns) checked against the layers
    ``linears`` they are for: each layer present, a floating ``(in, in)`` tensor. Other names are ignored."""
    check_instance(hessians, "hessians", dict, "dict {layer name: (in, in) tensor} (model_hessians)")
    for name, lin in linears.items():
        H = hessians.get(name)
        if H is None:
            raise ValueError(f"hessians has no entry for layer {name} (made with another config or model?)")
        check_instance(H, f"hessians[{name!r}]", torch.Tensor, "torch.Tensor")
        if not H.is_floating_point() or tuple(H.shape) != (lin.in_features, lin.in_features):
            raise ValueError(
                f"hessians[{name!r}] must be a floating ({lin.in_features}, {lin.in_features}) tensor (the "
                f"layer's input size), got {H.dtype} {tuple(H.shape)}"
            )
    return hessians


def quantize_model(
    model: nn.Module,
    config: QuantConfig,
    calibration_texts,
    *,
    tokenizer=None,
    progress: bool = True,
    hessians: dict[str, torch.Tensor] | None = None,
    distributed: bool = False,
) -> nn.Module:
    """Quantize the Linear layers of ``model`` in place and return it.

    Args:
        model: a causal LM (``model(ids).logits``), float32/float16/bfloat16 Linear weights.
        config: :class:`QuantConfig` (method, code, bits, L, ...).
        calibration_texts: a str, a list of str (encoded with ``tokenizer``) or integer token ids; cut
            into ``config.n_calibration`` sequences of ``config.seq_len`` tokens (at least one). Every id
            must be in ``0 .. vocab_size - 1`` of the model's input embedding (checked before any work).
        tokenizer: anything with ``encode(text, add_special_tokens=False)`` (a Hugging Face tokenizer).
        progress: show tqdm bars over the calibration sequences and the layers.
        hessians: the layers' input second moments from :func:`model_hessians` (same model, config and
            calibration): no calibration pass here. Checked to cover every layer with the right shape;
            that they come from the same calibration is the caller's word.
        distributed: split the work over the ranks of the initialized ``torch.distributed`` process group
            (run under ``torchrun``; every rank calls this with the same float model, config and
            calibration text, and every rank returns the whole quantized model). See below.

    After it, ``model.icml_quantization`` holds the config and per-layer statistics (proxy error, chosen
    candidate, seconds) and ``generate`` works as before.

    In steps: a model already partly quantized (an earlier call with a smaller ``config.max_blocks``, or
    a :func:`load_quantized` save of one) gets its remaining ``nn.Linear`` layers quantized, and its record
    covers the whole model (:func:`merged_record`: every quantized layer's statistics, the seconds of all
    passes; with one config it equals a one-pass record but for the seconds). Calibration then runs the
    model as it is, its quantized blocks feeding the later ones, so the later layers differ from a one-pass
    quantization's; the Hessians of the float model (``hessians=model_hessians(float model, ...)``) give
    the one-pass packed words (distillation's teacher is still the model as it was before the pass).

    The layers are calibrated and quantized one group of blocks at a time (:func:`calibration_groups`,
    Hessians within :data:`HESSIAN_BYTES`), each group from the float model, on ``config.device`` (default
    the model's device); on the CPU the Viterbi uses worker processes for torch's threads. Calibration
    keeps each Hessian as a double-double sum (twice :data:`HESSIAN_BYTES` while a group calibrates).

    With ``distributed=True`` (docs: ``proteus-distributed.md``): each rank streams a contiguous shard of
    the calibration sequences, and the per-rank double-double Hessian sums are combined in rank order (a
    send/recv chain, never a float ``all_reduce``), so every Hessian is the float64 rounding of the exact
    sum, as in one process; within each group the layers are shared out between the ranks (balanced by
    ``in_features * out_features``) and every rank gets all quantized modules and statistics
    (``all_gather_object``). The packed words and every stored tensor then equal those of one process
    (``distributed=False``; the same kind of device and libraries), except where an exact Hessian sum lies
    within about ``n^2 2^-107`` (``n`` sequences) of its largest partial sum from a float64 rounding
    boundary, where its last bit may differ (:func:`~icml_compress.quantize.calibration.pair_value`).
    Distillation (``config.distill_steps``) runs whole on every rank, with the same result on each. Needs at
    least one calibration sequence per rank when it calibrates (ValueError otherwise, on every rank, before
    any work); a rank given another text, config or model makes every rank raise ValueError.
    ``model.icml_quantization["distributed"]`` records the world size, backend and each rank's share; save
    on one rank (``save_quantized`` on rank 0). Use ``init_process_group(timeout=...)`` longer than the
    slowest layer's quantization: a rank that dies ends a ``torchrun`` job, the timeout ends other waits.
    """
    linears = _check_model(model, config)
    check_bool(progress, "progress")
    earlier = getattr(model, "icml_quantization", None)  # the record of an earlier pass, if any
    group = process_group(distributed)  # (rank, world size) or None
    rank, world = group if group is not None else (0, 1)
    if hessians is not None and config.method != "rtn":
        check_hessians(hessians, linears)
    if config.distill_chat and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "config.distill_chat needs the model's tokenizer with a chat template (tokenizer=...)"
        )
    ids = check_token_ids(encode_texts(calibration_texts, tokenizer), "calibration_texts", vocab_size(model))
    sequences = make_sequences(ids, config.n_calibration, config.seq_len)
    device = next(model.parameters()).device
    if config.method != "rtn":
        quantization_device(config, device)  # a missing CUDA is refused before any work
    calibrate = config.method != "rtn" and hessians is None
    if group is not None:
        if calibrate and len(sequences) < world:
            raise ValueError(
                f"distributed=True needs at least one calibration sequence per rank: calibration_texts give "
                f"{len(sequences)} sequences of config.seq_len={config.seq_len} tokens "
                f"(config.n_calibration={config.n_calibration}) for {world} ranks"
            )
        check_same_call(fingerprint(ids, config.to_dict(), linears, hessians is not None))
    sequences = sequences.to(device)
    t0 = time.perf_counter()
    teacher = copy.deepcopy(model) if config.distill_steps else None
    stats: dict = {}
    new: dict[str, nn.Module] = {}  # swapped in at the end: every group calibrates on the float model
    shown = progress and rank == 0
    bar = tqdm(total=len(linears), desc=f"quantize {config.label}", disable=not shown)
    owners: dict[str, int] = {}  # each layer's rank, balanced within its group: a group ends in a gather
    for part in calibration_groups(linears, HESSIAN_BYTES if calibrate else None):
        owners.update(assign_layers(part, world))
        if not calibrate:
            group_h = hessians
        elif group is None:
            group_h = collect_hessians(model, part, sequences, progress=shown)
        else:
            group_h = collect_hessians_sharded(model, part, sequences, progress=shown)
        done: dict[str, tuple[nn.Module, dict]] = {}
        for name, lin in part.items():
            if owners[name] != rank:
                continue
            mod: nn.Module
            if config.method == "rtn":
                mod, st = quantize_linear_rtn(lin, config, name), {}
            else:
                assert group_h is not None  # for the type checker: collected or given
                mod, st = quantize_linear_trellis(lin, group_h[name], config, name)
            done[name] = (mod, st)
            bar.update()
        if group is not None:
            done = gather_layers(done, list(part))  # every rank's layers, in the model's order
            bar.update(len(part) - sum(owners[n] == rank for n in part))
        for name, (mod, st) in done.items():
            new[name] = mod.to(device)
            stats[name] = st
        del group_h
    bar.close()
    for name, quantized in new.items():
        quantized.train(linears[name].training)  # not nn.Module's default train mode in an eval model
        set_module(model, name, quantized)
    info: dict = {"config": config.to_dict(), "layers": stats}
    if group is not None:
        info["distributed"] = distributed_record(len(sequences) if calibrate else 0, owners)
    if teacher is not None:
        try:
            sequences = distillation_set(sequences, teacher, tokenizer, config)
            before = packed_hash(model)
            losses = distill(model, teacher, sequences, config.distill_steps, config.distill_lr, progress)
        except BaseException:
            for name in new:  # all or nothing: a failed distillation leaves the float model
                set_module(model, name, linears[name])
            raise
        info["distill"] = {
            "kl_first": losses[0],
            "kl_last": losses[-1],
            "hash_before": before,
            "hash_after": packed_hash(model),
        }
        del teacher
    info["seconds"] = round(time.perf_counter() - t0, 2)
    info = merged_record(model, earlier, info)
    cast(Any, model).icml_quantization = info  # nn.Module.__setattr__ is typed for tensors and modules
    return model


def merged_record(model: nn.Module, earlier: Any, info: dict) -> dict:
    """The ``icml_quantization`` record of ``model`` after a :func:`quantize_model` pass whose own record is
    ``info``, when the model already held the record ``earlier`` of an earlier pass (quantized in steps with
    ``max_blocks``, or resumed from :func:`load_quantized`/``from_pretrained``): ``layers`` has the statistics
    of every quantized module of the model, in model order (this pass's, else the earlier record's), and
    ``seconds`` is the sum of both passes; ``config`` is this pass's, and a layer quantized by an earlier pass
    whose config differs from it in more than ``max_blocks`` keeps its own under ``config`` in its
    statistics. Other entries (``distill``, ``distributed``) are this pass's, or the earlier record's when
    this pass made none. ``earlier`` None (or not such a record): ``info`` as it is."""
    if not isinstance(earlier, dict) or not isinstance(earlier.get("layers"), dict):
        return info

    def key(cfg: Any) -> Any:  # a config as compared: max_blocks is how a model is quantized in steps
        return {k: v for k, v in cfg.items() if k != "max_blocks"} if isinstance(cfg, dict) else cfg

    config = info["config"]
    layers: dict[str, Any] = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, QUANTIZED):
            continue
        if name in info["layers"]:
            layers[name] = info["layers"][name]
        elif isinstance(earlier["layers"].get(name), dict):
            st = copy.deepcopy(earlier["layers"][name])
            own = st.pop("config", earlier.get("config"))
            if own is not None and key(own) != key(config):
                st["config"] = own
            layers[name] = st
    out = {**copy.deepcopy(earlier), **info, "layers": layers}
    if isinstance(earlier.get("seconds"), int | float) and not isinstance(earlier["seconds"], bool):
        out["seconds"] = round(earlier["seconds"] + info["seconds"], 2)
    return out


def bytes_per_token(model: nn.Module) -> dict:
    """Bytes read per generated token (batch 1), from the modules' actual tensors.

    ``quantized``: every quantized layer's packed words/codes, side vectors, affine pair, tables and bias;
    ``float16``: the same layers' weights (and biases) in float16; ``rest_float16``: the other layers in
    float16 (a Linear reads its whole weight, an Embedding one row, norms their vectors).

    A model without quantized layers (the float baseline) has ``quantized_bytes == 0`` and the ratios
    ``ratio_to_float16`` and ``bits_per_weight`` None (0/0: undefined, and not a NaN in a JSON report).
    """
    check_instance(model, "model", nn.Module, "torch.nn.Module")
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
        "ratio_to_float16": q / f16 if f16 else None,
        "bits_per_weight": 8 * q / weights if weights else None,
        "table_bytes": tables,
        "rest_float16_bytes": rest,
        "quantized_weights": weights,
    }


def save_quantized(model: nn.Module, path, *, tokenizer=None, extra: dict | None = None) -> Path:
    """Save a model returned by :func:`quantize_model` to the directory ``path``: ``model.safetensors``
    (every tensor, tied ones once), ``quantization.json`` (config, per-layer module metadata, the model's
    Hugging Face config), ``config.json`` (that Hugging Face config with a ``quantization_config``, see
    :func:`hf_config`: ``AutoModelForCausalLM.from_pretrained(path)`` loads the same model after
    ``import icml_compress``), the model's ``generation_config.json`` (:func:`save_generation_config`) and
    the tokenizer if given.

    Atomic: everything is written to a temporary directory beside ``path``, flushed to disk (fsync) and
    moved into place at the end (``os.replace``); a failure leaves ``path`` as it was, and a crash cannot
    leave a renamed directory whose files are still unwritten. An existing ``path`` must be empty or an
    earlier save; files saved beside the earlier save (a tokenizer not given this time, a model card) are
    kept, as ``save_pretrained`` keeps them (:func:`write_directory`).
    """
    from safetensors.torch import save_model

    check_instance(model, "model", nn.Module, "torch.nn.Module")
    info = getattr(model, "icml_quantization", None)
    if info is None:
        raise ValueError("model must come from quantize_model or load_quantized (no icml_quantization info)")
    path = check_path(path)
    check_save_extras(tokenizer, extra)

    def write(tmp: Path) -> None:
        layers = {n: m.meta() for n, m in model.named_modules() if isinstance(m, QUANTIZED)}
        first = next(model.parameters())
        doc = {
            "format": FORMAT,
            "version": 1,
            "quantization": info,
            "layers": layers,
            "model_class": type(model).__name__,
            "dtype": str(first.dtype).removeprefix("torch."),
            "model_config": model_config(model),
            "extra": extra or {},
        }
        save_model(model, str(tmp / WEIGHTS_FILE))
        (tmp / CONFIG_FILE).write_text(json.dumps(doc, indent=1, default=str))
        if doc["model_config"] is not None:  # a transformers model: loadable by from_pretrained too
            (tmp / HF_CONFIG_FILE).write_text(json.dumps(hf_config(doc), indent=1, default=str))
        save_generation_config(model, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))

    return write_directory(path, write, CONFIG_FILE, "save_quantized")


def save_generation_config(model: nn.Module, directory: Path) -> None:
    """Write ``model.generation_config`` to ``directory/generation_config.json`` as transformers'
    ``save_pretrained`` does (for a model that ``can_generate()``; its ``save_pretrained`` refuses a
    modified, invalid config with a ValueError). ``generate`` reads its defaults from it (``max_new_tokens``,
    ``eos_token_id`` lists, sampling settings of instruct models): without it a reloaded model generated with
    defaults derived from ``config.json`` instead (20 new tokens where the saved model stopped after 3)."""
    can_generate = getattr(model, "can_generate", None)
    config = getattr(model, "generation_config", None)
    if callable(can_generate) and can_generate() and config is not None:
        config.save_pretrained(str(directory))


def load_generation_config(model: nn.Module, path: Path, error: type[Exception]) -> None:
    """Give ``model`` the generation config saved in ``path`` by :func:`save_generation_config`, as
    ``from_pretrained`` does; a save without one (written before it was saved) keeps the config the model
    derived from its ``config.json``. An unreadable file raises ``error`` naming it."""
    f = path / GENERATION_CONFIG_FILE
    if not f.is_file():
        return
    from transformers import GenerationConfig

    try:
        cast(Any, model).generation_config = GenerationConfig.from_pretrained(str(path))
    except (OSError, ValueError) as exc:  # a JSONDecodeError is wrapped in an OSError by transformers
        raise error(f"{f} is not a readable generation config (truncated or corrupted?): {exc}") from exc


def check_save_extras(tokenizer: Any, extra: Any) -> None:
    """A save's optional ``tokenizer`` (with ``save_pretrained``) and ``extra`` (a dict saved as JSON)."""
    if tokenizer is not None and not callable(getattr(tokenizer, "save_pretrained", None)):
        raise TypeError(
            f"tokenizer must have a save_pretrained method (a Hugging Face tokenizer), got {tokenizer!r:.80}"
        )
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict (saved as a JSON object) or None, got {type(extra).__name__}")


# the files of an earlier save that describe its model: a new save writes its own (or the model has none), so
# they are never carried over into it (a stale one would describe another model, weights another model's)
_MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "quantization.json",  # save_quantized
        "sharing.json",  # save_shared
        "icml_merge.json",  # combine_checkpoints
    }
)


def _is_model_file(name: str) -> bool:
    """Whether the file ``name`` of an earlier save holds or describes its model (weights, their index, a
    :data:`_MODEL_FILES` name): :func:`write_directory` does not carry it over into a new save."""
    return (
        name in _MODEL_FILES
        or name.endswith((".safetensors", ".safetensors.index.json"))
        or (name.startswith("pytorch_model") and ".bin" in name)
    )


def write_directory(path: Path, write: Callable[[Path], None], marker: str, what: str) -> Path:
    """Write the directory ``path`` atomically: ``write(tmp)`` fills a temporary directory beside ``path``,
    which is flushed to disk (fsync) and moved into place at the end (``os.replace``); a failure leaves
    ``path`` as it was (also when the last rename fails: the earlier save is put back), and a crash cannot
    leave a renamed directory whose files are still unwritten. An existing ``path`` must be empty or an
    earlier save (a directory holding the file ``marker``; ``what`` names the saving function in the error).

    Replacing an earlier save keeps what ``save_pretrained`` keeps when it overwrites a directory: every
    entry of the earlier one that the new save does not write and that is not a model file
    (:func:`_is_model_file`: weights, their index, config files) is carried over (hard-linked where the
    file system allows, else copied), so a tokenizer, a model card or a ``.git`` saved beside the model
    survive. Stale weights are not carried over (``save_pretrained`` deletes stale shards too)."""
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / marker).is_file())):
        raise ValueError(f"path {path} exists and is not an earlier {what} directory; not overwriting")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        write(tmp)
        _fsync_tree(tmp)
        if path.exists():
            written = {p.name for p in tmp.iterdir()}
            for entry in sorted(path.iterdir()):
                if entry.name not in written and not _is_model_file(entry.name):
                    _link_or_copy(entry, tmp / entry.name)
            _fsync_dir(tmp)
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)  # the earlier save back in place
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _link_or_copy(src: Path, dst: Path) -> None:
    """``src`` (a file, a directory or a symbolic link) at ``dst``: files hard-linked (no copy of a large
    file), copied with their metadata where the file system has no hard links; links recreated as links."""

    def file(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)
            with open(b, "rb") as fh:  # a copy is new data: flushed before the rename, as the save's files
                os.fsync(fh.fileno())

    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=file)
    else:
        file(str(src), str(dst))


def model_config(model: nn.Module) -> dict | None:
    """The model's Hugging Face config as a dict (``config.to_dict()``) without a ``quantization_config``
    (a model loaded by ``from_pretrained`` carries one; :func:`hf_config` writes it afresh); None for a
    model without a config."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    out = config.to_dict()
    out.pop("quantization_config", None)
    return out


def hf_config(doc: dict) -> dict:
    """The ``config.json`` of a save whose ``quantization.json`` document is ``doc``: the model's Hugging Face
    config (``AutoConfig.from_pretrained`` reads it) with ``architectures``, ``dtype`` and a
    ``quantization_config`` holding what the transformers quantizer needs: ``quant_method``
    (``icml-proteus``), ``format``, ``version``, ``dtype``, the per-layer module metadata ``layers`` and the
    quantization record ``quantization`` (config and per-layer statistics, ``model.icml_quantization``)."""
    out = dict(doc["model_config"])
    out["architectures"] = [doc["model_class"]]
    out["dtype"] = doc["dtype"]
    out["quantization_config"] = {
        "quant_method": HF_QUANT_METHOD,
        "format": doc["format"],
        "version": doc["version"],
        "dtype": doc["dtype"],
        "layers": doc["layers"],
        "quantization": doc["quantization"],
    }
    return out


def check_path(path: Any, name: str = "path") -> Path:
    """A filesystem path: a ``str`` or an ``os.PathLike`` (not bytes), non-empty."""
    if not isinstance(path, str | os.PathLike) or isinstance(path, bytes):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{name} must be a non-empty path, got {path!r}")
    return Path(text)


def _fsync_tree(directory: Path) -> None:
    """Flush every file under ``directory``, then the directory itself, to disk."""
    for f in sorted(directory.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (the renames into it) to disk; a no-op where directories cannot be
    opened (Windows)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_quantization(path) -> dict:
    """The ``quantization.json`` document of a saved model, checked: a JSON object of this format with a
    ``quantization`` object, a ``layers`` object of layer objects whose ``kind`` is ``trellis`` or ``rtn``,
    a ``model_class`` name, a ``dtype`` among float32/float16/bfloat16 and an ``extra`` object (if any).

    Raises :class:`CorruptQuantizedModelError` naming the file when ``path`` is not a directory, the file is
    missing, is not valid UTF-8 JSON (truncated or corrupted) or fails a check.
    """
    path = check_path(path)
    f = path / CONFIG_FILE
    if not f.is_file():
        what = (
            f"no {CONFIG_FILE}"
            if path.is_dir()
            else "not a directory"
            if path.exists()
            else "no such directory"
        )
        raise CorruptQuantizedModelError(f"path {path} is not a save_quantized directory ({what})")
    try:
        doc = json.loads(f.read_bytes())
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptQuantizedModelError(f"{f} is not valid JSON (truncated or corrupted?): {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptQuantizedModelError(f"{f} must hold a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise CorruptQuantizedModelError(f"{f} has format {doc.get('format')!r}, expected {FORMAT!r}")
    for key, kind in (("quantization", dict), ("layers", dict), ("model_class", str), ("dtype", str)):
        if key not in doc:
            raise CorruptQuantizedModelError(f"{f} lacks {key!r}")
        if not isinstance(doc[key], kind):
            what = "a JSON object" if kind is dict else "a string"
            raise CorruptQuantizedModelError(f"{f}: {key} must be {what}, got {type(doc[key]).__name__}")
    if not isinstance(doc.get("extra", {}), dict):
        raise CorruptQuantizedModelError(
            f"{f}: extra must be a JSON object, got {type(doc['extra']).__name__}"
        )
    check_dtype_name(doc["dtype"], str(f))
    check_layers(doc["layers"], str(f))
    return doc


def check_dtype_name(dtype: str, where: str) -> torch.dtype:
    """The torch dtype named ``dtype`` (``float32``, ``float16`` or ``bfloat16``); ``where`` (the file)
    starts the :class:`CorruptQuantizedModelError` message otherwise."""
    dtypes = tuple(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
    if dtype not in dtypes:
        raise CorruptQuantizedModelError(f"{where}: dtype must be one of {dtypes}, got {dtype!r}")
    return cast(torch.dtype, getattr(torch, dtype))


def check_layers(layers: dict, where: str) -> None:
    """Every value of ``layers`` is a JSON object whose ``kind`` is ``trellis`` or ``rtn``; the rest of each
    one is checked when its module is built (:func:`replace_linears`)."""
    for name, meta in layers.items():
        kind = meta.get("kind") if isinstance(meta, dict) else None
        if not isinstance(kind, str) or kind not in LAYER_KINDS:
            raise CorruptQuantizedModelError(
                f"{where}: layer {name}: kind must be one of {tuple(LAYER_KINDS)} in a JSON object, got {meta!r}"
            )


def load_quantized(path) -> nn.Module:
    """Rebuild a model saved by :func:`save_quantized` (needs transformers); outputs are bit-identical.

    Checked before any stored value is used: ``quantization.json`` (as :func:`read_quantization` checks it)
    and ``model.safetensors`` exist and are complete (a truncated file fails the safetensors header
    check); the model is built from ``model_config``/``model_class`` and every quantized layer from its
    metadata, each replacing an ``nn.Linear`` of the same size; the stored tensors are exactly the model's:
    same names (tied weights stored once), shapes and dtypes; the saved ``generation_config.json`` (if any)
    becomes the model's ``generation_config``, as in ``from_pretrained``. Any failure raises
    :class:`CorruptQuantizedModelError` naming the file (a ``ValueError``).
    """
    path = check_path(path)
    doc = read_quantization(path)
    weights, state = read_weights(path, "save_quantized", CorruptQuantizedModelError)
    model = _build_model(doc, path / CONFIG_FILE)
    _load_tensors(model, state, weights)
    load_generation_config(model, path, CorruptQuantizedModelError)
    model.icml_quantization = doc["quantization"]  # a transformers model: attributes are untyped
    return model.eval()


def _build_model(doc: dict, f: Path) -> nn.Module:
    """The empty model described by a checked ``quantization.json`` document ``doc`` (the file ``f``)."""
    model = build_empty_model(doc, f, CorruptQuantizedModelError)
    replace_linears(model, doc["layers"], str(f))
    return model


def build_empty_model(doc: dict, f: Path, error: type[Exception]) -> nn.Module:
    """The transformers model (random weights, tied embeddings tied) described by the saved document ``doc``
    (the file ``f``): its ``model_config`` (a Hugging Face config dict with a ``model_type``), ``model_class``
    (a transformers class name) and ``dtype`` (checked by :func:`check_dtype_name`). A document that does
    not describe a model raises ``error`` naming ``f``."""
    import transformers

    cfg = doc.get("model_config")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise error(
            f"{f}: model_config must be a JSON object with a model_type (the Hugging Face config the model "
            f"was saved with), got {type(cfg).__name__}"
        )
    if cfg["model_type"] not in transformers.CONFIG_MAPPING:
        raise error(
            f"{f}: model_config has model_type {cfg['model_type']!r}, which transformers does not know"
        )
    cls = getattr(transformers, doc["model_class"], None)
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise error(f"{f}: model_class {doc['model_class']!r} is not a transformers model class")
    cfg = dict(cfg)
    cfg.pop("quantization_config", None)  # a model_config written by an older from_pretrained-loaded save
    try:
        config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
        # built under the saved dtype as from_pretrained builds it (not cast afterwards): buffers a model
        # computes in float32 whatever the dtype (Llama's rotary inv_freq) stay float32, as in the model
        # from_pretrained loads and that quantize_model was given
        with (
            no_init_weights(),
            default_dtype(getattr(torch, doc["dtype"])),
        ):
            model = cls(config)
    except Exception as exc:  # any failure to build from the document (huggingface_hub's strict dataclass
        # checks raise their own StrictDataclassFieldValidationError, not a ValueError) means it is corrupt
        raise error(
            f"{f}: model_config does not describe a {doc['model_class']}: {type(exc).__name__}: {exc}"
        ) from exc
    model.tie_weights()  # under no_init_weights the tied embeddings are not tied yet
    return model


def no_init_weights() -> contextlib.AbstractContextManager:
    """transformers' switch that skips the random initialization of weights loaded next (about 1 s for
    SmolLM2; in ``initialization`` in transformers 5, ``modeling_utils`` in 4), else a null context."""
    for module in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            switch = getattr(importlib.import_module(module), "no_init_weights", None)
        except ImportError:
            continue
        if switch is not None:
            return switch()
    return contextlib.nullcontext()


def replace_linears(model: nn.Module, layers: dict, where: str) -> None:
    """Replace each ``nn.Linear`` named in ``layers`` (checked by :func:`check_layers`) by an empty
    :class:`ProteusLinear`/:class:`RTNLinear` built from its metadata, with the module's own dtypes (float32
    side vectors, whatever the default dtype is: transformers builds a bfloat16 model under a bfloat16
    default). ``where`` (the file) starts the :class:`CorruptQuantizedModelError` message of a layer that is
    not an ``nn.Linear`` of the model, metadata its module refuses, or sizes that disagree with the model."""
    with default_dtype(torch.float32):
        for name, meta in layers.items():
            try:
                old = model.get_submodule(name)
            except AttributeError:
                old = None
            if not isinstance(old, nn.Linear):
                raise CorruptQuantizedModelError(f"{where}: layer {name} is not an nn.Linear of the model")
            try:
                new = LAYER_KINDS[meta["kind"]].from_meta(meta)
            except (TypeError, ValueError, KeyError, RuntimeError) as exc:
                raise CorruptQuantizedModelError(
                    f"{where}: layer {name}: {type(exc).__name__}: {exc}"
                ) from exc
            for attr in ("in_features", "out_features"):
                if getattr(new, attr) != getattr(old, attr):
                    raise CorruptQuantizedModelError(
                        f"{where}: layer {name} has {attr}={getattr(new, attr)}, the model's layer has "
                        f"{getattr(old, attr)} (layers and model_config disagree)"
                    )
            set_module(model, name, new)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """``torch.set_default_dtype(dtype)`` inside the block, restored afterwards."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def check_stored_tensors(
    expected: dict[str, tuple[tuple[int, ...], torch.dtype]],
    stored: dict[str, tuple[tuple[int, ...], torch.dtype]],
    shared: dict[str, Any],
    weights: Path | str,
    described_by: str,
    error: type[Exception] = CorruptQuantizedModelError,
) -> None:
    """Check that a checkpoint holds exactly a model's tensors: no unknown name, the same shape and dtype (no
    silent cast), and every tensor of the model either stored or sharing storage with a stored one
    (safetensors stores tied tensors once). ``expected``/``stored``: ``{name: (shape, dtype)}`` of the model
    and of the file ``weights``; ``shared``: ``{name: key}``, equal keys for tied tensors;
    ``described_by``: the file that describes the model (for messages). Raises ``error``
    (:class:`CorruptQuantizedModelError` by default)."""
    for name, (shape, dtype) in stored.items():
        if name not in expected:
            raise error(
                f"{weights} holds tensor {name!r}, which the model described by {described_by} does not have"
            )
        e_shape, e_dtype = expected[name]
        if tuple(shape) != tuple(e_shape) or dtype != e_dtype:
            raise error(
                f"{weights}: tensor {name!r} is {dtype} {tuple(shape)}, but {described_by} describes "
                f"{e_dtype} {tuple(e_shape)}"
            )
    keys = {shared[n] for n in stored}
    missing = [n for n in expected if n not in stored and shared[n] not in keys]
    if missing:
        raise error(
            f"{weights} lacks tensors {missing[:8]}{' ...' if len(missing) > 8 else ''} of the model "
            f"described by {described_by}"
        )


def _load_tensors(model: nn.Module, state: dict[str, torch.Tensor], weights: Path) -> None:
    """Copy ``state`` (read from ``weights``) into ``model`` after :func:`check_stored_tensors`."""
    load_tensors(model, state, weights, CONFIG_FILE, CorruptQuantizedModelError)


def read_weights(path: Path, saved_by: str, error: type[Exception]) -> tuple[Path, dict[str, torch.Tensor]]:
    """The ``model.safetensors`` of a directory written by ``saved_by``, and its tensors; a missing or
    unreadable file raises ``error`` naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise error(f"{path} is not a complete {saved_by} directory (no {WEIGHTS_FILE})")
    try:
        return weights, load_file(str(weights))
    except (SafetensorError, OSError) as exc:
        raise error(f"{weights} is not a readable safetensors file (truncated or corrupted?): {exc}") from exc


def load_tensors(
    model: nn.Module, state: dict[str, torch.Tensor], weights: Path, described_by: str, error: type[Exception]
) -> None:
    """Copy ``state`` (read from ``weights``) into ``model`` after :func:`check_stored_tensors` (tensors that
    share storage in the model, tied or shared ones, stored once), which raises ``error``."""
    expected = model.state_dict()
    check_stored_tensors(
        {n: (tuple(t.shape), t.dtype) for n, t in expected.items()},
        {n: (tuple(t.shape), t.dtype) for n, t in state.items()},
        {n: t.untyped_storage().data_ptr() for n, t in expected.items()},
        weights,
        described_by,
        error,
    )
    model.load_state_dict(state, strict=False)


def apply_compensation(
    model: nn.Module,
    reference: nn.Module,
    calibration_ids: torch.Tensor,
    config: QuantConfig,
    *,
    progress: bool = True,
    hessians: dict[str, torch.Tensor] | None = None,
) -> dict:
    """Compensate every ProteusLinear of an already quantized ``model`` against the float ``reference``
    (same names), with Hessians collected on ``reference`` from ``calibration_ids`` exactly as
    :func:`quantize_model` does; equivalent to quantizing with ``compensation=True`` (the packed words are
    the same either way). Returns ``{name: proxy after compensation}``. ``progress``: a tqdm bar over the
    calibration sequences. ``hessians``: those of :func:`model_hessians` for ``reference``, instead of
    calibrating here (checked as in :func:`quantize_model`)."""
    check_instance(model, "model", nn.Module, "torch.nn.Module")
    check_instance(reference, "reference", nn.Module, "torch.nn.Module")
    check_instance(config, "config", QuantConfig)
    check_bool(progress, "progress")
    mods = {n: m for n, m in model.named_modules() if isinstance(m, ProteusLinear)}
    if not mods:
        raise ValueError("model has no ProteusLinear layers to compensate")
    linears = {}
    for n, mod in mods.items():
        try:
            lin = reference.get_submodule(n)
        except AttributeError:
            raise ValueError(
                f"reference has no layer {n} (the float model that model was quantized from)"
            ) from None
        linears[n] = check_instance(lin, f"reference.{n}", nn.Linear, "torch.nn.Linear")
        assert isinstance(lin, nn.Linear)  # for the type checker: check_instance refused anything else
        if lin.weight.shape != (mod.out_features, mod.in_features):
            raise ValueError(
                f"reference.{n} has weight shape {tuple(lin.weight.shape)}, the quantized layer "
                f"({mod.out_features}, {mod.in_features})"
            )
    ids = check_token_ids(
        encode_texts(calibration_ids, None, "calibration_ids"), "calibration_ids", vocab_size(reference)
    )
    sequences = make_sequences(ids, config.n_calibration, config.seq_len, "calibration_ids")
    if hessians is None:
        sequences = sequences.to(next(reference.parameters()).device)
        hessians = collect_hessians(reference, linears, sequences, progress=progress)
    else:
        check_hessians(hessians, linears)
    scales = {n: (mod.su.detach().clone(), mod.sv.detach().clone()) for n, mod in mods.items()}
    out = {}
    try:
        for n, mod in mods.items():
            Hreg = regularize(hessians[n], config.damping, f"H of {n}")
            W = linears[n].weight.detach().double()
            compensate(mod, W, Hreg)
            mod.clear_cache()
            out[n] = proxy_error(W, mod.dequantized_weight(), Hreg)
    except BaseException:
        with torch.no_grad():  # all or nothing: a failed layer leaves every layer's su/sv as they were
            for n, mod in mods.items():
                mod.su.copy_(scales[n][0])
                mod.sv.copy_(scales[n][1])
                mod.clear_cache()
        raise
    return out
