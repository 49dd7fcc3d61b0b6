"""icml-generative: generative-model methods from ICML 2026: diffusion caches and guidance, video attention, watermarking."""

from importlib.metadata import version as _version

from icml_generative.sampling import gaussian_mixture_score, karras_sigmas, sample_pf_ode, sliced_wasserstein

__version__ = _version("icml-generative")
__all__ = ["gaussian_mixture_score", "karras_sigmas", "sample_pf_ode", "sliced_wasserstein"]
