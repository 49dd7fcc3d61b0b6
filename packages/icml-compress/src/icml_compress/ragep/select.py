"""Which experts to keep: RaGEP's rank-aware budgets and Spectral-Salience selection, and the baselines.

**Budgets** (:func:`allocate_budgets`). RaGEP gives each MoE layer a share of the global expert budget
proportional to the effective rank of its representation (:meth:`LayerStats.effective_rank`); every layer
keeps at least ``min_experts`` (default its top-k) and at most all its experts; shares are clipped and the rest
redistributed, then rounded by largest remainder so the budgets sum exactly to ``round(keep_ratio · ΣE)``.
The uniform baseline gives each layer ``round(keep_ratio · E)``.

**Spectral-Salience** (:func:`spectral_salience`). Our reconstruction (the paper's text is not available; its
abstract says the metric "harmonizes subspace orthogonality and activation magnitude to identify high-energy
orthogonal experts"): a greedy column-subset selection over experts. Each expert ``e`` has its output energy
``E_e`` and its energy-weighted output Gram matrix ``G_e`` (both from calibration). Starting from nothing, the
kept set ``S`` is grown by the expert maximizing ``E_e · novelty_e(S)``, where ``novelty_e(S) = 1 −
tr(P_S G_e) / tr(G_e)`` is the share of ``e``'s output energy outside the span of the kept experts' principal
subspaces (each expert contributes the top directions holding ``energy_fraction`` of its energy, at most
``hidden // k`` of them so the kept span is not saturated before ``k`` experts are chosen). A duplicate of a
kept expert has novelty ≈ 0 and goes first; if every remaining expert is already spanned, energy decides.

**Baselines**: frequency (top-k choice counts), REAP (mean ``g·‖f‖`` over routed tokens), NAEE (the subset
whose masked-router MoE output is closest to the unpruned one on kept calibration inputs, by exhaustive
search over all ``C(E, k)`` subsets), random.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from icml_compress.ragep.calibrate import Calibration, LayerStats, calibrate
from icml_compress.ragep.layout import (
    MoELayer,
    check_keep,
    find_moe_layers,
    route,
    slice_experts,
    sync_config,
)
from icml_compress.validation import check_bool, check_instance, check_int, check_one_of

__all__ = [
    "METHODS",
    "PruningPlan",
    "allocate_budgets",
    "frequency_select",
    "naee_select",
    "plan_pruning",
    "prune_experts",
    "prune_moe",
    "random_select",
    "reap_select",
    "spectral_salience",
    "uniform_budgets",
]

METHODS = ("ragep", "spectral-salience", "reap", "frequency", "naee", "random")
MAX_SUBSETS = 100_000


def _check_keep_ratio(keep_ratio) -> float:
    if isinstance(keep_ratio, bool) or not isinstance(keep_ratio, (int, float)):
        raise TypeError(f"keep_ratio must be a number in (0, 1], got {keep_ratio!r}")
    if not (0 < keep_ratio <= 1):
        raise ValueError(f"keep_ratio must be in (0, 1] (the share of experts kept), got {keep_ratio!r}")
    return float(keep_ratio)


def _array(value, name: str, dtype=None) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a list of numbers (one per layer), got {value!r:.80}") from err


def _check_counts(n_experts, min_experts) -> tuple[np.ndarray, np.ndarray]:
    e = _array(n_experts, "n_experts")
    m = _array(min_experts, "min_experts")
    if e.ndim != 1 or e.size == 0 or not np.issubdtype(e.dtype, np.integer) or (e < 1).any():
        raise ValueError(
            f"n_experts must be a non-empty list of positive ints (one per layer), got {n_experts!r}"
        )
    if m.ndim != 1 or m.shape != e.shape or not np.issubdtype(m.dtype, np.integer) or (m < 1).any():
        raise ValueError(f"min_experts must list one positive int per layer ({e.size}), got {min_experts!r}")
    if (m > e).any():
        raise ValueError(
            f"min_experts must not exceed n_experts in any layer, got {min_experts!r} > {n_experts!r}"
        )
    return e.astype(np.int64), m.astype(np.int64)


def _total(keep_ratio: float, e: np.ndarray, m: np.ndarray) -> int:
    total = round(keep_ratio * int(e.sum()))
    if total < int(m.sum()):
        raise ValueError(
            f"keep_ratio={keep_ratio} keeps {total} experts in all, below the per-layer minimum (top-k) "
            f"summed over layers ({int(m.sum())}): a budget below top-k cannot route"
        )
    return total


def allocate_budgets(scores, n_experts, keep_ratio: float, min_experts) -> list[int]:
    """Experts kept per layer, proportional to ``scores`` (effective ranks, ≥ 0), within
    ``min_experts..n_experts`` per layer, summing to ``round(keep_ratio · Σ n_experts)`` (largest remainder)."""
    keep_ratio = _check_keep_ratio(keep_ratio)
    e, m = _check_counts(n_experts, min_experts)
    s = _array(scores, "scores", np.float64)
    if s.shape != e.shape or not np.isfinite(s).all() or (s < 0).any():
        raise ValueError(
            f"scores must list one finite non-negative number per layer ({e.size}), got {scores!r}"
        )
    total = _total(keep_ratio, e, m)
    raw = s
    s = np.ones_like(s) if s.max() <= 0 else np.maximum(s, s.max() * 1e-12)  # a zero score still gets a share
    # quota_i = clip(lam * s_i, m_i, e_i) with lam found by bisection so the quotas sum to total: shares
    # proportional to the scores wherever a layer's bounds allow (clip is monotone, so is the allocation)
    lo, hi = 0.0, 1.0
    while np.clip(hi * s, m, e).sum() < total and hi < 1e300:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.clip(mid * s, m, e).sum() < total else (lo, mid)
    quota = np.clip(hi * s, m, e)
    base = np.floor(quota).astype(np.int64)
    base = np.clip(base, m, e)
    short = total - int(base.sum())
    remainder = quota - base
    order = sorted(range(e.size), key=lambda i: (-remainder[i], -raw[i], i))
    for i in itertools.cycle(order):  # largest remainder first, never above a layer's expert count
        if short <= 0:
            break
        if base[i] < e[i]:
            base[i] += 1
            short -= 1
    return [int(b) for b in base]


def uniform_budgets(n_experts, keep_ratio: float, min_experts) -> list[int]:
    """``round(keep_ratio · E)`` experts per layer (at least ``min_experts``)."""
    keep_ratio = _check_keep_ratio(keep_ratio)
    e, m = _check_counts(n_experts, min_experts)
    _total(keep_ratio, e, m)
    return [int(max(mi, min(ei, round(keep_ratio * ei)))) for ei, mi in zip(e, m, strict=True)]


def _check_k(stats: LayerStats, k) -> int:
    check_instance(stats, "stats", LayerStats)
    return check_int(k, "k", 1, stats.n_experts)


def _top(scores: torch.Tensor, k: int) -> list[int]:
    order = sorted(range(scores.numel()), key=lambda i: (-float(scores[i]), i))  # ties: lower index first
    return sorted(order[:k])


def frequency_select(stats: LayerStats, k: int) -> list[int]:
    """The ``k`` experts chosen most often in top-k routing (frequency pruning)."""
    k = _check_k(stats, k)
    return _top(stats.counts, k)


def reap_select(stats: LayerStats, k: int) -> list[int]:
    """The ``k`` experts of highest REAP saliency (mean gate weight × expert output norm over routed tokens)."""
    k = _check_k(stats, k)
    return _top(stats.reap, k)


def random_select(stats: LayerStats, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` experts drawn uniformly at random (the floor every criterion must beat)."""
    k = _check_k(stats, k)
    check_instance(rng, "rng", np.random.Generator, "numpy.random.Generator")
    return sorted(int(i) for i in rng.choice(stats.n_experts, size=k, replace=False))


def _principal_basis(gram: torch.Tensor, energy_fraction: float, max_rank: int) -> torch.Tensor:
    eig, vec = torch.linalg.eigh((gram + gram.T) / 2)
    eig, vec = eig.flip(0).clamp_min(0), vec.flip(1)
    total = float(eig.sum())
    if total <= 0:
        return vec[:, :0]
    r = int((eig.cumsum(0) / total < energy_fraction - 1e-12).sum()) + 1
    return vec[:, : min(r, max_rank)]


def extend_span(span: torch.Tensor, basis: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """An orthonormal basis of ``span ∪ basis`` (both ``(hidden, ·)``, ``span`` orthonormal): the part of
    ``basis`` outside ``span``, orthonormalized by SVD, directions below ``tol`` (relative) dropped, so a
    basis already inside the span adds nothing (a plain QR of the concatenation would add arbitrary
    directions for the dependent columns)."""
    if basis.shape[1] == 0:
        return span
    rest = basis - span @ (span.T @ basis) if span.shape[1] else basis
    u, sigma, _ = torch.linalg.svd(rest, full_matrices=False)
    keep = sigma > tol * max(1.0, float(basis.norm(dim=0).max()))
    return torch.cat([span, u[:, keep]], dim=1)


def spectral_salience(
    stats: LayerStats, k: int, *, energy_fraction: float = 0.9, return_scores: bool = False
) -> list[int] | tuple[list[int], list[dict]]:
    """The ``k`` high-energy, mutually orthogonal experts of one layer (greedy energy × novelty; see the module
    docstring). ``return_scores``: also the trace of each greedy step (chosen expert, its energy and novelty)."""
    k = _check_k(stats, k)
    if isinstance(energy_fraction, bool) or not isinstance(energy_fraction, (int, float)):
        raise TypeError(f"energy_fraction must be a number in (0, 1], got {energy_fraction!r}")
    if not 0 < energy_fraction <= 1:
        raise ValueError(f"energy_fraction must be in (0, 1], got {energy_fraction!r}")
    check_bool(return_scores, "return_scores")
    hidden = stats.gram.shape[-1]
    max_rank = max(1, hidden // k)
    energy = stats.energy.double()
    traces = stats.gram.diagonal(dim1=1, dim2=2).sum(-1).clamp_min(1e-300)
    bases = [
        _principal_basis(stats.gram[e], float(energy_fraction), max_rank) for e in range(stats.n_experts)
    ]
    span = torch.zeros(hidden, 0, dtype=torch.float64, device=stats.gram.device)
    kept: list[int] = []
    trace: list[dict] = []
    for _ in range(k):
        best, best_key = -1, (-math.inf, -math.inf)
        for e in range(stats.n_experts):
            if e in kept:
                continue
            inside = float((span.T @ stats.gram[e] @ span).diagonal().sum()) if span.shape[1] else 0.0
            novelty = max(0.0, 1.0 - inside / float(traces[e]))
            key = (float(energy[e]) * novelty, float(energy[e]))  # energy breaks ties (all spanned)
            if key > best_key:
                best, best_key = e, key
        kept.append(best)
        trace.append({"expert": best, "energy": float(energy[best]), "score": best_key[0]})
        span = extend_span(span, bases[best])
    result = sorted(kept)
    return (result, trace) if return_scores else result


@torch.no_grad()
def naee_select(layer: MoELayer, stats: LayerStats, k: int, *, max_subsets: int = MAX_SUBSETS) -> list[int]:
    """NAEE: of all ``C(E, k)`` expert subsets, the one whose routed output (router renormalized over the
    subset) is closest in squared error to the unpruned layer's on the calibration inputs kept in
    ``stats.inputs`` (``calibrate(..., keep_inputs=N)``). Ties: the lexicographically first subset."""
    check_instance(layer, "layer", MoELayer)
    k = _check_k(stats, k)
    check_int(max_subsets, "max_subsets", 1, 1 << 40)
    if stats.inputs is None or stats.inputs.shape[0] == 0:
        raise ValueError(
            "stats must hold calibration inputs for NAEE: calibrate(..., keep_inputs=N) with N > 0"
        )
    n = stats.n_experts
    if math.comb(n, k) > max_subsets:
        raise ValueError(
            f"NAEE would search C({n}, {k}) = {math.comb(n, k)} subsets > max_subsets={max_subsets}"
        )
    device = layer.router.weight.device
    x = stats.inputs.to(device, layer.router.weight.dtype)
    f = layer.expert_outputs(x).double()  # (E, tokens, hidden)
    target = _mixture(layer, x, f, None)
    best, best_loss = None, math.inf
    for subset in itertools.combinations(range(n), k):
        alive = torch.zeros(n, dtype=torch.bool, device=device)
        alive[list(subset)] = True
        loss = float((_mixture(layer, x, f, alive) - target).square().sum())
        if loss < best_loss:
            best, best_loss = list(subset), loss
    assert best is not None
    return best


def _mixture(layer: MoELayer, x: torch.Tensor, f: torch.Tensor, alive: torch.Tensor | None) -> torch.Tensor:
    _, index, weights = route(layer, x, alive)
    tokens = torch.arange(x.shape[0], device=x.device)[:, None].expand_as(index)
    return (weights.double()[..., None] * f[index, tokens]).sum(1)


@dataclass
class PruningPlan:
    """Experts kept per MoE layer (``kept``: layer index → sorted original expert indices), the budgets, the
    method, the layers' effective ranks (when computed), and the keep ratio."""

    method: str
    keep_ratio: float
    kept: dict[int, list[int]]
    budgets: dict[int, int]
    effective_ranks: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "keep_ratio": self.keep_ratio,
            "kept": {str(i): v for i, v in self.kept.items()},
            "budgets": {str(i): v for i, v in self.budgets.items()},
            "effective_ranks": {str(i): v for i, v in self.effective_ranks.items()},
        }


def plan_pruning(
    calibration: Calibration,
    keep_ratio: float,
    *,
    method: str = "ragep",
    budgets: str | None = None,
    model: nn.Module | None = None,
    seed: int = 0,
    energy_fraction: float = 0.9,
) -> PruningPlan:
    """Choose the experts to keep in every layer of ``calibration``.

    ``method``: ``"ragep"`` (rank-aware budgets + Spectral-Salience), ``"spectral-salience"`` (uniform budgets +
    Spectral-Salience), ``"reap"``, ``"frequency"``, ``"naee"`` (needs ``model`` and ``keep_inputs`` at
    calibration), ``"random"`` (``seed``). ``budgets``: ``"rank"`` or ``"uniform"``; default rank for
    ``"ragep"``, uniform for the others (the baselines as their papers use them). Every layer keeps at least its
    top-k experts.
    """
    check_instance(calibration, "calibration", Calibration)
    keep_ratio = _check_keep_ratio(keep_ratio)
    check_one_of(method, "method", METHODS)
    budgets = budgets or ("rank" if method == "ragep" else "uniform")
    check_one_of(budgets, "budgets", ("rank", "uniform"))
    check_int(seed, "seed", 0, 2**63 - 1)
    if method == "naee":
        if model is None:
            raise ValueError("model is needed for method='naee' (it runs the experts on kept inputs)")
        moe = {layer.name: layer for layer in find_moe_layers(model)}
    layers = calibration.layers
    n_experts = [s.n_experts for s in layers]
    minimum = [s.top_k for s in layers]
    eranks = calibration.effective_ranks() if budgets == "rank" else {}
    if budgets == "rank":
        counts = allocate_budgets([eranks[s.index] for s in layers], n_experts, keep_ratio, minimum)
    else:
        counts = uniform_budgets(n_experts, keep_ratio, minimum)
    rng = np.random.default_rng(seed)
    kept: dict[int, list[int]] = {}
    for s, k in zip(layers, counts, strict=True):
        if method in ("ragep", "spectral-salience"):
            kept[s.index] = spectral_salience(s, k, energy_fraction=energy_fraction)  # type: ignore[assignment]
        elif method == "reap":
            kept[s.index] = reap_select(s, k)
        elif method == "frequency":
            kept[s.index] = frequency_select(s, k)
        elif method == "naee":
            kept[s.index] = naee_select(moe[s.name], s, k)
        else:
            kept[s.index] = random_select(s, k, rng)
    return PruningPlan(
        method, keep_ratio, kept, {s.index: k for s, k in zip(layers, counts, strict=True)}, eranks
    )


@torch.no_grad()
def prune_experts(model: nn.Module, plan: PruningPlan | dict) -> nn.Module:
    """Remove, in place, every expert ``plan`` does not keep (a :class:`PruningPlan` or ``{layer index: kept
    expert indices}``): router rows and expert weights are sliced, so the router renormalizes its top-k over
    the survivors. The config records the new counts (:func:`~icml_compress.ragep.layout.sync_config`) and the
    original indices kept (``config.ragep_kept_experts``). Returns ``model``."""
    kept = plan.kept if isinstance(plan, PruningPlan) else plan
    if not isinstance(kept, dict):
        raise TypeError(
            f"plan must be a PruningPlan or a dict {{layer index: kept experts}}, got {type(plan).__name__}"
        )
    layers = {layer.index: layer for layer in find_moe_layers(model)}
    unknown = set(kept) - set(layers)
    if unknown:
        raise ValueError(
            f"plan names layers {sorted(unknown)} that are not MoE layers of model ({sorted(layers)})"
        )
    for index, experts in kept.items():  # check every layer before changing any
        check_keep(layers[index], experts, f"plan[{index}]")
    config: Any = model.config
    previous = getattr(config, "ragep_kept_experts", None) or {}
    record = {str(i): list(previous.get(str(i), range(layer.n_experts))) for i, layer in layers.items()}
    for index, experts in kept.items():
        slice_experts(layers[index], list(experts), name=f"plan[{index}]")
        record[str(index)] = [record[str(index)][e] for e in sorted(experts)]
    config.ragep_kept_experts = record  # original expert indices, also after repeated pruning
    sync_config(model)
    return model


def prune_moe(
    model: nn.Module,
    sequences: torch.Tensor,
    keep_ratio: float,
    *,
    method: str = "ragep",
    budgets: str | None = None,
    route_all: bool = False,
    keep_inputs: int = 2048,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = False,
) -> PruningPlan:
    """Calibrate ``model`` on ``sequences`` (token ids ``(n, seq_len)``), plan with ``method`` and prune in place;
    returns the plan. See :func:`~icml_compress.ragep.calibrate.calibrate` and :func:`plan_pruning`."""
    check_one_of(method, "method", METHODS)
    calibration = calibrate(
        model,
        sequences,
        batch_size=batch_size,
        route_all=route_all,
        keep_inputs=keep_inputs if method == "naee" else 0,
        progress=progress,
    )
    plan = plan_pruning(calibration, keep_ratio, method=method, budgets=budgets, model=model, seed=seed)
    prune_experts(model, plan)
    return plan
