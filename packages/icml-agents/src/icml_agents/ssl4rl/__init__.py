"""SSL4RL: self-supervised tasks as verifiable rewards for RL of vision(-language) policies (arXiv 2510.16416).

``tasks`` builds verifiable examples from any image, ``rewards`` scores answers with the official semantics
(plain functions and TRL ``reward_funcs``). The digits testbeds trained with :mod:`icml_agents.rl.grpo` and
the reproduction ``ssl4rl-digits`` live in the repository's unpublished experiments area
(``packages/icml-agents/experiments``).
"""

from icml_agents.ssl4rl.rewards import (
    answer_match_reward,
    average_rewards,
    compute_score,
    extract_answer,
    format_reward,
    jigsaw_reward,
    patch_reward,
    score_answer_match,
    score_format,
    score_jigsaw,
    score_patch,
    score_task,
    ssl4rl_reward,
)
from icml_agents.ssl4rl.tasks import (
    SSLExample,
    build_dataset,
    build_examples,
    contrastive_task,
    jigsaw_task,
    patch_task,
    position_task,
    rotation_task,
)

__all__ = [
    "SSLExample",
    "answer_match_reward",
    "average_rewards",
    "build_dataset",
    "build_examples",
    "compute_score",
    "contrastive_task",
    "extract_answer",
    "format_reward",
    "jigsaw_reward",
    "jigsaw_task",
    "patch_reward",
    "patch_task",
    "position_task",
    "rotation_task",
    "score_answer_match",
    "score_format",
    "score_jigsaw",
    "score_patch",
    "score_task",
    "ssl4rl_reward",
]
