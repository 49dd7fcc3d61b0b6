"""Probability-flow ODE sampling for variance-exploding diffusion: Euler and Heun on the EDM schedule,
an exact Gaussian-mixture score for ground-truth checks, and sample-quality metrics (sliced Wasserstein-2,
Fréchet distance, Spearman's rank correlation)."""

from icml_generative.sampling.metrics import frechet_distance, sliced_wasserstein, spearman
from icml_generative.sampling.mixture import gaussian_mixture_score
from icml_generative.sampling.pf_ode import karras_sigmas, sample_pf_ode

__all__ = [
    "frechet_distance",
    "gaussian_mixture_score",
    "karras_sigmas",
    "sample_pf_ode",
    "sliced_wasserstein",
    "spearman",
]
