"""Input validation for every module of icml-agents (and its experiments).

Every message names the argument and says what was expected. Conventions, kept from the package's first
release: a number or a choice that is wrong in any way (wrong type included) raises ``ValueError``; a seed,
a tensor or a list of the wrong type raises ``TypeError``, one of the right type but the wrong shape or
length ``ValueError``. Intervals are written as they read in the messages, e.g. ``"(0, 1]"``, with ``inf``
for an unbounded end.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    return f" >= {minimum}" if minimum is not None else (f" <= {maximum}" if maximum is not None else "")


def check_int(
    value: Any, name: str, minimum: int | None = None, maximum: int | None = None, why: str = ""
) -> int:
    """An integer (bools refused) in ``[minimum, maximum]`` (either end optional); ``why`` is appended to the
    message, e.g. ``" (a group of one has no baseline)"``."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Integral)
    if not ok or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer{_range_text(minimum, maximum)}{why}, got {value!r}")
    return int(value)


def check_real(value: Any, name: str, interval: str = "(-inf, inf)") -> float:
    """A real number (bools refused, NaN refused) inside ``interval``, e.g. ``"[0, inf)"`` or ``"(0, 1]"``."""
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        v = float(value)
        low, high = (float(end) for end in interval[1:-1].split(","))
        above = v > low or (v == low and interval[0] == "[")
        if above and (v < high or (v == high and interval[-1] == "]")):
            return v
    raise ValueError(f"{name} must be a number in {interval}, got {value!r}")


def check_bool(value: Any, name: str) -> bool:
    """A flag: ``True`` or ``False`` (a NumPy bool too); anything else, 0 and 1 included, raises ``ValueError``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(value: T, name: str, choices: Sequence[T]) -> T:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_seed(seed: Any, name: str = "seed") -> np.random.Generator:
    """A NumPy generator from an int seed (bools refused) or a generator, which is returned as it is."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an int or a numpy Generator, got {seed!r}")
    if seed < 0:
        raise ValueError(f"{name} must be a non-negative integer or a numpy Generator, got {seed!r}")
    return np.random.default_rng(int(seed))


def check_tensor(
    value: Any, name: str, shape: Sequence[int] | None = None, ndim: int | None = None, floating: bool = False
) -> torch.Tensor:
    """A torch tensor (a floating one if ``floating``) of exactly ``shape`` and/or ``ndim`` dimensions."""
    kind = "a float tensor" if floating else "a tensor"
    if not isinstance(value, torch.Tensor) or (floating and not value.is_floating_point()):
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__}")
    if shape is not None and value.shape != tuple(shape):
        raise ValueError(f"{name} must be {kind} of shape {tuple(shape)}, got {tuple(value.shape)}")
    if ndim is not None and value.ndim != ndim:
        raise ValueError(f"{name} must be {kind} with {ndim} dimensions, got shape {tuple(value.shape)}")
    return value


def check_list(value: Any, name: str) -> Sequence[Any]:
    """A list or a tuple (TRL passes every dataset column as a list)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list, got {type(value).__name__}")
    return value


def check_texts(values: Sequence[Any], name: str, convert: Any) -> list[Any]:
    """``convert(v)`` of every item of the list ``name``; a ``TypeError`` or ``ValueError`` that an item raises is
    raised again naming the item, e.g. ``completions[2]: a completion must be a string ...``."""
    out = []
    for i, v in enumerate(values):
        try:
            out.append(convert(v))
        except (TypeError, ValueError) as err:
            raise type(err)(f"{name}[{i}]: {err}") from None
    return out


def check_column(value: Any, name: str, length: int, item: str) -> Sequence[Any]:
    """A list with one ``item`` per completion (``length`` of them), e.g. ``answer`` beside ``completions``."""
    if not isinstance(value, (list, tuple)) or len(value) != length:
        raise ValueError(f"{name} must be a list with one {item} per completion ({length}), got {value!r}")
    return value


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 if it is half precision (float16, bfloat16), else unchanged (with its gradient)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def expm1_minus_x(x: torch.Tensor) -> torch.Tensor:
    """``exp(x) - 1 - x`` (>= 0), differentiable, without the cancellation of ``x.exp() - x - 1`` or
    ``expm1(x) - x`` near 0: the Taylor series ``x^2 (1/2! + x/3! + ... + x^8/10!)`` where ``|x| < 0.1``
    (truncated below float64's rounding), ``expm1(x) - x`` elsewhere. Shared by :func:`icml_agents.rl.k3_kl`
    and the distillation loss of :mod:`icml_agents.dlmr`."""
    small = x.abs() < 0.1
    d = torch.where(small, x, torch.zeros_like(x))  # the series only where used: a finite gradient
    series = torch.zeros_like(d)
    for n in range(10, 1, -1):  # Horner: 1/2! + d/3! + ... + d^8/10!
        series = series * d + 1 / math.factorial(n)
    return torch.where(small, d * d * series, torch.expm1(x) - x)
