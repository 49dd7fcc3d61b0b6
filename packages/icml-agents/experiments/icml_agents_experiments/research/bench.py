"""Benchmark ``dualgraph-loop-time``: wall time per loop iteration (4 searches of 5 documents, their
extraction by the scripted model, the graph updates and, for DualGraph, the gap analysis) of DualGraph, the
outline-centric agent and the linear agent on the same worlds, measured in the same run; worlds of 25
organisations per industry (the reproduction's) and of 100 (a graph four times larger). Medians over the
iterations of all repeats; the ratio is to the linear agent. Then the gap analysis alone (entity linking and
``gap_queries`` for 4 queries) on a knowledge graph holding a whole world's corpus, as the graph grows.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from icml_agents.research import (
    BM25Search,
    DualGraphResearcher,
    KnowledgeGraph,
    LinearResearcher,
    OutlineResearcher,
    draft_outline,
    gap_queries,
    link_entities,
    merge_extraction,
    parse_extraction,
)
from icml_agents_experiments.research.world import World

AGENTS = {"linear": LinearResearcher, "outline": OutlineResearcher, "dualgraph": DualGraphResearcher}
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"worlds": (0,), "sizes": (25,), "searches": 24, "repeats": 2, "graph_sizes": (25,)},
    "full": {
        "worlds": (0, 1, 2),
        "sizes": (25, 100),
        "searches": 60,
        "repeats": 3,
        "graph_sizes": (25, 100, 400),
    },
}


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    del seed  # the worlds are fixed
    cfg = BUDGETS[budget]
    rows = []
    for size in cfg["sizes"]:
        steps: dict[str, list[float]] = {a: [] for a in AGENTS}
        entities: dict[str, list[int]] = {a: [] for a in AGENTS}
        for w in cfg["worlds"]:
            world = World(w, size=size)
            search = BM25Search(world.documents)
            for _ in range(cfg["repeats"]):
                for name, cls in AGENTS.items():
                    result = cls(world.backend(), search, budget=cfg["searches"], docs_per_query=5).run(
                        world.topic
                    )
                    steps[name] += [s["seconds"] for s in result.steps]
                    entities[name].append(len(result.knowledge))
        base = statistics.median(steps["linear"])
        for name in AGENTS:
            med = statistics.median(steps[name])
            rows.append(
                {
                    "organisations_per_industry": size,
                    "agent": name,
                    "ms_per_iteration": round(med * 1e3, 2),
                    "to_linear": round(med / base, 2),
                    "entities_at_end": round(statistics.mean(entities[name]), 1),
                    "iterations": len(steps[name]),
                }
            )
    for size in cfg["graph_sizes"]:
        world = World(0, size=size)
        outline, knowledge = draft_outline(world.backend(), world.topic), KnowledgeGraph()
        for doc in world.documents:
            merge_extraction(knowledge, parse_extraction(world.gold[doc.doc_id]), doc)
        times = []
        for _ in range(cfg["repeats"]):
            start = time.perf_counter()
            link_entities(outline, knowledge)
            gap_queries(outline, knowledge, 4)
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "organisations_per_industry": size,
                "agent": "gap analysis, whole corpus in the graph",
                "ms_per_iteration": round(statistics.median(times) * 1e3, 2),
                "entities_at_end": len(knowledge),
                "relations": knowledge.graph.number_of_edges(),
            }
        )
    return rows
