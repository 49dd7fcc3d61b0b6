"""``SharedBasisLinear``: a Linear layer ``y = (x B) C + b`` whose basis ``B`` is one ``nn.Parameter`` shared by
every layer of its group (``basis``, stored ``(k, in)``) and whose coefficients ``C`` are its own
(``coeff``, stored ``(out, k)``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from icml_compress.validation import check_instance


class SharedBasisLinear(nn.Module):
    """``forward(x) = x @ basis.T @ coeff.T + bias`` with ``basis (k, in)`` (shared: the same Parameter
    object in every layer of a group, so ``model.parameters()`` and safetensors store it once),
    ``coeff (out, k)`` and an optional ``bias (out,)``."""

    def __init__(self, basis: nn.Parameter, coeff: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        check_instance(basis, "basis", nn.Parameter, "torch.nn.Parameter (shared by the group)")
        check_instance(coeff, "coeff", torch.Tensor, "torch.Tensor")
        if basis.dim() != 2 or coeff.dim() != 2 or coeff.shape[1] != basis.shape[0]:
            raise ValueError(
                f"basis (k, in) and coeff (out, k) must agree on k, got {tuple(basis.shape)} and "
                f"{tuple(coeff.shape)}"
            )
        if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != (coeff.shape[0],)):
            raise ValueError(f"bias must be None or a tensor of shape ({coeff.shape[0]},)")
        self.basis = basis
        self.coeff = nn.Parameter(coeff, requires_grad=coeff.requires_grad)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=bias.requires_grad)

    @property
    def in_features(self) -> int:
        return self.basis.shape[1]

    @property
    def out_features(self) -> int:
        return self.coeff.shape[0]

    @property
    def rank(self) -> int:
        return self.basis.shape[0]

    def dense_weight(self) -> torch.Tensor:
        """The dense weight ``coeff @ basis`` (out, in) the layer applies (computed; not stored)."""
        return self.coeff @ self.basis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.basis), self.coeff, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, bias={self.bias is not None}"
