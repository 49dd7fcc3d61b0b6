"""icml-theory: learning theory from ICML 2026: optimal RDP to f-DP accounting, stability, attention dynamics, bandits."""

from importlib.metadata import version as _version

__version__ = _version("icml-theory")
__all__: list[str] = []
