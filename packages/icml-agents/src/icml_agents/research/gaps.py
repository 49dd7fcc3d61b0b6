"""Topology-driven gap finding: read the knowledge graph's shape together with the outline, score what is
missing, and turn the best-scored gaps into search queries.

Our reconstruction (the paper's text was not available; its abstract says queries come from "the KG topology
together with structural signals from the OG"). Six signals, each a list of scored :class:`Gap` candidates
with a templated query (scores in [0, 1], then multiplied by the signal's weight):

- ``coverage``: a section with fewer than ``min_entities`` linked entities; query: its title and intent (then
  its title alone, at half the score).
- ``disconnected``: a section whose linked entities form several components of the knowledge graph; query:
  the best-connected entity of the largest component with that of another ("A B").
- ``missing_link``: unlinked pairs ranked by their Adamic–Adar index (common neighbours, the rarer the
  better), scaled by the top score; query "A B".
- ``thin_hub``: central entities (PageRank of the undirected graph) with few facts of their own (fewer than
  ``min_facts``: known mostly from others' relations); query: the entity's name.
- ``single_source``: relations stated by one document only (verification); query "A relation B".
- ``imbalance``: a section with less than half its siblings' mean support; query: its title with its least
  supported entity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from icml_agents.research.graphs import KnowledgeGraph, OutlineGraph
from icml_agents.research.search import tokenize
from icml_agents.validation import check_int, check_real


@dataclass(frozen=True)
class Gap:
    """A scored gap: the signal that found it, its score, the query it becomes and what it is about."""

    signal: str
    score: float
    query: str
    targets: tuple[str, ...] = ()


def pagerank(graph: nx.Graph, damping: float = 0.85, tol: float = 1e-10, max_iter: int = 200) -> dict:
    """PageRank of an undirected, unweighted graph by power iteration (dangling nodes spread uniformly; a
    self-loop is one link to itself), equal to ``networkx.pagerank`` without its SciPy dependency."""
    if not isinstance(graph, nx.Graph) or graph.is_directed():
        raise TypeError(f"graph must be an undirected networkx Graph, got {type(graph).__name__}")
    damping = check_real(damping, "damping", "[0, 1)")
    tol = check_real(tol, "tol", "(0, inf)")
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    nodes = list(graph)
    n = len(nodes)
    if n == 0:
        return {}
    index = {v: i for i, v in enumerate(nodes)}
    links = [(index[u], index[v]) for u, v in graph.edges()]
    links += [(j, i) for i, j in links if i != j]  # both directions; a self-loop once
    src, dst = np.array(links, dtype=np.int64).reshape(-1, 2).T
    degree = np.bincount(src, minlength=n).astype(float)
    dangling = degree == 0
    rank = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        spread = np.bincount(dst, weights=rank[src] / degree[src], minlength=n)
        new = (1.0 - damping) / n + damping * (rank[dangling].sum() / n + spread)
        done = np.abs(new - rank).sum() < n * tol
        rank = new
        if done:
            break
    return {v: float(rank[i]) for i, v in enumerate(nodes)}


def check_graphs(outline: object, knowledge: object) -> None:
    if not isinstance(outline, OutlineGraph):
        raise TypeError(f"outline must be an OutlineGraph, got {type(outline).__name__}")
    if not isinstance(knowledge, KnowledgeGraph):
        raise TypeError(f"knowledge must be a KnowledgeGraph, got {type(knowledge).__name__}")


def link_entities(outline: OutlineGraph, knowledge: KnowledgeGraph) -> None:
    """Link entities to sections: an entity with facts goes to the section whose title and intent share the
    most words with its facts and aliases, and stays unlinked (off the outline) if none shares a word; an
    entity without facts yet (known only from relations) follows the majority of its linked neighbours.
    Links are rebuilt from scratch (entity merges and new sections are followed)."""
    check_graphs(outline, knowledge)
    sections = outline.sections()
    for s in sections:
        s.entities = []
    if not sections:
        return
    words = [set(tokenize(f"{s.title} {s.intent}")) for s in sections]
    linked: dict[str, int] = {}
    for name, data in knowledge.graph.nodes(data=True):
        text = Counter(tokenize(" ".join([*(t for t, _ in data["facts"]), *data["aliases"]])))
        overlap = [sum(text[w] for w in ws) for ws in words]
        best = int(np.argmax(overlap))
        if overlap[best] > 0:
            linked[name] = best
    undirected = knowledge.undirected()
    for _ in range(2):
        for name in undirected:
            if name in linked or knowledge.graph.nodes[name]["facts"]:
                continue
            votes = Counter(linked[m] for m in undirected[name] if m in linked)
            if votes:
                linked[name] = min(votes, key=lambda i: (-votes[i], i))
    for name, i in linked.items():
        sections[i].entities.append(name)


def _hub(graph: nx.Graph, nodes: Iterable[str]) -> str:
    return max(nodes, key=lambda v: (graph.degree(v), v))


def coverage_gaps(outline: OutlineGraph, knowledge: KnowledgeGraph, min_entities: int = 3) -> list[Gap]:
    check_graphs(outline, knowledge)
    min_entities = check_int(min_entities, "min_entities", minimum=1)
    out = []
    for s in outline.sections():
        if len(s.entities) < min_entities:
            score = 1.0 - len(s.entities) / min_entities
            full = f"{s.title} {s.intent}".strip()
            out.append(Gap("coverage", score, full, (s.section_id,)))
            if full != s.title:  # asked once already: the title alone, at half the score
                out.append(Gap("coverage", score / 2, s.title, (s.section_id,)))
    return out


def disconnected_gaps(outline: OutlineGraph, knowledge: KnowledgeGraph, per_section: int = 3) -> list[Gap]:
    check_graphs(outline, knowledge)
    per_section = check_int(per_section, "per_section", minimum=1)
    graph = knowledge.undirected()
    out = []
    for s in outline.sections():
        nodes = [e for e in s.entities if e in graph]
        if len(nodes) < 2:
            continue
        parts = sorted(nx.connected_components(graph.subgraph(nodes)), key=lambda c: (-len(c), min(c)))
        if len(parts) < 2:
            continue
        score = (len(parts) - 1) / (len(nodes) - 1)
        a = _hub(graph, parts[0])
        for part in parts[1 : per_section + 1]:
            b = _hub(graph, part)
            out.append(Gap("disconnected", score, f"{a} {b}", (a, b)))
    return out


def _on_outline(outline: OutlineGraph) -> set[str]:
    return {e for s in outline.sections() for e in s.entities}


def missing_link_gaps(outline: OutlineGraph, knowledge: KnowledgeGraph, top: int = 20) -> list[Gap]:
    check_graphs(outline, knowledge)
    top = check_int(top, "top", minimum=1)
    graph = knowledge.undirected()
    scope = _on_outline(outline)
    pairs = {
        (min(u, v), max(u, v))
        for w in graph
        for u in graph[w]
        for v in graph[w]
        if u != v and u in scope and v in scope and not graph.has_edge(u, v)
    }
    if not pairs:
        return []
    scored = sorted(nx.adamic_adar_index(graph, sorted(pairs)), key=lambda t: (-t[2], t[0], t[1]))[:top]
    best = scored[0][2]
    return [Gap("missing_link", s / best, f"{u} {v}", (u, v)) for u, v, s in scored]


def thin_hub_gaps(outline: OutlineGraph, knowledge: KnowledgeGraph, min_facts: int = 3) -> list[Gap]:
    check_graphs(outline, knowledge)
    min_facts = check_int(min_facts, "min_facts", minimum=1)
    graph = knowledge.undirected()
    if graph.number_of_nodes() == 0:
        return []
    rank = pagerank(graph)
    top = max(rank.values())
    scope = _on_outline(outline)
    out = []
    for v, r in rank.items():
        if v not in scope:
            continue
        thin = 1.0 - min(len(knowledge.graph.nodes[v]["facts"]), min_facts) / min_facts
        if thin > 0:
            out.append(Gap("thin_hub", r / top * thin, v, (v,)))
    return out


def single_source_gaps(outline: OutlineGraph, knowledge: KnowledgeGraph) -> list[Gap]:
    check_graphs(outline, knowledge)
    return [
        Gap("single_source", 1.0, f"{r.subject} {r.relation} {r.object}", (r.subject, r.object))
        for r in knowledge.relations()
        if len(r.sources) == 1
    ]


def imbalance_gaps(outline: OutlineGraph, knowledge: KnowledgeGraph) -> list[Gap]:
    check_graphs(outline, knowledge)
    out: list[Gap] = []
    for s in outline.sections():
        siblings = outline.siblings(s.section_id)
        if not siblings:
            continue
        mine = sum(knowledge.support(e) for e in s.entities)
        mean = float(np.mean([sum(knowledge.support(e) for e in t.entities) for t in siblings]))
        if mean > 0 and mine < mean / 2:
            score = 1.0 - mine / (mean / 2)
            weakest = sorted(s.entities, key=lambda e: (knowledge.support(e), e))[:3]
            queries = [f"{s.title} {e}" for e in weakest] or [f"{s.title} {s.intent}".strip()]
            out.extend(Gap("imbalance", score, q, (s.section_id,)) for q in queries)
    return out


GAP_SIGNALS = {
    "coverage": coverage_gaps,
    "disconnected": disconnected_gaps,
    "missing_link": missing_link_gaps,
    "thin_hub": thin_hub_gaps,
    "single_source": single_source_gaps,
    "imbalance": imbalance_gaps,
}
DEFAULT_WEIGHTS = {
    "coverage": 1.0,
    "disconnected": 1.0,
    "missing_link": 1.0,
    "thin_hub": 1.0,
    "single_source": 0.3,
    "imbalance": 0.5,
}


def check_signals(signals: object) -> tuple[str, ...]:
    if isinstance(signals, str) or not isinstance(signals, Iterable):
        raise TypeError(
            f"signals must be a list of gap-signal names from {tuple(GAP_SIGNALS)}, got {signals!r}"
        )
    names = tuple(signals)
    for s in names:
        if s not in GAP_SIGNALS:
            raise ValueError(f"signals: unknown gap signal {s!r}; expected names from {tuple(GAP_SIGNALS)}")
    return names


def query_key(query: str) -> str:
    """Queries that differ only in case, punctuation or word order count as the same query."""
    return " ".join(sorted(tokenize(query)))


def gap_queries(
    outline: OutlineGraph,
    knowledge: KnowledgeGraph,
    k: int,
    *,
    signals: Sequence[str] = tuple(GAP_SIGNALS),
    weights: Mapping[str, float] | None = None,
    asked: Iterable[str] = (),
    repeat_decay: float = 0.5,
) -> list[Gap]:
    """The ``k`` best gaps whose queries were not asked before (nor repeat each other), best first.

    A gap's value is its signal's weight times its score, times ``repeat_decay`` for every earlier query
    (asked before, or chosen earlier in this call) that named one of its target entities, so that the queries
    spread over the graph; ties keep the order of ``signals`` and of each signal's candidates."""
    check_graphs(outline, knowledge)
    k = check_int(k, "k", minimum=1)
    names = check_signals(signals)
    if weights is not None and not isinstance(weights, Mapping):
        raise TypeError(f"weights must be None or a mapping of signal names to numbers, got {weights!r}")
    decay = check_real(repeat_decay, "repeat_decay", "[0, 1]")
    w = dict(DEFAULT_WEIGHTS)
    for name, value in (weights or {}).items():
        if name not in GAP_SIGNALS:
            raise ValueError(f"weights: unknown gap signal {name!r}; known: {tuple(GAP_SIGNALS)}")
        w[name] = check_real(value, f"weights[{name!r}]", "[0, inf)")
    if isinstance(asked, str) or not isinstance(asked, Iterable):
        raise TypeError(f"asked must be a list of query strings, got {type(asked).__name__}")
    asked = list(asked)
    if not all(isinstance(q, str) for q in asked):
        raise TypeError("asked must be a list of query strings")
    asked = list(asked)
    past = [set(tokenize(q)) for q in asked]
    seen = {query_key(q) for q in asked}
    named: Counter[str] = Counter()
    for name in knowledge.graph.nodes:
        words = set(tokenize(name))
        named[name] = sum(bool(words) and words <= q for q in past)
    candidates: list[tuple[float, int, Gap]] = []
    for name in names:
        for gap in GAP_SIGNALS[name](outline, knowledge) if w[name] > 0 else ():
            key = query_key(gap.query)
            if gap.score > 0 and key and key not in seen:
                seen.add(key)
                candidates.append((w[name] * gap.score, len(candidates), gap))
    out: list[Gap] = []
    while candidates and len(out) < k:
        values = [v * decay ** sum(named[t] for t in g.targets) for v, _, g in candidates]
        best = max(range(len(candidates)), key=lambda i: (values[i], -i))
        gap = candidates.pop(best)[2]
        out.append(gap)
        named.update(t for t in gap.targets if t in knowledge.graph)
    return out
