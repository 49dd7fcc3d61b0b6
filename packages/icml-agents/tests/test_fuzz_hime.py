"""A fuzz test per public API of icml_agents.hime (issue 51), checked with :mod:`icml_tools.fuzz` against the
bad-input contract of GUIDE "Bad input"."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_agents import hime
from icml_agents.backends import ScriptedBackend
from icml_agents.hime import (
    AddOnlyKnowledgeBase,
    Executor,
    Fact,
    HiMeAgent,
    KnowledgeBase,
    MemoryItem,
    Observation,
    Operation,
    Planner,
    Schema,
    Sentry,
    Subgoal,
    WorkingMemory,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Executor, "a typing Protocol (any object with act), checked by HiMeAgent (fuzzed)")
FUZZ.exempt(MemoryItem, "a record only WorkingMemory.add builds (fuzzed through it)")

BACKEND = ScriptedBackend(
    lambda request: json.dumps({"subgoals": [{"name": "goto", "args": {"target": "x"}}]})
)
NOT_A_STR = st.sampled_from([None, 3, b"x", ["a"]])
FACT = Fact("cup", {"place": "shelf_2"}, text="the cup goes on shelf_2", visual=np.ones(3))


class Walker:
    def act(self, observation, subgoal):
        return ("wait", "running") if subgoal is None else (f"step:{subgoal.args.get('target')}", "running")


@FUZZ.covers(Fact)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fact(data):
    fuzz_call(
        data,
        Fact,
        {
            "concept": "cup",
            "attributes": {"place": "a"},
            "text": "t",
            "visual": np.zeros(2),
            "confidence": 0.5,
        },
        check=lambda f: f.concept == "cup",
        strategies={
            "concept": st.sampled_from([None, "", 3]),
            "attributes": st.sampled_from([None, [1], {"a": 1}, {1: "a"}]),
            "visual": st.sampled_from([np.zeros((2, 2)), np.array([np.nan, 1.0]), "v", np.zeros(0)]),
            "confidence": st.sampled_from([-0.1, 1.5, math.nan, "1", None]),
        },
    )


@FUZZ.covers(Schema)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_schema(data):
    fuzz_call(
        data,
        Schema,
        {
            "id": 1,
            "concept": "cup",
            "attributes": {"place": "a"},
            "text": "t",
            "visual": None,
            "source": "observation",
            "confidence": 1.0,
            "created": 0,
            "updated": 0,
        },
        check=lambda s: s.id == 1,
        strategies={
            "id": st.sampled_from([0, -1, 1.5, None]),
            "concept": NOT_A_STR,
            "source": st.sampled_from(["dream", None]),
            "created": st.sampled_from([-1, None]),
        },
    )


@FUZZ.covers(Operation)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_operation(data):
    fuzz_call(
        data,
        Operation,
        {"kind": "UPDATE", "schema_id": 1, "fact": FACT, "patch": {"place": "b"}, "reason": "r"},
        check=lambda o: o.kind == "UPDATE",
        strategies={
            "kind": st.sampled_from(["MERGE", None, "update"]),
            "schema_id": st.sampled_from([None, -1, "1"]),
            "fact": st.sampled_from(["fact", 3]),
            "patch": st.sampled_from([[1], {"a": 1}, None]),
        },
        related={"schema_id": ["kind"], "fact": ["kind", "patch"], "patch": ["kind", "fact"]},
    )


@FUZZ.covers(KnowledgeBase)
@FUZZ.covers(AddOnlyKnowledgeBase)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_knowledge_base_observe_and_query(data):
    store = data.draw(st.sampled_from([KnowledgeBase, AddOnlyKnowledgeBase]))

    def call(text_weight, visual_weight, fact, k, query_text):
        kb = store(text_weight=text_weight, visual_weight=visual_weight)
        kb.observe(fact, tick=1)
        return kb.query(text=query_text, visual=None, k=k)

    call.__qualname__ = store.__name__
    fuzz_call(
        data,
        call,
        {"text_weight": 1.0, "visual_weight": 1.0, "fact": FACT, "k": 3, "query_text": "cup shelf_2"},
        check=lambda hits: len(hits) == 1 and hits[0][0].concept == "cup",
        strategies={
            "text_weight": st.sampled_from([-1.0, math.inf, "1", None]),
            "visual_weight": st.sampled_from([-1.0, math.nan, None]),
            "fact": st.sampled_from([None, "cup", {"concept": "cup"}]),
            "k": st.sampled_from([0, -1, 1.5, None]),
            "query_text": st.sampled_from([3, b"cup"]),
        },
        related={"query_text": ["text"]},
    )


@FUZZ.covers(Observation)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_observation(data):
    fuzz_call(
        data,
        Observation,
        {"tick": 0, "text": "x", "visual": None, "facts": (FACT,), "decision": False, "human": None},
        check=lambda o: o.tick == 0,
        strategies={
            "tick": st.sampled_from([-1, 1.5, None, "0"]),
            "text": NOT_A_STR,
            "visual": st.sampled_from([np.zeros((2, 2)), np.array([np.nan]), [1.0], np.zeros(0)]),
            "facts": st.sampled_from([[FACT], ("f",), None]),
            "decision": st.sampled_from([None, 1, "yes"]),
            "human": st.sampled_from([3, b"hi"]),
        },
    )


@FUZZ.covers(Subgoal)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_subgoal(data):
    fuzz_call(
        data,
        Subgoal,
        {"name": "goto", "args": {"target": "x"}},
        check=lambda s: str(s) == "goto(target=x)",
        strategies={"name": st.sampled_from(["", None, 3]), "args": st.sampled_from([None, [1], {1: "x"}])},
    )


@FUZZ.covers(WorkingMemory)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_working_memory(data):
    def call(capacity, ttl, tick, kind, text):
        wm = WorkingMemory(capacity, ttl)
        wm.add(tick, kind, text)
        return wm

    call.__qualname__ = "WorkingMemory"
    fuzz_call(
        data,
        call,
        {"capacity": 2, "ttl": 5, "tick": 0, "kind": "fact", "text": "t"},
        check=lambda wm: len(wm) == 1,
        strategies={
            "capacity": st.sampled_from([0, -1, 1.5, None]),
            "ttl": st.sampled_from([0, -3, 2.5]),
            "tick": st.sampled_from([-1, None, 0.5]),
            "kind": st.sampled_from(["memo", None]),
            "text": NOT_A_STR,
        },
    )


@FUZZ.covers(Sentry)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sentry(data):
    def call(memory, period, subgoal_timeout, status):
        sentry = Sentry(memory, period=period, subgoal_timeout=subgoal_timeout)
        return sentry.triggers(
            [Observation(0, "x", decision=True)],
            tick=0,
            has_plan=True,
            started=True,
            status=status,
            subgoal_age=0,
        )

    call.__qualname__ = "Sentry"
    fuzz_call(
        data,
        call,
        {"memory": WorkingMemory(2), "period": 1, "subgoal_timeout": 5, "status": "running"},
        check=lambda fired: fired == ["decision"],
        strategies={
            "memory": st.sampled_from([None, [], 3]),
            "period": st.sampled_from([0, -1, None]),
            "subgoal_timeout": st.sampled_from([0, 1.5]),
            "status": st.sampled_from(["ok", None]),
        },
    )


@FUZZ.covers(Planner)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_planner(data):
    def call(backend, latency, max_new_tokens, max_retries):
        return Planner(backend, latency=latency, max_new_tokens=max_new_tokens, max_retries=max_retries).plan(
            "task", [], [], "now"
        )

    call.__qualname__ = "Planner"
    fuzz_call(
        data,
        call,
        {"backend": BACKEND, "latency": 2, "max_new_tokens": 16, "max_retries": 0},
        check=lambda plan: [str(s) for s in plan] == ["goto(target=x)"],
        strategies={
            "backend": st.sampled_from([None, "model", lambda r: ""]),
            "latency": st.sampled_from([-1, 1.5, None]),
            "max_new_tokens": st.sampled_from([0, None]),
            "max_retries": st.sampled_from([-1, None]),
        },
    )


@FUZZ.covers(HiMeAgent)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_hime_agent(data):
    def call(executor, planner, knowledge, memory_capacity, memory_ttl, sentry_period, observation):
        agent = HiMeAgent(
            executor,
            planner,
            knowledge=knowledge,
            memory_capacity=memory_capacity,
            memory_ttl=memory_ttl,
            sentry_period=sentry_period,
        )
        agent.reset("go", seed=0)
        return [agent.act(observation), agent.act(Observation(1, "x"))]

    call.__qualname__ = "HiMeAgent"
    fuzz_call(
        data,
        call,
        {
            "executor": Walker(),
            "planner": Planner(BACKEND, latency=1),
            "knowledge": KnowledgeBase(),
            "memory_capacity": 4,
            "memory_ttl": None,
            "sentry_period": 1,
            "observation": Observation(0, "x", facts=(FACT,)),
        },
        check=lambda actions: actions == ["wait", "step:x"],
        strategies={
            "executor": st.sampled_from([None, object(), "walker"]),
            "planner": st.sampled_from([None, BACKEND]),
            "knowledge": st.sampled_from(["kb", {}]),
            "memory_capacity": st.sampled_from([0, None]),
            "memory_ttl": st.sampled_from([0, -1, 1.5]),
            "sentry_period": st.sampled_from([0, None]),
            "observation": st.sampled_from([None, "x", {"tick": 0}]),
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(hime)
