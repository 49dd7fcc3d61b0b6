"""Reinforcement-learning building blocks: GRPO (advantages, clipped objective, k3 KL) and TRL-compatible rewards."""

from icml_agents.rl.advantages import group_relative_advantages
from icml_agents.rl.grpo import GRPOConfig, compute_advantages, grpo_loss, k3_kl
from icml_agents.rl.rewards import exact_match_reward, normalize_answer

__all__ = [
    "GRPOConfig",
    "compute_advantages",
    "exact_match_reward",
    "group_relative_advantages",
    "grpo_loss",
    "k3_kl",
    "normalize_answer",
]
