"""icml-interp: interpretability from ICML 2026: hooks, lens and patching, sparse autoencoders, steering geometry."""

from importlib.metadata import version as _version

__version__ = _version("icml-interp")
__all__: list[str] = []
