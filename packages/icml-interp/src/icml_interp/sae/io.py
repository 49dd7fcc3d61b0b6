"""Save and load SAEs in SAELens 6's folder layout: ``cfg.json`` + ``sae_weights.safetensors``.

The tensors are ``W_enc (d_in, d_sae)``, ``b_enc``, ``W_dec (d_sae, d_in)``, ``b_dec`` and, for the JumpReLU
forms, ``threshold (d_sae,)``. ``cfg.json`` holds the keys SAELens' ``SAE.load_from_disk`` reads
(``architecture``, ``d_in``, ``d_sae``, ``dtype``, ``device``, ``apply_b_dec_to_input``,
``normalize_activations``, ``reshape_activations``, ``k`` / ``rescale_acts_by_decoder_norm`` for TopK,
``metadata`` with ``sae_lens_version`` >= 6 so that its pre-6 key renaming is skipped) and, under the key
``icml_interp``, our full :class:`~icml_interp.sae.config.SAEConfig` and training record. Architectures map as
topk -> ``topk``, relu -> ``standard``, jumprelu and batchtopk -> ``jumprelu`` (BatchTopK's inference form).
The saved SAE already works in the caller's units (any input normalization was folded in), so
``normalize_activations`` is ``"none"``.

Writes are atomic: the folder is built under a temporary name beside the target and renamed into place.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from icml_interp.sae.config import SAEConfig
from icml_interp.sae.model import SAE
from icml_interp.validation import check_type

CFG_FILENAME = "cfg.json"
WEIGHTS_FILENAME = "sae_weights.safetensors"
FORMAT_VERSION = 1
SAELENS_FORMAT_VERSION = "6.0.0"  # the SAELens config layout these files follow
_TO_SAELENS = {"topk": "topk", "relu": "standard", "jumprelu": "jumprelu", "batchtopk": "jumprelu"}
_FROM_SAELENS = {"topk": "topk", "standard": "relu", "jumprelu": "jumprelu"}
_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}


def _json_safe(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def saelens_config(sae: SAE) -> dict:
    """The ``cfg.json`` content for ``sae``."""
    cfg = sae.cfg
    dtype = _DTYPES.get(sae.W_enc.dtype)
    if dtype is None:
        raise ValueError(f"cannot save an SAE with parameter dtype {sae.W_enc.dtype}")
    meta_keys = ("model_name", "hook_name", "hook_head_index", "context_size", "prepend_bos")
    out = {
        "architecture": _TO_SAELENS[cfg.architecture],
        "d_in": cfg.d_in,
        "d_sae": cfg.d_sae,
        "dtype": dtype,
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": {
            "sae_lens_version": SAELENS_FORMAT_VERSION,
            **{key: _json_safe(sae.info[key]) for key in meta_keys if key in sae.info},
        },
        "icml_interp": {
            "format": FORMAT_VERSION,
            "config": cfg.to_dict(),
            "info": {key: _json_safe(value) for key, value in sae.info.items()},
        },
    }
    if cfg.architecture == "topk":
        out["k"] = cfg.k
        out["rescale_acts_by_decoder_norm"] = False
    return out


def save_sae(sae: SAE, path: str | Path) -> Path:
    """Write ``sae`` to the folder ``path`` (created; an existing folder is replaced only once the new one is
    complete). Returns the folder's path."""
    check_type(sae, "sae", SAE, "an icml_interp.sae.SAE")
    path = Path(check_type(path, "path", (str, Path), "a str or Path"))
    if path.exists() and not path.is_dir():
        raise ValueError(f"path must be a folder (or not exist yet), but {path} is a file")
    config = saelens_config(sae)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in sae.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_file(tensors, str(tmp / WEIGHTS_FILENAME))
        (tmp / CFG_FILENAME).write_text(json.dumps(config, indent=2))
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            old.rmdir()
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _config_from_saelens(data: dict) -> SAEConfig:
    arch = data.get("architecture")
    if arch not in _FROM_SAELENS:
        raise ValueError(
            f"cfg.json architecture {arch!r} is not supported; supported SAELens architectures: "
            f"{sorted(_FROM_SAELENS)}"
        )
    if data.get("normalize_activations", "none") not in ("none", None, False):
        raise ValueError(
            f"cfg.json normalize_activations={data['normalize_activations']!r} is not supported "
            "(fold the scaling into the weights first, e.g. SAELens' fold_activation_norm_scaling_factor)"
        )
    if data.get("rescale_acts_by_decoder_norm"):
        raise ValueError(
            "cfg.json rescale_acts_by_decoder_norm=true is not supported (fold W_dec norms first)"
        )
    if not data.get("apply_b_dec_to_input", True):
        raise ValueError("cfg.json apply_b_dec_to_input=false is not supported")
    kwargs: dict[str, Any] = {
        "d_in": int(data["d_in"]),
        "d_sae": int(data["d_sae"]),
        "architecture": _FROM_SAELENS[arch],
    }
    if arch == "topk":
        kwargs["k"] = int(data["k"])
    return SAEConfig(**kwargs, normalize_activations="none")


def load_sae(path: str | Path, device: str | torch.device = "cpu") -> SAE:
    """An :class:`SAE` from a folder written by :func:`save_sae` (bit-identical parameters) or by SAELens
    (architectures topk, standard, jumprelu without input normalization)."""
    path = Path(check_type(path, "path", (str, Path), "a str or Path"))
    cfg_file, weights_file = path / CFG_FILENAME, path / WEIGHTS_FILENAME
    for file in (cfg_file, weights_file):
        if not file.is_file():
            raise FileNotFoundError(
                f"{file} is missing: path must be an SAE folder ({CFG_FILENAME} + {WEIGHTS_FILENAME})"
            )
    data = json.loads(cfg_file.read_text())
    ours = data.get("icml_interp")
    if ours is not None:
        if ours.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"unknown icml_interp SAE format {ours.get('format')!r} (this version reads {FORMAT_VERSION})"
            )
        cfg = SAEConfig.from_dict(ours["config"])
        info = dict(ours.get("info", {}))
    else:
        cfg = _config_from_saelens(data)
        info = {k: v for k, v in data.get("metadata", {}).items() if k != "sae_lens_version"}
    tensors = load_file(str(weights_file), device="cpu")
    sae = SAE(cfg)
    dtype = next(iter(tensors.values())).dtype
    sae = sae.to(dtype)
    expected = set(sae.state_dict())
    if set(tensors) != expected:
        raise ValueError(
            f"{weights_file} holds tensors {sorted(tensors)}, expected {sorted(expected)} for a "
            f"{cfg.architecture} SAE"
        )
    sae.load_state_dict(tensors, strict=True)
    sae.info = info
    return sae.to(device).eval()
