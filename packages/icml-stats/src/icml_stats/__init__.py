"""icml-stats: statistics from ICML 2026: conditional-coverage diagnostics (ERT), sequential CI tests, Fréchet regression."""

from importlib.metadata import version as _version

__version__ = _version("icml-stats")
__all__: list[str] = []
