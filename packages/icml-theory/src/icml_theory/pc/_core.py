"""The energies without input checks, for the inference loops (the checked, public versions are in
:mod:`icml_theory.pc.energy`, which documents them)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in at least float32, for the sums: a float16 sum of squares overflows above 65504 and bfloat16
    sums lose the small terms (float32 and float64 pass through untouched)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def output_loss(output: torch.Tensor, target: torch.Tensor, loss: str) -> torch.Tensor:
    if loss == "mse":
        return 0.5 * _wide(output - target).pow(2).sum()
    return F.cross_entropy(_wide(output), target, reduction="sum")


def forward_states(layers: Sequence[nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    states = []
    s = x
    for f in layers:
        s = f(s)
        states.append(s)
    return states


def states_from_errors(
    layers: Sequence[nn.Module], x: torch.Tensor, errors: Sequence[torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    states = []
    s = x
    for f, e in zip(layers[:-1], errors, strict=True):
        s = f(s) + e
        states.append(s)
    return states, layers[-1](s)


def energy(layers, x, y, states, loss: str, beta: float) -> torch.Tensor:
    total = _wide(x.new_zeros(()))
    previous = x
    for f, s in zip(layers[:-1], states, strict=True):
        total = total + 0.5 * _wide(s - f(previous)).pow(2).sum()
        previous = s
    return total + beta * output_loss(layers[-1](previous), y, loss)


def error_energy(layers, x, y, errors, loss: str, beta: float) -> torch.Tensor:
    _, output = states_from_errors(layers, x, errors)
    total = _wide(x.new_zeros(()))
    for e in errors:
        total = total + 0.5 * _wide(e).pow(2).sum()
    return total + beta * output_loss(output, y, loss)


def local_energy(layers, x, y, states, loss: str, beta: float) -> torch.Tensor:
    return energy(layers, x, y, [s.detach() for s in states], loss, beta)
