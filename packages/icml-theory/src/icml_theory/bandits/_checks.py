"""Input checks shared by the bandit modules: arrays (numpy, torch or nested lists) to float64 tensors."""

from __future__ import annotations

import numpy as np
import torch


def as_tensor(values, name: str, ndim: int, last: int | None = None, *, rows: bool = True) -> torch.Tensor:
    """``values`` as a new float64 tensor with ``ndim`` dimensions, its last one of size ``last`` (when given),
    finite and non-empty (``rows=False`` allows zero rows)."""
    what = f"a {ndim}-D array of real numbers" + (f" with last dimension {last}" if last is not None else "")
    if isinstance(values, torch.Tensor):
        if values.is_complex() or values.dtype == torch.bool:
            raise TypeError(f"{name} must be {what}, got a {values.dtype} tensor")
        t = values.detach().to("cpu", torch.float64).clone()
    else:
        try:
            if np.iscomplexobj(values):
                raise TypeError
            arr = np.array(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be {what}, got {type(values).__name__}") from None
        if np.asarray(values).dtype == np.bool_:
            raise TypeError(f"{name} must be {what}, got booleans")
        t = torch.from_numpy(arr)
    if t.ndim != ndim or (last is not None and t.shape[-1] != last):
        raise ValueError(f"{name} must be {what}, got shape {tuple(t.shape)}")
    if t.numel() == 0 and (rows or ndim == 0 or t.shape[-1] == 0):
        raise ValueError(f"{name} must be {what} and non-empty, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return t


def check_reward(reward, name: str = "reward") -> float:
    """A reward in [0, 1] (a real number; bools refused)."""
    if isinstance(reward, torch.Tensor | np.ndarray):
        if reward.ndim != 0:
            raise ValueError(
                f"{name} must be one real number in [0, 1], got an array of shape {tuple(reward.shape)}"
            )
        reward = reward.item()
    if isinstance(reward, bool) or not isinstance(reward, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number in [0, 1], got {type(reward).__name__} {reward!r}")
    r = float(reward)
    if not 0.0 <= r <= 1.0:  # NaN fails too
        raise ValueError(f"{name} must be in [0, 1] (rewards of a logistic bandit), got {reward!r}")
    return r
