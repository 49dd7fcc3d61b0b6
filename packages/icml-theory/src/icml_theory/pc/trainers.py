"""Trainers with one API for backprop, state-based predictive coding (sPC) and error-based predictive coding
(ePC), for any sequential stack of torch modules (an MLP, a CNN, transformer blocks).

Each training step on a batch ``(x, y)``:

* :class:`Backprop`: the gradient of the mean output loss ``ℓ(model(x), y) / B``.
* :class:`SPC`: states start at the forward pass; ``inference_steps`` gradient steps on the states,
  ``s ← s − inference_lr · ∂E/∂s`` (each layer's update needs only its neighbours: the output error travels
  back one layer per step, which is sPC's signal decay); then the weight gradient of the local energy
  ``∂E/∂θ / B`` at the final states.
* :class:`EPC`: errors start at zero; ``inference_steps`` gradient steps on the errors,
  ``e ← e − inference_lr · ∂E/∂e`` (through the whole forward pass: the output error reaches every layer in
  one step); then the same local weight gradient at the states ``s_l = f_l(s_{l−1}) + e_l``.

At an equilibrium of inference both predictive-coding trainers give the same, exact PC weight gradient.
The weights move with a torch optimizer (Adam with ``lr`` unless one is given). Prediction is the plain
forward pass (all errors zero). One design choice of ours: the official ePC code rescales the weight loss by
``1 / min(1, inference_lr · inference_steps)``; we do not, so that the gradients are exactly ∂E/∂θ / B.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

import icml_theory.pc._core as core
from icml_theory.pc._checks import as_input, check_batch, check_finite, check_output, forward_checked
from icml_theory.pc.energy import LOSSES, as_layers
from icml_theory.validation import (
    check_choice,
    check_int,
    check_real,
    check_seed,
    refuse_float16_for_adam,
)

__all__ = ["EPC", "SPC", "Backprop", "TrainStep", "Trainer"]


@dataclasses.dataclass(frozen=True)
class TrainStep:
    """What one step measured.

    ``loss``: the mean output loss of the forward pass before the update. ``energies``: the energy before
    each inference step and after the last (``inference_steps + 1`` values; empty for backprop).
    ``grad_norms``: each layer's weight-gradient norm (0 for a layer without parameters) — the
    signal-decay picture."""

    loss: float
    energies: torch.Tensor
    grad_norms: torch.Tensor


class Trainer:
    """Base of the trainers: the model, its optimizer, the output loss, ``predict``, ``fit``, ``save``/``load``.

    Parameters: ``model`` a sequential stack (see :func:`icml_theory.pc.energy.as_layers`); ``loss``
    ``"ce"`` (class-index targets) or ``"mse"`` (targets shaped like the output); ``lr`` Adam's learning
    rate when ``optimizer`` is None; ``optimizer`` a torch optimizer over the model's parameters.

    With ``optimizer=None`` a model with float16 trainable parameters is refused (ValueError): Adam's ``eps``
    (1e-8) rounds to 0 in float16 and the first step turns weights to NaN; train in bfloat16, or in float32
    under ``torch.autocast`` for float16 compute (or pass an ``optimizer`` suited to float16 weights)."""

    method = "trainer"

    def __init__(
        self, model, loss: str = "ce", *, lr: float = 1e-3, optimizer: torch.optim.Optimizer | None = None
    ):
        self.layers = as_layers(model)
        self.model = model if isinstance(model, nn.Module) else nn.ModuleList(self.layers)
        self.loss = check_choice(loss, "loss", LOSSES)
        self.lr = check_real(lr, "lr", "(0, inf)")
        params = list(self.model.parameters())
        if not params:
            raise ValueError("model must have trainable parameters, got none")
        if optimizer is None:
            refuse_float16_for_adam(params, "Adam", ", or pass an optimizer suited to float16 weights")
            optimizer = torch.optim.Adam(params, lr=self.lr)
        elif not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}"
            )
        else:
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            if not all(id(p) in held for p in params):
                raise ValueError("optimizer must hold every parameter of model")
        self.optimizer = optimizer

    def _batch(self, x, y) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The checked batch and its forward pass ``[s_1 … s_L]`` (no graph), whose output ``y`` must fit and
        whose loss must be finite."""
        x, y = check_batch(x, y, self.loss, next(self.model.parameters()))
        forward = forward_checked(self.layers, x)
        check_output(forward[-1], y, self.loss)
        check_finite(core.output_loss(forward[-1], y, self.loss), "the loss of the forward pass", "x or y")
        return x, y, forward

    # ------------------------------------------------------------------ one step
    def _weight_loss(
        self, x: torch.Tensor, y: torch.Tensor, forward: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(the scalar whose gradient is the update, the energy trace, the forward pass's mean loss)."""
        raise NotImplementedError

    def gradients(self, x, y) -> TrainStep:
        """Zero the gradients, then leave this method's weight gradients in each parameter's ``.grad`` (no update)."""
        x, y, forward = self._batch(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        objective, energies, loss = self._weight_loss(x, y, forward)
        objective.backward()
        norms = []
        for layer in self.layers:
            grads = [p.grad for p in layer.parameters() if p.grad is not None]
            norms.append(
                torch.sqrt(
                    sum(
                        (g.detach().double().pow(2).sum() for g in grads),
                        torch.zeros((), dtype=torch.float64, device=x.device),
                    )
                )
            )
        norm = torch.stack(norms).cpu()
        if not torch.isfinite(norm).all():
            self.optimizer.zero_grad(set_to_none=True)
            raise ValueError(
                "the weight gradients are not finite (the weights or the inputs overflow); nothing was updated"
            )
        return TrainStep(loss, energies, norm)

    def step(self, x, y) -> TrainStep:
        """One training step on the batch ``(x, y)``: :meth:`gradients`, then the optimizer's step."""
        info = self.gradients(x, y)
        self.optimizer.step()
        return info

    @torch.no_grad()
    def predict(self, x) -> torch.Tensor:
        """The forward pass (every error zero), as predictive coding predicts at test time."""
        return forward_checked(self.layers, as_input(x, "x", next(self.model.parameters())))[-1]

    def fit(self, x, y, *, epochs: int = 1, batch_size: int = 64, seed: int = 0) -> list[float]:
        """Train for ``epochs`` passes over ``(x, y)`` in shuffled mini-batches (the order fixed by ``seed``, so
        trainers given the same seed see the same batches); returns each epoch's mean batch loss."""
        x, y, _ = self._batch(x, y)
        epochs = check_int(epochs, "epochs", 1)
        batch_size = check_int(batch_size, "batch_size", 1)
        gen = torch.Generator().manual_seed(check_seed(seed))
        history = []
        for _ in range(epochs):
            order = torch.randperm(x.shape[0], generator=gen).to(x.device)
            losses = [self.step(x[i], y[i]).loss for i in order.split(batch_size)]
            history.append(float(np.mean(losses)))
        return history

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict:
        return {
            "method": self.method,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("method") != self.method:
            raise ValueError(
                f"state must be a state_dict of a {self.method} trainer, got {state.get('method') if isinstance(state, dict) else type(state).__name__}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def save(self, path: str | os.PathLike) -> None:
        """Write the model's and the optimizer's state to ``path`` atomically (a failed save leaves the old file)."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            torch.save(self.state_dict(), tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, path: str | os.PathLike) -> None:
        """Load a file written by :meth:`save` of a trainer of the same method and model."""
        self.load_state_dict(
            torch.load(Path(path), map_location=next(self.model.parameters()).device, weights_only=True)
        )


class Backprop(Trainer):
    """Backpropagation of the mean output loss, under the predictive-coding trainers' API."""

    method = "bp"

    def _weight_loss(self, x, y, forward):
        output = (
            self.model(x)
            if isinstance(self.model, nn.Sequential)
            else core.forward_states(self.layers, x)[-1]
        )
        loss = core.output_loss(output, y, self.loss) / x.shape[0]
        return loss, torch.empty(0), float(loss.detach())


class _PC(Trainer):
    """Shared by sPC and ePC: the inference settings and the local weight gradient at the inferred states.

    ``inference_lr`` the step size of inference, ``inference_steps`` its number of steps, ``beta`` the output
    loss's weight in the energy (β → 0 is the small-nudge limit where PC's gradients / β approach backprop's).
    """

    def __init__(
        self,
        model,
        loss: str = "ce",
        *,
        inference_lr: float = 0.1,
        inference_steps: int = 20,
        beta: float = 1.0,
        lr: float = 1e-3,
        optimizer: torch.optim.Optimizer | None = None,
    ):
        super().__init__(model, loss, lr=lr, optimizer=optimizer)
        self.inference_lr = check_real(inference_lr, "inference_lr", "(0, inf)")
        self.inference_steps = check_int(inference_steps, "inference_steps", 1)
        self.beta = check_real(beta, "beta", "(0, inf)")

    def infer(self, x, y) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Run inference on a batch: (the hidden states ``[s_1 … s_{L−1}]`` reached, the energy before each step)."""
        return self._infer(*self._batch(x, y))

    def _infer(self, x, y, forward) -> tuple[list[torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    @property
    def _advice(self) -> str:
        return (
            f"; use a smaller inference_lr (the energy's curvature grows with beta={self.beta:g}, and with the "
            "weights: a smaller lr keeps them from growing large)"
        )

    def _descend(self, variables: list[torch.Tensor], energy) -> tuple[list[torch.Tensor], torch.Tensor]:
        """``inference_steps`` of gradient descent on ``variables`` (states or errors): (where they end, the
        energy before each step)."""
        trace = []
        for _ in range(self.inference_steps):
            # detached: the first states may be the caller's own x (a first layer that returns its input)
            variables = [v.detach().requires_grad_(True) for v in variables]
            e = energy(variables)
            grads = torch.autograd.grad(e, variables) if variables else ()
            trace.append(e.detach())
            with torch.no_grad():
                variables = [
                    v.detach() - self.inference_lr * g for v, g in zip(variables, grads, strict=True)
                ]
        return variables, torch.stack(trace)

    def _diverged(self, trace: torch.Tensor) -> None:
        """Inference from the forward pass should lower the energy; gradient descent with a step size too large
        for the energy's curvature climbs instead (and may overflow). A final energy above twice the starting
        one is taken as divergence (a small rise, an overshoot near a minimum, is not)."""
        if not torch.isfinite(trace).all():
            step = int((~torch.isfinite(trace)).nonzero()[0])
            raise ValueError(
                f"inference_lr={self.inference_lr:g} made the energy diverge (not finite at inference step {step})"
                + self._advice
            )
        start, end = float(trace[0]), float(trace[-1])
        if end > 2 * start + 1e-12:
            raise ValueError(
                f"inference_lr={self.inference_lr:g} made the energy diverge (it rose from {start:.6g} to {end:.6g} "
                "during inference)" + self._advice
            )

    def _weight_loss(self, x, y, forward):
        loss = float(core.output_loss(forward[-1], y, self.loss))
        if not math.isfinite(self.beta * loss):
            raise ValueError(f"beta={self.beta:g} times the loss {loss:g} overflows; use a smaller beta")
        states, trace = self._infer(x, y, forward)
        local = core.local_energy(self.layers, x, y, states, self.loss, self.beta)
        energies = torch.cat([trace, local.detach().reshape(1).to(trace)])
        self._diverged(energies)
        return local / x.shape[0], energies.double().cpu(), loss / x.shape[0]


class SPC(_PC):
    """State-based predictive coding: gradient descent on the hidden states from the forward pass."""

    method = "spc"

    def _infer(self, x, y, forward):
        return self._descend(forward[:-1], lambda s: core.energy(self.layers, x, y, s, self.loss, self.beta))


class EPC(_PC):
    """Error-based predictive coding: gradient descent on the errors ``e_l = s_l − f_l(s_{l−1})`` from zero."""

    method = "epc"

    def _infer(self, x, y, forward):
        energy = lambda e: core.error_energy(self.layers, x, y, e, self.loss, self.beta)  # noqa: E731
        errors, trace = self._descend([torch.zeros_like(s) for s in forward[:-1]], energy)
        with torch.no_grad():
            states = [s.detach() for s in core.states_from_errors(self.layers, x, errors)[0]]
        return states, trace
