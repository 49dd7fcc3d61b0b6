"""Reinforcement-learning building blocks: GRPO's group-relative advantages and TRL-compatible rewards."""

from icml_agents.rl.advantages import group_relative_advantages
from icml_agents.rl.rewards import exact_match_reward, normalize_answer

__all__ = ["exact_match_reward", "group_relative_advantages", "normalize_answer"]
