"""Input checks shared by the baseline quantizers."""

from __future__ import annotations

import torch


def check_float_tensor(x, name: str) -> torch.Tensor:
    """``x`` must be a floating torch tensor with at least one dimension and no NaN or infinity."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    if x.dim() == 0 or x.numel() == 0:
        raise ValueError(f"{name} must have at least one dimension and one element, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return x


def check_int(value, name: str, low: int, high: int | None = None) -> int:
    """``value`` must be an int in ``low..high`` (``high`` None: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f"..{high}"
        raise ValueError(f"{name} must be in {low}{upper}{'' if high is not None else ' or more'}, got {value}")
    return value


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else is computed in float32 (half precision rounds too coarsely)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32
