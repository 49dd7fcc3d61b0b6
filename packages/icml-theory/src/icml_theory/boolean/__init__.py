"""Fourier analysis of Boolean functions: exact spectra by one fast Walsh–Hadamard transform.

A placeholder for the Boolean-function tools the coming systems need (the CA-learnability paper's
Fourier-degree weights); its reproduction checks the transform against a closed form. Needs torch and
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

__all__ = [
    "fourier_coefficients",
    "majority",
    "majority_coefficient",
    "majority_spectrum",
    "spectral_weights",
    "subset_sizes",
]
