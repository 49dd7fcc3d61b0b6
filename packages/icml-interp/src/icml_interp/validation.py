"""Argument checks shared by every module of ``icml_interp`` and its experiments (and :func:`eval_mode`, the
eval-mode context of the functions that run a caller's model).

Each check raises with a message that names the argument and says what was expected, and returns the value
(converted where noted) so that a call can stand in an assignment. A value of the wrong type raises
``TypeError``, a value of the right type but out of range ``ValueError``; ``bool`` is never an int or a number.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import overload

import torch
from torch import nn


def _bounds(
    noun: str, minimum: float | None, maximum: float | None, open_min: bool = False, open_max: bool = False
) -> str:
    """``"a positive int"``, ``"an int >= 24"``, ``"a number in (0, 1]"``, ... (``noun`` with its article)."""
    if minimum is not None and maximum is not None:
        return f"{noun} in {'(' if open_min else '['}{minimum}, {maximum}{')' if open_max else ']'}"
    if minimum == 0 or (minimum == 1 and noun == "an int"):
        sign = "positive" if open_min or minimum == 1 else "non-negative"
        return f"a {sign} {noun.split()[-1]}"
    if minimum is not None:
        return f"{noun} {'>' if open_min else '>='} {minimum}"
    if maximum is not None:
        return f"{noun} {'<' if open_max else '<='} {maximum}"
    return noun


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` is an int (not a bool) in ``[minimum, maximum]`` (either bound optional)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {_bounds('an int', minimum, maximum)}, got {value!r}")
    return value


def check_number(
    value,
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_min: bool = False,
    open_max: bool = False,
) -> float:
    """``value`` is a finite real number (not a bool) between the bounds (closed unless ``open_*``); as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    low = minimum is not None and (value <= minimum if open_min else value < minimum)
    high = maximum is not None and (value >= maximum if open_max else value > maximum)
    if low or high:
        raise ValueError(
            f"{name} must be {_bounds('a number', minimum, maximum, open_min, open_max)}, got {value!r}"
        )
    return float(value)


def check_choice(value, name: str, choices: Collection):
    """``value`` is one of ``choices``."""
    try:
        known = value in choices
    except TypeError:  # an unhashable value and a set or dict of choices
        known = False
    if not known:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_type(value, name: str, types: type | tuple[type, ...], expected: str):
    """``value`` is an instance of ``types`` (``expected`` says so in words, e.g. ``"an SAEConfig"``)."""
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}")
    return value


def check_tensor(
    x, name: str, shape: str, *, ndim: int | Iterable[int] | None = None, integer: bool = False
) -> torch.Tensor:
    """``x`` is a non-empty tensor with ``ndim`` dimensions (integer dtype if ``integer``); ``shape`` describes
    the expected layout in the message, e.g. ``"(n_tokens, d_sae)"``."""
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if (
        not isinstance(x, torch.Tensor)
        or x.numel() == 0
        or (dims is not None and x.dim() not in tuple(dims))
        or (integer and x.dtype.is_floating_point)
    ):
        what = "integer tensor of class ids" if integer else "tensor"
        raise ValueError(f"{name} must be a non-empty {shape} {what}, got {getattr(x, 'shape', x)!r}")
    return x


def check_activations(x, name: str, width: int, what: str) -> torch.Tensor:
    """``x`` is a floating-point tensor shaped ``(..., width)``; ``what`` says what ``width`` is."""
    check_type(x, name, torch.Tensor, "a torch.Tensor")
    if x.ndim == 0 or x.shape[-1] != width:
        raise ValueError(
            f"{name} must have shape (..., {width}) ({what}), got {tuple(x.shape)}"
            + (" (activation width mismatch)" if name == "x" else "")
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    return x


def check_d_in(width: int, d_in: int, name: str | None = None) -> None:
    """An activation of ``width`` channels fits an SAE with input width ``d_in`` (``name``: the argument that
    holds the activation, named in the message)."""
    if width != d_in:
        where = f"{name}: " if name else ""
        raise ValueError(f"{where}activation width {width} does not match the SAE's d_in = {d_in}")


def check_finite(x: torch.Tensor, name: str) -> torch.Tensor:
    """A tensor holds no NaN or inf (integer and bool tensors always pass)."""
    if (x.is_floating_point() or x.is_complex()) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must hold finite values, got NaN or inf")
    return x


def check_bool(value, name: str) -> bool:
    """``value`` is a bool (not 0, 1 or another truthy object)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def check_sae_like(sae, name: str = "sae") -> None:
    """``sae`` has ``encode``/``decode`` methods and a ``W_dec`` tensor ``(d_sae, d_in)``, like an SAE."""
    w_dec = getattr(sae, "W_dec", None)
    if not (
        callable(getattr(sae, "encode", None))
        and callable(getattr(sae, "decode", None))
        and isinstance(w_dec, torch.Tensor)
        and w_dec.ndim == 2
    ):
        raise TypeError(
            f"{name} must be an SAE (encode() and decode() methods, a W_dec (d_sae, d_in) tensor), "
            f"got {type(sae).__name__}"
        )


def check_token_ids(input_ids, vocab: int | None = None, name: str = "input_ids") -> torch.Tensor:
    """``input_ids`` is a non-empty ``torch.long`` tensor ``(seq,)`` or ``(batch, seq)`` (with ids in
    ``[0, vocab)`` if given); returned as ``(batch, seq)``."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.long:
        raise TypeError(
            f"{name} must be a torch.LongTensor, got {getattr(input_ids, 'dtype', type(input_ids).__name__)}"
        )
    if input_ids.ndim not in (1, 2) or input_ids.numel() == 0:
        raise ValueError(
            f"{name} must be a non-empty tensor shaped (seq,) or (batch, seq), got {tuple(input_ids.shape)}"
        )
    if vocab is not None and (input_ids.min() < 0 or input_ids.max() >= vocab):
        raise ValueError(
            f"{name} must lie in [0, {vocab}), got values in [{int(input_ids.min())}, {int(input_ids.max())}]"
        )
    return input_ids if input_ids.ndim == 2 else input_ids[None]


def check_token_sequences(sequences, vocab: int, name: str) -> list[torch.Tensor]:
    """``sequences`` (a ``(batch, seq)`` LongTensor or a list of 1-d token-id tensors or lists) as a list of
    1-d LongTensors, checked."""
    if isinstance(sequences, torch.Tensor):
        if sequences.dtype != torch.long or sequences.ndim != 2 or 0 in sequences.shape:
            raise ValueError(
                f"{name} must be a non-empty (batch, seq) LongTensor or a list of token-id sequences, "
                f"got {sequences.dtype} {tuple(sequences.shape)}"
            )
        rows = list(sequences)
    elif isinstance(sequences, Sequence) and not isinstance(sequences, (str, bytes)) and len(sequences) > 0:
        rows = []
        for i, s in enumerate(sequences):
            if isinstance(s, torch.Tensor):
                if s.dtype != torch.long or s.ndim != 1:
                    raise ValueError(f"{name}[{i}] must be a 1-d LongTensor, got {s.dtype} {tuple(s.shape)}")
                rows.append(s)
            elif isinstance(s, (list, tuple)) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in s
            ):
                rows.append(torch.tensor(list(s), dtype=torch.long))
            else:
                raise TypeError(f"{name}[{i}] must be a list of int token ids or a 1-d LongTensor, got {s!r}")
    else:
        raise TypeError(
            f"{name} must be a non-empty (batch, seq) LongTensor or a list of token-id sequences, "
            f"got {type(sequences).__name__}"
        )
    for i, s in enumerate(rows):
        if s.numel() == 0:
            raise ValueError(f"{name}[{i}] is empty")
        if int(s.min()) < 0 or int(s.max()) >= vocab:
            raise ValueError(f"{name}[{i}] holds token ids outside [0, {vocab})")
    return rows


@overload
def check_indices(values: None, size: int, name: str) -> None: ...
@overload
def check_indices(values: int | Iterable[int], size: int, name: str) -> list[int]: ...
def check_indices(values, size: int, name: str) -> list[int] | None:
    """One int or ints in ``[-size, size)`` as a list of indices in ``[0, size)`` (``None`` stays ``None``)."""
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not isinstance(values, (int, Iterable)):
        raise TypeError(f"{name} must be None, an int or a list of ints, got {values!r}")
    values = [values] if isinstance(values, int) else list(values)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not -size <= v < size:
            raise ValueError(f"{name} must be ints in [-{size}, {size}), got {v!r}")
    return [v % size for v in values]


def check_head(head, name: str, n_layers: int, n_heads: int) -> tuple[int, int]:
    """``head`` is a ``(layer, head)`` pair of ints inside a model of ``n_layers`` x ``n_heads``."""
    if not (
        isinstance(head, tuple)
        and len(head) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in head)
    ):
        raise TypeError(f"{name} must be (layer, head) tuples of ints, got {head!r}")
    layer, h = head
    if not (0 <= layer < n_layers and 0 <= h < n_heads):
        raise ValueError(f"{name} {head} is outside the model's {n_layers} layers x {n_heads} heads")
    return layer, h


def check_inputs(inputs, name: str = "inputs") -> None:
    """``inputs`` is a non-empty tensor batch, a non-empty sequence or another iterable of model inputs."""
    if isinstance(inputs, torch.Tensor):
        if inputs.ndim == 0 or inputs.shape[0] == 0:
            raise ValueError(f"{name} is an empty tensor (shape {tuple(inputs.shape)}): nothing to run")
        return
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
        raise TypeError(
            f"{name} must be a tensor, a list or an iterable of model inputs, got {type(inputs).__name__}"
        )
    if isinstance(inputs, Sequence) and len(inputs) == 0:
        raise ValueError(f"{name} is empty: nothing to run")


def check_replacement(out, given: torch.Tensor, what: str) -> torch.Tensor | None:
    """What a hook returned (``what`` names it): ``None``, or a tensor of ``given``'s shape (cast to its dtype)."""
    if out is None:
        return None
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{what} must return None or a tensor, got {type(out).__name__}")
    if out.shape != given.shape:
        raise ValueError(
            f"{what} returned shape {tuple(out.shape)}, expected {tuple(given.shape)} (the activation's shape)"
        )
    return out.to(given.dtype)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode for the body; on exit, also when the body raises, every submodule's ``training``
    flag is what it was, so mixed modes (a frozen BatchNorm in a training model, MC dropout in an eval model)
    survive."""
    flags = [(module, module.training) for module in model.modules()]
    try:
        model.eval()
        yield model
    finally:
        for module, training in flags:
            module.training = training
