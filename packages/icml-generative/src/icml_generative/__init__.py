"""icml-generative: generative-model methods from ICML 2026: diffusion caches and guidance, video attention, watermarking."""

from importlib.metadata import version as _version

__version__ = _version("icml-generative")
__all__: list[str] = []
