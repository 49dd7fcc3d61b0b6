"""icml-compress: model compression from ICML 2026: 2-bit trellis quantization (Proteus), expert pruning, parameter sharing, merging."""

from importlib.metadata import version as _version

__version__ = _version("icml-compress")
__all__: list[str] = []
