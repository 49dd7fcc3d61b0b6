"""Atomic save / load of a module with a ``config()`` into a folder (``config.json`` + ``model.safetensors``)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

_FILES = ("config.json", "model.safetensors")


def _folder(path: object, name: str = "path") -> Path:
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    return Path(path)


def save_module(path: str | os.PathLike, module: torch.nn.Module, config: dict[str, Any]) -> Path:
    """Write ``config`` and ``module``'s state into the folder ``path`` atomically: a failed save leaves an
    existing folder as it was. Refuses to replace a folder that holds other files."""
    from safetensors.torch import save_file

    target = _folder(path)
    kind = type(module).__name__
    if target.exists() and not (target.is_dir() and {p.name for p in target.iterdir()} <= set(_FILES)):
        raise ValueError(
            f"path {str(path)!r} exists and is not a folder {kind}.save wrote: refusing to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".tmp-{kind}-"))
    try:
        (tmp / "config.json").write_text(json.dumps({"class": kind, **config}, indent=1))
        save_file({k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}, tmp / _FILES[1])
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".old-{kind}-"))
            os.replace(target, old / "model")
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_module(path: str | os.PathLike, cls: type) -> Any:
    """The ``cls`` instance :func:`save_module` wrote into the folder ``path`` (``cls(**config)``), in eval mode."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = _folder(path)
    kind = cls.__name__
    if not all((folder / f).is_file() for f in _FILES):
        raise ValueError(f"path must be a folder written by {kind}.save, got {str(path)!r}")
    try:
        cfg = json.loads((folder / "config.json").read_text())
        if cfg.pop("class", None) != kind:
            raise ValueError(f"the folder holds no {kind}")
        module = cls(**cfg)
        module.load_state_dict(load_file(folder / _FILES[1]))
    except (ValueError, TypeError, KeyError, AttributeError, RuntimeError, SafetensorError) as err:
        raise ValueError(f"path {str(path)!r} holds a damaged {kind}: {err}") from err
    return module.eval()
