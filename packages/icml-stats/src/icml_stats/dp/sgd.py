"""Cond-DP: DP-SGD on a conditioned parametrization (Jiang, Krichene and Mayoraz, ICML 2026).

A parameter ``W`` of shape ``(..., d)`` (a linear layer's weight, whose last axis meets the public
features) is reparametrized ``W = Theta C`` with a public ``(d, d)`` conditioning matrix ``C`` and DP-SGD
runs on ``Theta``. In ``W``'s coordinates one step is::

    W <- W - lr * [ sum_{i in batch} clip_c(G_i C^T) + N(0, sigma^2 c^2 I) ] C / B

with ``G_i`` the per-sample gradient in ``W``, clipping over all parameters jointly, ``B`` the expected
batch size (Poisson sampling) and other parameters updated as in DP-SGD. ``C = I`` is DP-SGD, to the bit.
The mechanism on ``Theta`` is DP-SGD itself, and ``C`` depends on public features only, so its privacy is
DP-SGD's: the accountant sees the same ``(sample_rate, noise_multiplier, steps)``.

Label DP: a neighbouring dataset changes one label, and the record's clipped contribution moves anywhere
in the clip ball, so the sensitivity is ``2c``; ``relation="replace-one"`` accounts for exactly that pair
(see :class:`icml_theory.privacy.SubsampledGaussianRDP`). For regression with a scalar output the two
clipped gradients are collinear, which is the one-dimensional pair the accountant uses.

Per-sample gradients come from ``torch.func`` (``vmap(grad(...))``); clipping and noise follow opacus'
``DPOptimizer`` (factor ``min(1, c / (norm + 1e-6))``, noise ``torch.normal`` drawn per parameter in
parameter order from ``generator``), so the same generator gives opacus' noise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from icml_stats.dp.estimators import RELATIONS
from icml_stats.validation import check_choice, check_int, check_real

__all__ = ["CondDPSGD", "calibrate_noise", "privacy_spent"]

MAX_STEPS = 10**9
MAX_RECORDS = 2**40


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for a half-precision dtype (float16 sums overflow above 65504), else ``dtype`` itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _squared_error(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The default per-sample loss ``0.5 * ||output - target||^2`` (one sample's output and target)."""
    if output.numel() != target.numel():
        raise ValueError(
            f"targets must hold one value per model output: output {tuple(output.shape)}, target {tuple(target.shape)}"
        )
    return 0.5 * ((output.reshape(-1) - target.reshape(-1)) ** 2).sum()


def as_conditioning(matrix, d: int, name: str, dtype: torch.dtype) -> torch.Tensor:
    """A finite ``(d, d)`` tensor."""
    try:
        C = torch.as_tensor(np.asarray(matrix, dtype=float) if not torch.is_tensor(matrix) else matrix)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a (d, d) matrix of numbers, got {type(matrix).__name__}") from None
    if C.shape != (d, d):
        raise ValueError(
            f"{name} must be a ({d}, {d}) matrix (the parameter's last axis), got {tuple(C.shape)}"
        )
    if not C.is_floating_point() and C.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must hold real numbers, got dtype {C.dtype}")
    if not torch.isfinite(C).all():
        raise ValueError(f"{name} must be finite")
    return C.to(dtype)


def _check_batch(inputs, targets, dtype: torch.dtype) -> None:
    for name, t in (("inputs", inputs), ("targets", targets)):
        if not torch.is_tensor(t):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim == 0:
            raise ValueError(f"{name} must have a batch axis, got a 0-d tensor")
        if name == "inputs" and t.dtype != dtype:
            raise TypeError(f"inputs must have the model's dtype {dtype}, got {t.dtype}")
        if t.dtype == torch.bool or t.dtype.is_complex:
            raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} must be finite (no NaN or inf)")
    if len(inputs) != len(targets):
        raise ValueError(
            f"inputs and targets must have the same length, got {len(inputs)} and {len(targets)}"
        )


class CondDPSGD:
    """Conditioned DP-SGD on a torch module: per-sample clipping, Gaussian noise, conditioning.

    ``model``: any ``nn.Module`` mapping a batch of inputs to outputs. ``conditioning``: ``{parameter name:
    (d, d) matrix}`` for parameters whose last axis has size ``d`` (``"weight"`` of an ``nn.Linear``; the
    first layer of a network, e.g. ``"0.weight"``); ``None`` or ``{}`` is DP-SGD. ``loss_fn(output,
    target)`` is one sample's loss (default ``0.5 * ||output - target||^2``). ``max_grad_norm`` is the clip bound
    ``c``, ``noise_multiplier`` ``sigma`` (noise std ``sigma * c``), ``expected_batch_size`` the ``B`` that
    the noisy sum is divided by (``sample_rate * n`` under Poisson sampling). ``generator`` draws the noise
    (on its own device, then moved to each parameter's) and the Poisson batches (returned as CPU indices).

    :meth:`step` makes one update from a batch; :meth:`poisson_batch` draws a Poisson batch's indices.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        lr: float,
        max_grad_norm: float,
        noise_multiplier: float,
        expected_batch_size: float,
        conditioning: Mapping[str, object] | None = None,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        generator: torch.Generator | None = None,
    ):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.lr = check_real(lr, "lr", "(0, inf)")
        self.max_grad_norm = check_real(max_grad_norm, "max_grad_norm", "(0, inf)")
        self.noise_multiplier = check_real(noise_multiplier, "noise_multiplier", "[0, inf)")
        self.expected_batch_size = check_real(expected_batch_size, "expected_batch_size", "(0, inf)")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable (output, target) -> loss, got {loss_fn!r}")
        self.loss_fn = _squared_error if loss_fn is None else loss_fn
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.generator = generator
        self.params = {k: p for k, p in model.named_parameters() if p.requires_grad}
        if not self.params:
            raise ValueError("model has no trainable parameters")
        self.conditioning: dict[str, torch.Tensor] = {}
        if conditioning is not None and not isinstance(conditioning, Mapping):
            raise TypeError("conditioning must be a mapping {parameter name: (d, d) matrix} or None")
        for name, C in (conditioning or {}).items():
            if name not in self.params:
                raise ValueError(
                    f"conditioning names {name!r}, not a trainable parameter of model: {list(self.params)}"
                )
            p = self.params[name]
            # kept in float32 for a half-precision parameter: bfloat16's 8-bit mantissa would round away the
            # small-eigenvalue directions that conditioning exists for
            self.conditioning[name] = as_conditioning(
                C, p.shape[-1], f"conditioning[{name!r}]", wide_dtype(p.dtype)
            )

    def per_sample_gradients(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-sample gradients ``{name: (B, *shape)}`` in the model's own (unconditioned) coordinates."""
        dtype = next(iter(self.params.values())).dtype
        _check_batch(inputs, targets, dtype)
        params = {k: p.detach() for k, p in self.params.items()}
        buffers = {k: b.detach() for k, b in self.model.named_buffers()}

        def loss(p, x, y):
            out = functional_call(self.model, (p, buffers), (x.unsqueeze(0),))
            return self.loss_fn(out.squeeze(0), y)

        if len(inputs) == 0:
            return {k: p.new_zeros((0, *p.shape)) for k, p in params.items()}
        try:
            g = vmap(grad(loss), in_dims=(None, 0, 0))(params, inputs, targets)
        except RuntimeError as err:
            raise ValueError(f"inputs and targets do not fit the model: {err}") from err
        if not all(bool(torch.isfinite(v).all()) for v in g.values()):
            raise ValueError(
                "the per-sample gradients overflow (non-finite): inputs or targets are too large, rescale them"
            )
        return g

    def clipped_sum(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """The sum of the batch's clipped per-sample gradients, in conditioned coordinates: in float32 for a
        half-precision parameter (a float16 sum overflows above 65504; a conditioned parameter's gradients are
        conditioned in float32 too), else in the parameter's dtype."""
        g = self.per_sample_gradients(inputs, targets)
        if len(inputs) == 0:  # an empty Poisson batch: noise only
            return {k: torch.zeros_like(p, dtype=wide_dtype(p.dtype)) for k, p in self.params.items()}
        for k, C in self.conditioning.items():
            # C is kept on the CPU (the model may have moved since); half precision is conditioned in float32
            g[k] = g[k].to(C.dtype) @ C.to(g[k].device).mT
        flat = torch.cat([v.reshape(len(v), -1) for v in g.values()], dim=1)
        # the norm scaled by each row's largest entry: no overflow of the squares for huge gradients
        top = flat.abs().amax(dim=1).clamp_min(torch.finfo(flat.dtype).tiny)
        norms = top * (flat / top[:, None]).norm(2, dim=1)
        if not bool(torch.isfinite(norms).all()):
            raise ValueError(
                "the conditioned per-sample gradients overflow: inputs or targets are too large, rescale them"
            )
        factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        return {
            k: torch.einsum("i,i...", factor.to(wide_dtype(v.dtype)), v.to(wide_dtype(v.dtype)))
            for k, v in g.items()
        }

    @torch.no_grad()
    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """One Cond-DP update of the model's parameters from the batch ``(inputs, targets)``. For a
        half-precision parameter the noisy sum is formed, conditioned and divided by the batch size in float32;
        only the update's result is rounded to the parameter's dtype."""
        summed = self.clipped_sum(inputs, targets)
        std = self.noise_multiplier * self.max_grad_norm
        for k, p in self.params.items():
            # drawn on the generator's device (a generator draws only there), then moved to the parameter's
            where = p.device if self.generator is None else self.generator.device
            noise = torch.normal(0.0, std, size=p.shape, device=where, generator=self.generator).to(p.device)
            wide = wide_dtype(p.dtype)
            update = (summed[k] + noise).to(wide)
            if k in self.conditioning:
                update = update @ self.conditioning[k].to(p.device, wide)
            p.sub_(self.lr * update / self.expected_batch_size)

    def poisson_batch(self, n: int, sample_rate: float) -> torch.Tensor:
        """Indices of a Poisson batch: each of ``n`` records independently with probability ``sample_rate``."""
        n = check_int(n, "n", 1, MAX_RECORDS)
        q = check_real(sample_rate, "sample_rate", "(0, 1]")
        where = None if self.generator is None else self.generator.device  # a generator draws only there
        return torch.nonzero(torch.rand(n, generator=self.generator, device=where) < q).reshape(-1).cpu()


def calibrate_noise(epsilon: float, delta: float, sample_rate: float, steps: int, relation: str) -> float:
    """The smallest noise multiplier (bisection) whose ``(epsilon, delta)`` by icml-theory's optimal
    RDP -> f-DP accountant meets the target after ``steps`` Poisson-subsampled steps (cached)."""
    return _calibrate(
        check_real(epsilon, "epsilon", "(0, inf)"),
        check_real(delta, "delta", "(0, 1)"),
        check_real(sample_rate, "sample_rate", "(0, 1]"),
        check_int(steps, "steps", 1, MAX_STEPS),
        check_choice(relation, "relation", RELATIONS),
    )


@functools.lru_cache(maxsize=256)
def _calibrate(epsilon: float, delta: float, sample_rate: float, steps: int, relation: str) -> float:
    from icml_theory.privacy import get_noise_multiplier

    return get_noise_multiplier(epsilon, delta, sample_rate, steps, relation=relation)


def privacy_spent(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, relation: str
) -> float:
    """``epsilon`` at ``delta`` of ``steps`` DP-SGD steps by icml-theory's optimal accountant."""
    from icml_theory.privacy import OptimalRDPAccountant

    acc = OptimalRDPAccountant(check_choice(relation, "relation", RELATIONS))
    acc.step(
        noise_multiplier=check_real(noise_multiplier, "noise_multiplier", "(0, inf)"),
        sample_rate=check_real(sample_rate, "sample_rate", "(0, 1]"),
        num_steps=check_int(steps, "steps", 1, MAX_STEPS),
    )
    return acc.get_epsilon(check_real(delta, "delta", "(0, 1)"))
