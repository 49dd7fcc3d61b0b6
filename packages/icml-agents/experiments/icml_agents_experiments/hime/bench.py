"""Benchmark ``hime-tick-time``: wall time per simulated tick of HiMe (Sentry, working memory, planner calls
with the scripted reasoner, and a knowledge base of 20 schemas queried at each planner call) against the
Executor tier alone (the reactive controller following one fixed subgoal, every tick), on the same episodes
of every task, measured in the same run; the reproduction's reactive agent (the scripted reasoner on the
current percept every tick) for reference. Medians over repeats.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from icml_agents.hime import Fact, KnowledgeBase, Observation, Subgoal
from icml_agents_experiments.hime.repro import make_agent
from icml_agents_experiments.hime.tasks import TASKS, LineExecutor, World


class ExecutorOnly:
    """The Executor tier alone: the reactive controller on one fixed subgoal."""

    def __init__(self) -> None:
        self.executor, self.subgoal = LineExecutor(), Subgoal("goto", {"target": "table"})

    def reset(self, task: str, seed: int = 0) -> None:
        pass

    def act(self, observation: Observation) -> str:
        return self.executor.act(observation, self.subgoal)[0]


BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"episodes": 10, "repeats": 3},
    "full": {"episodes": 40, "repeats": 5},
}


def _seconds_per_tick(method: str, task: str, episodes: int, knowledge: bool) -> float:
    ticks, start = 0, time.perf_counter()
    for ep in range(episodes):
        world = World(task, seed=ep)
        kb = None
        if knowledge:
            kb = KnowledgeBase()
            for i in range(20):  # a knowledge base of 20 schemas to retrieve from
                kb.observe(Fact(f"thing{i}", {"place": f"shelf_{i % 4 + 1}"}), tick=0)
        agent = ExecutorOnly() if method == "executor" else make_agent(method, world, kb)
        agent.reset(world.text, ep)
        obs = world.reset()
        while not world.done:
            obs = world.step(agent.act(obs))
        ticks += world.tick
    return (time.perf_counter() - start) / ticks


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    del seed  # deterministic episodes
    cfg = BUDGETS[budget]
    rows = []
    for task in TASKS:
        times: dict[str, list[float]] = {"executor": [], "hime": [], "hime+kb": [], "reactive": []}
        for _ in range(cfg["repeats"]):
            for name in times:
                times[name].append(
                    _seconds_per_tick(name.split("+")[0], task, cfg["episodes"], name == "hime+kb")
                )
        base = statistics.median(times["executor"])
        for method, values in times.items():
            med = statistics.median(values)
            rows.append(
                {
                    "task": task,
                    "agent": method,
                    "us_per_tick": round(med * 1e6, 1),
                    "to_executor": round(med / base, 2),
                }
            )
    return rows
