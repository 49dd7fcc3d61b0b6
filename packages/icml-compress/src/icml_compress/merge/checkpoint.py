"""SpeechCombine streamed over safetensors checkpoints: :func:`combine_checkpoints`.

Reads one tensor of each model at a time (plain reads, not memory maps, so the measured memory is what the
merge holds), writes the merged tensors in shards of at most ``shard_bytes``, and publishes the output
directory atomically: peak memory is about one shard plus three tensors, whatever the model's size. The
per-tensor rules are those of the in-memory :func:`~icml_compress.merge.model.combine`
(:mod:`~icml_compress.merge.rules`), so both give the same bits.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from icml_compress.merge.model import check_same_architecture
from icml_compress.merge.rules import (
    MergeReport,
    MergeSettings,
    TensorAction,
    merge_tensor,
    module_kind,
    plan_tensor,
    settings_from,
)
from icml_compress.quantize.model import SAFETENSORS_DTYPES, check_path, write_directory
from icml_compress.validation import check_bool, check_int

INDEX = "model.safetensors.index.json"
MARKER = "icml_merge.json"  # the report, beside the weights; marks a directory combine_checkpoints wrote


class Checkpoint:
    """The tensors of a Hugging Face model directory's safetensors files (``model.safetensors``, or the
    shards its index names), read one at a time; ``config`` is its ``config.json`` (or None)."""

    def __init__(self, path: Any, which: str):
        self.path, self.which = check_path(path, which), which
        if not self.path.is_dir():
            raise ValueError(f"{which}: {self.path} is not a model directory")
        index = self.path / INDEX
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = sorted(p.name for p in self.path.glob("*.safetensors"))
        if not files:
            raise ValueError(f"{which}: {self.path} holds no safetensors file")
        self.entries: dict[str, tuple[Path, int, dict]] = {}
        for name in files:
            f = self.path / name
            with open(f, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                try:
                    header = json.loads(fh.read(size))
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise ValueError(f"{which}: {f} is not a safetensors file ({exc})") from None
            for key, info in header.items():
                if key != "__metadata__":
                    if info["dtype"] not in SAFETENSORS_DTYPES:
                        raise ValueError(
                            f"{which}: {f}: tensor {key} has dtype {info['dtype']}, not supported"
                        )
                    self.entries[key] = (f, 8 + size, info)
        cfg = self.path / "config.json"
        self.config = json.loads(cfg.read_text()) if cfg.is_file() else None

    def meta(self, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        info = self.entries[name][2]
        return tuple(info["shape"]), SAFETENSORS_DTYPES[info["dtype"]]

    def read(self, name: str) -> torch.Tensor:
        f, start, info = self.entries[name]
        begin, end = info["data_offsets"]
        buf = bytearray(end - begin)
        with open(f, "rb") as fh:
            fh.seek(start + begin)
            if fh.readinto(buf) != len(buf):
                raise ValueError(f"{self.which}: {f} is truncated (tensor {name})")
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        if not buf:
            return torch.empty(info["shape"], dtype=dtype)
        return torch.frombuffer(buf, dtype=dtype).reshape(info["shape"])

    def tied_names(self) -> dict[str, str]:
        """``{output embedding weight: input embedding weight}`` when the config ties them and only the input
        one is stored (how transformers saves tied weights), else empty. The names come from the model class
        built on the meta device from the config (transformers needed)."""
        if not (self.config and self.config.get("tie_word_embeddings", False)):
            return {}
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = dict(self.config)
        config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        names = {id(m): n for n, m in model.named_modules()}
        inp, out = model.get_input_embeddings(), model.get_output_embeddings()
        if out is None or id(out) not in names:
            return {}
        i, o = names[id(inp)] + ".weight", names[id(out)] + ".weight"
        return {o: i} if o not in self.entries and i in self.entries else {}


def combine_checkpoints(
    cpt: Any,
    instruct: Any,
    base: Any,
    out: Any,
    lam: float = 1.0,
    *,
    per_module: dict[str, float] | None = None,
    method: str = "task_arithmetic",
    density: float = 1.0,
    normalize: bool = False,
    seed: int = 0,
    shard_bytes: int = 1 << 30,
    dry_run: bool = False,
    overwrite: bool = False,
) -> MergeReport:
    """:func:`~icml_compress.merge.model.combine` from and to Hugging Face model directories (safetensors),
    streaming: one tensor of each model read at a time, the merged ones written in shards of at most
    ``shard_bytes`` (a tensor larger than that is a shard of its own), so memory stays near one shard.

    ``out`` gets the merged weights (``model.safetensors``, or shards and ``model.safetensors.index.json``)
    and every other file of the CPT directory (config, tokenizer, generation config): it loads with
    ``from_pretrained``. It is written to a temporary directory and renamed into place: a failed merge
    leaves no partial output, and an existing ``out`` is replaced only with ``overwrite=True`` and only if
    it is an earlier output of this function (kept whole until the new one is complete; files added to it
    that the merge does not write are carried over, its weights are not). ``dry_run=True``
    reads only the headers and writes nothing. Tied weights stored once (``tie_word_embeddings``) are
    matched to the tensor they are tied to. Returns the report.
    """
    settings = settings_from(lam, per_module, method, density, normalize, seed)
    check_int(shard_bytes, "shard_bytes", 1)
    check_bool(dry_run, "dry_run")
    check_bool(overwrite, "overwrite")
    c, i, b = Checkpoint(cpt, "cpt"), Checkpoint(instruct, "instruct"), Checkpoint(base, "base")
    out = check_path(out, "out")
    if out.exists() and not overwrite and not dry_run:
        raise ValueError(f"out: {out} exists (overwrite=True replaces it)")
    check_same_architecture({ck.which: ck.config for ck in (c, i, b)})
    report = MergeReport(settings, _actions(c, i, b, settings))
    if dry_run:
        return report
    # atomic, as save_quantized: a failure leaves out as it was; only an earlier merge output is replaced
    write_directory(
        out, lambda tmp: _write(c, i, b, report, settings, tmp, shard_bytes), MARKER, "combine_checkpoints"
    )
    return report


def _actions(c: Checkpoint, i: Checkpoint, b: Checkpoint, settings: MergeSettings) -> list[TensorAction]:
    """Every stored CPT tensor's action; the tensors stored once for tied weights resolved per model."""
    alias = {ck.which: ck.tied_names() for ck in (i, b)}
    c_tied = c.tied_names()
    for ck in (i, b):
        extra = [n for n in ck.entries if n not in c.entries and n not in c_tied]
        if extra:
            raise ValueError(f"{extra[0]} is in {ck.which} but not in cpt: the architectures differ")
    actions = []
    for name in c.entries:
        meta = []
        for ck in (i, b):
            key = alias[ck.which].get(name, name)
            meta.append(ck.meta(key) if key in ck.entries else None)
        actions.append(plan_tensor(name, c.meta(name), meta[0], meta[1], settings))
    for out_name, in_name in c_tied.items():  # not stored: follows the tensor it is tied to
        shape = c.meta(in_name)[0]
        why = (
            f"the same tensor as {in_name} in cpt (tie_word_embeddings): merged once, with that name's delta"
        )
        actions.append(TensorAction(out_name, "tied", why, shape, module_kind(out_name), source=in_name))
    return actions


def _write(c, i, b, report: MergeReport, settings: MergeSettings, tmp: Path, shard_bytes: int) -> None:
    from safetensors.torch import save_file

    alias = {ck.which: ck.tied_names() for ck in (i, b)}
    current: dict[str, torch.Tensor] = {}
    groups: list[list[str]] = []  # the tensor names of each shard written
    size = 0

    def flush() -> None:
        save_file(current, str(tmp / f"part-{len(groups) + 1:05d}.safetensors"), metadata={"format": "pt"})
        groups.append(list(current))
        current.clear()

    for a in report.actions:
        if a.action == "tied":
            continue
        t = c.read(a.name)
        if a.action in ("delta", "delta-shared-rows"):
            ti = i.read(alias["instruct"].get(a.name, a.name))
            tb = b.read(alias["base"].get(a.name, a.name))
            t = merge_tensor(a, t, ti, tb, settings, inplace=True)
            del ti, tb
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > shard_bytes:
            flush()
            size = 0
        current[a.name] = t.contiguous()
        size += nbytes
    if current or not groups:
        flush()
    if len(groups) == 1:
        os.replace(tmp / "part-00001.safetensors", tmp / "model.safetensors")
    else:
        weight_map = {}
        for k, group in enumerate(groups, start=1):
            final = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
            os.replace(tmp / f"part-{k:05d}.safetensors", tmp / final)
            weight_map.update(dict.fromkeys(group, final))
        total = sum((tmp / f).stat().st_size for f in set(weight_map.values()))
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (tmp / INDEX).write_text(json.dumps(index, indent=1))
    for src in c.path.iterdir():  # config, tokenizer, generation config: the CPT model's
        if src.is_file() and not src.name.endswith(".safetensors") and src.name != INDEX:
            shutil.copy2(src, tmp / src.name)
    (tmp / MARKER).write_text(json.dumps(report.to_dict(), indent=1))
