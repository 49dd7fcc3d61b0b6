"""The synthetic research world, DualGraph on it, and the dualgraph-synthetic reproduction (quick: about 8 s)."""

import json

from icml_agents.backends import Request
from icml_agents.research import (
    BM25Search,
    DualGraphResearcher,
    KnowledgeGraph,
    LinearResearcher,
    OutlineResearcher,
    citation_validity,
    merge_extraction,
    parse_extraction,
)
from icml_agents.research.extract import quoted
from icml_agents_experiments.research.repro import AGENTS, SEARCHES
from icml_agents_experiments.research.world import OracleSearch, World
from icml_tools.repro import run_reproduction

SMALL = {"communities": 3, "size": 8, "topic_communities": 2}


def test_the_world_is_seeded_and_its_gold_extraction_is_grounded():
    a, b = World(3), World(3)
    assert [d.text for d in a.documents] == [d.text for d in b.documents]
    assert [d.text for d in World(4).documents] != [d.text for d in a.documents]
    stated = []
    for doc in a.documents:
        gold = a.gold[doc.doc_id]
        for e in gold.get("entities", []):
            assert all(quoted(f, doc) for f in e["facts"])
        for r in gold.get("relations", []):
            assert quoted(r["evidence"], doc)
            stated.append((a.gold_id(r["subject"]), r["relation"], a.gold_id(r["object"])))
    # every gold relation is stated by exactly one document
    assert sorted(stated) == sorted((r.subject, r.relation, r.object) for r in a.relations)
    assert a.cross_share_of_topic() >= 0.2
    names = [e.name for e in a.entities] + [e.alias for e in a.entities if e.alias]
    assert len(names) == len(set(names))


def test_entity_resolution_merges_the_planted_aliases_only():
    world = World(0)
    kg = KnowledgeGraph()
    for doc in world.documents:
        merge_extraction(kg, parse_extraction(world.gold[doc.doc_id]), doc)
    mapped = [world.map_entity(kg, node) for node in kg.graph.nodes]
    assert None not in mapped
    assert (
        len(mapped) == len(set(mapped)) == len(world.entities)
    )  # one node per organisation, no merges across
    with_alias = [e for e in world.entities if e.alias]
    assert with_alias and all(kg.resolve(e.alias) == kg.resolve(e.name) for e in with_alias)
    assert world.score(kg) == {"entity_recall": 1.0, "relation_recall": 1.0, "fact_precision": 1.0}


def test_without_a_budget_dualgraph_recovers_the_gold_graph_with_exact_extraction():
    for seed in (0, 1):
        world = World(seed, **SMALL)
        result = DualGraphResearcher(world.backend(), BM25Search(world.documents), budget=None).run(
            world.topic
        )
        assert world.score(result.knowledge) == {
            "entity_recall": 1.0,
            "relation_recall": 1.0,
            "fact_precision": 1.0,
        }
        assert len(result.queries) == len(set(result.queries))


def test_every_claim_cites_a_document_that_contains_it():
    world = World(1)
    for noise in (0.0, 0.2):
        for cls in (DualGraphResearcher, LinearResearcher, OutlineResearcher):
            result = cls(world.backend(noise), BM25Search(world.documents), budget=12).run(world.topic)
            claims = result.report.claims()
            assert claims and citation_validity(result.report, world.by_id) == 1.0
            for claim in claims:
                assert claim.citations and all(quoted(claim.text, world.by_id[d]) for d in claim.citations)


def test_noisy_extraction_drops_and_corrupts_items():
    world = World(2)
    exact = noisy = corrupted = 0
    for doc in world.documents:
        gold, noisy_doc = world.gold[doc.doc_id], world.extraction(doc.doc_id, 0.2)
        exact += len(gold.get("relations", []))
        noisy += len(noisy_doc["relations"])
        corrupted += sum(r not in gold["relations"] for r in noisy_doc["relations"])
    assert 0.7 * exact < noisy < 0.9 * exact and 0 < corrupted < 0.2 * noisy


def test_the_oracle_returns_unread_gold_documents_and_the_model_answers_the_prompts():
    world = World(0)
    oracle = OracleSearch(world)
    first, second = oracle.search("anything", 5), oracle.search("anything", 5)
    assert len(first) == len(second) == 5
    assert not {h.document.doc_id for h in first} & {h.document.doc_id for h in second}
    request = Request("generate", "TASK: outline\nTopic: x", 64, 0.0, 1.0, (), None)
    assert len(json.loads(world.backend().run([request])[0].text)["sections"]) == world.topic_communities


def test_quick_run_follows_the_protocol():
    result = run_reproduction("dualgraph-synthetic", "quick", 0)
    rows = {(r["extraction"], r["agent"]) for r in result["rows"]}
    assert rows == {(m, a) for m in ("exact", "noisy") for a in AGENTS}
    assert result["checks"]["C: every agent within the search budget"]
    assert all(r["citation_validity"] == 1.0 for r in result["rows"])
    yields = {(r["agent"], r["query"]): r["searches"] for r in result["query_yield"]}
    assert sum(n for (agent, _), n in yields.items() if agent == "linear") == 5 * SEARCHES
