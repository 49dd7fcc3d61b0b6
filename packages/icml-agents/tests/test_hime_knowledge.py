"""icml_agents.hime.knowledge: mem0's decisions (a table), cross-modal retrieval (against scikit-learn's
TF-IDF and brute force), atomic writes, exact persistence, self-correction against the add-only baseline,
the language-model decider, bad input."""

import json
import math
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from icml_agents.backends import ScriptedBackend, StructuredOutputError
from icml_agents.hime.knowledge import (
    AddOnlyKnowledgeBase,
    Fact,
    KnowledgeBase,
    Operation,
    Schema,
)


def filled(facts, cls=KnowledgeBase, path=None, **kwargs):
    kb = cls(path, **kwargs)
    for tick, fact in enumerate(facts):
        kb.apply([Operation("ADD", None, fact)], tick)
    return kb


# 1. mem0's decisions ------------------------------------------------------------------------------
CUP_R = Fact("cup", {"place": "shelf_right", "color": "red"})
CASES = [
    # (name, knowledge-base class, facts already added (ids 1, 2, ...), new fact, [(kind, id, patch)])
    ("new concept", KnowledgeBase, [CUP_R], Fact("plate", {"place": "sink"}), [("ADD", None, {})]),
    ("same attributes", KnowledgeBase, [CUP_R], Fact("cup", {"color": "red"}), [("NONE", 1, {})]),
    ("case-insensitive concept", KnowledgeBase, [CUP_R], Fact("CUP", {"color": "red"}), [("NONE", 1, {})]),
    (
        "changed attribute",
        KnowledgeBase,
        [CUP_R],
        Fact("cup", {"color": "red", "place": "shelf_left"}),
        [("UPDATE", 1, {"place": "shelf_left"})],
    ),
    (
        "new attribute",
        KnowledgeBase,
        [CUP_R],
        Fact("cup", {"size": "small"}),
        [("UPDATE", 1, {"size": "small"})],
    ),
    (
        "negate matching",
        KnowledgeBase,
        [CUP_R, Fact("cup", {"place": "table"})],
        Fact("cup", {"place": "table"}, negate=True),
        [("DELETE", 2, {})],
    ),
    (
        "negate non-matching",
        KnowledgeBase,
        [CUP_R],
        Fact("cup", {"place": "table"}, negate=True),
        [("NONE", None, {})],
    ),
    ("negate unknown concept", KnowledgeBase, [CUP_R], Fact("bowl", negate=True), [("NONE", None, {})]),
    (
        "negate without attributes deletes the concept",
        KnowledgeBase,
        [CUP_R, Fact("plate"), Fact("cup", {"place": "table"})],
        Fact("cup", negate=True),
        [("DELETE", 1, {}), ("DELETE", 3, {})],
    ),
    (
        "best match: most shared keys",
        KnowledgeBase,
        [CUP_R, Fact("cup", {"place": "table"})],
        Fact("cup", {"place": "drawer", "color": "red"}),
        [("UPDATE", 1, {"place": "drawer"})],
    ),
    (
        "best match: ties go to the highest id",
        KnowledgeBase,
        [Fact("cup", {"place": "a"}), Fact("cup", {"place": "b"}), Fact("mug", {"place": "c"})],
        Fact("cup", {"place": "c"}),
        [("UPDATE", 2, {"place": "c"})],
    ),
    (
        "similar text and visual of another concept never merge",
        KnowledgeBase,
        [Fact("mug", {"place": "shelf"}, text="cup mug shelf", visual=np.ones(3))],
        Fact("cup", {"place": "shelf"}, text="cup mug shelf", visual=np.ones(3)),
        [("ADD", None, {})],
    ),
    (
        "add-only: contradicting preference",
        AddOnlyKnowledgeBase,
        [CUP_R],
        Fact("cup", {"place": "shelf_left"}, source="human"),
        [("ADD", None, {})],
    ),
    ("add-only: same fact", AddOnlyKnowledgeBase, [CUP_R], CUP_R, [("ADD", None, {})]),
    ("add-only: negated", AddOnlyKnowledgeBase, [CUP_R], Fact("cup", negate=True), [("NONE", None, {})]),
]


@pytest.mark.parametrize(("name", "cls", "existing", "fact", "expected"), CASES, ids=[c[0] for c in CASES])
def test_manage_follows_mem0s_protocol_without_changing_anything(name, cls, existing, fact, expected):
    kb = filled(existing, cls)
    before = kb.schemas()
    ops = kb.manage(fact, tick=7)
    assert [(op.kind, op.schema_id, op.patch) for op in ops] == expected
    assert all(op.fact is fact for op in ops)
    assert kb.schemas() == before


def test_apply_carries_out_each_kind():
    kb = filled([CUP_R, Fact("plate", visual=np.zeros(2, np.float32) + 1)])
    new = Fact("cup", {"place": "shelf_left", "size": "small"}, visual=np.array([1.0, 2.0]), source="human")
    assert kb.apply([Operation("UPDATE", 1, new, {"place": "shelf_left", "size": "small"})], tick=5) == [1]
    cup = kb.get(1)
    # the patch is merged into the attributes in place; the default text follows the merged attributes
    assert cup == Schema(
        1,
        "cup",
        {"place": "shelf_left", "color": "red", "size": "small"},
        "cup: place=shelf_left, color=red, size=small",
        np.array([1.0, 2.0]),
        "human",
        1.0,
        0,
        5,
    )
    # an UPDATE without a fact keeps text and visual; a fact's own text replaces the schema's
    assert kb.apply([Operation("UPDATE", 2, None, {"place": "sink"})], 6) == [2]
    assert kb.get(2).text == "plate: place=sink" and kb.get(2).visual.dtype == np.float32
    kb.apply([Operation("UPDATE", 2, Fact("plate", text="a white plate"))], 7)
    assert kb.get(2).text == "a white plate" and kb.get(2).attributes == {"place": "sink"}
    assert kb.apply([Operation("DELETE", 1), Operation("NONE", 2), Operation("ADD", None, CUP_R)], 8) == [
        1,
        3,
    ]
    assert [s.id for s in kb.schemas()] == [2, 3] and kb.get(1) is None and len(kb) == 2
    # returned schemas are copies
    kb.schemas()[0].attributes["place"] = "floor"
    assert kb.get(2).attributes == {"place": "sink"}


def test_schema_equality_is_exact():
    a = Schema(1, "cup", {"a": "1", "b": "2"}, "t", np.ones(2), "human", 0.5, 0, 1)
    assert a == a.copy()
    assert a != Schema(1, "cup", {"b": "2", "a": "1"}, "t", np.ones(2), "human", 0.5, 0, 1)
    assert a != Schema(1, "cup", {"a": "1", "b": "2"}, "t", np.ones(2, np.float32), "human", 0.5, 0, 1)
    assert a != Schema(1, "cup", {"a": "1", "b": "2"}, "t", None, "human", 0.5, 0, 1)
    assert a != Schema(1, "cup", {"a": "1", "b": "2"}, "t", np.ones(2), "human", math.nextafter(0.5, 1), 0, 1)


# 2. retrieval -----------------------------------------------------------------------------------------
def test_retrieval_finds_a_planted_schema_by_text_alone_and_by_visual_alone():
    rng = np.random.default_rng(0)
    words = ["red", "blue", "plate", "bowl", "fork", "shelf", "table", "drawer", "sink", "box"]
    facts = [
        Fact(
            f"object_{i}",
            {"place": str(rng.choice(words))},
            text=" ".join(rng.choice(words, 4)),
            visual=rng.normal(size=16),
        )
        for i in range(25)
    ]
    planted_visual = rng.normal(size=16)
    facts.insert(11, Fact("teapot", {"place": "stove"}, visual=planted_visual))
    kb = filled(facts)
    by_text = kb.query(text="the teapot", k=3)
    assert [s.id for s, _ in by_text] == [12]  # no distractor shares a word with the query
    by_visual = kb.query(visual=planted_visual + rng.normal(scale=0.1, size=16), k=3)
    assert by_visual[0][0].id == 12 and by_visual[0][1] > 0.9 > by_visual[1][1]
    # the stored float64 key, given as float32, still finds it
    assert kb.query(visual=planted_visual.astype(np.float32), k=1)[0][0].concept == "teapot"


def test_text_scores_equal_scikit_learns_tfidf_cosine():
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    rng = np.random.default_rng(1)
    words = ["cup", "mug", "shelf_left", "shelf_2", "Table", "a", "red", "ROOM", "é", "x9"]
    texts = [" ".join(rng.choice(words, int(rng.integers(1, 6)))) + "." for _ in range(30)]
    kb = filled([Fact(f"c{i}", text=t) for i, t in enumerate(texts)], text_weight=0.7)
    vectorizer = sklearn_text.TfidfVectorizer(token_pattern=r"(?u)\w+", smooth_idf=True)
    matrix = vectorizer.fit_transform(texts)
    for query in ["cup on shelf_left", "RED mug, red mug", "x9 é a", "nothing here"]:
        expected = 0.7 * (vectorizer.transform([query]) @ matrix.T).toarray()[0]
        got = np.zeros(len(texts))
        for schema, score in kb.query(text=query, k=len(texts)):
            got[schema.id - 1] = score
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


VOCAB = ["cup", "mug", "shelf", "left", "right", "red", "table", "box"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(VOCAB), max_size=4),
            st.none() | st.lists(st.integers(-2, 2), min_size=3, max_size=3),
        ),
        max_size=12,
    ),
    st.none() | st.lists(st.sampled_from(VOCAB), max_size=3),
    st.none() | st.lists(st.integers(-2, 2), min_size=3, max_size=3),
    st.floats(0, 2),
    st.floats(0, 2),
    st.integers(1, 15),
)
def test_query_orders_by_score_then_id_and_scores_by_brute_force(entries, words, vec, tw, vw, k):
    facts = [
        Fact(f"c{i}", text=" ".join(t), visual=None if v is None else np.array(v, float))
        for i, (t, v) in enumerate(entries)
    ]
    kb = filled(facts, text_weight=tw, visual_weight=vw)
    text = None if words is None else " ".join(words)
    visual = None if vec is None else np.array(vec, float)
    if text is None and visual is None:
        with pytest.raises(ValueError, match="text and visual"):
            kb.query(text, visual, k)
        return
    result = kb.query(text, visual, k)
    full = kb.query(text, visual, len(facts) + 1)
    assert result == full[:k]
    keys = [(-score, s.id) for s, score in full]
    assert keys == sorted(keys) and all(score > 0 for _, score in full)
    expected = brute_force_scores(entries, words, vec, tw, vw)
    assert {s.id for s, _ in full} == {i + 1 for i, score in enumerate(expected) if score > 0}
    for s, score in full:
        assert score == pytest.approx(expected[s.id - 1], rel=1e-12)


def brute_force_scores(entries, words, vec, tw, vw):
    """Dense TF-IDF (smoothed idf, l2 rows) and visual cosines, the larger of the two weighted."""
    n = len(entries)
    vocab = sorted({w for t, _ in entries for w in t})
    tf = np.array([[t.count(w) for w in vocab] for t, _ in entries], float).reshape(n, len(vocab))
    idf = np.log((1 + n) / (1 + (tf > 0).sum(0))) + 1
    out = []
    for (_, v), row in zip(entries, tf * idf, strict=True):
        parts = []
        if words is not None:
            q = np.array([words.count(w) for w in vocab], float) * idf
            denominator = np.linalg.norm(q) * np.linalg.norm(row)
            parts.append(tw * (q @ row / denominator if denominator > 0 else 0.0))
        if vec is not None:
            a, b = np.array(vec, float), np.array(v if v is not None else [0, 0, 0], float)
            denominator = np.linalg.norm(a) * np.linalg.norm(b)
            parts.append(vw * (a @ b / denominator if denominator > 0 else 0.0))
        out.append(max(parts))
    return out


# 3. atomic writes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("persisted", [True, False])
def test_a_failed_apply_changes_nothing_in_memory_or_on_disk(tmp_path, monkeypatch, persisted):
    path = tmp_path / "kb.sqlite" if persisted else None
    kb = filled([CUP_R, Fact("plate")], path=path)
    kb.apply([Operation("UPDATE", 2, None, {"place": "sink"})], 3)  # committed before the failures
    snapshot = kb.schemas()
    bad = [Operation("ADD", None, Fact("bowl")), Operation("UPDATE", 9, None, {"a": "b"})]
    with pytest.raises(ValueError, match=r"ops\[1\]: UPDATE of schema 9"):
        kb.apply(bad, 4)
    assert kb.schemas() == snapshot
    calls = []
    original = KnowledgeBase._store

    def crash_on_second_write(self, schema):
        calls.append(schema.id)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        original(self, schema)

    monkeypatch.setattr(KnowledgeBase, "_store", crash_on_second_write)
    ops = [
        Operation("UPDATE", 1, None, {"place": "floor"}),
        Operation("ADD", None, Fact("bowl")),
        Operation("DELETE", 2),
    ]
    with pytest.raises(RuntimeError, match="disk full"):
        kb.apply(ops, 5)
    monkeypatch.undo()
    assert kb.schemas() == snapshot
    if persisted:
        with KnowledgeBase(path) as reopened:
            assert reopened.schemas() == snapshot
    # the failed calls used no id, and the base still writes
    assert kb.apply([Operation("ADD", None, Fact("bowl"))], 6) == [3]
    if persisted:
        kb.close()
        with KnowledgeBase(path) as reopened:
            assert [s.concept for s in reopened.schemas()] == ["cup", "plate", "bowl"]


def test_ids_are_never_reused_even_across_reopening(tmp_path):
    path = tmp_path / "kb.sqlite"
    with filled([CUP_R, Fact("plate"), Fact("bowl")], path=path) as kb:
        kb.apply([Operation("DELETE", 3)], 1)
    with KnowledgeBase(path) as kb:
        assert kb.observe(Fact("fork"))[0].kind == "ADD" and kb.schemas()[-1].id == 4
        kb.close()
        with pytest.raises(ValueError, match="closed"):
            kb.apply([], 0)


@st.composite
def facts(draw, dim):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    width = 32 if dtype is np.float32 else 64
    elements = st.floats(allow_nan=False, allow_infinity=False, width=width)
    visual = draw(st.none() | hnp.arrays(dtype, dim, elements=elements))
    names = st.text(min_size=1, max_size=8).filter(str.strip)
    return Fact(
        draw(st.sampled_from(["cup", "Cup", "plate"]) | names),
        draw(st.dictionaries(names, st.text(max_size=12), max_size=4)),
        draw(st.text(max_size=30)),
        visual,
        source=draw(st.sampled_from(["observation", "human", "planner"])),
        confidence=draw(st.floats(0, 1)),
    )


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 6))
def test_schemas_round_trip_exactly_through_the_file(data, dim):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kb.sqlite"
        with KnowledgeBase(path) as kb:
            for tick, fact in enumerate(data.draw(st.lists(facts(dim), max_size=6))):
                kb.observe(fact, tick)
            expected = kb.schemas()
        with KnowledgeBase(path) as kb:
            assert kb.schemas() == expected
            for mine, theirs in zip(kb.schemas(), expected, strict=True):
                assert list(mine.attributes) == list(theirs.attributes)
                assert math.copysign(1, mine.confidence) == math.copysign(1, theirs.confidence)


def test_a_file_that_is_not_a_knowledge_base_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(ValueError, match=r"path .* not a knowledge base"):
        KnowledgeBase(other)
    text = tmp_path / "notes.txt"
    text.write_text("cup on the shelf\n" * 100)
    with pytest.raises(ValueError, match="path"):
        KnowledgeBase(text)
    assert text.read_text() == "cup on the shelf\n" * 100


# 4. self-correction ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [KnowledgeBase, AddOnlyKnowledgeBase])
def test_a_human_correction_replaces_the_old_knowledge_only_in_the_self_correcting_base(cls, tmp_path):
    kb = cls(tmp_path / "kb.sqlite")
    kb.observe(Fact("cup", {"place": "shelf_right"}), tick=1)
    kb.observe(Fact("cup", {"place": "shelf_left"}, source="human"), tick=2)
    places = [(s.attributes["place"], s.source) for s, _ in kb.query("cup")]
    if cls is KnowledgeBase:
        assert places == [("shelf_left", "human")]
        assert (kb.get(1).created, kb.get(1).updated) == (1, 2)
        kb.observe(Fact("cup", {"place": "shelf_left"}, negate=True), tick=3)
        assert kb.query("cup") == []
    else:
        assert sorted(places) == [("shelf_left", "human"), ("shelf_right", "observation")]
    kb.close()


# 5. the decider --------------------------------------------------------------------------------------
def update_reply(schema_id):
    ops = [{"kind": "UPDATE", "id": schema_id, "patch": {"place": "shelf_left"}, "reason": "human said so"}]
    return json.dumps({"operations": ops})


def test_a_decider_answers_in_json_and_nothing_changes_until_applied():
    kb = filled([CUP_R, Fact("mug", {"place": "shelf_right"}, visual=np.ones(3)), Fact("plate")])
    backend = ScriptedBackend({"knowledge base": "Sure:\n```json\n" + update_reply(1) + "\n```"})
    fact = Fact("cup", {"place": "shelf_left"}, visual=np.ones(3), source="human")
    before = kb.schemas()
    ops = kb.manage(fact, decider=backend)
    assert ops == [Operation("UPDATE", 1, fact, {"place": "shelf_left"}, "human said so")]
    assert kb.schemas() == before and len(backend.calls) == 1
    prompt = backend.calls[0].prompt[0][1]
    same, related = prompt.split("Schemas of the same concept: ")[1].split("\nRelated schemas: ")
    assert [s["id"] for s in json.loads(same)] == [1]
    assert [s["id"] for s in json.loads(related.split("\n")[0])] == [2]  # the same visual key
    assert '"concept": "cup"' in prompt.split("New fact: ")[1]
    assert kb.observe(fact, 3, decider=backend) == ops
    assert kb.get(1).attributes == {"place": "shelf_left", "color": "red"} and kb.get(1).visual.size == 3


def test_an_invalid_decision_is_retried_and_then_refused():
    kb = filled([CUP_R])
    fact = Fact("cup", {"place": "shelf_left"})
    backend = ScriptedBackend({"knowledge base": [update_reply(7), update_reply(1)]})
    assert [op.schema_id for op in kb.manage(fact, decider=backend)] == [1]
    assert (
        len(backend.calls) == 2 and "must be the id of an existing schema" in backend.calls[1].prompt[-1][1]
    )
    bad = [
        update_reply(7),
        '{"operations": [{"kind": "ADD", "id": 1}]}',
        '{"operations": [{"kind": "MERGE", "id": 1}]}',
        '{"operations": []}',
        '{"operations": [{"kind": "DELETE", "id": 1}, {"kind": "UPDATE", "id": 1, "patch": {"a": "b"}}]}',
        '{"operations": [{"kind": "DELETE", "id": 1, "patch": {"a": "b"}}]}',
        '{"ops": "NONE"}',
    ]
    for reply in bad:
        backend = ScriptedBackend({"knowledge base": reply})
        with pytest.raises(StructuredOutputError):
            kb.manage(fact, decider=backend)
        assert len(backend.calls) == 3
    assert kb.schemas() == filled([CUP_R]).schemas()


# 6. bad input ---------------------------------------------------------------------------------------
def kb4():
    return filled([Fact("cup", visual=np.ones(4))])


BAD = [
    (lambda: Fact(""), ValueError, "concept"),
    (lambda: Fact("  "), ValueError, "concept"),
    (lambda: Fact(3), TypeError, "concept"),
    (lambda: Fact("cup", ["place"]), TypeError, "attributes"),
    (lambda: Fact("cup", {"place": 3}), TypeError, "attributes"),
    (lambda: Fact("cup", {"": "x"}), ValueError, "attributes"),
    (lambda: Fact("cup", visual=np.array([1.0, np.nan])), ValueError, "visual"),
    (lambda: Fact("cup", visual=np.ones((2, 2))), ValueError, "visual"),
    (lambda: Fact("cup", visual=[1.0, 2.0]), TypeError, "visual"),
    (lambda: Fact("cup", visual=np.arange(3)), TypeError, "visual"),
    (lambda: Fact("cup", confidence=1.5), ValueError, "confidence"),
    (lambda: Fact("cup", confidence=-0.1), ValueError, "confidence"),
    (lambda: Fact("cup", source="rumour"), ValueError, "source"),
    (lambda: Fact("cup", negate=1), ValueError, "negate"),
    (lambda: Fact("cup", text="\ud800"), ValueError, "text"),
    (lambda: Operation("MERGE"), ValueError, "kind"),
    (lambda: Operation("ADD", 1, CUP_R), ValueError, "schema_id"),
    (lambda: Operation("ADD"), ValueError, "fact"),
    (lambda: Operation("DELETE"), ValueError, "schema_id"),
    (lambda: Operation("UPDATE", 1), ValueError, "patch"),
    (lambda: Operation("NONE", 1, None, {"a": "b"}), ValueError, "patch"),
    (lambda: KnowledgeBase(text_weight=-1), ValueError, "text_weight"),
    (lambda: KnowledgeBase(match_threshold=float("nan")), ValueError, "match_threshold"),
    (lambda: KnowledgeBase(3), TypeError, "path"),
    (lambda: KnowledgeBase(""), ValueError, "path"),
    (lambda: KnowledgeBase("/nonexistent/dir/kb.sqlite"), ValueError, "path"),
    (lambda: kb4().query("cup", k=0), ValueError, "k"),
    (lambda: kb4().query(), ValueError, "text and visual"),
    (lambda: kb4().query(visual=np.ones(3)), ValueError, "visual"),
    (lambda: kb4().query(3), TypeError, "text"),
    (lambda: kb4().apply(Operation("NONE")), TypeError, "ops"),
    (lambda: kb4().apply(["ADD"]), TypeError, r"ops\[0\]"),
    (lambda: kb4().apply([], tick=-1), ValueError, "tick"),
    (lambda: kb4().apply([Operation("ADD", None, Fact("a", visual=np.ones(2)))]), ValueError, r"ops\[0\]"),
    (lambda: kb4().manage(Fact("cup"), tick=-1), ValueError, "tick"),
    (lambda: kb4().manage("cup"), TypeError, "fact"),
    (lambda: kb4().manage(Fact("cup", visual=np.ones(2))), ValueError, "fact.visual"),
    (lambda: kb4().manage(Fact("cup"), decider="gpt"), TypeError, "decider"),
    (lambda: kb4().get("1"), ValueError, "schema_id"),
    (lambda: AddOnlyKnowledgeBase().observe(Fact("cup"), tick=1.5), ValueError, "tick"),
]


@pytest.mark.parametrize(("call", "error", "name"), BAD)
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()
