"""HiMe's tiers (issue 51): working-memory bounds and eviction, the Sentry's triggers against their
definition (hypothesis), the Planner's latency on the simulated clock and its failures, knowledge retrieval in
the planner's prompt, a tiny random Hugging Face planner and SmolLM2 (slow), bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_agents.backends import ScriptedBackend
from icml_agents.hime import (
    TRIGGERS,
    Fact,
    HiMeAgent,
    KnowledgeBase,
    Observation,
    Planner,
    Sentry,
    Subgoal,
    WorkingMemory,
)
from icml_agents.hime.agent import PRIORITY

ITEMS = st.lists(
    st.tuples(st.integers(0, 50), st.sampled_from(tuple(PRIORITY)), st.sampled_from("abcdef")), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(items=ITEMS, capacity=st.integers(1, 6), ttl=st.one_of(st.none(), st.integers(1, 20)))
def test_working_memory_stays_in_bounds_and_evicts_the_least_important_oldest(items, capacity, ttl):
    wm = WorkingMemory(capacity, ttl)
    reference: list[tuple[int, str, str]] = []
    for tick, kind, text in sorted(items):
        wm.add(tick, kind, text)
        reference = [r for r in reference if (r[1], r[2]) != (kind, text)] + [(tick, kind, text)]
        while len(reference) > capacity:
            reference.remove(min(reference, key=lambda r: (PRIORITY[r[1]], r[0])))
        assert len(wm) <= capacity
        assert [(i.tick, i.kind, i.text) for i in wm.items] == reference
    if items and ttl is not None:
        now = max(t for t, _, _ in items) + 1
        wm.expire(now)
        assert all(now - i.tick <= ttl for i in wm.items)
        assert len(wm) == sum(now - r[0] <= ttl for r in reference)


OBS = st.lists(st.tuples(st.booleans(), st.one_of(st.none(), st.just("hello"))), max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    obs=OBS,
    has_plan=st.booleans(),
    started=st.booleans(),
    status=st.sampled_from(("running", "done", "failed")),
    age=st.integers(0, 100),
    timeout=st.integers(1, 60),
)
def test_sentry_fires_exactly_on_its_conditions(obs, has_plan, started, status, age, timeout):
    sentry = Sentry(WorkingMemory(4), subgoal_timeout=timeout)
    observations = [Observation(i, "x", decision=d, human=h) for i, (d, h) in enumerate(obs)]
    fired = sentry.triggers(
        observations, tick=len(obs), has_plan=has_plan, started=started, status=status, subgoal_age=age
    )
    expected = {
        "start": not started,
        "decision": any(d for d, _ in obs),
        "human": any(h for _, h in obs),
        "done": started and not has_plan,
        "failed": status == "failed",
        "timeout": has_plan and age > timeout,
    }
    assert fired == [t for t in TRIGGERS if expected[t]]
    assert sum(i.kind == "human" for i in sentry.memory.items) == (1 if any(h for _, h in obs) else 0)


class Walker:
    """goto(target): one 'step' per tick until the percept says it is there."""

    def act(self, observation, subgoal):
        if subgoal is None:
            return "wait", "running"
        if observation.text == f"at {subgoal.args['target']}":
            return "wait", "done"
        return f"step:{subgoal.args['target']}", "running"


def scripted(plan):
    return ScriptedBackend(lambda request: json.dumps({"subgoals": plan}))


def test_plans_arrive_after_the_planner_latency_and_triggers_replan():
    agent = HiMeAgent(Walker(), Planner(scripted([{"name": "goto", "args": {"target": "door"}}]), latency=3))
    agent.reset("go to the door", seed=1)
    actions = [agent.act(Observation(t, "corridor")) for t in range(5)]
    assert actions == ["wait", "wait", "wait", "step:door", "step:door"]
    assert agent.log == [{"asked": 0, "delivered": 3, "trigger": "start", "plan": ["goto(target=door)"]}]
    assert agent.act(Observation(5, "at door")) == "wait"  # done: the plan is finished
    agent.act(Observation(6, "at door", decision=True))  # the Sentry wakes the planner again
    assert [e["trigger"] for e in agent.log] == ["start", "decision"] and agent.log[1]["delivered"] == 9


class SeedLoggingPlanner(Planner):
    """A Planner that records the seed of every call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seeds: list[int | None] = []

    def plan(self, *args, seed=None, **kwargs):
        self.seeds.append(seed)
        return super().plan(*args, seed=seed, **kwargs)


def test_a_replayed_episode_asks_the_planner_with_the_same_seeds():
    """The seed of a planner call counted the Planner's calls over its life (never reset), so replaying a
    seeded episode on the same agent asked with other seeds: now the episode's n-th call asks with
    ``seed * 1000 + n``, the first episode's seeds as before."""
    backend = scripted([{"name": "goto", "args": {"target": "door"}}])
    agent = HiMeAgent(Walker(), SeedLoggingPlanner(backend, latency=0))

    def episode(seed: int) -> tuple[list[int | None], list[int | None]]:
        asked, sent = len(agent.planner.seeds), len(backend.calls)
        agent.reset("go to the door", seed=seed)
        for t in range(4):
            agent.act(Observation(t, "corridor", decision=t == 2))  # start, then decision: two calls
        return agent.planner.seeds[asked:], [r.seed for r in backend.calls[sent:]]

    first = episode(3)
    assert first[0] == [3000, 3001]
    assert episode(3) == first  # the backend sees the same requests again
    assert episode(4)[0] == [4000, 4001]
    assert agent.planner.calls == 6  # the planner still counts its calls over its life


def test_knowledge_and_memory_reach_the_planner_prompt_and_bad_replies_give_empty_plans():
    backend = ScriptedBackend(lambda request: "not json")
    kb = KnowledgeBase()
    kb.observe(Fact("cup", {"place": "shelf_2"}, text="the cup goes on shelf_2"))
    agent = HiMeAgent(Walker(), Planner(backend, latency=0, max_retries=1), knowledge=kb)
    agent.reset("put the cup away", seed=0)
    lamp = Fact("lamp", {"colour": "red"}, text="a red lamp is lit")
    assert agent.act(Observation(0, "you hold a cup", facts=(lamp,))) == "wait"
    prompt = backend.calls[0].prompt[0][1]
    assert (
        'cup: {"place": "shelf_2"}' in prompt
        and "a red lamp is lit" in prompt
        and "Now: you hold a cup" in prompt
    )
    assert agent.planner.calls == 1 and agent.planner.failures == 1 and len(backend.calls) == 2
    assert [s.concept for s in kb.schemas()] == ["cup", "lamp"]  # the percept's fact was stored


def test_a_tiny_random_hugging_face_model_drives_the_planner():
    from transformers import AutoTokenizer

    from icml_agents.backends import HFLocalBackend
    from icml_tools.assets import smollm2_dir, tiny_llama

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    backend = HFLocalBackend(tiny_llama(vocab=len(tokenizer)), tokenizer)
    agent = HiMeAgent(Walker(), Planner(backend, latency=2, max_new_tokens=8, max_retries=0))
    agent.reset("go to the door")
    for t in range(4):
        agent.act(Observation(t, "corridor"))
    assert agent.planner.calls >= 1 and agent.planner.failures == agent.planner.calls  # random text: no plan


@pytest.mark.slow
def test_smollm2_drives_the_planner():
    from icml_agents.backends import HFLocalBackend
    from icml_tools.assets import smollm2

    model, tokenizer = smollm2()
    planner = Planner(
        HFLocalBackend(model, tokenizer), latency=1, max_new_tokens=32, max_retries=0, subgoal_names=("goto",)
    )
    agent = HiMeAgent(Walker(), planner)
    agent.reset("go to the door: use the subgoal goto with args target=door")
    for t in range(2):
        agent.act(Observation(t, "corridor"))
    assert 1 <= planner.calls == len(agent.log) and planner.failures <= planner.calls
    assert all(e["delivered"] == e["asked"] + 1 and isinstance(e["plan"], list) for e in agent.log)


def test_bad_input_names_the_argument():
    backend = scripted([])
    with pytest.raises(ValueError, match="capacity"):
        WorkingMemory(0)
    with pytest.raises(ValueError, match="ttl"):
        WorkingMemory(2, ttl=0)
    with pytest.raises(ValueError, match="latency"):
        Planner(backend, latency=-1)
    with pytest.raises(ValueError, match="memory_capacity"):
        HiMeAgent(Walker(), Planner(backend), memory_capacity=0)
    with pytest.raises(TypeError, match="executor"):
        HiMeAgent(object(), Planner(backend))
    with pytest.raises(ValueError, match="tick"):
        Observation(-1, "x")
    with pytest.raises(ValueError, match="status"):
        Sentry(WorkingMemory(1)).triggers([], tick=0, has_plan=True, started=True, status="ok", subgoal_age=0)
    planner = Planner(scripted([{"name": "fly", "args": {}}]), subgoal_names=("goto",), max_retries=0)
    assert planner.plan("t", [], [], "now") == [] and planner.failures == 1
    assert str(Subgoal("goto", {"target": "door"})) == "goto(target=door)"
