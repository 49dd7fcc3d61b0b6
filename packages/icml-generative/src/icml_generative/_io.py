"""Atomic save / load of a module with a ``config()`` into a folder (``config.json`` + a safetensors file)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

WEIGHTS = "model.safetensors"


def _folder(path: object, name: str = "path") -> Path:
    """The folder ``path`` (a non-empty string or path, ``~`` expanded)."""
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    if not str(path).strip():
        raise ValueError(f"{name} must name a folder, got {str(path)!r}")
    return Path(path).expanduser()


def _swap_in(new: Path, target: Path, kind: str) -> None:
    """Move the folder ``new`` to ``target``, replacing an existing ``target``; if that is interrupted (any
    exception, KeyboardInterrupt included) after the old folder was moved aside, the old one is put back."""
    if not target.exists():
        os.replace(new, target)
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".old-{kind}-"))
    aside = old / "model"
    try:
        os.replace(target, aside)
        os.replace(new, target)
    finally:
        # decided from the file system, not from flags: an interrupt may land between a move and its flag
        if aside.exists() and not target.exists():
            os.replace(aside, target)
        shutil.rmtree(old, ignore_errors=True)


def save_module(
    path: str | os.PathLike, module: torch.nn.Module, config: dict[str, Any], weights: str = WEIGHTS
) -> Path:
    """Write ``config`` and ``module``'s state (as ``weights``, tensors in their own dtypes) into the folder
    ``path`` atomically: a failed or interrupted save leaves an existing folder as it was. Refuses to replace
    a folder that holds other files."""
    from safetensors.torch import save_file

    target = _folder(path)
    kind = type(module).__name__
    if target.exists() and not (
        target.is_dir() and {p.name for p in target.iterdir()} <= {"config.json", weights}
    ):
        raise ValueError(
            f"path {str(path)!r} exists and is not a folder {kind}.save wrote: refusing to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".tmp-{kind}-"))
    try:
        (tmp / "config.json").write_text(json.dumps({"class": kind, **config}, indent=1))
        save_file({k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}, tmp / weights)
        _swap_in(tmp, target, kind)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_module(
    path: str | os.PathLike,
    cls: type,
    weights: str = WEIGHTS,
    build: Callable[[dict[str, Any]], torch.nn.Module] | None = None,
) -> Any:
    """The ``cls`` instance :func:`save_module` wrote into the folder ``path``, in eval mode.

    ``build(config)`` makes the module (``cls(**config)`` by default); the saved tensors then replace its
    parameters and buffers as they are (``load_state_dict(..., assign=True)``), so a float64 module loads as
    float64 with bit-identical tensors instead of being rounded into the float32 that ``cls`` builds."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = _folder(path)
    kind = cls.__name__
    if not all((folder / f).is_file() for f in ("config.json", weights)):
        raise ValueError(f"path must be a folder written by {kind}.save, got {str(path)!r}")
    try:
        cfg = json.loads((folder / "config.json").read_text())
        if cfg.pop("class", None) != kind:
            raise ValueError(f"the folder holds no {kind}")
        module = cls(**cfg) if build is None else build(cfg)
        module.load_state_dict(load_file(folder / weights), assign=True)
    except (ValueError, TypeError, KeyError, AttributeError, RuntimeError, SafetensorError) as err:
        raise ValueError(f"path {str(path)!r} holds a damaged {kind}: {err}") from err
    return module.eval()
