"""Fréchet regression for objects in metric spaces: 1-D distributions (W2), SPD matrices, graph
Laplacians, compositions and spheres; global and local Fréchet regression (Petersen & Müller 2019) and
DeSI, deep single-index Fréchet regression (ICML 2026). ``DeSI`` needs torch (the ``deep`` extra)."""

from icml_stats.frechet.desi import DeSI
from icml_stats.frechet.regression import (
    KERNELS,
    GlobalFrechetRegressor,
    LocalFrechetRegressor,
    global_weights,
    local_weights,
)
from icml_stats.frechet.spaces import (
    SPACES,
    SPD,
    Compositional,
    Euclidean,
    FrechetMeanError,
    Laplacian,
    Space,
    Sphere,
    Wasserstein,
    as_space,
    check_weights,
    quantiles,
)

__all__ = [
    "KERNELS",
    "SPACES",
    "SPD",
    "Compositional",
    "DeSI",
    "Euclidean",
    "FrechetMeanError",
    "GlobalFrechetRegressor",
    "Laplacian",
    "LocalFrechetRegressor",
    "Space",
    "Sphere",
    "Wasserstein",
    "as_space",
    "check_weights",
    "global_weights",
    "local_weights",
    "quantiles",
]
