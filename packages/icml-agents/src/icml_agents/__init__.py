"""icml-agents: agents and RL from ICML 2026: self-supervised verifiable rewards, actor-critic variants, games."""

from importlib.metadata import version as _version

from icml_agents.rl import exact_match_reward, group_relative_advantages, normalize_answer

__version__ = _version("icml-agents")
__all__ = ["exact_match_reward", "group_relative_advantages", "normalize_answer"]
