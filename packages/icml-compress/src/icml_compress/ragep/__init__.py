"""RaGEP: rank-aware geometric expert pruning for Mixture-of-Experts causal LMs, with its baselines.

Calibrate (:func:`calibrate`), plan (:func:`plan_pruning`: rank-aware budgets + Spectral-Salience, or REAP,
frequency, NAEE, random), prune in place (:func:`prune_experts`), save and load (:func:`save_pruned`,
:func:`load_pruned`); :func:`prune_moe` does the first three in one call. Spectral-Salience is our
reconstruction from the paper's abstract (see :mod:`icml_compress.ragep.select`).
"""

from icml_compress.ragep.calibrate import Calibration, LayerStats, calibrate, effective_rank
from icml_compress.ragep.layout import (
    ARCHITECTURES,
    MoELayer,
    MoESpec,
    find_moe_layers,
    load_pruned,
    register_moe_architecture,
    route,
    save_pruned,
)
from icml_compress.ragep.select import (
    METHODS,
    PruningPlan,
    allocate_budgets,
    frequency_select,
    naee_select,
    plan_pruning,
    prune_experts,
    prune_moe,
    random_select,
    reap_select,
    spectral_salience,
    uniform_budgets,
)

__all__ = [
    "ARCHITECTURES",
    "METHODS",
    "Calibration",
    "LayerStats",
    "MoELayer",
    "MoESpec",
    "PruningPlan",
    "allocate_budgets",
    "calibrate",
    "effective_rank",
    "find_moe_layers",
    "frequency_select",
    "load_pruned",
    "naee_select",
    "plan_pruning",
    "prune_experts",
    "prune_moe",
    "random_select",
    "reap_select",
    "register_moe_architecture",
    "route",
    "save_pruned",
    "spectral_salience",
    "uniform_budgets",
]
