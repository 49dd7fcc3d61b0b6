"""Input validation for every module of icml-generative (and its experiments).

Each check returns the value it accepts and raises with a message that names the argument and says what
was expected: ``ValueError`` for a wrong value (a number or an integer of the wrong type included),
``TypeError`` for an object of the wrong kind (a config, a module, a tensor or its dtype).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")


def _bounds(
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
) -> str:
    ends = ((">=", minimum), (">", above), ("<=", maximum), ("<", below))
    return " and".join(f" {op} {v}" for op, v in ends if v is not None)


def _is_int(value: Any, minimum: int | None = None, maximum: int | None = None) -> bool:
    """An integer (bools refused) in ``[minimum, maximum]``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        return False
    v = int(value)
    return (minimum is None or v >= minimum) and (maximum is None or v <= maximum)


def check_int(
    value: Any, name: str, minimum: int | None = None, maximum: int | None = None, why: str = ""
) -> int:
    """An integer (bools refused) in ``[minimum, maximum]``, either end optional; ``why`` ends the message."""
    if not _is_int(value, minimum, maximum):
        raise ValueError(f"{name} must be an integer{_bounds(minimum, maximum)}{why}, got {value!r}")
    return int(value)


def check_number(
    value: Any,
    name: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
) -> float:
    """A finite real number (bools refused), ``>= minimum``, ``<= maximum``, ``> above``, ``< below`` (each
    optional)."""
    v = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not (
        math.isfinite(v)
        and (minimum is None or v >= minimum)
        and (maximum is None or v <= maximum)
        and (above is None or v > above)
        and (below is None or v < below)
    ):
        raise ValueError(
            f"{name} must be a finite number{_bounds(minimum, maximum, above, below)}, got {value!r}"
        )
    return v


def check_positive(value: Any, name: str) -> float:
    """A finite number > 0."""
    return check_number(value, name, above=0)


def check_ints(
    values: Any, name: str, minimum: int | None = None, maximum: int | None = None
) -> tuple[int, ...]:
    """A non-empty tuple or list of integers, each in ``[minimum, maximum]``."""
    if (
        not isinstance(values, (tuple, list))
        or not values
        or not all(_is_int(v, minimum, maximum) for v in values)
    ):
        raise ValueError(
            f"{name} must be a non-empty tuple of integers{_bounds(minimum, maximum)}, got {values!r}"
        )
    return tuple(int(v) for v in values)


def check_divisor(value: Any, name: str, total: int, total_name: str) -> int:
    """A positive integer that divides ``total`` (the value of the argument ``total_name``)."""
    if not _is_int(value, 1) or total % value:
        raise ValueError(f"{name} must be a positive divisor of {total_name} ({total}), got {value!r}")
    return int(value)


def check_choice(value: T, name: str, choices: Sequence[T]) -> T:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_instance(value: Any, name: str, *types: type[T]) -> T:
    """An instance of one of ``types`` (``TypeError`` otherwise)."""
    if not isinstance(value, types):
        expected = " or ".join(t.__name__ for t in types)
        article = "an" if expected[0] in "AEIOU" else "a"
        raise TypeError(f"{name} must be {article} {expected}, got {type(value).__name__}")
    return value


def check_module(value: Any, method: str, name: str = "module") -> torch.nn.Module:
    """The ``torch.nn.Module`` that ``method`` works on, passed as the argument ``name`` (``TypeError`` otherwise)."""
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{method} needs a torch.nn.Module as {name}, got {type(value).__name__}")
    return value


def check_real_tensor(value: Any, name: str, *, finite: bool = True, nonempty: bool = True) -> torch.Tensor:
    """A tensor of real numbers (bool, integer or floating point; ``TypeError`` for complex or another type),
    non-empty and free of NaN and infinity unless told otherwise."""
    check_tensor(value, name)
    if value.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
    if nonempty and value.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(value.shape)}")
    if finite and value.is_floating_point() and not torch.isfinite(value).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return value


def as_real_tensor(value: Any, name: str, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``value`` (a tensor, an array, a number or nested sequences of numbers) as a ``dtype`` tensor;
    ``TypeError`` naming ``name`` for strings, objects, complex numbers or ragged sequences."""
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
        return value.detach().to(dtype)
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise TypeError
        return torch.as_tensor(arr.astype(np.float64), dtype=dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be real numbers (a tensor, an array or a sequence), got {value!r}"
        ) from None


def check_tensor(
    value: Any,
    name: str,
    shape: Sequence[int | str] | None = None,
    *,
    floating: bool = False,
    finite: bool = False,
) -> torch.Tensor:
    """A tensor (a floating-point one if ``floating``; ``TypeError`` otherwise) of ``shape`` if given (an int
    is a fixed size, a string names a free one, e.g. ``("n", 2)``), with no NaN or infinity if ``finite``."""
    kind = "a floating-point torch.Tensor" if floating else "a torch.Tensor"
    if not isinstance(value, torch.Tensor) or (floating and not value.is_floating_point()):
        got = f"dtype {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise TypeError(f"{name} must be {kind}, got {got}")
    if shape is not None and (
        value.ndim != len(shape)
        or any(isinstance(s, int) and s != n for s, n in zip(shape, value.shape, strict=True))
    ):
        raise ValueError(f"{name} must be shaped ({', '.join(map(str, shape))}), got {tuple(value.shape)}")
    if finite and not torch.isfinite(value).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return value


def check_model_input(
    value: Any, name: str, module: torch.nn.Module, shape: Sequence[int | str] | None = None
) -> torch.Tensor:
    """A finite, non-empty floating-point tensor (of ``shape`` if given, as :func:`check_tensor`) in the dtype
    ``module`` computes in (``TypeError`` otherwise: torch would fail deep inside the first layer): its first
    parameter's, or under diffusers' ``enable_layerwise_casting`` the compute dtype of the layer holding it
    (the weights are stored in, e.g., bfloat16 or float8 and cast to the compute dtype for each forward)."""
    check_tensor(value, name, shape, floating=True, finite=True)
    if value.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(value.shape)}")
    first = next(module.named_parameters(), None)
    if first is not None:
        dtype = _compute_dtype(module, *first)
        if value.dtype != dtype:
            raise TypeError(f"{name} must have the model's dtype {dtype}, got {value.dtype}")
    return value


def _compute_dtype(module: torch.nn.Module, param_name: str, param: torch.Tensor) -> torch.dtype:
    """The dtype ``param`` (named ``param_name`` in ``module``) computes in: the ``compute_dtype`` of a
    diffusers hook on the layer holding it (``LayerwiseCastingHook``), else its own."""
    owner = module.get_submodule(param_name.rpartition(".")[0])
    registry = getattr(owner, "_diffusers_hook", None)
    for hook in getattr(registry, "hooks", {}).values():
        dtype = getattr(hook, "compute_dtype", None)
        if isinstance(dtype, torch.dtype):
            return dtype
    return param.dtype


def check_trainable_dtype(module: torch.nn.Module, name: str, method: str) -> None:
    """Refuse float16 trainable parameters in ``module`` (the argument ``name`` of ``method``), which trains
    them with Adam(W) in their own dtype: its ``eps`` (1e-8) rounds to 0 in float16, so the first update
    divides by zero and turns weights to NaN (``ValueError``)."""
    if any(p.requires_grad and p.dtype == torch.float16 for p in module.parameters()):
        raise ValueError(
            f"{method}: {name} has float16 trainable parameters, which Adam turns to NaN (its eps, 1e-8, "
            f"rounds to 0 in float16); use {name}.to(torch.bfloat16), or keep float32 weights and run "
            "float16 compute under torch.autocast"
        )


def check_same_shape(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    """Two tensors of equal shape (``names``: how the message calls them, e.g. ``"x and ref"``)."""
    if a.shape != b.shape:
        raise ValueError(f"{names} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def check_cache_schedule(threshold: Any, alignment_steps: Any, num_inference_steps: Any) -> None:
    """The fields every stack cache's config has: ``threshold > 0``; ``alignment_steps`` (>= 1) and
    ``num_inference_steps`` (>= 2), integers or None; the alignment phase shorter than the schedule."""
    check_positive(threshold, "threshold")
    for value, name, minimum in (
        (alignment_steps, "alignment_steps", 1),
        (num_inference_steps, "num_inference_steps", 2),
    ):
        if value is not None:
            check_int(value, name, minimum, why=" or None")
    if (
        alignment_steps is not None
        and num_inference_steps is not None
        and alignment_steps >= num_inference_steps
    ):
        raise ValueError(
            f"alignment_steps ({alignment_steps}) must be smaller than num_inference_steps ({num_inference_steps})"
        )


def random_device(generator: torch.Generator | None, default: torch.device | str | None) -> Any:
    """Where draws with ``generator`` run: its own device (a generator draws only there), else ``default``.
    Callers draw there and move the result to their data's device, as diffusers' ``randn_tensor`` does, so
    a CPU generator serves CUDA data and a CUDA generator serves CPU data."""
    if generator is None:
        return default
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator.device
