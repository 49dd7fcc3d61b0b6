"""HiMe's three tiers on a simulated clock: a per-tick Executor, a Sentry with bounded working memory that
decides when to wake the Planner, and a slow Planner over any :class:`~icml_agents.backends.Backend`.

Our reconstruction (only the paper's abstract was available; it names the tiers, the working memory, the
cross-modal schemas with Add/Update/Delete and the "frequency–competence paradox", not their mechanics):

- **Time.** One call of :meth:`HiMeAgent.act` is one tick. The Executor answers every tick. A Planner call
  started at tick ``t`` returns its plan at tick ``t + latency`` (``Planner.latency``); meanwhile the
  Executor keeps acting on its current subgoal (or waits when it has none). This is the paradox: the competent
  tier is too slow to run every tick.
- **Executor** (any object with ``act(observation, subgoal) -> (action, status)``, status ``"running"``,
  ``"done"`` or ``"failed"``): reactive, no memory.
- **Sentry** (every ``sentry_period`` ticks, over the observations since its last step): stores the
  percepts that carry knowledge (an observation's structured ``facts``, a human utterance) in the
  :class:`WorkingMemory` (bounded, least important and then oldest evicted first, items older than
  ``ttl`` ticks dropped), feeds facts and human corrections to the :class:`KnowledgeBase` (``observe``:
  ADD/UPDATE/DELETE/NONE), and wakes the Planner on exactly these triggers: ``start`` (no plan yet),
  ``decision`` (an observation marks a decision point), ``human`` (a human spoke), ``done`` (the plan is
  finished), ``failed`` (the Executor reports failure) and ``timeout`` (one subgoal ran more than
  ``subgoal_timeout`` ticks). It hands the Planner a compact summary: working memory, the retrieved schemas and
  the latest percept, never the raw history.
- **Planner**: one JSON request ``{"subgoals": [{"name": ..., "args": {...}}]}`` per wake-up (validated,
  bounded retries); a reply that never validates gives an empty plan and is counted (``planner_failures``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from icml_agents.backends import Backend, StructuredOutputError, complete_json
from icml_agents.hime.knowledge import Fact, KnowledgeBase
from icml_agents.validation import check_int

__all__ = [
    "TRIGGERS",
    "Executor",
    "HiMeAgent",
    "MemoryItem",
    "Observation",
    "Planner",
    "Sentry",
    "Subgoal",
    "WorkingMemory",
]

TRIGGERS = ("start", "decision", "human", "done", "failed", "timeout")
STATUSES = ("running", "done", "failed")
PRIORITY = {"human": 3, "fact": 2, "note": 1}


@dataclass(frozen=True)
class Observation:
    """What the agent perceives at one tick: ``text`` (a caption), an optional ``visual`` feature vector,
    structured ``facts`` (what a perception module extracted), ``decision`` (the world presents a choice) and
    a ``human`` utterance (``None`` when nobody spoke)."""

    tick: int
    text: str
    visual: np.ndarray | None = None
    facts: tuple[Fact, ...] = ()
    decision: bool = False
    human: str | None = None
    human_facts: tuple[Fact, ...] = ()

    def __post_init__(self) -> None:
        check_int(self.tick, "tick", minimum=0)
        if not isinstance(self.text, str):
            raise TypeError(f"text must be a str, got {type(self.text).__name__}")
        if self.visual is not None and not (
            isinstance(self.visual, np.ndarray)
            and self.visual.ndim == 1
            and self.visual.size > 0
            and np.issubdtype(self.visual.dtype, np.floating)
            and bool(np.isfinite(self.visual).all())
        ):
            raise ValueError("visual must be None or a non-empty 1-D finite float numpy array")
        if not isinstance(self.facts, tuple) or not all(isinstance(f, Fact) for f in self.facts):
            raise TypeError("facts must be a tuple of Fact")
        if not isinstance(self.human_facts, tuple) or not all(isinstance(f, Fact) for f in self.human_facts):
            raise TypeError("human_facts must be a tuple of Fact")
        if not isinstance(self.decision, bool):
            raise TypeError(f"decision must be a bool, got {self.decision!r}")
        if self.human is not None and not isinstance(self.human, str):
            raise TypeError(f"human must be a str or None, got {type(self.human).__name__}")


@dataclass(frozen=True)
class Subgoal:
    """One step of a plan: ``name`` (e.g. ``"goto"``) and ``args`` (e.g. ``{"target": "door_left"}``)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.args, dict) or not all(isinstance(k, str) for k in self.args):
            raise TypeError(f"args must be a dict with str keys, got {self.args!r:.80}")

    def __str__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.args.items())})"


class Executor(Protocol):
    def act(self, observation: Observation, subgoal: Subgoal | None) -> tuple[str, str]: ...


@dataclass(frozen=True)
class MemoryItem:
    tick: int
    kind: str  # "fact", "human" or "note"
    text: str


class WorkingMemory:
    """At most ``capacity`` items; items older than ``ttl`` ticks (``None``: never) expire. When full, the
    least important kind (human > fact > note) and then the oldest item is evicted; an item equal to one
    held (same kind and text) refreshes it instead of taking a second slot."""

    def __init__(self, capacity: int, ttl: int | None = None) -> None:
        self.capacity = check_int(capacity, "capacity", minimum=1)
        self.ttl = None if ttl is None else check_int(ttl, "ttl", minimum=1)
        self.items: list[MemoryItem] = []
        self.evicted = 0

    def add(self, tick: int, kind: str, text: str) -> None:
        check_int(tick, "tick", minimum=0)
        if kind not in PRIORITY:
            raise ValueError(f"kind must be one of {tuple(PRIORITY)}, got {kind!r}")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self.items = [i for i in self.items if (i.kind, i.text) != (kind, text)]
        self.items.append(MemoryItem(tick, kind, text))
        while len(self.items) > self.capacity:
            victim = min(self.items, key=lambda i: (PRIORITY[i.kind], i.tick))
            self.items.remove(victim)
            self.evicted += 1

    def expire(self, tick: int) -> None:
        if self.ttl is not None:
            self.items = [i for i in self.items if tick - i.tick <= self.ttl]

    def summary(self) -> list[str]:
        return [f"t={i.tick} {i.kind}: {i.text}" for i in sorted(self.items, key=lambda i: i.tick)]

    def __len__(self) -> int:
        return len(self.items)


class Sentry:
    """Watches the observation stream every ``period`` ticks (see the module docstring for its triggers)."""

    def __init__(self, memory: WorkingMemory, *, period: int = 1, subgoal_timeout: int = 50) -> None:
        if not isinstance(memory, WorkingMemory):
            raise TypeError(f"memory must be a WorkingMemory, got {type(memory).__name__}")
        self.memory = memory
        self.period = check_int(period, "period", minimum=1)
        self.subgoal_timeout = check_int(subgoal_timeout, "subgoal_timeout", minimum=1)

    def triggers(
        self,
        observations: Sequence[Observation],
        *,
        tick: int,
        has_plan: bool,
        started: bool,
        status: str,
        subgoal_age: int,
    ) -> list[str]:
        """The triggers due now, in :data:`TRIGGERS` order, given the observations since the last step, whether
        a plan (or a pending planner call) exists, whether any plan was ever requested, the Executor's last
        status and how long the current subgoal has run. Also stores knowledge-bearing percepts in memory."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        fired = set()
        for obs in observations:
            for fact in obs.facts:
                self.memory.add(obs.tick, "fact", fact.text)
            if obs.human:
                self.memory.add(obs.tick, "human", obs.human)
                fired.add("human")
            if obs.decision:
                fired.add("decision")
        self.memory.expire(tick)
        if not started:
            fired.add("start")
        elif not has_plan:
            fired.add("done")
        if status == "failed":
            fired.add("failed")
        if has_plan and subgoal_age > self.subgoal_timeout:
            fired.add("timeout")
        return [t for t in TRIGGERS if t in fired]


class Planner:
    """The slow tier: asks ``backend`` for a plan (JSON subgoals) and takes ``latency`` ticks to answer."""

    def __init__(
        self,
        backend: Backend,
        *,
        latency: int = 10,
        max_new_tokens: int = 128,
        max_retries: int = 1,
        subgoal_names: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be an icml_agents Backend, got {type(backend).__name__}")
        self.backend = backend
        self.latency = check_int(latency, "latency", minimum=0)
        self.max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1)
        self.max_retries = check_int(max_retries, "max_retries", minimum=0)
        self.subgoal_names = None if subgoal_names is None else tuple(subgoal_names)
        self.calls = 0
        self.failures = 0

    def prompt(
        self, task: str, memory: Sequence[str], knowledge: Sequence[str], state: str, trigger: str
    ) -> str:
        lines = [
            "You plan for an embodied agent. Reply with JSON only: "
            '{"subgoals": [{"name": "...", "args": {...}}]}.',
            f"Task: {task}",
            f"Why you are called: {trigger}",
            "Working memory:",
            *(f"- {m}" for m in memory),
            "Knowledge:",
            *(f"- {k}" for k in knowledge),
            f"Now: {state}",
        ]
        if self.subgoal_names:
            lines.insert(1, f"Subgoal names: {', '.join(self.subgoal_names)}.")
        return "\n".join(lines)

    def _validate(self, value: Any) -> list[Subgoal]:
        items = value.get("subgoals") if isinstance(value, dict) else None
        if not isinstance(items, list):
            raise ValueError('the reply must be an object {"subgoals": [...]}')
        plan = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise ValueError(f"each subgoal must be an object with a string name, got {item!r:.80}")
            if self.subgoal_names is not None and item["name"] not in self.subgoal_names:
                raise ValueError(f"unknown subgoal {item['name']!r}; use one of {self.subgoal_names}")
            args = item.get("args", {})
            if not isinstance(args, dict):
                raise ValueError(f"args of {item['name']} must be an object")
            plan.append(Subgoal(item["name"], dict(args)))
        return plan

    def plan(
        self,
        task: str,
        memory: Sequence[str],
        knowledge: Sequence[str],
        state: str,
        trigger: str = "start",
        seed: int | None = None,
    ) -> list[Subgoal]:
        """One planner call; an answer that never validates gives ``[]`` (counted in :attr:`failures`)."""
        self.calls += 1
        prompt = self.prompt(task, memory, knowledge, state, trigger)
        try:
            return complete_json(
                self.backend,
                prompt,
                validate=self._validate,
                max_retries=self.max_retries,
                max_new_tokens=self.max_new_tokens,
                seed=seed,
            )
        except StructuredOutputError:
            self.failures += 1
            return []


class HiMeAgent:
    """Executor + Sentry + Planner (+ an optional :class:`KnowledgeBase`) on a simulated clock.

    ``reset(task, seed)`` starts an episode; ``act(observation)`` returns this tick's action. ``log`` records
    each planner call (tick asked, tick delivered, trigger, plan). The episode's n-th planner call (from 0)
    asks with seed ``seed * 1000 + n``, so a replayed episode sends the same requests."""

    def __init__(
        self,
        executor: Executor,
        planner: Planner,
        *,
        knowledge: KnowledgeBase | None = None,
        memory_capacity: int = 8,
        memory_ttl: int | None = None,
        sentry_period: int = 1,
        subgoal_timeout: int = 50,
        knowledge_k: int = 3,
    ) -> None:
        if not callable(getattr(executor, "act", None)):
            raise TypeError(
                f"executor must have an act(observation, subgoal) method, got {type(executor).__name__}"
            )
        if not isinstance(planner, Planner):
            raise TypeError(f"planner must be a Planner, got {type(planner).__name__}")
        if knowledge is not None and not isinstance(knowledge, KnowledgeBase):
            raise TypeError(f"knowledge must be a KnowledgeBase or None, got {type(knowledge).__name__}")
        self.executor, self.planner, self.knowledge = executor, planner, knowledge
        self.memory_capacity = check_int(memory_capacity, "memory_capacity", minimum=1)
        self.memory_ttl = None if memory_ttl is None else check_int(memory_ttl, "memory_ttl", minimum=1)
        self.sentry_period = check_int(sentry_period, "sentry_period", minimum=1)
        self.subgoal_timeout = check_int(subgoal_timeout, "subgoal_timeout", minimum=1)
        self.knowledge_k = check_int(knowledge_k, "knowledge_k", minimum=1)
        self.reset("")

    def reset(self, task: str, seed: int = 0) -> None:
        if not isinstance(task, str):
            raise TypeError(f"task must be a str, got {type(task).__name__}")
        self.task, self.seed = task, check_int(seed, "seed", minimum=0)
        self.memory = WorkingMemory(self.memory_capacity, self.memory_ttl)
        self.sentry = Sentry(self.memory, period=self.sentry_period, subgoal_timeout=self.subgoal_timeout)
        self.plan: list[Subgoal] = []
        self.pending: tuple[int, list[Subgoal]] | None = None  # (tick delivered, plan)
        self.started = False
        self.status = "running"
        self.failed = False  # a failure since the Sentry's last step
        self.subgoal_since = 0
        self.buffer: list[Observation] = []
        self.log: list[dict] = []
        self.planner_calls = 0  # this episode's: the n-th call asks with seed ``seed * 1000 + n``

    def context(self, observation: Observation) -> tuple[list[str], list[str]]:
        """What the Planner is shown besides the task and the current percept: the working memory's summary
        and the schemas retrieved for the task, the percept and the memory (text and visual keys). Baselines
        override this (a flat, truncated history instead)."""
        memory = self.memory.summary()
        if self.knowledge is None or len(self.knowledge) == 0:
            return memory, []
        text = " ".join([self.task, observation.text, *memory])
        hits = self.knowledge.query(text=text, visual=observation.visual, k=self.knowledge_k)
        return memory, [f"{s.concept}: {json.dumps(s.attributes, sort_keys=True)}" for s, _ in hits]

    def act(self, observation: Observation) -> str:
        """This tick's action (the Executor's), after the Sentry's and the Planner's work due at this tick."""
        if not isinstance(observation, Observation):
            raise TypeError(f"observation must be an Observation, got {type(observation).__name__}")
        tick = observation.tick
        self.buffer.append(observation)
        if self.knowledge is not None:
            for fact in (*observation.facts, *observation.human_facts):
                self.knowledge.observe(fact, tick=tick)
        if self.pending is not None and tick >= self.pending[0]:
            self.plan, self.pending = list(self.pending[1]), None
            self.subgoal_since, self.status = tick, "running"
        if tick % self.sentry_period == 0 or not self.started:
            fired = self.sentry.triggers(
                self.buffer,
                tick=tick,
                has_plan=bool(self.plan) or self.pending is not None,
                started=self.started,
                status="failed" if self.failed else self.status,
                subgoal_age=tick - self.subgoal_since,
            )
            self.buffer, self.failed = [], False
            if fired and self.pending is None:
                self.started = True
                memory, knowledge = self.context(observation)
                seed = self.seed * 1000 + self.planner_calls  # a replayed episode asks with the same seeds
                self.planner_calls += 1
                plan = self.planner.plan(
                    self.task, memory, knowledge, observation.text, trigger=fired[0], seed=seed
                )
                self.pending = (tick + self.planner.latency, plan)
                self.log.append(
                    {
                        "asked": tick,
                        "delivered": tick + self.planner.latency,
                        "trigger": fired[0],
                        "plan": [str(s) for s in plan],
                    }
                )
                if self.planner.latency == 0:
                    self.plan, self.pending = plan, None
                    self.subgoal_since, self.status = tick, "running"
        subgoal = self.plan[0] if self.plan else None
        action, status = self.executor.act(observation, subgoal)
        if status not in STATUSES:
            raise ValueError(f"the executor returned status {status!r}; expected one of {STATUSES}")
        self.status = status
        self.failed |= status == "failed"
        if subgoal is not None and status == "done":
            self.plan.pop(0)
            self.subgoal_since = tick
        return action
