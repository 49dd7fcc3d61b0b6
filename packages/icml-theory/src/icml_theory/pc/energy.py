"""Predictive-coding energies of a layered model, in the state form (sPC) and the error form (ePC).

A model is a sequential stack of layers ``f_1 … f_L`` (an ``nn.Sequential``, an ``nn.ModuleList`` or a list
of modules; group modules into one layer with a nested ``nn.Sequential``). With ``s_0 = x`` and hidden states
``s_1 … s_{L-1}`` the energy is

    E(s) = Σ_{l<L} ½‖s_l − f_l(s_{l−1})‖² + β ℓ(f_L(s_{L−1}), y),

summed over the batch, with ``ℓ`` the summed squared error (``"mse"``: ½‖ŷ − y‖²) or the summed
cross-entropy (``"ce"``). ePC writes the states through their errors, ``s_l = f_l(s_{l−1}) + e_l``, so that

    E(e) = Σ_{l<L} ½‖e_l‖² + β ℓ(f_L(s_{L−1}(e)), y)

takes the same value at corresponding points; the map between ``s`` and ``e`` is triangular with unit
diagonal, so both forms have the same stationary points. The weight gradient at given states is that of the
*local* energy, the state energy with every state detached: each layer's parameters then see only their own
term ``½‖f_l(s_{l−1}) − s_l‖²`` (or the output loss).

The losses and energies of a half-precision model (float16, bfloat16) are summed, and returned, in float32:
a float16 sum of squares overflows above 65504. Float32 and float64 models sum in their own dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

import icml_theory.pc._core as core
from icml_theory.pc._checks import (
    as_input,
    check_batch,
    check_finite,
    check_output,
    check_tensors,
    forward_checked,
)
from icml_theory.validation import check_choice, check_real

LOSSES = ("mse", "ce")
# layers whose output is not a deterministic function of the input in training mode: inference would
# chase a moving target
_RANDOM = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)

__all__ = [
    "LOSSES",
    "as_layers",
    "energy",
    "error_energy",
    "forward_states",
    "local_energy",
    "output_loss",
    "states_from_errors",
]


def as_layers(model) -> list[nn.Module]:
    """The layers ``f_1 … f_L`` of a sequential stack, checked: an ``nn.Sequential``, an ``nn.ModuleList``, or a
    list or tuple of modules, at least one layer, none of them dropout or batch normalisation."""
    if isinstance(model, nn.Sequential | nn.ModuleList):
        layers = list(model)
    elif isinstance(model, list | tuple) and all(isinstance(m, nn.Module) for m in model):
        layers = list(model)
    else:
        raise TypeError(
            "model must be a sequential stack of layers (nn.Sequential, nn.ModuleList or a list of "
            f"nn.Module, one predictive-coding layer each), got {type(model).__name__}"
        )
    if not layers:
        raise ValueError("model must have at least one layer, got an empty stack")
    for layer in layers:
        for m in layer.modules():
            if isinstance(m, _RANDOM):
                raise ValueError(
                    f"model holds {type(m).__name__}: predictive coding needs deterministic layers "
                    "(drop dropout; replace batch norm by layer norm)"
                )
    return layers


def output_loss(output: torch.Tensor, target: torch.Tensor, loss: str = "ce") -> torch.Tensor:
    """ℓ summed over the batch: ``"mse"`` ½‖output − target‖², ``"ce"`` cross-entropy of logits against class
    indices (``output`` of shape ``(B, C, …)``, ``target`` of shape ``(B, …)``); float32 for a half-precision
    ``output`` (see the module docstring)."""
    loss = check_choice(loss, "loss", LOSSES)
    like = output if isinstance(output, torch.Tensor) and output.is_floating_point() else torch.zeros(())
    output, target = check_batch(output, target, loss, like, names=("output", "target"))
    check_output(output, target, loss, "target")
    return check_finite(core.output_loss(output, target, loss), "the loss", "output or target")


def forward_states(model, x) -> list[torch.Tensor]:
    """The forward pass ``[s_1, …, s_L]`` (``s_L`` the output): the states where every error is zero."""
    layers = as_layers(model)
    x = as_input(x, "x", _like(layers))
    forward_checked(layers, x)
    return core.forward_states(layers, x)


def states_from_errors(model, x, errors) -> tuple[list[torch.Tensor], torch.Tensor]:
    """ePC's states ``s_l = f_l(s_{l−1}) + e_l`` for ``l < L`` and the output ``f_L(s_{L−1})``."""
    layers = as_layers(model)
    like = _like(layers)
    x = as_input(x, "x", like)
    shapes = [s.shape for s in forward_checked(layers, x)[:-1]]
    return core.states_from_errors(layers, x, check_tensors(errors, "errors", shapes, like))


def energy(model, x, y, states, loss: str = "ce", beta: float = 1.0) -> torch.Tensor:
    """The state energy E(s) (a scalar tensor) at hidden states ``[s_1, …, s_{L−1}]``."""
    layers, x, y, states, loss, beta = _checked(model, x, y, states, "states", loss, beta)
    return check_finite(core.energy(layers, x, y, states, loss, beta), "the energy", "states, x, y or beta")


def error_energy(model, x, y, errors, loss: str = "ce", beta: float = 1.0) -> torch.Tensor:
    """ePC's energy E(e) = Σ ½‖e_l‖² + β ℓ(f_L(s_{L−1}(e)), y) (a scalar tensor)."""
    layers, x, y, errors, loss, beta = _checked(model, x, y, errors, "errors", loss, beta)
    return check_finite(
        core.error_energy(layers, x, y, errors, loss, beta), "the energy", "errors, x, y or beta"
    )


def local_energy(model, x, y, states, loss: str = "ce", beta: float = 1.0) -> torch.Tensor:
    """The state energy with every state detached: its value is E(s), its gradient with respect to layer
    ``l``'s parameters is local (only term ``l`` depends on them) and equals ∂E/∂θ_l at ``s``."""
    layers, x, y, states, loss, beta = _checked(model, x, y, states, "states", loss, beta)
    return check_finite(
        core.local_energy(layers, x, y, states, loss, beta), "the energy", "states, x, y or beta"
    )


# ---------------------------------------------------------------- checks
def _like(layers: Sequence[nn.Module]) -> torch.Tensor:
    """A tensor with the parameters' dtype and device (float32 on the CPU for a model without parameters)."""
    return next((p for f in layers for p in f.parameters()), torch.zeros(()))


def _checked(model, x, y, seq, seq_name: str, loss: str, beta: float):
    layers = as_layers(model)
    loss = check_choice(loss, "loss", LOSSES)
    beta = check_real(beta, "beta", "(0, inf)")
    like = _like(layers)
    x, y = check_batch(x, y, loss, like)
    forward = forward_checked(layers, x)
    check_output(forward[-1], y, loss)
    seq = check_tensors(seq, seq_name, [s.shape for s in forward[:-1]], like)
    return layers, x, y, seq, loss, beta
