"""icml-theory: learning theory from ICML 2026: optimal RDP to f-DP accounting, stability, attention dynamics, bandits."""

from importlib.metadata import version as _version

from icml_theory import boolean, privacy
from icml_theory.boolean import *  # noqa: F403  (each subpackage's public API, listed in its __all__)
from icml_theory.privacy import *  # noqa: F403

__version__ = _version("icml-theory")
__all__ = [*boolean.__all__, *privacy.__all__]
