"""Reproduction ``dualgraph-synthetic``: DualGraph against linear search-then-generate and outline-centric
agents at an equal search budget on synthetic research worlds with a known answer, with each gap signal
ablated, under exact and noisy extraction.

Protocol fixed in ``packages/icml-agents/docs/dualgraph.md`` before the first run on the evaluation worlds
(seeds 0-9; the method was developed on worlds 100-102). Script:
``python -m icml_agents_experiments.research.repro --budget full``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from icml_agents.research import (
    GAP_SIGNALS,
    BM25Search,
    DualGraphResearcher,
    LinearResearcher,
    OutlineResearcher,
    citation_validity,
    section_balance,
)
from icml_agents_experiments.research.world import OracleSearch, World
from icml_tools.claims import paired_bootstrap_interval

SEARCHES = 36  # the search budget of every agent
DOCS_PER_QUERY = 5
QUERIES_PER_STEP = 4
NOISE = 0.2  # noisy extraction: each item dropped with this probability, a relation's object swapped at half of it
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"worlds": (0, 1, 2, 3, 4)},
    "full": {"worlds": tuple(range(10))},
}
ABLATIONS = tuple(f"-{s}" for s in GAP_SIGNALS)
AGENTS = ("dualgraph", "linear", "outline", "oracle", *ABLATIONS)
METRICS = ("relation_recall", "entity_recall", "fact_precision", "citation_validity", "section_balance")


def run_agent(world: World, agent: str, noise: float) -> dict[str, Any]:
    """One agent on one world: the metrics of the graph and the report it ends with."""
    backend = world.backend(noise)
    search = OracleSearch(world) if agent == "oracle" else BM25Search(world.documents)
    common: dict[str, Any] = {
        "budget": SEARCHES,
        "docs_per_query": DOCS_PER_QUERY,
        "queries_per_step": QUERIES_PER_STEP,
    }
    if agent in ("linear", "oracle"):
        researcher: Any = LinearResearcher(backend, search, **common)
    elif agent == "outline":
        researcher = OutlineResearcher(backend, search, **common)
    else:
        signals = [s for s in GAP_SIGNALS if f"-{s}" != agent]
        researcher = DualGraphResearcher(backend, search, signals=signals, **common)
    result = researcher.run(world.topic)
    signal = {g.query: g.signal for g in getattr(researcher, "gaps", [])}
    scores: dict[str, Any] = world.score(result.knowledge)
    scores["yield"] = query_yield(
        world, result.trace, lambda q: signal.get(q, "topic" if q == world.topic else agent)
    )
    scores["citation_validity"] = citation_validity(result.report, world.by_id)
    scores["section_balance"] = section_balance(result.report)
    scores["searches"] = len(result.queries)
    scores["documents"] = len(result.documents)
    return scores


def query_yield(world: World, trace: list[dict], label: Any) -> dict[str, list[int]]:
    """Mechanism diagnostic: per kind of query (a DualGraph gap signal, the topic, or the agent's name), the
    number of searches, the documents they read first and the gold topic relations those documents state that
    no earlier document did."""
    topic, found = world.topic_relations(), set()
    out: dict[str, list[int]] = {}
    for entry in trace:
        fresh = 0
        for doc_id in entry["new"]:
            for r in world.gold[doc_id].get("relations", []):
                t = (world.gold_id(r["subject"]), r["relation"], world.gold_id(r["object"]))
                if t in topic and t not in found:
                    found.add(t)
                    fresh += 1
        row = out.setdefault(label(entry["query"]), [0, 0, 0])
        row[0], row[1], row[2] = row[0] + 1, row[1] + len(entry["new"]), row[2] + fresh
    return out


def run(budget: str = "quick", seed: int = 0) -> dict:
    del seed  # the worlds are part of the budget (fixed in the docs)
    start = time.perf_counter()
    worlds = BUDGETS[budget]["worlds"]
    modes = {"exact": 0.0, "noisy": NOISE}
    res: dict[str, dict[str, list[dict[str, Any]]]] = {m: {a: [] for a in AGENTS} for m in modes}
    cross, topic = 0, 0
    for w in worlds:
        world = World(w)
        rels = world.topic_relations()
        topic += len(rels)
        cross += round(world.cross_share_of_topic() * len(rels))
        for mode, noise in modes.items():
            for agent in AGENTS:
                res[mode][agent].append(run_agent(world, agent, noise))

    def values(mode: str, agent: str, metric: str) -> np.ndarray:
        return np.array([r[metric] for r in res[mode][agent]])

    def mean(mode: str, agent: str, metric: str) -> float:
        return float(values(mode, agent, metric).mean())

    intervals: dict[str, dict[str, list[float]]] = {}
    for mode in modes:
        for metric in ("relation_recall", "entity_recall"):
            for other in ("linear", "outline", *ABLATIONS):
                diff = values(mode, "dualgraph", metric) - values(mode, other, metric)
                intervals.setdefault(mode, {})[f"{metric}: dualgraph - {other}"] = paired_bootstrap_interval(
                    diff
                )
    checks: dict[str, bool] = {
        "H: linear relation recall <= 0.6 (exact)": mean("exact", "linear", "relation_recall") <= 0.6,
        "H: oracle relation recall >= 0.9 (exact)": mean("exact", "oracle", "relation_recall") >= 0.9,
        "H: >= 20% of gold topic relations link two communities": cross / topic >= 0.2,
    }
    for metric in ("relation_recall", "entity_recall"):
        for other in ("linear", "outline"):
            low = intervals["exact"][f"{metric}: dualgraph - {other}"][0]
            checks[f"C: {metric} dualgraph - {other}, 95% lower end > 0 (exact)"] = low > 0
    budget_ok = all(r["searches"] <= SEARCHES for m in modes for a in AGENTS for r in res[m][a])
    checks["C: every agent within the search budget"] = budget_ok
    yields: dict[str, dict[str, list[int]]] = {}
    for agent in ("dualgraph", "linear", "outline"):
        for r in res["exact"][agent]:
            for kind, counts in r["yield"].items():
                row = yields.setdefault(agent, {}).setdefault(kind, [0, 0, 0])
                row[:] = [a + b for a, b in zip(row, counts, strict=True)]
    query_yields = [
        {
            "agent": agent,
            "query": kind,
            "searches": n,
            "new_documents_per_search": round(docs / n, 2),
            "new_gold_relations_per_search": round(rels / n, 2),
        }
        for agent, kinds in yields.items()
        for kind, (n, docs, rels) in sorted(kinds.items())
    ]
    rows = [
        {"extraction": mode, "agent": agent, **{k: round(mean(mode, agent, k), 4) for k in METRICS}}
        for mode in modes
        for agent in AGENTS
    ]
    headroom_ok = all(v for k, v in checks.items() if k.startswith("H"))
    claim_ok = all(v for k, v in checks.items() if k.startswith("C"))
    return {
        "system": "dualgraph-synthetic",
        "claim": (
            "Search queries chosen from the gaps of an outline graph and a knowledge graph recover more of a "
            "topic's entities and relations than linear search-then-generate and outline-centric agents at the "
            "same search budget."
        ),
        "metric": f"relation recall on the topic's gold subgraph (exact extraction, {SEARCHES} searches); "
        "baseline = linear search-then-generate",
        "ours": mean("exact", "dualgraph", "relation_recall"),
        "baseline": mean("exact", "linear", "relation_recall"),
        "criterion": "; ".join(checks) + " (all; without headroom the comparison cannot decide)",
        "passed": bool(headroom_ok and claim_ok),
        "checks": checks,
        "rows": rows,
        "intervals": intervals,
        "query_yield": query_yields,
        "cross_community_share": cross / topic,
        "figures": [
            {
                "name": "dualgraph_recall",
                "title": f"relation recall at {SEARCHES} searches ({len(worlds)} worlds, exact extraction)",
                "xlabel": "agent",
                "ylabel": "relation recall",
                "x": list(AGENTS),
                "series": {m: [mean(m, a, "relation_recall") for a in AGENTS] for m in modes},
                "kind": "bar",
            }
        ],
        "notes": (
            f"budget={budget}: worlds {list(worlds)}; {SEARCHES} searches x {DOCS_PER_QUERY} documents, "
            f"{QUERIES_PER_STEP} queries per step; noisy extraction p={NOISE}; cross-community share of gold "
            f"topic relations {cross / topic:.3f}; paired-bootstrap 95% intervals (DualGraph minus other): "
            f"{intervals}; checks {checks}; total {time.perf_counter() - start:.1f} s"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.budget), indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
