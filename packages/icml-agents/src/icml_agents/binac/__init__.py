"""Bi-NAC: a bilevel natural-language actor-critic, where the critic is trained on how much its feedback
improves the actor (Singh et al., ICML 2026). The first-order loop is our reconstruction; see :mod:`.loop`."""

from icml_agents.binac.loop import (
    BiNACConfig,
    BiNACTrainer,
    Ledger,
    Rollout,
    Template,
    count_parameters,
    evaluate,
    improvement_rewards,
)
from icml_agents.binac.policy import CausalLMPolicy, Completions, ScriptedPolicy

__all__ = [
    "BiNACConfig",
    "BiNACTrainer",
    "CausalLMPolicy",
    "Completions",
    "Ledger",
    "Rollout",
    "ScriptedPolicy",
    "Template",
    "count_parameters",
    "evaluate",
    "improvement_rewards",
]
