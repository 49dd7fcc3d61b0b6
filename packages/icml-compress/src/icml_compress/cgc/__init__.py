"""CGC: curvature-aware graph-coloring cross-layer parameter sharing with shared low-rank bases, beside its
baselines (per-layer whitened SVD as in SVD-LLM, Basis Sharing's adjacent groups).

:func:`collect_statistics` (input second moments by forward hooks), :func:`compress_model` (groups by
``ShareConfig.method``, a whitened-SVD fit per group, :class:`SharedBasisLinear` in place of each Linear),
:func:`save_shared`/:func:`load_shared` (exact round trip). The pieces: :mod:`.fit` (the shared-basis fit
and its cost ``tr(dW H dW^T)``), :mod:`.graph` (pairwise costs, conflict graph, capped seeded DSatur).
"""

from icml_compress.cgc.fit import SharedFit, fit_shared_basis, layer_cost, rank_for_ratio, refit_coefficients
from icml_compress.cgc.graph import color_groups, conflict_graph, dsatur_coloring, pair_costs, thresholds
from icml_compress.cgc.linear import SharedBasisLinear
from icml_compress.cgc.model import (
    CorruptSharedModelError,
    ShareConfig,
    collect_statistics,
    compress_model,
    load_shared,
    plan_groups,
    save_shared,
    sharing_record,
)

__all__ = [
    "CorruptSharedModelError",
    "ShareConfig",
    "SharedBasisLinear",
    "SharedFit",
    "collect_statistics",
    "color_groups",
    "compress_model",
    "conflict_graph",
    "dsatur_coloring",
    "fit_shared_basis",
    "layer_cost",
    "load_shared",
    "pair_costs",
    "plan_groups",
    "rank_for_ratio",
    "refit_coefficients",
    "save_shared",
    "sharing_record",
    "thresholds",
]
