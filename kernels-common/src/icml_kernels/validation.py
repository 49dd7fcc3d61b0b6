"""Input validation for every module of icml-kernels (and, through :mod:`icml_compress.validation`, of the
packages built on it).

Conventions: a value of the wrong type raises ``TypeError``, a value of the right type outside its domain
``ValueError``; every message names the argument and says what was expected. None of these checks reads
tensor data: they look at Python values and tensor metadata only, so they never wait for a device.
:func:`values_readable` says when the checks that do read data (NaN entries, index ranges) can run.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar, cast

import torch
from torch._subclasses.fake_tensor import is_fake as _is_fake  # torch's test, functional wrappers too

Size = TypeVar("Size", int, torch.SymInt)
_FLOAT_MAX = sys.float_info.max


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"in {minimum}..{maximum}"
    return f"{minimum} or more" if minimum is not None else f"{maximum} or less"


def check_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int (bools refused) in ``minimum..maximum`` (either end optional); a ``torch.SymInt`` too (an int
    argument that ``torch.compile`` made dynamic reaches a registered op's fake as one)."""
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {_range_text(minimum, maximum)}, got {value}")
    return cast(int, value)  # a SymInt stands for an int while tracing


def check_finite_float(value: Any, name: str) -> float:
    """A finite Python number (int or float, bools refused), returned as a float: another type raises
    ``TypeError``, NaN, an infinity or an int too large for a float ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a finite float, got {value!r:.80}")
    try:
        out = float(value)
    except OverflowError:  # an int beyond float range (its repr may be too long to print)
        raise ValueError(
            f"{name} must be a finite float, got an int of {int(value).bit_length()} bits (beyond float range)"
        ) from None
    # comparisons, not math.isfinite: torch.compile traces them (a float it made dynamic gets a guard; NaN
    # fails both), where math.isfinite broke the graph
    if not -_FLOAT_MAX <= out <= _FLOAT_MAX:
        raise ValueError(f"{name} must be a finite float, got {value!r}")
    return out


def check_power_of_two(value: Size, name: str) -> Size:
    """A positive power of two: 1, 2, 4, ... (a ``torch.SymInt`` too: a traced tensor's size). Not an int
    (a bool, a float such as ``8.0``) raises ``TypeError``, another int ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int, a power of two (1, 2, 4, ...), got {value!r:.80}")
    # SymInts of torch < 2.6 have no bitwise operators: compare with the power of two at or below the
    # size instead (comparisons and shifts of Python ints only)
    if value < 1 or value != 1 << (int(value).bit_length() - 1):
        bits = int(value).bit_length()  # a huge int's repr may be too long to print
        shown = repr(value) if bits <= 64 else f"an int of {bits} bits"
        raise ValueError(f"{name} must be a power of two (1, 2, 4, ...), got {shown}")
    return value


def check_tensor(value: Any, name: str, dtypes: tuple[torch.dtype, ...] | None = None) -> torch.Tensor:
    """A ``torch.Tensor``, of one of ``dtypes`` when given."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if dtypes is not None and value.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        kind = (
            f"dtype {names}"
            if len(dtypes) == 1
            else f"a floating dtype ({names})"
            if all(d.is_floating_point for d in dtypes)
            else f"one of the dtypes ({names})"
        )
        raise TypeError(f"{name} must have {kind}, got {value.dtype}")
    return value


def lacks_values(*tensors: torch.Tensor | None) -> bool:
    """Whether one of the given tensors (None skipped) has no values to read: a meta tensor
    (``device="meta"``, accelerate's ``init_empty_weights``) or a fake tensor of ``FakeTensorMode`` and
    ``torch.export``. False while dynamo traces (``torch.compile``, a strict ``torch.export``: the code
    sees no tensors then, only proxies of real ones); a non-strict ``torch.export`` runs the Python code
    on fake tensors, and this says so."""
    if torch.compiler.is_dynamo_compiling():
        return False
    return any(t is not None and (t.is_meta or _is_fake(t)) for t in tensors)


def values_readable(*tensors: torch.Tensor | None) -> bool:
    """Whether the data of every given tensor (None skipped) can be read: False while ``torch.compile``
    traces (a data-dependent branch would break the graph) and when :func:`lacks_values`. The public
    functions skip their checks of tensor data (NaN entries, index ranges, overflow warnings) exactly then
    and keep every metadata check (until 2026-12 they read meta and fake tensors and failed)."""
    return not torch.compiler.is_compiling() and not lacks_values(*tensors)
