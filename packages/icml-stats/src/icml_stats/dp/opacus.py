"""Cond-DP for opacus users: :class:`CondDPOptimizer`, an opacus ``DPOptimizer`` with conditioning.

Opacus computes the per-sample gradients (``GradSampleModule``) and accounts for privacy as usual; this
optimizer conditions the named parameters: per-sample gradients ``G_i -> G_i C^T`` before clipping and the
noisy sum ``-> (...) C`` after the noise, exactly :class:`icml_stats.dp.CondDPSGD`'s update (with the same
``generator`` the noise is the same; use opacus' defaults, a mean loss and ``loss_reduction="mean"``,
which divide by ``expected_batch_size`` as ``CondDPSGD`` does). Needs opacus (``pip install 'icml-stats[dp,opacus]'``)::

    from opacus import GradSampleModule
    from icml_stats.dp import conditioning_matrix
    from icml_stats.dp.opacus import CondDPOptimizer

    model = GradSampleModule(torch.nn.Linear(d, 1))
    optimizer = CondDPOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.5),
        conditioning={model._module.weight: conditioning_matrix(X_public)},
        noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=256,
    )
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from opacus.optimizers import DPOptimizer

# opacus' own checks that a gradient is used once and its (secure) noise, for the float32 path of
# half-precision parameters below
from opacus.optimizers.optimizer import _check_processed_flag, _generate_noise, _mark_as_processed

from icml_stats.dp.sgd import as_conditioning, wide_dtype
from icml_stats.validation import check_int, check_real

__all__ = ["CondDPOptimizer"]


class CondDPOptimizer(DPOptimizer):
    """``opacus.optimizers.DPOptimizer`` that conditions parameters: ``conditioning={parameter: (d, d) C}``
    (``d`` the parameter's last axis). Every other argument is ``DPOptimizer``'s.

    With half-precision (bfloat16, float16) parameters, as :class:`icml_stats.dp.CondDPSGD` does, ``C`` is
    kept in float32 and the conditioning, clipped sum, noise and division by the batch size run in float32;
    only ``p.grad`` is rounded to the parameter's dtype (opacus sums in the parameter's dtype, and a
    bfloat16 sum in conditioned coordinates multiplied by ``C`` moved the update by 0.24-0.40 of its norm).
    Float32 and float64 parameters take opacus' own code.

    Gradient accumulation works as in ``DPOptimizer``: several backward passes before one ``step`` (the
    update of one step over the concatenated batch) and opacus' ``BatchMemoryManager``."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        conditioning: Mapping,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: int | None,
        **kwargs,
    ):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        check_real(noise_multiplier, "noise_multiplier", "[0, inf)")
        check_real(max_grad_norm, "max_grad_norm", "(0, inf)")
        if expected_batch_size is None or isinstance(expected_batch_size, bool):
            raise TypeError(f"expected_batch_size must be a positive int, got {expected_batch_size!r}")
        check_int(expected_batch_size, "expected_batch_size", 1)
        super().__init__(
            optimizer,
            noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm,
            expected_batch_size=expected_batch_size,
            **kwargs,
        )
        if not isinstance(conditioning, Mapping):
            raise TypeError("conditioning must be a mapping {parameter: (d, d) matrix}")
        ids = {id(p) for p in self.params}
        self.conditioning: dict[int, torch.Tensor] = {}
        for p, C in conditioning.items():
            if not isinstance(p, torch.Tensor) or id(p) not in ids:
                raise ValueError("conditioning keys must be parameters that the wrapped optimizer updates")
            # float32 for a half-precision parameter: bfloat16's 8-bit mantissa would round away the
            # small-eigenvalue directions that conditioning exists for
            self.conditioning[id(p)] = as_conditioning(
                C, p.shape[-1], "conditioning matrix", wide_dtype(p.dtype)
            )
        self._wide_grads: dict[int, torch.Tensor] = {}

    @classmethod
    def from_dp_optimizer(cls, optimizer: DPOptimizer, conditioning: Mapping) -> CondDPOptimizer:
        """The same optimizer with conditioning: for the ``DPOptimizer`` that opacus'
        ``PrivacyEngine.make_private`` returns. Noise, clipping, batch size, loss reduction, generator and
        the accountant's step hook carry over, so ``privacy_engine.get_epsilon`` keeps counting::

            model, optimizer, loader = engine.make_private(module=..., optimizer=..., data_loader=...,
                                                           noise_multiplier=1.0, max_grad_norm=1.0)
            optimizer = CondDPOptimizer.from_dp_optimizer(optimizer, {model._module.weight: C})
        """
        if not isinstance(optimizer, DPOptimizer):
            raise TypeError(f"optimizer must be an opacus DPOptimizer, got {type(optimizer).__name__}")
        out = cls(
            optimizer.original_optimizer,
            conditioning=conditioning,
            noise_multiplier=optimizer.noise_multiplier,
            max_grad_norm=optimizer.max_grad_norm,
            expected_batch_size=optimizer.expected_batch_size,
            loss_reduction=optimizer.loss_reduction,
            generator=optimizer.generator,
            secure_mode=optimizer.secure_mode,
        )
        out.step_hook = optimizer.step_hook
        return out

    def _has_half(self) -> bool:
        return any(wide_dtype(p.dtype) != p.dtype for p in self.params)

    def clip_and_accumulate(self):
        for p in self.params:
            C = self.conditioning.get(id(p))
            if C is not None and p.grad_sample is not None:
                # a gradient already used in a step would be conditioned again into a new, unflagged tensor
                # and slip past opacus' own check below: refuse it here as opacus does
                _check_processed_flag(p.grad_sample)
                # opacus keeps one tensor per backward pass in a list (gradient accumulation) and divides by
                # accumulated_iterations, the list's length: condition each tensor and keep the list (one
                # concatenated tensor counted as 1 pass: refused as "inconsistent" beside an unconditioned
                # parameter and, where every parameter was conditioned, 2 passes divided by B, not 2B)
                if isinstance(p.grad_sample, list):
                    p.grad_sample = [g.to(C.dtype) @ C.to(g.device).mT for g in p.grad_sample]
                else:
                    p.grad_sample = p.grad_sample.to(C.dtype) @ C.to(p.grad_sample.device).mT
        if not self._has_half():
            super().clip_and_accumulate()
            return
        # opacus' clipping with the norms, factors and sums in float32 (opacus casts to the parameter's dtype)
        grads = self.grad_samples
        if len(grads[0]) == 0:
            factor = torch.zeros((0,), device=grads[0].device)
        else:
            norms = [g.reshape(len(g), -1).to(wide_dtype(g.dtype)).norm(2, dim=-1) for g in grads]
            norms = torch.stack([v.to(norms[0].device) for v in norms], dim=1).norm(2, dim=1)
            factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        for p in self.params:
            _check_processed_flag(p.grad_sample)
            g = self._get_flat_grad_sample(p)
            wide = wide_dtype(p.dtype)
            grad = torch.einsum("i,i...", factor.to(g.device, wide), g.to(wide))
            if p.summed_grad is not None:
                p.summed_grad += grad  # in place: keeps opacus' processed flag
            else:
                p.summed_grad = grad
            _mark_as_processed(p.grad_sample)

    def add_noise(self):
        if not self._has_half():
            super().add_noise()
            for p in self.params:
                C = self.conditioning.get(id(p))
                if C is not None:
                    p.grad = (p.grad @ C.to(p.grad.device)).view_as(p)
            return
        # opacus' noise drawn in the (float32) sum's dtype; kept in float32 until scale_grad
        self._wide_grads = {}
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            noise = _generate_noise(
                std=self.noise_multiplier * self.max_grad_norm,
                reference=p.summed_grad,
                generator=self.generator,
                secure_mode=self.secure_mode,
            )
            grad = p.summed_grad + noise
            C = self.conditioning.get(id(p))
            if C is not None:
                grad = grad @ C.to(grad.device)
            self._wide_grads[id(p)] = grad = grad.view_as(p)
            p.grad = grad.to(p.dtype)
            _mark_as_processed(p.summed_grad)

    def scale_grad(self):
        if not self._has_half():
            super().scale_grad()
            return
        wide, self._wide_grads = self._wide_grads, {}
        for p in self.params:
            grad = wide[id(p)]
            if self.loss_reduction == "mean":
                grad = grad / (self.expected_batch_size * self.accumulated_iterations)
            p.grad = grad.to(p.dtype)
