"""HiMe: hierarchical embodied memory — a per-tick Executor, a Sentry with bounded working memory that wakes a
slow Planner, and a self-correcting knowledge base of cross-modal schemas (ADD/UPDATE/DELETE/NONE).

Only the paper's abstract was available: the mechanics are our reconstruction (see :mod:`icml_agents.hime.agent`
and :mod:`icml_agents.hime.knowledge`).
"""

from icml_agents.hime.agent import (
    TRIGGERS,
    Executor,
    HiMeAgent,
    MemoryItem,
    Observation,
    Planner,
    Sentry,
    Subgoal,
    WorkingMemory,
)
from icml_agents.hime.knowledge import AddOnlyKnowledgeBase, Fact, KnowledgeBase, Operation, Schema

__all__ = [
    "TRIGGERS",
    "AddOnlyKnowledgeBase",
    "Executor",
    "Fact",
    "HiMeAgent",
    "KnowledgeBase",
    "MemoryItem",
    "Observation",
    "Operation",
    "Planner",
    "Schema",
    "Sentry",
    "Subgoal",
    "WorkingMemory",
]
