"""icml-stats: statistics from ICML 2026: conditional-coverage diagnostics (ERT), sequential CI tests, Fréchet regression."""

from importlib.metadata import version as _version

from icml_stats import conformal
from icml_stats.conformal import *  # noqa: F403  (each subpackage's public API, listed in its __all__)

__version__ = _version("icml-stats")
__all__ = [*conformal.__all__]
