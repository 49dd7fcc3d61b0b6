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

Writes are atomic: the folder is built under a temporary name beside the target (its files flushed to disk)
and renamed into place, so ``path`` never holds a partly written SAE.

Loading checks the folder and raises :class:`SAEFileError` (a ``ValueError``; for a missing file also a
``FileNotFoundError``) naming the file when a file is missing, truncated or corrupt (unreadable JSON or
safetensors, missing or malformed keys, non-finite parameters), when ``cfg.json``'s SAELens keys disagree with
our stored config, and when the tensors disagree with the config (names, every shape the config implies,
one dtype, the declared ``dtype``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
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


class SAEFileError(ValueError):
    """An SAE folder that cannot be loaded as it is: a missing, truncated or corrupt file, or a ``cfg.json``
    that disagrees with itself or with the stored tensors. The message names the file."""


class _MissingSAEFile(SAEFileError, FileNotFoundError):
    """A missing ``cfg.json`` or ``sae_weights.safetensors`` (also a ``FileNotFoundError``)."""


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


def _folder(path) -> Path:
    """``path`` (a str or Path naming a folder, not the empty string or the current folder) as a Path."""
    check_type(path, "path", (str, Path), "a str or Path")
    if not str(path).strip() or Path(path) == Path("."):
        raise ValueError(f"path must name an SAE folder, got {str(path)!r}")
    return Path(path)


def _fsync(file: Path) -> None:
    with open(file, "rb+") as handle:
        os.fsync(handle.fileno())


def save_sae(sae: SAE, path: str | Path) -> Path:
    """Write ``sae`` to the folder ``path`` (created; an existing folder is replaced only once the new one is
    complete and flushed to disk). Returns the folder's path. Checked: ``sae``'s parameters are finite (a
    file that :func:`load_sae` would refuse is not written), and an existing ``path`` is a folder holding
    nothing but an earlier save's two files (a folder with other files in it is refused, not replaced)."""
    check_type(sae, "sae", SAE, "an icml_interp.sae.SAE")
    path = _folder(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"path must be a folder (or not exist yet), but {path} is a file")
    if path.exists():
        foreign = sorted(p.name for p in path.iterdir() if p.name not in (CFG_FILENAME, WEIGHTS_FILENAME))
        if foreign:
            raise ValueError(
                f"path {path} holds files save_sae did not write ({foreign[:5]}); refusing to replace the "
                "folder: save into a new or empty folder"
            )
    config = saelens_config(sae)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in sae.state_dict().items()}
    bad = [name for name, t in tensors.items() if not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"sae must have finite parameters to be saved, but {bad} hold NaN or inf")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_file(tensors, str(tmp / WEIGHTS_FILENAME))
        (tmp / CFG_FILENAME).write_text(json.dumps(config, indent=2))
        for file in (tmp / WEIGHTS_FILENAME, tmp / CFG_FILENAME):
            _fsync(file)
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


def _int_key(data: dict, key: str, file: Path) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SAEFileError(f"{file}: {key} must be an int, got {value!r} (corrupt or hand-edited file?)")
    return value


def _config_from_saelens(data: dict, file: Path) -> SAEConfig:
    """The config SAELens would read from ``cfg.json``'s top-level keys."""
    arch = data.get("architecture")
    if arch not in _FROM_SAELENS:
        raise SAEFileError(
            f"{file}: architecture {arch!r} is not supported; supported SAELens architectures: "
            f"{sorted(_FROM_SAELENS)}"
        )
    if data.get("normalize_activations", "none") not in ("none", None, False):
        raise SAEFileError(
            f"{file}: normalize_activations={data['normalize_activations']!r} is not supported "
            "(fold the scaling into the weights first, e.g. SAELens' fold_activation_norm_scaling_factor)"
        )
    if data.get("rescale_acts_by_decoder_norm"):
        raise SAEFileError(
            f"{file}: rescale_acts_by_decoder_norm=true is not supported (fold W_dec norms first)"
        )
    if not data.get("apply_b_dec_to_input", True):
        raise SAEFileError(f"{file}: apply_b_dec_to_input=false is not supported")
    kwargs: dict[str, Any] = {
        "d_in": _int_key(data, "d_in", file),
        "d_sae": _int_key(data, "d_sae", file),
        "architecture": _FROM_SAELENS[arch],
    }
    if arch == "topk":
        kwargs["k"] = _int_key(data, "k", file)
    try:
        return SAEConfig(**kwargs, normalize_activations="none")
    except (TypeError, ValueError) as exc:
        raise SAEFileError(f"{file}: {exc}") from None


def _read_config(cfg_file: Path) -> tuple[SAEConfig, dict, str | None]:
    """``(config, info, declared dtype)`` from ``cfg.json``; every problem is an :class:`SAEFileError`."""
    try:
        data = json.loads(cfg_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SAEFileError(f"{cfg_file} is not readable JSON (truncated or corrupt?): {exc}") from None
    if not isinstance(data, dict):
        raise SAEFileError(f"{cfg_file} must hold a JSON object, got {type(data).__name__}")
    theirs = _config_from_saelens(data, cfg_file)  # what SAELens reads: must agree with our own record
    ours = data.get("icml_interp")
    if ours is None:
        info = data.get("metadata", {})
        if not isinstance(info, dict):
            raise SAEFileError(f"{cfg_file}: metadata must be a JSON object, got {type(info).__name__}")
        cfg, info = theirs, {k: v for k, v in info.items() if k != "sae_lens_version"}
    else:
        if not isinstance(ours, dict) or ours.get("format") != FORMAT_VERSION:
            found = ours.get("format") if isinstance(ours, dict) else ours
            raise SAEFileError(
                f"{cfg_file}: unknown icml_interp SAE format {found!r} (this version reads {FORMAT_VERSION})"
            )
        try:
            cfg = SAEConfig.from_dict(ours["config"])
            info = dict(ours.get("info", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise SAEFileError(f"{cfg_file}: icml_interp.config is invalid: {exc!r}") from None
        mine = {"architecture": _TO_SAELENS[cfg.architecture], "d_in": cfg.d_in, "d_sae": cfg.d_sae}
        read = {"architecture": _TO_SAELENS[theirs.architecture], "d_in": theirs.d_in, "d_sae": theirs.d_sae}
        if cfg.architecture == "topk":
            mine["k"], read["k"] = cfg.k, theirs.k
        for key, value in mine.items():
            if read[key] != value:
                raise SAEFileError(
                    f"{cfg_file} says {key}={read[key]!r} at the top level (what SAELens reads) but "
                    f"{key}={value!r} in icml_interp.config: the file was edited or corrupted"
                )
    dtype = data.get("dtype")
    return cfg, info, dtype.removeprefix("torch.") if isinstance(dtype, str) else None


def load_sae(path: str | Path, device: str | torch.device = "cpu") -> SAE:
    """An :class:`SAE` from a folder written by :func:`save_sae` (bit-identical parameters) or by SAELens
    (architectures topk, standard, jumprelu without input normalization).

    Checked (:class:`SAEFileError`, naming the file): both files exist and parse (a truncated or corrupt file
    is reported, not passed on as a JSON or safetensors error); ``cfg.json``'s SAELens keys (``architecture``,
    ``d_in``, ``d_sae``, ``k``) agree with our stored config; the tensors are exactly the ones the
    architecture needs, each with the shape ``d_in`` and ``d_sae`` imply (``W_enc (d_in, d_sae)``,
    ``W_dec (d_sae, d_in)``, ``b_enc (d_sae,)``, ``b_dec (d_in,)``, ``threshold (d_sae,)``), all of one
    floating dtype (the declared ``dtype`` if any) and finite.
    """
    path = _folder(path)
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise (TypeError if not isinstance(device, str) else ValueError)(
            f"device must be a torch device or its name (e.g. 'cpu'), got {device!r}: {err}"
        ) from None
    cfg_file, weights_file = path / CFG_FILENAME, path / WEIGHTS_FILENAME
    for file in (cfg_file, weights_file):
        if not file.is_file():
            raise _MissingSAEFile(
                f"{file} is missing: path must be an SAE folder ({CFG_FILENAME} + {WEIGHTS_FILENAME})"
            )
    cfg, info, declared = _read_config(cfg_file)
    try:
        tensors = load_file(str(weights_file), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise SAEFileError(
            f"{weights_file} is not a readable safetensors file (truncated or corrupt?): {exc}"
        ) from None
    sae = SAE(cfg)
    expected = {name: tuple(t.shape) for name, t in sae.state_dict().items()}
    if set(tensors) != set(expected):
        raise SAEFileError(
            f"{weights_file} holds tensors {sorted(tensors)}, but {cfg_file} describes a {cfg.architecture} "
            f"SAE, which has {sorted(expected)}"
        )
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise SAEFileError(
                f"{weights_file}: {name} has shape {tuple(tensors[name].shape)}, but {cfg_file} says "
                f"d_in={cfg.d_in}, d_sae={cfg.d_sae}, which needs {shape}"
            )
    dtypes = {t.dtype for t in tensors.values()}
    dtype = next(iter(dtypes))
    if len(dtypes) != 1 or dtype not in _DTYPES:
        raise SAEFileError(
            f"{weights_file} must hold tensors of one floating dtype ({sorted(_DTYPES.values())}), got "
            f"{sorted(str(d) for d in dtypes)}"
        )
    if declared in _DTYPES.values() and declared != _DTYPES[dtype]:
        raise SAEFileError(f"{cfg_file} says dtype={declared!r}, but {weights_file} holds {_DTYPES[dtype]}")
    bad = [name for name in sorted(tensors) if not bool(torch.isfinite(tensors[name]).all())]
    if bad:
        raise SAEFileError(f"{weights_file}: {bad} hold NaN or inf (corrupt file?)")
    sae = sae.to(dtype)
    sae.load_state_dict(tensors, strict=True)
    sae.info = info
    try:
        return sae.to(device).eval()
    except (RuntimeError, AssertionError) as err:  # e.g. a CUDA device on a machine without one
        raise ValueError(f"device {device} is not usable here: {err}") from None
