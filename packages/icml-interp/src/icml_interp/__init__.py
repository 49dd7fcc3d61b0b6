"""icml-interp: interpretability from ICML 2026: hooks, lens and patching, sparse autoencoders, steering geometry."""

from importlib.metadata import version as _version

from icml_interp.lens import logit_lens

__version__ = _version("icml-interp")
__all__ = ["logit_lens"]
