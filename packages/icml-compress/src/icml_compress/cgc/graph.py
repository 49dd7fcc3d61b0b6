"""CGC's grouping: pairwise sharing costs, the conflict graph and its capped, seeded DSatur coloring.

Layers of one matrix family (the ``q_proj`` of every block, ...) are the nodes. The sharing cost of a pair
is either

- ``"exact"``: how much the Hessian-weighted error rises when the two share one basis instead of each
  having its own at the same parameter ratio,
  ``c_ij = cost(i, j share at rank k_2) - cost(i alone at k_1) - cost(j alone at k_1)`` (negative when
  sharing is cheaper than per-layer SVD), with costs ``tr(dW H dW^T)`` of :mod:`.fit`; or
- ``"overlap"``: the cheaper surrogate ``1 - ||E_i^T E_j||_F^2 / r`` on the top-``r`` eigenvectors of the
  two input moments (0: the same high-curvature subspace, 1: orthogonal ones), ``r = k_2``.

An edge of the conflict graph joins two layers whose cost exceeds the threshold ``tau``; a proper coloring
(no edge inside a color) with at most ``max_group`` layers per color is a grouping in which no two layers
that conflict share a basis, and layers far apart in depth may. The coloring is DSatur (Brelaz 1979):
repeatedly take the uncolored layer whose neighbours already use the most distinct colors (ties: more
uncolored neighbours, then a random order drawn from ``seed``), and give it the feasible color (no
neighbour in it, fewer than ``max_group`` members) whose members it is cheapest to share with, or a new
color when none is feasible. Choosing among feasible colors by cost rather than by lowest index is our
design (the paper's text was not available); it is deterministic under ``seed``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from icml_compress.cgc.fit import (
    check_group,
    check_ratio,
    fit_shared_basis,
    group_costs,
    rank_for_ratio,
    top_eigenspace,
)
from icml_compress.validation import check_bool, check_int, check_one_of, check_positive

COSTS = ("exact", "overlap")


def pair_costs(
    weights, hessians, ratio: float, *, cost: str = "exact", refit: bool = False, damping: float = 0.01
) -> np.ndarray:
    """The symmetric ``(n, n)`` matrix of pairwise sharing costs (zero diagonal) of ``n`` layers of one
    shape, ``weights[i] (out, in)`` with input moments ``hessians[i] (in, in)``, at the parameter ``ratio``
    removed (see the module docstring for ``cost``)."""
    check_group(weights, hessians)
    ratio = check_ratio(ratio)
    check_one_of(cost, "cost", COSTS)
    check_bool(refit, "refit")
    check_positive(damping, "damping")
    n = len(weights)
    d_out, d_in = weights[0].shape
    k2 = rank_for_ratio(d_in, d_out, 2, ratio)
    out = np.zeros((n, n))
    if cost == "overlap":
        r = min(k2, d_in)
        E = [top_eigenspace(H, r) for H in hessians]
        for i in range(n):
            for j in range(i + 1, n):
                out[i, j] = out[j, i] = 1.0 - float((E[i].T @ E[j]).pow(2).sum()) / r
        return out
    return exact_pair_costs(GroupCost(weights, hessians, ratio, refit=refit, damping=damping))


def exact_pair_costs(cost_of: GroupCost) -> np.ndarray:
    """The ``"exact"`` pairwise costs ``cost_of([i, j]) - cost_of([i]) - cost_of([j])`` (zero diagonal); the
    single-layer costs stay memoized in ``cost_of``."""
    n = len(cost_of.weights)
    out = np.zeros((n, n))
    alone = [cost_of([i]) for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = cost_of([i, j]) - alone[i] - alone[j]
    return out


class GroupCost:
    """``cost_of(group)``: the total cost ``sum_l tr(dW_l H_l dW_l^T)`` of fitting one basis to the layers
    ``group`` (indices into ``weights``/``hessians``) at the rank that removes ``ratio`` of their parameters;
    memoized. Without ``refit`` it uses :func:`.fit.group_costs` on cached Gram matrices (``(in, in)``
    products only); with it, the full fit."""

    def __init__(
        self, weights, hessians, ratio: float, *, refit: bool = False, damping: float = 0.01
    ) -> None:
        self.weights, self.hessians, self.ratio = weights, hessians, ratio
        self.refit, self.damping = refit, damping
        self.d_out, self.d_in = weights[0].shape
        self.grams = None if refit else [W.detach().double().T @ W.detach().double() for W in weights]
        self.memo: dict[tuple[int, ...], float] = {}

    def __call__(self, group) -> float:
        key = tuple(group)
        if key not in self.memo:
            k = min(
                rank_for_ratio(self.d_in, self.d_out, len(key), self.ratio), self.d_in, len(key) * self.d_out
            )
            Hs = [self.hessians[i] for i in key]
            if self.grams is None:
                Ws = [self.weights[i] for i in key]
                costs = fit_shared_basis(Ws, Hs, k, refit=True, damping=self.damping).costs
            else:
                costs = group_costs([self.grams[i] for i in key], Hs, k, damping=self.damping)
            self.memo[key] = sum(costs)
        return self.memo[key]


def check_costs(costs) -> np.ndarray:
    """A square, symmetric float matrix without NaN (``+inf`` allowed: a pair that may never share)."""
    if isinstance(costs, torch.Tensor):
        costs = costs.detach().cpu().numpy()
    if not isinstance(costs, np.ndarray) or costs.dtype.kind not in "fiu":
        raise TypeError(f"costs must be a numeric (n, n) array, got {type(costs).__name__}")
    costs = costs.astype(float)
    if costs.ndim != 2 or costs.shape[0] != costs.shape[1] or costs.shape[0] < 1:
        raise ValueError(f"costs must be a square (n, n) matrix with n >= 1, got shape {costs.shape}")
    if np.isnan(costs).any():
        raise ValueError("costs must not contain NaN")
    if not np.array_equal(costs, costs.T):
        raise ValueError("costs must be symmetric (the cost of sharing i with j is that of j with i)")
    return costs


def conflict_graph(costs, tau: float) -> np.ndarray:
    """The boolean adjacency ``(n, n)``: ``costs[i, j] > tau`` off the diagonal."""
    costs = check_costs(costs)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or math.isnan(tau):
        raise TypeError(f"tau must be a number (the cost above which two layers conflict), got {tau!r}")
    adj = costs > tau
    np.fill_diagonal(adj, False)
    return adj


def dsatur_coloring(adjacency, max_group: int, seed: int = 0, costs=None) -> list[int]:
    """A proper coloring of the graph ``adjacency`` (boolean, symmetric ``(n, n)``) with at most
    ``max_group`` nodes per color: ``colors[i]`` in ``0 .. C-1``, numbered by first use. ``costs`` (same
    shape, optional) ranks the feasible colors of a node by its summed cost to their members (lowest first);
    without it the lowest feasible color is taken, as in plain DSatur. Deterministic under ``seed``."""
    adj = adjacency.detach().cpu().numpy() if isinstance(adjacency, torch.Tensor) else np.asarray(adjacency)
    if adj.dtype != bool or adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"adjacency must be a square boolean matrix, got {adj.dtype} {adj.shape}")
    if not np.array_equal(adj, adj.T) or adj.diagonal().any():
        raise ValueError("adjacency must be symmetric with a False diagonal")
    check_int(max_group, "max_group", 1)
    check_int(seed, "seed", 0)
    n = adj.shape[0]
    if costs is not None:
        costs = check_costs(costs)
        if costs.shape != adj.shape:
            raise ValueError(f"costs must have the adjacency's shape {adj.shape}, got {costs.shape}")
    tiebreak = np.random.default_rng(seed).permutation(n)
    colors = [-1] * n
    members: list[list[int]] = []
    for _ in range(n):
        best, best_key = -1, None
        for v in range(n):
            if colors[v] >= 0:
                continue
            nbrs = np.flatnonzero(adj[v])
            sat = len({colors[u] for u in nbrs if colors[u] >= 0})
            key = (sat, sum(colors[u] < 0 for u in nbrs), -tiebreak[v])
            if best_key is None or key > best_key:
                best, best_key = v, key
        feasible = [
            c for c, m in enumerate(members) if len(m) < max_group and not any(adj[best, u] for u in m)
        ]
        if not feasible:
            colors[best] = len(members)
            members.append([best])
            continue
        if costs is not None:
            c = min(feasible, key=lambda c: (sum(costs[best, u] for u in members[c]), c))
        else:
            c = feasible[0]
        colors[best] = c
        members[c].append(best)
    return colors


def color_groups(colors: list[int]) -> list[list[int]]:
    """The color classes of ``colors`` as sorted lists of nodes, ordered by their first node."""
    if not isinstance(colors, (list, tuple)) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in colors
    ):
        raise TypeError(f"colors must be a list of non-negative ints (a color per node), got {colors!r:.80}")
    groups: dict[int, list[int]] = {}
    for v, c in enumerate(colors):
        groups.setdefault(c, []).append(v)
    return sorted(groups.values())


def thresholds(costs, count: int = 12) -> list[float]:
    """Candidate ``tau`` for the sweep: ``-inf`` (no sharing), ``count`` quantiles of the off-diagonal finite
    costs, and ``+inf`` (no conflicts: groups limited only by the cap)."""
    costs = check_costs(costs)
    check_int(count, "count", 1)
    off = costs[~np.eye(costs.shape[0], dtype=bool)]
    off = off[np.isfinite(off)]
    qs = np.quantile(off, np.linspace(0, 1, count)).tolist() if off.size else []
    return [-math.inf, *sorted(set(qs)), math.inf]
