"""Research agents: DualGraph and the two designs it is compared with, at the same search budget.

All three share everything but how they choose their next queries: the outline is drafted by the backend,
every retrieved document not read before is extracted by the backend into the knowledge graph, entities are
linked to sections, and the report is written from the graphs. The budget is one :class:`SearchBudget` per
run, the only path to the search tool.

- :class:`DualGraphResearcher`: queries from the gap signals of both graphs (:func:`gap_queries`);
  optionally, the outline grows a section when a community of the knowledge graph has none (Louvain).
- :class:`LinearResearcher` (search-then-generate, gpt-researcher style): the topic, then the entity names
  found in the most recently read documents, newest first.
- :class:`OutlineResearcher` (outline-centric, STORM style): sections in turn; a section's title and intent,
  then its title with the entities most recently linked to it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from icml_agents.backends import Backend
from icml_agents.research.extract import draft_outline, extract, merge_extraction
from icml_agents.research.gaps import GAP_SIGNALS, check_signals, gap_queries, link_entities, query_key
from icml_agents.research.graphs import KnowledgeGraph, OutlineGraph
from icml_agents.research.report import Report, write_report
from icml_agents.research.search import Document, SearchBudget, SearchTool
from icml_agents.validation import check_bool, check_int


@dataclass
class ResearchState:
    """What a run holds: both graphs, the queries asked, the documents read (in order) and what each read
    document added to the knowledge graph (canonical entity names)."""

    outline: OutlineGraph
    knowledge: KnowledgeGraph
    budget: SearchBudget
    read: dict[str, Document] = field(default_factory=dict)
    found: list[list[str]] = field(default_factory=list)
    failures: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ResearchResult:
    """A finished run: the graphs, the report, every query asked, the documents read, per-step records
    (queries, documents read, graph sizes, seconds) and the trace of every search (``query``, the ids of its
    ``hits`` and of the hits read for the first time, ``new``)."""

    topic: str
    outline: OutlineGraph
    knowledge: KnowledgeGraph
    report: Report
    queries: list[str]
    documents: dict[str, Document]
    steps: list[dict[str, Any]]
    extraction_failures: int
    trace: list[dict[str, Any]]


class Researcher:
    """The shared research loop (see the module docstring); subclasses choose the queries.

    ``budget`` is the number of searches (``None``: until the agent has nothing left to ask),
    ``docs_per_query`` the hits read per search, ``queries_per_step`` the queries chosen between two graph
    updates. ``writer`` is the backend that writes the report (``None``: extractive).
    """

    name = "researcher"

    def __init__(
        self,
        backend: Backend,
        search: SearchTool,
        *,
        budget: int | None = 30,
        docs_per_query: int = 5,
        queries_per_step: int = 4,
        verify_quotes: bool = True,
        writer: Backend | None = None,
    ) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be an icml_agents Backend, got {type(backend).__name__}")
        if isinstance(search, type) or not callable(getattr(search, "search", None)):
            raise TypeError(f"search must have a search(query, k) method, got {type(search).__name__}")
        if writer is not None and not isinstance(writer, Backend):
            raise TypeError(f"writer must be None or an icml_agents Backend, got {type(writer).__name__}")
        self.backend, self.search, self.writer = backend, search, writer
        self.budget = None if budget is None else check_int(budget, "budget", minimum=1)
        self.docs_per_query = check_int(docs_per_query, "docs_per_query", minimum=1)
        self.queries_per_step = check_int(queries_per_step, "queries_per_step", minimum=1)
        self.verify_quotes = check_bool(verify_quotes, "verify_quotes")

    def next_queries(self, state: ResearchState, k: int) -> list[str]:
        raise NotImplementedError

    def update(self, state: ResearchState) -> None:
        """Called after each step's documents are merged."""
        link_entities(state.outline, state.knowledge)

    def read(self, state: ResearchState, document: Document) -> None:
        extraction = extract(self.backend, document)
        if not extraction.entities and not extraction.relations:
            state.failures += 1
        merge_extraction(state.knowledge, extraction, document, verify_quotes=self.verify_quotes)
        state.read[document.doc_id] = document
        mentioned = [e.name for e in extraction.entities] + [
            n for r in extraction.relations for n in (r.subject, r.object)
        ]
        canon = [c for c in (state.knowledge.resolve(n) for n in mentioned) if c is not None]
        state.found.append(list(dict.fromkeys(canon)))

    def run(self, topic: str) -> ResearchResult:
        """Research ``topic`` until the budget is spent or no query is left; returns graphs and report."""
        outline = draft_outline(self.backend, topic)
        state = ResearchState(outline, KnowledgeGraph(), SearchBudget(self.search, self.budget))
        steps: list[dict[str, Any]] = []
        while state.budget.remaining >= 1:
            start = time.perf_counter()
            k = int(min(self.queries_per_step, state.budget.remaining))
            queries = self.next_queries(state, k)[:k]
            if not queries:
                break
            read_before = len(state.read)
            for query in queries:
                hits = state.budget.search(query, self.docs_per_query)
                new = list(
                    {
                        h.document.doc_id: h.document for h in hits if h.document.doc_id not in state.read
                    }.values()
                )
                for document in new:
                    self.read(state, document)
                ids = [h.document.doc_id for h in hits]
                state.trace.append({"query": query, "hits": ids, "new": [d.doc_id for d in new]})
            self.update(state)
            steps.append(
                {
                    "queries": queries,
                    "documents": len(state.read) - read_before,
                    "entities": len(state.knowledge),
                    "relations": state.knowledge.graph.number_of_edges(),
                    "seconds": time.perf_counter() - start,
                }
            )
        link_entities(state.outline, state.knowledge)
        report = write_report(state.outline, state.knowledge, self.writer)
        return ResearchResult(
            topic,
            state.outline,
            state.knowledge,
            report,
            list(state.budget.queries),
            state.read,
            steps,
            state.failures,
            state.trace,
        )


def _fresh(state: ResearchState, queries: Sequence[str], k: int) -> list[str]:
    asked = {query_key(q) for q in state.budget.queries}
    out: list[str] = []
    for q in queries:
        key = query_key(q)
        if key and key not in asked:
            asked.add(key)
            out.append(q)
            if len(out) == k:
                break
    return out


class LinearResearcher(Researcher):
    """Search-then-generate: the topic first, then entity names from the most recently read documents."""

    name = "linear"

    def next_queries(self, state: ResearchState, k: int) -> list[str]:
        recent = [name for found in reversed(state.found) for name in found]
        return _fresh(state, [state.outline.topic, *recent], k)


class OutlineResearcher(Researcher):
    """Outline-centric: each section in turn asks its title and intent, then its title with the entities
    most recently linked to it."""

    name = "outline"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn = 0

    def run(self, topic: str) -> ResearchResult:
        self._turn = 0  # each run starts the rotation at the first section: a rerun asks the same queries
        return super().run(topic)

    def next_queries(self, state: ResearchState, k: int) -> list[str]:
        sections = state.outline.sections()
        per_section = [
            [f"{s.title} {s.intent}".strip(), *(f"{s.title} {e}" for e in reversed(s.entities))]
            for s in sections
        ]
        ordered = []
        for depth in range(max(len(p) for p in per_section)):
            for i in range(len(sections)):
                j = (self._turn + i) % len(sections)
                if depth < len(per_section[j]):
                    ordered.append(per_section[j][depth])
        self._turn += 1
        return _fresh(state, ordered, k)


class DualGraphResearcher(Researcher):
    """DualGraph memory: queries from the gap signals of the outline and knowledge graphs.

    When no signal finds a gap before the first search (as without ``coverage``), the topic is the first
    query. ``signals`` selects gap signals (ablations drop one), ``weights`` re-weights them; ``revise_outline``
    (off by default) adds a section for a knowledge-graph community of at least ``min_community`` entities
    that no section covers, which widens the report beyond the drafted outline. :attr:`gaps` records every
    chosen gap.
    """

    name = "dualgraph"

    def __init__(
        self,
        *args: Any,
        signals: Sequence[str] = tuple(GAP_SIGNALS),
        weights: Mapping[str, float] | None = None,
        revise_outline: bool = False,
        min_community: int = 4,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.signals = check_signals(signals)
        gap_queries(OutlineGraph("check"), KnowledgeGraph(), 1, signals=self.signals, weights=weights)
        self.weights = dict(weights or {})
        self.revise_outline = check_bool(revise_outline, "revise_outline")
        self.min_community = check_int(min_community, "min_community", minimum=2)
        self.gaps: list[Any] = []

    def next_queries(self, state: ResearchState, k: int) -> list[str]:
        gaps = gap_queries(
            state.outline,
            state.knowledge,
            k,
            signals=self.signals,
            weights=self.weights,
            asked=state.budget.queries,
        )
        self.gaps.extend(gaps)
        if not gaps and not state.budget.queries:  # nothing to read a gap from yet: start from the topic
            return [state.outline.topic]
        return [g.query for g in gaps]

    def update(self, state: ResearchState) -> None:
        link_entities(state.outline, state.knowledge)
        if not self.revise_outline:
            return
        graph = state.knowledge.undirected()
        if graph.number_of_edges() == 0:
            return
        added = False
        for community in nx.community.louvain_communities(graph, seed=0):
            unlinked = [e for e in community if state.outline.section_of(e) is None]
            if len(community) >= self.min_community and len(unlinked) > len(community) / 2:
                hubs = sorted(community, key=lambda v: (-graph.degree(v), v))[:3]
                state.outline.add_section(" and ".join(hubs), ", ".join(sorted(community)[:6]))
                added = True
        if added:
            link_entities(state.outline, state.knowledge)
