"""Input checks shared by the predictive-coding modules: batches, the forward pass they must fit, targets
against the model's output, sequences of state or error tensors, and finite results."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


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


def check_batch(
    x, y, loss: str, like: torch.Tensor, names: tuple[str, str] = ("x", "y")
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as a finite tensor like the parameters; ``y`` as class indices (``"ce"``) or a finite tensor (``"mse"``)
    with ``x``'s batch size. ``names`` are the two arguments' names in the messages."""
    xn, yn = names
    x = as_input(x, xn, like)
    if loss == "ce":
        if isinstance(y, np.ndarray):
            if not np.issubdtype(y.dtype, np.integer):
                raise TypeError(f"{yn} must be integer class indices for loss='ce', got dtype {y.dtype}")
            y = torch.from_numpy(y)
        if (
            not isinstance(y, torch.Tensor)
            or y.is_floating_point()
            or y.is_complex()
            or y.dtype == torch.bool
        ):
            got = y.dtype if isinstance(y, torch.Tensor) else type(y).__name__
            raise TypeError(f"{yn} must be an integer tensor of class indices for loss='ce', got {got}")
        y = y.to(like.device, torch.long)
    else:
        y = as_input(y, yn, like)
    if y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(f"{yn} must have {xn}'s batch size {x.shape[0]} first, got shape {tuple(y.shape)}")
    return x, y


def check_output(output: torch.Tensor, y: torch.Tensor, loss: str, name: str = "y") -> None:
    """``y`` fits the model's output: its shape for ``"mse"``, one class index in range per row for ``"ce"``."""
    if loss == "mse" and output.shape != y.shape:
        raise ValueError(
            f"{name} must have the model output's shape {tuple(output.shape)}, got {tuple(y.shape)}"
        )
    if loss == "ce":
        rows = output.shape[:1] + output.shape[2:]
        if output.ndim < 2 or y.shape != rows:
            raise ValueError(
                f"{name} must hold one class index per output row (shape {tuple(rows)}), got {tuple(y.shape)}"
            )
        if bool((y < 0).any()) or bool((y >= output.shape[1]).any()):
            raise ValueError(
                f"{name} must hold class indices in [0, {output.shape[1]}), got {int(y.min())}..{int(y.max())}"
            )


def forward_checked(layers: Sequence[nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    """The forward pass without a graph, with torch's shape errors turned into one that names ``x``."""
    states = []
    s = x
    with torch.no_grad():
        for f in layers:
            try:
                s = f(s)
            except RuntimeError as err:
                raise ValueError(f"x of shape {tuple(x.shape)} does not fit the model: {err}") from None
            states.append(s)
    return states


def check_tensors(values, name: str, shapes: Sequence[torch.Size], like: torch.Tensor) -> list[torch.Tensor]:
    """A list of finite floating tensors of the given ``shapes`` (the forward pass's hidden states), on ``like``'s
    device and dtype."""
    count = len(shapes)
    if isinstance(values, torch.Tensor) or not isinstance(values, list | tuple):
        raise TypeError(
            f"{name} must be a list of {count} tensors (one per layer but the last), got {type(values).__name__}"
        )
    if len(values) != count:
        raise ValueError(f"{name} must hold {count} tensors (one per layer but the last), got {len(values)}")
    out = [as_input(v, name, like) for v in values]
    for v, shape in zip(out, shapes, strict=True):
        if v.shape != shape:
            raise ValueError(
                f"{name} must have the hidden states' shapes {[tuple(s) for s in shapes]}, got {tuple(v.shape)}"
            )
    return out


def check_finite(value: torch.Tensor, what: str, names: str) -> torch.Tensor:
    """``value`` if finite; otherwise a ValueError saying which arguments overflowed it (finite inputs can)."""
    if not math.isfinite(float(value.detach())):
        raise ValueError(f"{what} overflowed to {float(value.detach())}: {names} too large")
    return value
