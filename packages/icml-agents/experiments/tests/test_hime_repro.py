"""The HiMe task suite, its scripted reasoner and the hime-memory-tasks reproduction (quick: about 3 s)."""

import json

import pytest

from icml_agents.backends import Request
from icml_agents_experiments.hime.agents import reasoner
from icml_agents_experiments.hime.repro import METHODS, make_agent, run_episode
from icml_agents_experiments.hime.tasks import TASKS, World
from icml_tools.repro import run_reproduction


def ask(prompt: str, seed: int = 0) -> list:
    return json.loads(reasoner(Request("generate", prompt, 64, 0.0, 1.0, (), seed)))["subgoals"]


def test_worlds_are_seeded_and_the_oracle_solves_every_memory_task():
    for task in TASKS:
        a, b = World(task, seed=3), World(task, seed=3)
        assert (a.key, a.reset().text) == (b.key, b.reset().text)
        for seed in range(20):
            world = World(task, seed=seed)
            assert run_episode(world, make_agent("oracle", world), seed)["success"]
    with pytest.raises(ValueError, match="task"):
        World("fly")


def test_the_reasoner_plans_from_its_prompt_and_guesses_without_the_key():
    task = "Task: walk to the junction and open the door that matches the lamp\n"
    now = "Now: you are at junction; the left door is blue, the right door is red\n"
    assert ask(task + "- t=0 fact: a red lamp is lit\n" + now) == [
        {"name": "choose", "args": {"door": "right"}}
    ]
    guesses = {ask(task + now, seed)[0]["args"]["door"] for seed in range(20)}
    assert guesses == {"left", "right"}
    count = "Task: press the button as many times as you were told, then submit\n"
    plan = ask(
        count
        + "- press the button 3 times\nNow: you are at cell 8; the button is now at the far wall (far_button)"
    )
    assert plan[0]["args"]["target"] == "far_button" and plan[1] == {"name": "press", "args": {"count": 3}}


def test_the_deadline_ends_an_episode_and_every_tick_planning_misses_it():
    world = World("cue", seed=0)
    result = run_episode(world, make_agent("everytick", world), 0)
    assert not result["success"] and result["ticks"] == world.deadline


def test_quick_run_follows_the_protocol():
    result = run_reproduction("hime-memory-tasks", "quick", 0)
    rows = {(r["task"], r["method"]): r for r in result["rows"]}
    assert set(rows) == {(t, m) for t in TASKS for m in METHODS}
    assert rows[("cue", "hime")]["planner_calls"] == rows[("cue", "flat")]["planner_calls"]
    assert result["self_correction"]["hime"]["cup_schemas"] == [{"place": "shelf_3"}]
    assert len(result["self_correction"]["add-only"]["cup_schemas"]) == 2
