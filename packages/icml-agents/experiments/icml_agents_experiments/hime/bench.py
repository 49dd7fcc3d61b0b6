"""Benchmark ``hime-tick-time``: wall time per simulated tick of HiMe (Sentry, working memory, planner calls
with the scripted reasoner, and a knowledge base queried at each planner call) against the reactive
executor, on the same episodes of every task, measured in the same run. Medians over repeats.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from icml_agents.hime import Fact, KnowledgeBase
from icml_agents_experiments.hime.repro import make_agent
from icml_agents_experiments.hime.tasks import TASKS, World

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
        agent = make_agent(method, world, kb) if method == "hime" else make_agent(method, world)
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
        times: dict[str, list[float]] = {"reactive": [], "hime": [], "hime+kb": []}
        for _ in range(cfg["repeats"]):
            times["reactive"].append(_seconds_per_tick("reactive", task, cfg["episodes"], False))
            times["hime"].append(_seconds_per_tick("hime", task, cfg["episodes"], False))
            times["hime+kb"].append(_seconds_per_tick("hime", task, cfg["episodes"], True))
        base = statistics.median(times["reactive"])
        for method, values in times.items():
            med = statistics.median(values)
            rows.append(
                {
                    "task": task,
                    "agent": method,
                    "us_per_tick": round(med * 1e6, 1),
                    "to_reactive": round(med / base, 2),
                }
            )
    return rows
