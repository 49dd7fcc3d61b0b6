"""Fourier analysis of Boolean functions: exact spectra by one fast Walsh–Hadamard transform, the
measures read off them (influences, total influence, low-degree and junta weights), and Monte-Carlo
estimates with confidence intervals for functions with too many inputs for a truth table. Needs torch and
icml-kernels: ``pip install 'icml-theory[torch]'``.
"""

try:
    import torch  # noqa: F401

    import icml_kernels  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the installed-alone test
    raise ImportError(
        f"icml_theory.boolean needs torch and icml-kernels ({exc.name} is missing): "
        "pip install 'icml-theory[torch]'"
    ) from exc

from icml_theory.boolean.fourier import fourier_coefficients, spectral_weights, subset_sizes
from icml_theory.boolean.majority import majority, majority_coefficient, majority_spectrum
from icml_theory.boolean.measures import (
    best_junta,
    flip_influences,
    influences,
    junta_weights,
    low_degree_weight,
    total_influence,
)
from icml_theory.boolean.sampling import (
    Estimate,
    estimate_coefficients,
    estimate_influences,
    estimate_low_degree_weight,
    estimate_total_influence,
    krawtchouk_kernel,
    truth_table_function,
)

__all__ = [
    "Estimate",
    "best_junta",
    "estimate_coefficients",
    "estimate_influences",
    "estimate_low_degree_weight",
    "estimate_total_influence",
    "flip_influences",
    "fourier_coefficients",
    "influences",
    "junta_weights",
    "krawtchouk_kernel",
    "low_degree_weight",
    "majority",
    "majority_coefficient",
    "majority_spectrum",
    "spectral_weights",
    "subset_sizes",
    "total_influence",
    "truth_table_function",
]
