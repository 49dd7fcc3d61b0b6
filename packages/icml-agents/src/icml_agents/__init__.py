"""icml-agents: agents and RL from ICML 2026: self-supervised verifiable rewards, actor-critic variants, games."""

from importlib.metadata import version as _version

__version__ = _version("icml-agents")
__all__: list[str] = []
