"""The reward network ``f(x; θ)`` of the neural bandits and its gradient features ``g(x) = ∇_θ f(x; θ) / sqrt(m)``.

The network is a ReLU MLP of width ``m`` built from two identical halves whose outputs are subtracted, so
that ``f(x; θ_0) = 0`` (up to rounding) for every ``x`` at initialization (the symmetric initialization of NeuralUCB's
analysis, Zhou et al. 2020); after the first update the halves move independently.
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad, vmap

from icml_theory.bandits._checks import as_tensor
from icml_theory.validation import check_int, check_seed


def _mlp(dim: int, width: int, depth: int, generator: torch.Generator) -> torch.nn.Sequential:
    """Zhou et al.'s symmetric initialization: hidden weights ``[[W, 0], [0, W]]`` (``[W; W]`` for the first
    layer), output ``[w, −w]``, so the two halves cancel at ``θ_0``; He-normal ``W``, ``w ~ N(0, 2/m)``."""
    half = width // 2
    layers: list[torch.nn.Module] = []
    fan_in = dim
    with torch.no_grad():
        for i in range(depth):
            layer = torch.nn.Linear(fan_in, width, dtype=torch.float64)
            W = torch.randn(half, fan_in if i == 0 else half, generator=generator, dtype=torch.float64)
            W *= math.sqrt(2.0 / (fan_in if i == 0 else half))
            layer.weight.zero_()
            if i == 0:
                layer.weight.copy_(torch.cat([W, W]))
            else:
                layer.weight[:half, :half] = W
                layer.weight[half:, half:] = W
            layer.bias.zero_()
            layers += [layer, torch.nn.ReLU()]
            fan_in = width
        out = torch.nn.Linear(width, 1, dtype=torch.float64)
        w = torch.randn(half, generator=generator, dtype=torch.float64) * math.sqrt(2.0 / width)
        out.weight.copy_(torch.cat([w, -w])[None])
        out.bias.zero_()
    layers.append(out)
    return torch.nn.Sequential(*layers)


class RewardNetwork(torch.nn.Module):
    """``f(x; θ)``: a ReLU MLP with ``depth`` hidden layers of width ``width`` (even), zero at init (up to
    the rounding of the output layer's sum, ~1e-16).

    ``gradients(X)`` returns the rows ``g(x_k) = ∇_θ f(x_k; θ) / sqrt(width)`` (float64), the features of
    the confidence matrices; ``num_parameters`` is their length ``p``."""

    def __init__(self, dim: int, width: int = 32, depth: int = 1, seed: int = 0) -> None:
        super().__init__()
        self.dim = check_int(dim, "dim", 1, 1 << 16)
        self.width = check_int(width, "width", 2, 1 << 14)
        if self.width % 2:
            raise ValueError(f"width must be even (two identical halves), got {width}")
        self.depth = check_int(depth, "depth", 1, 16)
        generator = torch.Generator().manual_seed(check_seed(seed))
        self.layers = _mlp(self.dim, self.width, self.depth, generator)
        self.initial = [p.detach().clone() for p in self.parameters()]
        self.num_parameters = sum(p.numel() for p in self.parameters())
        self._scale = 1.0 / math.sqrt(self.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).squeeze(-1)

    def _single(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self, params, (x[None],))[0]

    def gradients(self, X) -> torch.Tensor:
        """``(n, p)``: the scaled gradient ``∇_θ f(x_k; θ) / sqrt(width)`` of each row ``x_k`` of ``X``."""
        X = as_tensor(X, "X", 2, self.dim)
        return self._gradients(X)

    def _gradients(self, X: torch.Tensor) -> torch.Tensor:
        """Per-sample backpropagation by hand through the Linear/ReLU stack (several times faster than
        ``torch.func.vmap(grad(...))`` at these sizes; tested equal to it), in ``named_parameters`` order."""
        n = X.shape[0]
        with torch.no_grad():
            linears = [m for m in self.layers if isinstance(m, torch.nn.Linear)]
            acts, pres = [X], []
            for layer in linears[:-1]:
                z = torch.addmm(layer.bias, acts[-1], layer.weight.T)
                pres.append(z)
                acts.append(torch.relu(z))
            grads: list[torch.Tensor] = [torch.ones((n, 1), dtype=X.dtype), acts[-1]]
            delta = linears[-1].weight * (pres[-1] > 0)
            for i in range(len(linears) - 2, -1, -1):
                grads.append(delta)
                grads.append((delta[:, :, None] * acts[i][:, None, :]).reshape(n, -1))
                if i:
                    delta = (delta @ linears[i].weight) * (pres[i - 1] > 0)
        # reversed: weight, bias of the first layer ... of the output layer (named_parameters order)
        return torch.cat(grads[::-1], dim=1) * self._scale

    def _gradients_autograd(self, X: torch.Tensor) -> torch.Tensor:
        """The same features by ``torch.func`` (the reference the tests compare :meth:`_gradients` with)."""
        params = {k: v.detach() for k, v in self.named_parameters()}
        per_sample = vmap(grad(self._single), in_dims=(None, 0))(params, X)
        flat = torch.cat([g.reshape(X.shape[0], -1) for g in per_sample.values()], dim=1)
        return flat * self._scale

    def distance_to_init(self) -> float:
        """``‖θ − θ_0‖²``, the regularizer of the bandits' training objective."""
        with torch.no_grad():
            return float(
                sum(((p - p0) ** 2).sum() for p, p0 in zip(self.parameters(), self.initial, strict=True))
            )


def ntk_gram(network: RewardNetwork, contexts) -> torch.Tensor:
    """The (empirical, scaled) neural tangent kernel Gram matrix ``G = J Jᵀ`` over the rows of ``contexts``
    (``(n, dim)``; ``J`` = :meth:`RewardNetwork.gradients`), for :func:`~icml_theory.bandits.effective_dimension`."""
    if not isinstance(network, RewardNetwork):
        raise TypeError(f"network must be a RewardNetwork, got {type(network).__name__}")
    J = network.gradients(as_tensor(contexts, "contexts", 2, network.dim))
    G = J @ J.T
    if not (torch.isfinite(J).all() and torch.isfinite(G).all()):
        raise ValueError("contexts are too large: their gradient features' inner products overflow float64")
    return G
