"""Streaming calibration of a MoE model's experts: what every pruning criterion here reads.

One forward hook per sparse-MoE block sees the block's token inputs ``x`` and computes, with the model's own
router rule (:func:`~icml_compress.ragep.layout.route`) and experts module, the gate-weighted output
``g_e(x) f_e(x)`` of each expert ``e`` on the tokens routed to it (its top-k weight ``g``), and accumulates:

- ``counts[e]``: tokens that chose ``e`` in their top-k (frequency pruning);
- ``reap[e]``: ``Σ g·‖f_e‖`` over the measured tokens (REAP's saliency is its mean);
- ``energy[e]``: ``Σ ‖g f_e‖²`` (the expert's share of the layer's output energy);
- ``gram[e]``: ``Σ (g f_e)(g f_e)^T`` ``(hidden, hidden)``: the expert's output subspace with its energy;
- the routed block output ``z = Σ_e g_e f_e`` as ``Σ z`` and ``Σ z z^T``: the layer representation whose
  effective rank sets the layer's budget.

With ``route_all=True`` every token is sent through every expert, weighted by its router probability
(softmax over all experts; sigmoid score for sigmoid routers), so rarely routed experts are still measured
(llm-compressor users' complaint); ``counts`` still counts real top-k choices. Memory is
``O(E · hidden²)`` per layer whatever the number of tokens; ``keep_inputs`` additionally keeps the first
``keep_inputs`` token inputs of each layer for NAEE's exhaustive subset search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm

from icml_compress.quantize.calibration import eval_mode
from icml_compress.ragep.layout import MoELayer, find_moe_layers, route
from icml_compress.validation import check_bool, check_int, check_tensor

__all__ = ["Calibration", "LayerStats", "calibrate", "effective_rank"]


@dataclass
class LayerStats:
    """Calibration statistics of one MoE layer (see the module docstring); sums, in float64."""

    index: int
    name: str
    n_experts: int
    top_k: int
    tokens: int = 0
    counts: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    measured: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    reap_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    energy_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    gram: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    z_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    z_gram: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    inputs: torch.Tensor | None = None

    @property
    def frequency(self) -> torch.Tensor:
        """Share of tokens that chose each expert in their top-k, ``(E,)``."""
        return self.counts / max(self.tokens, 1)

    @property
    def reap(self) -> torch.Tensor:
        """REAP saliency ``mean g·‖f_e‖`` over each expert's measured tokens (0 for an expert never measured)."""
        return self.reap_sum / self.measured.clamp_min(1)

    @property
    def energy(self) -> torch.Tensor:
        """Mean squared norm of each expert's gate-weighted output per calibration token, ``(E,)``."""
        return self.energy_sum / max(self.tokens, 1)

    def effective_rank(self) -> float:
        """Effective rank (Roy & Vetterli) of the centered routed outputs of this layer."""
        n = max(self.tokens, 1)
        scatter = self.z_gram - torch.outer(self.z_sum, self.z_sum) / n
        return _erank_from_scatter(scatter)


@dataclass
class Calibration:
    """Per-layer :class:`LayerStats` in forward order, and how they were measured."""

    layers: list[LayerStats]
    route_all: bool
    sequences: int

    def effective_ranks(self) -> dict[int, float]:
        return {s.index: s.effective_rank() for s in self.layers}


def _erank(sigma: torch.Tensor) -> float:
    """``exp(entropy(σ / Σσ))`` of singular values ``sigma``; 0 when they are all 0 (or not finite)."""
    total = float(sigma.sum())
    if total <= 0 or not math.isfinite(total):
        return 0.0
    p = sigma[sigma > 0] / total
    return float(torch.exp(-(p * p.log()).sum()))


def _erank_from_scatter(scatter: torch.Tensor) -> float:
    return _erank(torch.linalg.eigvalsh((scatter + scatter.T) / 2).clamp_min(0).sqrt())


def effective_rank(matrix: torch.Tensor, *, center: bool = True) -> float:
    """``exp(entropy(σ / Σσ))`` of the singular values ``σ`` of ``matrix`` ``(samples, features)`` (rows
    centered first unless ``center=False``): between 1 (one direction) and ``min(samples, features)``; 0 for
    an all-zero matrix."""
    check_tensor(matrix, "matrix")
    if matrix.dim() != 2 or matrix.numel() == 0 or not matrix.is_floating_point():
        raise ValueError(f"matrix must be a non-empty 2-D float tensor, got shape {tuple(matrix.shape)}")
    if not bool(torch.isfinite(matrix).all()):
        raise ValueError("matrix must be finite (it holds NaN or infinity)")
    check_bool(center, "center")
    m = matrix.double()
    if center:
        m = m - m.mean(dim=0, keepdim=True)
    return _erank(torch.linalg.svdvals(m))


def _new_stats(layer: MoELayer, hidden: int) -> LayerStats:
    e = layer.n_experts
    z = torch.zeros
    return LayerStats(
        index=layer.index,
        name=layer.name,
        n_experts=e,
        top_k=layer.top_k,
        counts=z(e, dtype=torch.float64),
        measured=z(e, dtype=torch.float64),
        reap_sum=z(e, dtype=torch.float64),
        energy_sum=z(e, dtype=torch.float64),
        gram=z(e, hidden, hidden, dtype=torch.float64),
        z_sum=z(hidden, dtype=torch.float64),
        z_gram=z(hidden, hidden, dtype=torch.float64),
    )


@torch.no_grad()
def _accumulate(layer: MoELayer, stats: LayerStats, x: torch.Tensor, route_all: bool, keep: int) -> None:
    x = x.reshape(-1, x.shape[-1])
    probs, index, weights = route(layer, x)
    routed = torch.zeros(x.shape[0], layer.n_experts, dtype=x.dtype, device=x.device)
    routed.scatter_(
        1, index, weights
    )  # (tokens, E): the weight each token gives each expert (0 if not chosen)
    chosen = torch.zeros_like(routed, dtype=torch.bool).scatter_(1, index, True)
    z = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64, device=x.device)
    for e in range(layer.n_experts):
        tokens = torch.arange(x.shape[0], device=x.device) if route_all else chosen[:, e].nonzero().squeeze(1)
        if tokens.numel() == 0:
            continue
        f = layer.expert_outputs(x[tokens], [e])[0].double()
        g = (probs[tokens, e] if route_all else routed[tokens, e]).double()
        gf = g[:, None] * f
        stats.measured[e] += tokens.numel()
        stats.reap_sum[e] += (g * f.norm(dim=1)).sum().cpu()
        stats.energy_sum[e] += gf.square().sum().cpu()
        stats.gram[e] += (gf.T @ gf).cpu()
        w = routed[tokens, e].double()
        z.index_add_(0, tokens, w[:, None] * f)
    stats.counts += chosen.sum(0).double().cpu()
    stats.tokens += x.shape[0]
    stats.z_sum += z.sum(0).cpu()
    stats.z_gram += (z.T @ z).cpu()
    if keep:
        have = 0 if stats.inputs is None else stats.inputs.shape[0]
        if have < keep:
            more = x[: keep - have].detach().cpu().clone()
            stats.inputs = more if stats.inputs is None else torch.cat([stats.inputs, more])


@torch.no_grad()
def calibrate(
    model: nn.Module,
    sequences: torch.Tensor,
    *,
    batch_size: int = 8,
    route_all: bool = False,
    keep_inputs: int = 0,
    progress: bool = False,
) -> Calibration:
    """Run ``sequences`` (token ids ``(n, seq_len)``) through ``model`` (a transformers MoE causal LM, see
    :data:`~icml_compress.ragep.layout.ARCHITECTURES`) ``batch_size`` at a time and return each MoE layer's
    :class:`LayerStats`. ``route_all``: measure every expert on every token (see the module docstring);
    ``keep_inputs``: token inputs kept per layer for :func:`~icml_compress.ragep.select.naee_select`."""
    layers = find_moe_layers(model)
    check_tensor(sequences, "sequences")
    if (
        sequences.dim() != 2
        or sequences.numel() == 0
        or sequences.is_floating_point()
        or sequences.is_complex()
    ):
        raise ValueError(
            f"sequences must be a non-empty (n, seq_len) integer tensor of token ids, got "
            f"{sequences.dtype} of shape {tuple(sequences.shape)}"
        )
    vocab = getattr(model.config, "vocab_size", None)
    if int(sequences.min()) < 0 or (vocab is not None and int(sequences.max()) >= vocab):
        raise ValueError(f"sequences must hold token ids in 0..{vocab - 1 if vocab else 'vocab'}")
    check_int(batch_size, "batch_size", 1, 1 << 20)
    check_bool(route_all, "route_all")
    check_int(keep_inputs, "keep_inputs", 0, 1 << 24)
    check_bool(progress, "progress")
    hidden = int(layers[0].router.weight.shape[1])
    stats = {layer.name: _new_stats(layer, hidden) for layer in layers}

    def hook(layer: MoELayer):
        def fn(module, args):
            _accumulate(layer, stats[layer.name], args[0], route_all, keep_inputs)

        return fn

    handles = [layer.block.register_forward_pre_hook(hook(layer)) for layer in layers]
    device = next(model.parameters()).device
    try:
        with eval_mode(model):
            starts = range(0, sequences.shape[0], batch_size)
            for start in tqdm(starts, desc="calibration", unit="batch", disable=not progress):
                model(sequences[start : start + batch_size].to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return Calibration([stats[layer.name] for layer in layers], route_all, int(sequences.shape[0]))
