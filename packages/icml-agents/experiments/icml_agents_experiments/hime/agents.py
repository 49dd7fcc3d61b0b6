"""The scripted planner "LLM" of the HiMe reproduction and the agents compared (our design).

:func:`reasoner` is a competent but context-bound planner: it reads the prompt the Planner builds (task,
working memory or history, knowledge, current percept) and returns the right plan when the information it
needs is in the prompt, and a seeded guess when it is not; with several conflicting preferences in its
knowledge it picks one at random. So the agents differ only in what reaches the planner and when:

- **HiMe** (:class:`~icml_agents.hime.HiMeAgent`): Sentry triggers, bounded working memory of facts and
  utterances, knowledge retrieval; planner latency ``LATENCY`` ticks, asynchronous.
- **flat memory** (:class:`FlatMemoryAgent`): the same triggers (so the same number of planner calls at the
  same ticks) but the planner sees the last ``HISTORY`` raw percepts instead of the working memory;
- **planner every tick** (:class:`EveryTickAgent`): full history, synchronous: each action waits for a fresh
  plan (``LATENCY`` ticks);
- **reactive** (:class:`ReactiveAgent`): the same reasoning on the current percept alone, every tick, no
  latency, no memory; **oracle**: the reactive agent handed the episode's key (``World.hint``).
"""

from __future__ import annotations

import json
import re

import numpy as np

from icml_agents.backends import Request, ScriptedBackend
from icml_agents.hime import HiMeAgent, Observation, Planner, Subgoal
from icml_agents_experiments.hime.tasks import COLOURS, SHELVES, LineExecutor

LATENCY = 4  # ticks per planner call
HISTORY = 4  # raw percepts the flat-memory planner sees


def _plan(*subgoals: tuple) -> str:
    return json.dumps({"subgoals": [{"name": n, "args": a} for n, a in subgoals]})


def _section(prompt: str) -> tuple[str, str, str]:
    task = re.search(r"^Task: (.*)$", prompt, re.M)
    now = re.search(r"^Now: (.*)$", prompt, re.M)
    return (task.group(1) if task else "", now.group(1) if now else "", prompt)


def reasoner(request: Request) -> str:
    """The plan for the prompt of ``request`` (see the module docstring); guesses use ``request.seed``."""
    if isinstance(request.prompt, str):
        prompt = request.prompt
    else:  # complete_json's chat: the first user turn holds the prompt (retries append turns)
        prompt = next(content for role, content in request.prompt if role == "user")
    task, now, everything = _section(prompt)
    rng = np.random.default_rng(request.seed or 0)
    if "lamp" in task:
        if "junction" not in now or "door is" not in now:
            return _plan(("goto", {"target": "junction"}))
        doors = dict(re.findall(r"the (left|right) door is (\w+)", now))
        lamp = re.search(r"a (\w+) lamp is lit", everything)
        colour = lamp.group(1) if lamp else str(rng.choice(COLOURS))
        door = next((d for d, c in doors.items() if c == colour), "left")
        return _plan(("choose", {"door": door}))
    if "press the button" in task:
        told = re.search(r"press the button (\d) times", everything)
        count = int(told.group(1)) if told else int(rng.integers(1, 5))
        target = "far_button" if "far_button" in everything else "button"
        return _plan(("goto", {"target": target}), ("press", {"count": count}), ("submit", {}))
    if "carry the cup" in task:
        if "put the cup back" not in everything:
            return _plan(("goto", {"target": "table"}))
        where = re.search(r"the cup stands on (shelf_\d)", everything)
        shelf = where.group(1) if where else str(rng.choice(SHELVES))
        return _plan(("goto", {"target": shelf}), ("place", {}))
    if "put the cup away" in task:
        places = sorted(set(re.findall(r'cup: \{"place": "(shelf_\w+)"\}', everything)))
        said = re.search(r"cups go on (shelf_\w+)", now)
        shelf = said.group(1) if said else (str(rng.choice(places)) if places else str(rng.choice(SHELVES)))
        return _plan(("goto", {"target": shelf}), ("place", {}))
    if "flag" in task:
        flag = re.search(r"the flag is at (flag_\w)", now)
        target = flag.group(1) if flag else "flag_a"
        return _plan(("goto", {"target": target}), ("submit", {}))
    return _plan()


def planner(latency: int = LATENCY) -> Planner:
    return Planner(ScriptedBackend(reasoner), latency=latency, subgoal_names=LineExecutor.names)


class FlatMemoryAgent(HiMeAgent):
    """HiMe's triggers and latency, but the planner sees the last ``history`` raw percepts (flat memory)."""

    def __init__(self, *args, history: int = HISTORY, **kwargs) -> None:
        self.history = history
        super().__init__(*args, **kwargs)

    def reset(self, task: str, seed: int = 0) -> None:
        super().reset(task, seed)
        self.seen: list[str] = []

    def act(self, observation: Observation) -> str:
        self.seen.append(
            f"t={observation.tick}: {observation.text}"
            + (f" (human: {observation.human})" if observation.human else "")
        )
        return super().act(observation)

    def context(self, observation: Observation) -> tuple[list[str], list[str]]:
        return self.seen[-self.history :], []


class EveryTickAgent:
    """Planner every tick, synchronous, full history: each action waits ``planner.latency`` ticks for its plan."""

    def __init__(self, planner: Planner) -> None:
        self.planner, self.executor = planner, LineExecutor()

    def reset(self, task: str, seed: int = 0) -> None:
        self.task, self.seed = task, seed
        self.seen: list[str] = []
        self.ready_at: int | None = None
        self.plan: list[Subgoal] = []

    def act(self, observation: Observation) -> str:
        self.seen.append(
            f"t={observation.tick}: {observation.text}"
            + (f" (human: {observation.human})" if observation.human else "")
        )
        if self.ready_at is None:  # ask for a plan now; it arrives latency ticks later
            self.plan = self.planner.plan(
                self.task, self.seen, [], observation.text, "tick", self.seed * 1000 + self.planner.calls
            )
            self.ready_at = observation.tick + self.planner.latency
        if observation.tick < self.ready_at:
            return "wait"
        self.ready_at = None
        action, _ = self.executor.act(observation, self.plan[0] if self.plan else None)
        return action


class ReactiveAgent:
    """A memoryless policy: the reasoner on the current percept (plus ``hint``, for the oracle), every tick."""

    def __init__(self, hint: str = "") -> None:
        self.hint, self.executor = hint, LineExecutor()
        self.backend = ScriptedBackend(reasoner)

    def reset(self, task: str, seed: int = 0) -> None:
        self.task, self.seed = task, seed

    def act(self, observation: Observation) -> str:
        now = observation.text + (f"; {self.hint}" if self.hint else "")
        if observation.human:
            now += f"; {observation.human}"
        request = Request("generate", f"Task: {self.task}\nNow: {now}", 128, 0.0, 1.0, (), self.seed * 1000)
        subgoals = [Subgoal(s["name"], s["args"]) for s in json.loads(reasoner(request))["subgoals"]]
        for subgoal in subgoals:  # the first subgoal not already done
            action, status = self.executor.act(observation, subgoal)
            if status != "done" or action != "wait":
                return action
        return "wait"
