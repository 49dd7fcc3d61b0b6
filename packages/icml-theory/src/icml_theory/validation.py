"""Input validation for every module of icml-theory (and its experiments); numpy only, so the privacy
accountant that uses it never imports torch.

Conventions: a value of the wrong type raises ``TypeError``, a value of the right type outside its domain
``ValueError``; every message names the argument and says what was expected. Intervals are written as
they read in the messages, e.g. ``"(0, 1]"``, with ``inf`` for an unbounded end (an open ``inf`` end
excludes infinity).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

MIN_ORDER = 0.5  # the smallest Rényi order: lower orders add nothing (see icml_theory.privacy.profiles)


def _inside(value: Any, interval: str) -> Any:
    """Elementwise ``value in interval`` (False for NaN) for a float or an array."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    above = (value > low) | ((value == low) & (interval[0] == "["))
    return above & ((value < high) | ((value == high) & (interval[-1] == "]")))


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    return f" >= {minimum}" if minimum is not None else (f" <= {maximum}" if maximum is not None else "")


def check_int(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (bools refused) in ``[minimum, maximum]`` (either end optional)."""
    expected = f"an integer{_range_text(minimum, maximum)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {expected}, got {value!r}")
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return v


def check_seed(value, name: str = "seed") -> int:
    """A seed for ``torch.Generator.manual_seed``: an integer >= 0 that fits in 64 bits."""
    seed = check_int(value, name, 0)
    if seed >= 2**64:
        raise ValueError(f"{name} must be below 2^64 (a 64-bit seed), got {value!r}")
    return seed


def check_bool(value, name: str) -> bool:
    """A bool (``True``/``False`` or a numpy bool; integers refused)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_real(value, name: str, interval: str = "(-inf, inf)") -> float:
    """A real number (bools refused) inside ``interval``, e.g. ``"(0, 1]"``; the default is any finite number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number in {interval}, got {type(value).__name__} {value!r}")
    if not _inside(float(value), interval):
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return float(value)


def check_choice(value, name: str, choices: tuple):
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_profile(profile):
    """An RDP profile: an ``RDPProfile`` or any callable mapping an array of orders to RDP values."""
    if not callable(profile):
        raise TypeError(
            f"profile must be an RDPProfile or a callable of orders, got {type(profile).__name__}"
        )
    return profile


def as_array(values, name: str, interval: str, what: str = "numbers") -> np.ndarray:
    """``values`` as a new float64 array (any shape), every entry inside ``interval`` (NaN refused)."""
    try:
        if np.iscomplexobj(values):  # float64 would silently drop the imaginary part
            raise TypeError
        a = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must hold {what} in {interval}, got {values!r}") from None
    if not np.all(_inside(a, interval)):
        raise ValueError(f"{name} must hold {what} in {interval}, got NaN or a value outside")
    return a


def check_alphas(alphas, name: str = "alphas") -> np.ndarray:
    """Type I errors as float64 (any shape), each in [0, 1]."""
    return as_array(alphas, name, "[0, 1]", "type I errors")


def check_orders(orders, name: str = "orders") -> np.ndarray:
    """Rényi orders as float64 (any shape), each finite and >= :data:`MIN_ORDER`."""
    return as_array(orders, name, f"[{MIN_ORDER}, inf)", "Rényi orders")


def as_rdp_table(orders, values, name: str = "values") -> tuple[np.ndarray, np.ndarray]:
    """Orders and the RDP values at them, flat, non-empty and of equal length (values >= 0, inf allowed)."""
    t = check_orders(orders).ravel()
    v = as_array(values, name, "[0, inf]", "non-negative RDP values").ravel()
    if t.size == 0 or t.size != v.size:
        raise ValueError(
            f"orders and {name} must be non-empty and of equal length, got {t.size} and {v.size}"
        )
    return t, v


def refuse_float16_for_adam(params, optimizer: str, alternative: str = "") -> None:
    """Raise ValueError if a trainable parameter of ``params`` is float16: Adam's and AdamW's ``eps`` (1e-8)
    rounds to 0 in float16 and the first step turns weights to NaN. ``alternative`` is a further remedy the
    message offers. Imports torch only when called (this module stays numpy-only)."""
    import torch

    if any(p.requires_grad and p.dtype == torch.float16 for p in params):
        raise ValueError(
            f"model has float16 trainable parameters, which {optimizer} turns to NaN (its eps, 1e-8, rounds to 0 "
            "in float16); use model.to(torch.bfloat16), or keep float32 weights and run float16 compute under "
            f"torch.autocast{alternative}"
        )
