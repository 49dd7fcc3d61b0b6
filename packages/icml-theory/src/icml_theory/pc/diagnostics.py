"""Diagnostics of predictive-coding inference: the equilibrium (a reference solve of inference, independent of
sPC's and ePC's own gradient steps), the weight gradient there, agreement between gradients, and the number
of inference steps an energy trace needs to close most of the gap to the equilibrium energy."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

import icml_theory.pc._core as core
from icml_theory.pc._checks import check_batch, check_finite, check_output, forward_checked
from icml_theory.pc.energy import LOSSES, as_layers
from icml_theory.validation import check_choice, check_int, check_real

__all__ = ["Equilibrium", "equilibrium", "iterations_to_tolerance", "relative_error"]


@dataclasses.dataclass(frozen=True)
class Equilibrium:
    """An equilibrium of inference on one batch.

    ``states``: the hidden states ``[s_1 … s_{L−1}]``; ``energy``: E there; ``gradients``: ∂E/∂θ / B for each
    parameter of the model (in ``model.parameters()`` order), the exact PC weight gradient; ``grad_norm``: the
    largest entry of |∂E/∂e| left (0 at an exact equilibrium); ``iterations``: L-BFGS iterations used;
    ``converged``: whether ``grad_norm <= tol``."""

    states: list[torch.Tensor]
    energy: float
    gradients: list[torch.Tensor]
    grad_norm: float
    iterations: int
    converged: bool


def equilibrium(
    model, x, y, loss: str = "ce", *, beta: float = 1.0, tol: float = 1e-10, max_iter: int = 2000
) -> Equilibrium:
    """Solve inference to ``max|∂E/∂e| <= tol`` with L-BFGS (strong-Wolfe line search) on ePC's errors, from zero
    errors (the forward pass), and return the states, the energy and the weight gradient there. Use float64
    models for tolerances below ~1e-6. The model's ``.grad`` fields are not touched."""
    layers = as_layers(model)
    loss = check_choice(loss, "loss", LOSSES)
    beta = check_real(beta, "beta", "(0, inf)")
    tol = check_real(tol, "tol", "(0, inf)")
    max_iter = check_int(max_iter, "max_iter", 1)
    params = [p for f in layers for p in f.parameters()]
    if not params:
        raise ValueError("model must have parameters, got none")
    x, y = check_batch(x, y, loss, params[0])
    forward = forward_checked(layers, x)
    check_output(forward[-1], y, loss)
    check_finite(
        beta * core.output_loss(forward[-1], y, loss), "the energy of the forward pass", "x, y or beta"
    )
    errors = [torch.zeros_like(s, requires_grad=True) for s in forward[:-1]]
    iterations, left = 0, 0.0

    def value() -> torch.Tensor:
        return core.error_energy(layers, x, y, errors, loss, beta)

    # L-BFGS with a strong-Wolfe line search until the energy stops changing in float rounding, then L-BFGS
    # with unit steps (which needs no energy values) to drive the gradient itself down to tol
    for search in ("strong_wolfe", None):
        if not errors or (left <= tol and iterations) or iterations >= max_iter:
            break
        iterations += _lbfgs(errors, value, max_iter - iterations, tol, search)
        left = max(float(g.abs().max()) for g in torch.autograd.grad(value(), errors))
    with torch.no_grad():
        states = [s.detach() for s in core.states_from_errors(layers, x, [e.detach() for e in errors])[0]]
    local = core.local_energy(layers, x, y, states, loss, beta)
    found = torch.autograd.grad(local / x.shape[0], params, allow_unused=True)
    gradients = [torch.zeros_like(p) if g is None else g for p, g in zip(params, found, strict=True)]
    return Equilibrium(states, float(local.detach()), gradients, left, iterations, left <= tol)


def _lbfgs(errors: list[torch.Tensor], value, max_iter: int, tol: float, search: str | None) -> int:
    """One L-BFGS run on ``errors`` minimising ``value()``; returns the iterations it took."""
    solver = torch.optim.LBFGS(
        errors,
        lr=1,
        max_iter=max_iter,
        tolerance_grad=tol,
        tolerance_change=0.0,
        history_size=50,
        line_search_fn=search,
    )

    def closure() -> torch.Tensor:
        solver.zero_grad()
        e = value()
        e.backward(inputs=errors)
        return e

    solver.step(closure)
    return int(solver.state[solver._params[0]]["n_iter"])


def relative_error(estimate: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> float:
    """‖estimate − reference‖ / ‖reference‖ over all tensors together (e.g. a model's parameter gradients)."""
    if not isinstance(estimate, Sequence) or not isinstance(reference, Sequence):
        raise TypeError("estimate and reference must be sequences of tensors")
    if len(estimate) != len(reference) or not reference:
        raise ValueError(
            f"estimate and reference must hold the same number (>= 1) of tensors, got {len(estimate)} and {len(reference)}"
        )
    for name, seq in (("estimate", estimate), ("reference", reference)):
        if not all(isinstance(t, torch.Tensor) for t in seq):
            raise TypeError(f"{name} must hold torch tensors")
    for a, b in zip(estimate, reference, strict=True):
        if a.shape != b.shape:
            raise ValueError(
                f"estimate and reference must match in shape, got {tuple(a.shape)} and {tuple(b.shape)}"
            )
    a = torch.cat([t.detach().reshape(-1).double().cpu() for t in estimate])
    b = torch.cat([t.detach().reshape(-1).double().cpu() for t in reference])
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("estimate and reference must be finite")
    if not bool((b != 0).any()):
        raise ValueError("reference must not be all zeros (the relative error is undefined)")
    # scaled by the largest entry first, so that huge finite values do not overflow the norms
    scale = max(float(a.abs().max()), float(b.abs().max()))
    a, b = a / scale, b / scale
    ratio = float((a - b).norm()) / float(b.norm())
    if not math.isfinite(ratio):
        raise ValueError("the relative error overflows: reference is tiny next to estimate")
    return ratio


def iterations_to_tolerance(energies, equilibrium_energy: float, tol: float = 0.01) -> int | None:
    """The first inference step ``t`` with ``E_t − E* <= tol · (E_0 − E*)`` — the step where the trace has closed
    all but ``tol`` of its gap to the equilibrium energy ``E*`` — or None if it never does."""
    trace = _trace(energies)
    if trace.numel() == 0 or not torch.isfinite(trace).all():
        raise ValueError("energies must be a non-empty, finite energy trace")
    target = check_real(equilibrium_energy, "equilibrium_energy")
    tol = check_real(tol, "tol", "(0, 1)")
    gap = trace - target
    if float(gap[0]) <= 0:
        return 0
    hits = (gap <= tol * float(gap[0])).nonzero()
    return int(hits[0]) if len(hits) else None


def _trace(energies) -> torch.Tensor:
    """``energies`` (a tensor, an array or a list of real numbers) as a 1-D float64 tensor."""
    if isinstance(energies, torch.Tensor):
        if energies.is_complex() or energies.dtype == torch.bool:
            raise TypeError(f"energies must hold real numbers, got a {energies.dtype} tensor")
        return energies.detach().double().reshape(-1).cpu()
    try:
        array = np.asarray(energies)
        if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
            raise TypeError
        return torch.as_tensor(array.astype(np.float64)).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(
            f"energies must be a sequence of real numbers, got {type(energies).__name__}"
        ) from None
