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

from icml_stats.dp.sgd import as_conditioning
from icml_stats.validation import check_int, check_real

__all__ = ["CondDPOptimizer"]


class CondDPOptimizer(DPOptimizer):
    """``opacus.optimizers.DPOptimizer`` that conditions parameters: ``conditioning={parameter: (d, d) C}``
    (``d`` the parameter's last axis). Every other argument is ``DPOptimizer``'s."""

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
            self.conditioning[id(p)] = as_conditioning(C, p.shape[-1], "conditioning matrix", p.dtype)

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

    def clip_and_accumulate(self):
        for p in self.params:
            C = self.conditioning.get(id(p))
            if C is not None and p.grad_sample is not None:
                g = self._get_flat_grad_sample(p)
                p.grad_sample = g @ C.to(g.device).mT
        super().clip_and_accumulate()

    def add_noise(self):
        super().add_noise()
        for p in self.params:
            C = self.conditioning.get(id(p))
            if C is not None:
                p.grad = (p.grad @ C.to(p.grad.device)).view_as(p)
