"""A fuzz test per public API of icml_agents.research (DualGraph memory), checked with :mod:`icml_tools.fuzz`
against the bad-input contract of GUIDE "Bad input": a result its check accepts, or ValueError/TypeError
naming the argument."""

from __future__ import annotations

import json
import math
import re
import sqlite3

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_agents import research
from icml_agents.backends import ScriptedBackend
from icml_agents.research import (
    BM25Search,
    Claim,
    Document,
    DualGraphResearcher,
    EntityResolver,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    Gap,
    KnowledgeGraph,
    LinearResearcher,
    OutlineGraph,
    OutlineResearcher,
    Relation,
    Report,
    ReportSection,
    Researcher,
    ResearchResult,
    ResearchState,
    SearchBudget,
    SearchHit,
    SearchTool,
    Section,
    citation_validity,
    coverage_gaps,
    disconnected_gaps,
    draft_outline,
    extract,
    gap_queries,
    imbalance_gaps,
    link_entities,
    load_graphs,
    merge_extraction,
    missing_link_gaps,
    normalize_name,
    pagerank,
    parse_extraction,
    save_graphs,
    section_balance,
    single_source_gaps,
    thin_hub_gaps,
    tokenize,
    write_report,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(SearchTool, "a typing Protocol (any object with search), checked by SearchBudget and the agents")
FUZZ.exempt(Researcher, "the abstract base of the three agents; its constructor is fuzzed through them")
for record in (Claim, ReportSection, Report):
    FUZZ.exempt(
        record, "a record write_report builds (fuzzed through it, citation_validity, section_balance)"
    )
for record in (ExtractedEntity, ExtractedRelation, Extraction):
    FUZZ.exempt(record, "a record parse_extraction builds (fuzzed through it and merge_extraction)")
FUZZ.exempt(Gap, "a record the gap signals build (each fuzzed)")
FUZZ.exempt(Relation, "a record KnowledgeGraph.relations builds (fuzzed through KnowledgeGraph)")
FUZZ.exempt(SearchHit, "a record search tools return (fuzzed through BM25Search and SearchBudget)")
FUZZ.exempt(Section, "a record OutlineGraph.add_section builds (fuzzed through OutlineGraph)")
FUZZ.exempt(ResearchState, "the loop's working record, built by Researcher.run (fuzzed through the agents)")
FUZZ.exempt(ResearchResult, "the record Researcher.run returns (fuzzed through the agents)")

WEIRD = st.sampled_from([None, 3, 1.5, math.nan, b"x", object(), (), [None], {"a": 1}])
NOT_A_STR = st.sampled_from([None, 3, b"x", ["a"], object()])

DOCS = [
    Document("p0", "Alpha Corp is a shipping company. Alpha Corp is based in Oslo."),
    Document("p1", "Beta Labs is a mining company."),
    Document("r0", "Alpha Corp supplies Beta Labs."),
    Document("r1", "Beta Labs partners with Gamma Works."),
]
NAME = r"[A-Z][a-z]+ [A-Z][a-z]+"


def script(request) -> str:
    """Outline, extraction and report-writing replies for the small corpus above."""
    prompt = request.messages()[0]["content"]
    if prompt.startswith("TASK: outline"):
        return json.dumps({"sections": [{"title": "Shipping", "intent": "firms"}, {"title": "Mining"}]})
    if prompt.startswith("TASK: write"):
        return json.dumps({"sentences": [{"text": "A summary.", "facts": [1]}]})
    text = re.search(r"^Document \S+:\n(.*)\Z", prompt, re.S | re.M).group(1)
    entities, relations = [], []
    for sentence in (s.strip() for s in re.findall(r"[^.]+\.", text)):
        if m := re.fullmatch(rf"({NAME}) is .*\.", sentence):
            entities.append({"name": m.group(1), "facts": [sentence]})
        elif m := re.fullmatch(rf"({NAME}) (supplies|partners with) ({NAME})\.", sentence):
            subject, relation, obj = m.groups()
            relations.append({"subject": subject, "relation": relation, "object": obj, "evidence": sentence})
    return json.dumps({"entities": entities, "relations": relations})


BACKEND = ScriptedBackend(script)


def graphs() -> tuple[OutlineGraph, KnowledgeGraph]:
    """A small grounded pair of graphs with a gap of every kind."""
    kg = KnowledgeGraph()
    kg.add_relation("Alpha Corp", "supplies", "Beta Labs", "Alpha Corp supplies Beta Labs.", "r0")
    kg.add_relation("Beta Labs", "partners with", "Gamma Works", "Beta Labs partners with Gamma Works.", "r1")
    kg.add_relation("Delta Freight", "supplies", "Epsilon Mining", "Delta Freight supplies Epsilon.", "r2")
    kg.add_fact("Alpha Corp", "Alpha Corp is a shipping company.", "p0")
    kg.add_fact("Beta Labs", "Beta Labs is a mining company.", "p1")
    og = OutlineGraph("shipping and mining")
    og.add_section("Shipping", "shipping firms").entities = ["Alpha Corp", "Gamma Works", "Delta Freight"]
    og.add_section("Mining", "mining firms").entities = ["Beta Labs", "Epsilon Mining"]
    og.add_section("Outlook", "what comes next")
    return og, kg


OUTLINE, KNOWLEDGE = graphs()
REPORT = write_report(OUTLINE, KNOWLEDGE)
GRAPH_STRATEGIES = {
    "outline": st.sampled_from([None, "outline", KNOWLEDGE, {"topic": "t"}]),
    "knowledge": st.sampled_from([None, "kg", OUTLINE, nx.Graph()]),
}


@FUZZ.covers(tokenize)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_tokenize(data):
    fuzz_call(
        data,
        tokenize,
        {"text": "The Cat sat."},
        check=lambda t: all(w.isalnum() and w == w.lower() for w in t),
    )


@FUZZ.covers(normalize_name)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_normalize_name(data):
    fuzz_call(
        data,
        normalize_name,
        {"name": "The  Varno-Dynamics."},
        check=lambda k: k == " ".join(k.casefold().split()),
    )


@FUZZ.covers(Document)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_document(data):
    fuzz_call(
        data,
        Document,
        {"doc_id": "d1", "text": "some text", "title": "a title"},
        check=lambda d: d.doc_id == "d1",
        strategies={"doc_id": st.sampled_from(["", "  ", None, 3, b"d1"]), "title": NOT_A_STR},
    )


@FUZZ.covers(BM25Search)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_bm25_search(data):
    def call(documents, k1, b, query, k):
        return BM25Search(documents, k1=k1, b=b).search(query, k)

    call.__qualname__ = "BM25Search"
    fuzz_call(
        data,
        call,
        {"documents": DOCS, "k1": 1.5, "b": 0.75, "query": "Alpha Corp", "k": 3},
        check=lambda hits: (
            0 < len(hits) <= 3
            and all(math.isfinite(h.score) and h.score >= 0 for h in hits)
            and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        ),
        strategies={
            "documents": st.sampled_from([[], None, "doc", DOCS + DOCS[:1], [DOCS[0], "x"], iter(()), 3]),
            "b": st.sampled_from([-0.1, 1.5, math.nan, None, "0.5"]),
            "query": st.sampled_from(["", "   ", None, 3, b"Alpha", ["Alpha"]]),
        },
    )


class FakeTool:
    def search(self, query, k):
        return [SearchHit(d, 1.0) for d in DOCS]


@FUZZ.covers(SearchBudget)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_search_budget(data):
    def call(tool, limit, query, k):
        budget = SearchBudget(tool, limit)
        return budget.search(query, k), k, budget.used

    call.__qualname__ = "SearchBudget"
    fuzz_call(
        data,
        call,
        {"tool": FakeTool(), "limit": 2, "query": "alpha", "k": 2},
        check=lambda out: len(out[0]) <= out[1] and out[2] == 1,
        strategies={"tool": st.sampled_from([None, "tool", BM25Search, object()]), "k": WEIRD},
    )


@FUZZ.covers(EntityResolver)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_entity_resolver(data):
    def call(canonical, names, name):
        resolver = EntityResolver()
        resolver.add(canonical, names)
        return resolver.find(name)

    call.__qualname__ = "EntityResolver"
    fuzz_call(
        data,
        call,
        {"canonical": "Varno Dynamics", "names": ["Varno Dynamics", "VDX"], "name": "the vdx"},
        check=lambda found: found in (None, "Varno Dynamics"),
        strategies={"canonical": NOT_A_STR, "names": st.sampled_from([None, "VDX", 3, [3], [b"x"]])},
    )


@FUZZ.covers(KnowledgeGraph)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_knowledge_graph(data):
    def call(name, aliases, entity, text, source, subject, relation, obj, evidence):
        kg = KnowledgeGraph()
        canon = kg.add_entity(name, aliases)
        kg.add_fact(entity, text, source)
        kg.add_relation(subject, relation, obj, evidence, source)
        return kg, canon

    def check(out):
        kg, canon = out
        return canon in kg.entities() and kg.resolve("VDX") is not None and len(kg.relations()) == 1

    call.__qualname__ = "KnowledgeGraph"
    fuzz_call(
        data,
        call,
        {
            "name": "Varno Dynamics",
            "aliases": ["VDX"],
            "entity": "VDX",
            "text": "Varno makes rotors.",
            "source": "d1",
            "subject": "Varno Dynamics",
            "relation": "supplies",
            "obj": "KAL Group",
            "evidence": "Varno supplies KAL.",
        },
        check=check,
        strategies={
            "name": st.sampled_from(["", " ", "...", None, 3]),
            "aliases": st.sampled_from([None, "VDX", 3, [None], [""], ["VDX", 3]]),
            "entity": st.sampled_from(["", "!!", None, 3]),
            "text": st.sampled_from(["", "   ", None]),
            "source": st.sampled_from(["", " ", None, 3]),
            "subject": st.sampled_from(["", "-", None]),
            "relation": st.sampled_from(["", " ", None, 3]),
            "obj": st.sampled_from(["", None, ["KAL"]]),
            "evidence": st.sampled_from(["", None]),
        },
    )


@FUZZ.covers(OutlineGraph)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_outline_graph(data):
    def call(topic, title, intent, parent, section_id, entity):
        og = OutlineGraph(topic)
        og.add_section(title, intent)
        og.add_section("Child", parent=parent)
        og.link(section_id, entity)
        return og, og.children(section_id)

    call.__qualname__ = "OutlineGraph"
    fuzz_call(
        data,
        call,
        {
            "topic": "rotors",
            "title": "Makers",
            "intent": "who makes rotors",
            "parent": "s1",
            "section_id": "s1",
            "entity": "Varno Dynamics",
        },
        check=lambda out: len(out[0]) == 2 and [s.title for s in out[1]] == ["Child"],
        strategies={
            "topic": st.sampled_from(["", " ", "?!", None, 3]),
            "title": st.sampled_from(["", None, 3]),
            "intent": NOT_A_STR,
            "parent": st.sampled_from(["s9", "", 3, ["s1"], {"s1": 1}]),
            "section_id": st.sampled_from(["s9", "", None, 3, ["s1"], {}]),
            "entity": st.sampled_from(["", None, 3]),
        },
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("research_fuzz")
    (path / "notes.txt").write_text("not a database")
    with sqlite3.connect(path / "other.sqlite") as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    save_graphs(path / "memory.sqlite", OUTLINE, KNOWLEDGE)
    return path


@FUZZ.covers(save_graphs)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_save_graphs(folder, data):
    fuzz_call(
        data,
        save_graphs,
        {"path": folder / "saved.sqlite", "outline": OUTLINE, "knowledge": KNOWLEDGE},
        check=lambda p: load_graphs(p)[1].to_dict() == KNOWLEDGE.to_dict(),
        strategies={
            "path": st.sampled_from([None, 3, b"x.sqlite", folder, str(folder / "missing" / "x.sqlite")]),
            **GRAPH_STRATEGIES,
        },
    )


@FUZZ.covers(load_graphs)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_load_graphs(folder, data):
    fuzz_call(
        data,
        load_graphs,
        {"path": folder / "memory.sqlite"},
        check=lambda out: out[0].to_dict() == OUTLINE.to_dict() and out[1].to_dict() == KNOWLEDGE.to_dict(),
        strategies={
            "path": st.sampled_from(
                [None, 3, b"x", folder, folder / "notes.txt", folder / "other.sqlite", str(folder / "none")]
            )
        },
    )


@FUZZ.covers(pagerank)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_pagerank(data):
    graph = nx.path_graph(5)
    graph.add_node("isolated")
    fuzz_call(
        data,
        pagerank,
        {"graph": graph, "damping": 0.85, "tol": 1e-10, "max_iter": 100},
        check=lambda r: len(r) == 6 and abs(sum(r.values()) - 1.0) < 1e-9 and min(r.values()) > 0,
        strategies={
            "graph": st.sampled_from([None, [(0, 1)], nx.DiGraph([(0, 1)]), {0: [1]}, "graph"]),
        },
    )


@FUZZ.covers(link_entities)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_link_entities(data):
    def call(outline, knowledge):
        link_entities(outline, knowledge)
        return outline

    call.__qualname__ = "link_entities"
    og, kg = graphs()
    fuzz_call(
        data,
        call,
        {"outline": og, "knowledge": kg},
        check=lambda og: og.section_of("Alpha Corp").title == "Shipping",
        strategies=GRAPH_STRATEGIES,
    )


def fuzz_signal(data, fn, extra=None, extra_strategies=None):
    fuzz_call(
        data,
        fn,
        {"outline": OUTLINE, "knowledge": KNOWLEDGE, **(extra or {})},
        check=lambda gaps: all(isinstance(g, Gap) and 0 < g.score <= 1 and g.query for g in gaps),
        strategies={**GRAPH_STRATEGIES, **(extra_strategies or {})},
    )


@FUZZ.covers(coverage_gaps)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_coverage_gaps(data):
    fuzz_signal(data, coverage_gaps, {"min_entities": 3})


@FUZZ.covers(disconnected_gaps)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_disconnected_gaps(data):
    fuzz_signal(data, disconnected_gaps, {"per_section": 3})


@FUZZ.covers(missing_link_gaps)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_missing_link_gaps(data):
    fuzz_signal(data, missing_link_gaps, {"top": 20})


@FUZZ.covers(thin_hub_gaps)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_thin_hub_gaps(data):
    fuzz_signal(data, thin_hub_gaps, {"min_facts": 3})


@FUZZ.covers(single_source_gaps)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_single_source_gaps(data):
    fuzz_signal(data, single_source_gaps)


@FUZZ.covers(imbalance_gaps)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_imbalance_gaps(data):
    fuzz_signal(data, imbalance_gaps)


@FUZZ.covers(gap_queries)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_gap_queries(data):
    def call(outline, knowledge, k, signals, weights, asked, repeat_decay):
        kwargs = {"signals": signals, "weights": weights, "asked": asked, "repeat_decay": repeat_decay}
        return gap_queries(outline, knowledge, k, **kwargs), k

    call.__qualname__ = "gap_queries"
    fuzz_call(
        data,
        call,
        {
            "outline": OUTLINE,
            "knowledge": KNOWLEDGE,
            "k": 4,
            "signals": ["coverage", "thin_hub", "single_source"],
            "weights": {"coverage": 0.5},
            "asked": ["Shipping shipping firms"],
            "repeat_decay": 0.5,
        },
        check=lambda out: len(out[0]) <= out[1] and len({g.query for g in out[0]}) == len(out[0]),
        strategies={
            **GRAPH_STRATEGIES,
            "signals": st.sampled_from(["coverage", ["nope"], [None], None, 3]),
            "weights": st.sampled_from(
                [{"nope": 1.0}, {"coverage": -1.0}, {"coverage": math.nan}, {"coverage": "1"}, [("a", 1)], 3]
            ),
            "asked": st.sampled_from(["query", None, 3, [3], [None], b"xy"]),
        },
    )


@FUZZ.covers(parse_extraction)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_parse_extraction(data):
    valid = {
        "entities": [{"name": "Alpha Corp", "aliases": ["Alpha"], "facts": ["Alpha Corp ships."]}],
        "relations": [{"subject": "Alpha Corp", "relation": "supplies", "object": "Beta", "evidence": "e"}],
    }
    fuzz_call(
        data,
        parse_extraction,
        {"data": valid},
        check=lambda e: len(e.entities) == 1 and len(e.relations) == 1,
        strategies={
            "data": st.sampled_from(
                [
                    None,
                    [],
                    "json",
                    {"entities": None},
                    {"entities": {"name": "x"}},
                    {"entities": [3]},
                    {"entities": [{"name": 3}]},
                    {"entities": [{"name": "a", "aliases": "b"}]},
                    {"entities": [{"name": "a", "facts": [1]}]},
                    {"relations": "r"},
                    {"relations": [{"subject": "a"}]},
                    {"relations": [{"subject": "a", "relation": "r", "object": None, "evidence": "e"}]},
                ]
            )
        },
        related={"data": ["entities", "relations"]},
    )


EXTRACTION = Extraction(
    (ExtractedEntity("Alpha Corp", ("Alpha",), ("Alpha Corp is a shipping company.", "Alpha Corp flies.")),),
    (ExtractedRelation("Alpha Corp", "supplies", "Beta Labs", "Alpha Corp supplies Beta Labs."),),
)


@FUZZ.covers(merge_extraction)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_merge_extraction(data):
    def call(knowledge, extraction, document, verify_quotes):
        return merge_extraction(knowledge, extraction, document, verify_quotes=verify_quotes), knowledge

    call.__qualname__ = "merge_extraction"
    document = Document("d", "Alpha Corp is a shipping company. Alpha Corp supplies Beta Labs.")
    fuzz_call(
        data,
        call,
        {
            "knowledge": KnowledgeGraph(),
            "extraction": EXTRACTION,
            "document": document,
            "verify_quotes": True,
        },
        check=lambda out: (
            out[0]["dropped"] == 1 and out[1].facts("Alpha") == [(EXTRACTION.entities[0].facts[0], "d")]
        ),
        strategies={
            "knowledge": st.sampled_from([None, "kg", OUTLINE, nx.MultiDiGraph()]),
            "extraction": st.sampled_from([None, {"entities": []}, "x", (EXTRACTION.entities, ())]),
            "document": st.sampled_from([None, "Alpha Corp supplies Beta Labs.", {"doc_id": "d"}]),
        },
    )


@FUZZ.covers(extract)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_extract(data):
    fuzz_call(
        data,
        extract,
        {"backend": BACKEND, "document": DOCS[2], "max_new_tokens": 256},
        check=lambda e: [(r.subject, r.object) for r in e.relations] == [("Alpha Corp", "Beta Labs")],
        strategies={
            "backend": st.sampled_from([None, "model", script, object()]),
            "document": st.sampled_from([None, "Alpha Corp supplies Beta Labs.", DOCS[2].__dict__]),
            "max_new_tokens": st.sampled_from([0, -1, 1.5, None, "256"]),
        },
    )


@FUZZ.covers(draft_outline)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_draft_outline(data):
    fuzz_call(
        data,
        draft_outline,
        {"backend": BACKEND, "topic": "rotors", "max_sections": 8},
        check=lambda og: 1 <= len(og) <= 8 and og.topic.lower() in ("rotors", "rotorsx"),
        strategies={
            "backend": st.sampled_from([None, "model", script, object()]),
            "topic": st.sampled_from(["", " ", "?", None, 3]),
            "max_sections": st.sampled_from([0, -2, 1.5, None, "8"]),
        },
    )


@FUZZ.covers(write_report)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_write_report(data):
    fuzz_call(
        data,
        write_report,
        {"outline": OUTLINE, "knowledge": KNOWLEDGE, "backend": BACKEND, "max_facts": 10},
        check=lambda r: [s.title for s in r.sections] == ["Shipping", "Mining", "Outlook"],
        strategies={
            **GRAPH_STRATEGIES,
            "backend": st.sampled_from(["model", script, object(), 3]),
            "max_facts": st.sampled_from([0, -1, 1.5, None, "10"]),
        },
    )


@FUZZ.covers(citation_validity)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_citation_validity(data):
    by_id = {d.doc_id: d for d in DOCS}
    by_id.update(
        {
            "p0": Document("p0", "Alpha Corp is a shipping company."),
            "p1": Document("p1", "Beta Labs is a mining company."),
            "r2": Document("r2", "Delta Freight supplies Epsilon."),
        }
    )
    fuzz_call(
        data,
        citation_validity,
        {"report": REPORT, "documents": list(by_id.values())},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={
            "report": st.sampled_from([None, "report", REPORT.sections, {"claims": []}]),
            "documents": st.sampled_from([None, "docs", 3, ["p0"], {"p0": "text"}, [None], b"x"]),
        },
    )
    assert citation_validity(REPORT, by_id) == 1.0


@FUZZ.covers(section_balance)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_section_balance(data):
    fuzz_call(
        data,
        section_balance,
        {"report": REPORT},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={"report": st.sampled_from([None, "report", REPORT.sections, OUTLINE, 3])},
    )


def fuzz_agent(data, cls, extra=None, extra_strategies=None):
    def call(backend, search, budget, docs_per_query, queries_per_step, verify_quotes, writer, topic, **kw):
        agent = cls(
            backend,
            search,
            budget=budget,
            docs_per_query=docs_per_query,
            queries_per_step=queries_per_step,
            verify_quotes=verify_quotes,
            writer=writer,
            **kw,
        )
        return agent.run(topic), budget

    def check(out):
        result, budget = out
        return (
            len(result.queries) <= (math.inf if budget is None else budget)
            and result.extraction_failures == 0
            and result.knowledge.triples()
            <= {("Alpha Corp", "supplies", "Beta Labs"), ("Beta Labs", "partners with", "Gamma Works")}
        )

    call.__qualname__ = cls.__name__
    fuzz_call(
        data,
        call,
        {
            "backend": BACKEND,
            "search": BM25Search(DOCS),
            "budget": 3,
            "docs_per_query": 2,
            "queries_per_step": 2,
            "verify_quotes": True,
            "writer": None,
            "topic": "shipping and mining",
            **(extra or {}),
        },
        check=check,
        strategies={
            "backend": st.sampled_from([None, "model", script]),
            "search": st.sampled_from([None, DOCS, "bm25", BM25Search]),
            "budget": st.sampled_from([0, -1, 1.5, "3", math.nan, None, 1, 7]),
            "docs_per_query": st.sampled_from([0, -1, 2.0, None, 1, 4]),
            "queries_per_step": st.sampled_from([0, 1.5, None, 1]),
            "writer": st.sampled_from(["model", script, 3]),
            "topic": st.sampled_from(["", "  ", "?!", None, 3, "Alpha Corp"]),
            **(extra_strategies or {}),
        },
    )


@FUZZ.covers(LinearResearcher)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_linear_researcher(data):
    fuzz_agent(data, LinearResearcher)


@FUZZ.covers(OutlineResearcher)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_outline_researcher(data):
    fuzz_agent(data, OutlineResearcher)


@FUZZ.covers(DualGraphResearcher)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_dualgraph_researcher(data):
    fuzz_agent(
        data,
        DualGraphResearcher,
        {
            "signals": ["coverage", "thin_hub"],
            "weights": {"thin_hub": 2.0},
            "revise_outline": True,
            "min_community": 2,
        },
        {
            "signals": st.sampled_from(["coverage", ["nope"], None, 3, [None]]),
            "weights": st.sampled_from([{"nope": 1.0}, {"coverage": -1}, "w", 3, [("coverage", 1.0)]]),
            "revise_outline": st.sampled_from([None, 1, "yes"]),
            "min_community": st.sampled_from([1, 0, 2.5, None]),
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(research)
