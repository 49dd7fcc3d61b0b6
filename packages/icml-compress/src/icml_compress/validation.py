"""Input validation for every module of icml-compress (and its experiments).

Conventions (those of :mod:`icml_kernels.validation`, whose general checks are re-exported here): a value
of the wrong type raises ``TypeError``, a value of the right type outside its domain ``ValueError``; every
message names the argument and says what was expected. The trellis parameters (``L``, ``K``, ``V``, ``T``,
code names) are validated by the format that owns them, :class:`icml_kernels.trellis.TrellisFormat`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from icml_kernels.validation import check_finite_float, check_int, check_tensor

__all__ = [
    "check_bool",
    "check_finite_float",
    "check_float_tensor",
    "check_instance",
    "check_int",
    "check_one_of",
    "check_positive",
    "check_tensor",
]


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def check_positive(value: Any, name: str) -> float:
    """A finite number (int or float, bools refused) greater than 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive number, got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return float(value)


def check_one_of(value: Any, name: str, choices: tuple) -> Any:
    """One of ``choices`` (compared with ``==``)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_instance(value: Any, name: str, cls: type, what: str | None = None) -> Any:
    """An instance of ``cls`` (``what``: how the message names it, default the class name)."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a {what or cls.__name__}, got {type(value).__name__}")
    return value


def check_float_tensor(x: Any, name: str) -> torch.Tensor:
    """A floating torch tensor with at least one dimension and one element, and no NaN or infinity (the
    finiteness check reads the data: a host sync on a GPU)."""
    check_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    if x.dim() == 0 or x.numel() == 0:
        raise ValueError(
            f"{name} must have at least one dimension and one element, got shape {tuple(x.shape)}"
        )
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return x
