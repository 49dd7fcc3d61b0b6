"""Mechanism diagnostic of ``epc-depth``: why ePC's inference does not reach the energy tolerance at depth 20.

On one batch at initialization (float64, seed 0, the first 64 training rows), for depth 4 and 20:

* the stiffness of ePC's energy in the errors: the eigenvalue ``λ`` of ``∇²_e E`` at ``e = 0`` largest in
  magnitude (power iteration on Hessian-vector products); gradient descent with step ``η`` settles into a
  minimum only where the curvature is positive and ``η λ < 2``;
* the relative energy gap ``(E_t − E*)/(E_0 − E*)`` after 64 and 2,048 inference steps of sPC and ePC;
* each method's weight gradient after the training budget (64 steps) against the reference gradient at the
  L-BFGS solution: relative error, and its cosine over the first and the last ten layers.

Script: ``python -m icml_theory_experiments.pc.diagnose`` (prints the JSON).
"""

from __future__ import annotations

import json

import torch

from icml_theory.pc import EPC, SPC, equilibrium, forward_states, relative_error
from icml_theory.pc.energy import error_energy
from icml_theory_experiments.pc.repro import BATCH, BUDGETS, INFERENCE
from icml_theory_experiments.pc.testbed import digits, mlp


def _extreme_eigenvalue(model, x, y, iterations: int = 100) -> float:
    layers = list(model)
    shapes = [s.shape for s in forward_states(model, x)[:-1]]
    errors = [torch.zeros(shape, dtype=x.dtype, requires_grad=True) for shape in shapes]
    gen = torch.Generator().manual_seed(0)
    v = [torch.randn(shape, generator=gen, dtype=x.dtype) for shape in shapes]
    value = 0.0
    for _ in range(iterations):
        norm = torch.stack([(t * t).sum() for t in v]).sum().sqrt()
        v = [t / norm for t in v]
        grads = torch.autograd.grad(error_energy(layers, x, y, errors, "ce", 1.0), errors, create_graph=True)
        hv = torch.autograd.grad(
            torch.stack([(g * t).sum() for g, t in zip(grads, v, strict=True)]).sum(), errors
        )
        value = float(sum((h * t).sum() for h, t in zip(hv, v, strict=True)))
        v = [h.detach() for h in hv]
    return value


def _cosine(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    u, w = torch.cat([t.reshape(-1) for t in a]), torch.cat([t.reshape(-1) for t in b])
    return float(u @ w / (u.norm() * w.norm()))


def run(depths: tuple[int, ...] = (4, 20), seed: int = 0) -> dict:
    torch.set_num_threads(1)
    x, y, _, _ = digits(torch.float64)
    xb, yb = x[:BATCH], y[:BATCH]
    out = {}
    for depth in depths:
        model = mlp(depth, seed, dtype=torch.float64)
        eq = equilibrium(model, xb, yb, "ce", tol=1e-9, max_iter=BUDGETS["full"]["reference_iter"])
        row: dict = {
            "reference converged": eq.converged,
            "reference max |dE/de|": eq.grad_norm,
            "eigenvalue of the error Hessian largest in magnitude": _extreme_eigenvalue(model, xb, yb),
            "inference lr": INFERENCE["inference_lr"],
        }
        row["lr x that eigenvalue"] = (
            row["inference lr"] * row["eigenvalue of the error Hessian largest in magnitude"]
        )
        params = list(model.parameters())
        per_layer = [len(list(layer.parameters())) for layer in model]
        split = sum(per_layer[: min(10, depth // 2)])
        for name, cls in (("sPC", SPC), ("ePC", EPC)):
            for steps in (INFERENCE["inference_steps"], 2048):
                trainer = cls(model, "ce", inference_lr=INFERENCE["inference_lr"], inference_steps=steps)
                _, trace = trainer.infer(xb, yb)
                gap = (float(trace[-1]) - eq.energy) / (float(trace[0]) - eq.energy)
                row[f"{name} energy gap after {steps} steps"] = gap
            trainer = cls(model, "ce", **INFERENCE)
            trainer.gradients(xb, yb)
            grads = [p.grad.clone() for p in params if p.grad is not None]
            row[f"{name} gradient relative error (64 steps)"] = relative_error(grads, eq.gradients)
            row[f"{name} gradient cosine, first layers"] = _cosine(grads[:split], eq.gradients[:split])
            row[f"{name} gradient cosine, last layers"] = _cosine(grads[split:], eq.gradients[split:])
        out[f"depth {depth}"] = row
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
