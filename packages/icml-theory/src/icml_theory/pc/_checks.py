"""Input checks shared by the predictive-coding modules: batches, targets against the model's output, and
sequences of state or error tensors."""

from __future__ import annotations

import numpy as np
import torch


def as_input(value, name: str, like: torch.Tensor) -> torch.Tensor:
    """A finite floating tensor (numpy arrays accepted) on the parameters' device and dtype, batch first."""
    if isinstance(value, np.ndarray):
        if not np.issubdtype(value.dtype, np.number) or np.iscomplexobj(value):
            raise TypeError(f"{name} must be an array of real numbers, got dtype {value.dtype}")
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")
    if value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got a {value.dtype} tensor")
    if value.ndim == 0 or value.shape[0] == 0:
        raise ValueError(
            f"{name} must have a non-empty batch dimension first, got shape {tuple(value.shape)}"
        )
    value = value.to(like.device, like.dtype)
    if not torch.isfinite(value).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return value


def check_batch(x, y, loss: str, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as a finite tensor like the parameters; ``y`` as class indices (``"ce"``) or a finite tensor (``"mse"``)
    with ``x``'s batch size."""
    x = as_input(x, "x", like)
    if loss == "ce":
        if isinstance(y, np.ndarray):
            y = torch.from_numpy(y)
        if (
            not isinstance(y, torch.Tensor)
            or y.is_floating_point()
            or y.is_complex()
            or y.dtype == torch.bool
        ):
            got = y.dtype if isinstance(y, torch.Tensor) else type(y).__name__
            raise TypeError(f"y must be an integer tensor of class indices for loss='ce', got {got}")
        y = y.to(like.device, torch.long)
    else:
        y = as_input(y, "y", like)
    if y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(f"y must have x's batch size {x.shape[0]} first, got shape {tuple(y.shape)}")
    return x, y


def check_output(output: torch.Tensor, y: torch.Tensor, loss: str) -> None:
    """``y`` fits the model's output: its shape for ``"mse"``, one class index in range per row for ``"ce"``."""
    if loss == "mse" and output.shape != y.shape:
        raise ValueError(f"y must have the model output's shape {tuple(output.shape)}, got {tuple(y.shape)}")
    if loss == "ce":
        rows = output.shape[:1] + output.shape[2:]
        if output.ndim < 2 or y.shape != rows:
            raise ValueError(
                f"y must hold one class index per output row (shape {tuple(rows)}), got {tuple(y.shape)}"
            )
        if bool((y < 0).any()) or bool((y >= output.shape[1]).any()):
            raise ValueError(
                f"y must hold class indices in [0, {output.shape[1]}), got {int(y.min())}..{int(y.max())}"
            )


def check_tensors(values, name: str, count: int, batch: int, like: torch.Tensor) -> list[torch.Tensor]:
    """A list of ``count`` finite floating tensors with batch size ``batch``, on ``like``'s device and dtype."""
    if isinstance(values, torch.Tensor) or not isinstance(values, list | tuple):
        raise TypeError(
            f"{name} must be a list of {count} tensors (one per layer but the last), got {type(values).__name__}"
        )
    if len(values) != count:
        raise ValueError(f"{name} must hold {count} tensors (one per layer but the last), got {len(values)}")
    out = [as_input(v, name, like) for v in values]
    for v in out:
        if v.shape[0] != batch:
            raise ValueError(f"{name} must have x's batch size {batch} first, got shape {tuple(v.shape)}")
    return out
