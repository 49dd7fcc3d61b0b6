"""A synthetic research world with a known answer (our design, made here): a gold knowledge graph of
organisations in communities (industries), a templated corpus that states it, distractor documents, and a
scripted "LLM" that drafts the outline and extracts each document exactly or noisily.

- Entities: ``communities`` industries of ``size`` organisations, each with a unique made-up name; a share
  have an alias (an acronym) that some documents use instead of the name.
- Relations: typed and directed. Within an industry a random spanning tree plus triadic closure (a new edge
  closes a triangle with probability ``closure``), so that common neighbours predict links; a
  ``cross_share`` of all relations joins two industries.
- Documents: one profile per organisation (its industry's words, its alias); relation documents of 1-3
  sentences about one subject; distractors that name organisations and industry words but state nothing;
  industry round-ups. Relation sentences name only the two organisations, so a relation is found by asking
  about the organisations, not about the industry.
- The topic names ``topic_communities`` industries; its gold subgraph (organisations of those industries and
  the relations among them) is what a report should cover.
- Extraction: the scripted backend answers the research prompts: the outline (one section per topic industry)
  and, for a document, its gold facts and relations (``noise=0``), or with each item dropped with
  probability ``noise`` and each kept relation's object swapped for another organisation with probability
  ``noise / 2`` (an extractor that misreads; its evidence sentence is still a verbatim quote).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from icml_agents.backends import Request, ScriptedBackend
from icml_agents.research import Document, KnowledgeGraph, normalize_name

INDUSTRIES = (
    ("shipping", "freight ports vessels cargo logistics"),
    ("biotech", "genomes enzymes assays trials proteins"),
    ("energy", "turbines grids solar storage reactors"),
    ("finance", "lending bonds payments insurance credit"),
    ("robotics", "actuators sensors automation drones arms"),
    ("agriculture", "crops seeds irrigation soil harvests"),
    ("media", "broadcast streaming publishing studios audiences"),
    ("mining", "ores drilling smelting quarries minerals"),
)
RELATIONS = (
    "supplies",
    "partners with",
    "invests in",
    "licenses patents to",
    "acquired a stake in",
    "audits",
)
SUFFIXES = ("Group", "Systems", "Works", "Holdings", "Partners", "Labs", "Industries", "Collective")
SYLLABLES = (
    "var", "kel", "tor", "min", "sar", "bel", "dro", "fen", "gal", "hux", "jor", "lum", "mar", "nev",
    "ost", "pra", "quil", "ren", "sol", "tav", "ur", "vex", "wyn", "zan", "cor", "dal", "eth", "fio",
)  # fmt: skip
CITIES = ("Orlin", "Castra", "Vell", "Marrow", "Deepford", "Ansel", "Kirrin", "Tolle")


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


@dataclass(frozen=True)
class GoldEntity:
    name: str
    alias: str | None
    community: int


@dataclass(frozen=True)
class GoldRelation:
    subject: int
    relation: str
    object: int


@dataclass
class World:
    """One seeded world (see the module docstring)."""

    seed: int = 0
    communities: int = 6
    size: int = 25
    topic_communities: int = 4
    intra_degree: float = 4.0
    closure: float = 0.7
    cross_share: float = 0.4
    alias_share: float = 0.3
    entities: list[GoldEntity] = field(init=False)
    relations: list[GoldRelation] = field(init=False)
    documents: list[Document] = field(init=False)
    gold: dict[str, dict] = field(init=False)  # doc_id -> its exact extraction (the JSON the prompt asks for)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.industries = [INDUSTRIES[i] for i in rng.permutation(len(INDUSTRIES))[: self.communities]]
        self._make_entities(rng)
        self._make_relations(rng)
        self._make_documents(rng)
        self.topic_set = set(range(self.topic_communities))
        names = [self.industries[c][0] for c in sorted(self.topic_set)]
        self.topic = "the organisations of the " + ", ".join(names[:-1]) + f" and {names[-1]} industries"
        self.by_id = {d.doc_id: d for d in self.documents}
        keys: dict[str, int] = {}
        for i, e in enumerate(self.entities):
            keys[normalize_name(e.name)] = i
            if e.alias:
                keys[normalize_name(e.alias)] = i
        self.keys = keys

    # generation -----------------------------------------------------------------------------------
    def _make_entities(self, rng: np.random.Generator) -> None:
        used: set[str] = set()
        self.entities = []
        for c in range(self.communities):
            for _ in range(self.size):
                while True:
                    word = "".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4)))).capitalize()
                    if word not in used:
                        break
                used.add(word)
                alias = None
                if rng.random() < self.alias_share:
                    alias = (word[:2] + word[-1] + "X").upper()
                    if alias in used:
                        alias = None
                    else:
                        used.add(alias)
                self.entities.append(GoldEntity(f"{word} {rng.choice(SUFFIXES)}", alias, c))

    def _make_relations(self, rng: np.random.Generator) -> None:
        edges: set[tuple[int, int]] = set()
        n_intra = round(self.size * self.intra_degree / 2)

        def add(a: int, b: int) -> None:
            if a != b and (a, b) not in edges and (b, a) not in edges:
                edges.add((a, b) if rng.random() < 0.5 else (b, a))

        for c in range(self.communities):
            members = [c * self.size + i for i in rng.permutation(self.size)]
            for i in range(1, self.size):  # a random spanning tree
                add(members[i], members[int(rng.integers(0, i))])
            neighbours = lambda v: [b for a, b in edges if a == v] + [a for a, b in edges if b == v]  # noqa: E731
            tries = 0
            while sum(1 for a, b in edges if a // self.size == c and b // self.size == c) < n_intra:
                tries += 1
                v = int(rng.choice(members))
                near = neighbours(v)
                if rng.random() < self.closure and near:
                    u = int(rng.choice(near))
                    far = [w for w in neighbours(u) if w != v]
                    if far:
                        add(v, int(rng.choice(far)))
                        continue
                add(v, int(rng.choice(members)))
                if tries > 100 * n_intra:
                    break
        n_cross = round(len(edges) * self.cross_share / (1 - self.cross_share))
        while n_cross > 0:
            a, b = (int(x) for x in rng.integers(0, len(self.entities), 2))
            if a // self.size != b // self.size and (a, b) not in edges and (b, a) not in edges:
                edges.add((a, b))
                n_cross -= 1
        self.relations = [GoldRelation(a, str(rng.choice(RELATIONS)), b) for a, b in sorted(edges)]

    def mention(self, i: int, rng: np.random.Generator) -> str:
        e = self.entities[i]
        return e.alias if e.alias and rng.random() < 0.5 else e.name

    def _make_documents(self, rng: np.random.Generator) -> None:
        docs: list[tuple[str, dict]] = []
        for e in self.entities:
            industry, words = self.industries[e.community]
            w = words.split()
            intro = f" (also known as {e.alias})" if e.alias else ""
            facts = [
                f"{e.name}{intro} is {article(industry)} {industry} company based in {rng.choice(CITIES)}.",
                "{} works on {} and {}.".format(
                    e.name, *(w[j] for j in rng.choice(len(w), 2, replace=False))
                ),
            ]
            aliases = [e.alias] if e.alias else []
            docs.append(
                (" ".join(facts), {"entities": [{"name": e.name, "aliases": aliases, "facts": facts}]})
            )
        by_subject: dict[int, list[GoldRelation]] = {}
        for r in self.relations:
            by_subject.setdefault(r.subject, []).append(r)
        for rels in by_subject.values():
            order = [rels[j] for j in rng.permutation(len(rels))]
            while order:
                n = int(rng.integers(1, 4))
                chunk, order = order[:n], order[n:]
                sentences, relations, mentioned = [], [], {}
                for r in chunk:
                    s, o = self.mention(r.subject, rng), self.mention(r.object, rng)
                    sentence = f"{s} {r.relation} {o}."
                    sentences.append(sentence)
                    relations.append(
                        {"subject": s, "relation": r.relation, "object": o, "evidence": sentence}
                    )
                    mentioned[s] = mentioned[o] = True
                entities = [{"name": n, "aliases": [], "facts": []} for n in mentioned]
                docs.append((" ".join(sentences), {"entities": entities, "relations": relations}))
        for e in self.entities:  # distractors: names and industry words, no facts
            industry, words = self.industries[e.community]
            other = self.entities[int(rng.integers(0, len(self.entities)))].name
            text = (
                f"{article(industry).capitalize()} {industry} newsletter mentioned {e.name} and {other} among firms to watch in "
                f"{words.split()[int(rng.integers(0, 5))]}."
            )
            docs.append((text, {"entities": [], "relations": []}))
        for industry, words in self.industries:  # round-ups
            for j in range(3):
                text = f"The {industry} industry round-up {j + 1}: {words}; {industry} firms reported mixed results."
                docs.append((text, {"entities": [], "relations": []}))
        self.documents, self.gold = [], {}
        for n, j in enumerate(rng.permutation(len(docs))):
            doc_id = f"d{n:04d}"
            self.documents.append(Document(doc_id, docs[j][0]))
            self.gold[doc_id] = docs[j][1]

    # the gold answer -------------------------------------------------------------------------------
    def topic_entities(self) -> set[int]:
        return {i for i, e in enumerate(self.entities) if e.community in self.topic_set}

    def topic_relations(self) -> set[tuple[int, str, int]]:
        t = self.topic_entities()
        return {(r.subject, r.relation, r.object) for r in self.relations if r.subject in t and r.object in t}

    def cross_share_of_topic(self) -> float:
        rels = self.topic_relations()
        size = self.size
        return sum(s // size != o // size for s, _, o in rels) / max(len(rels), 1)

    def gold_id(self, name: str) -> int | None:
        return self.keys.get(normalize_name(name))

    def map_entity(self, knowledge: KnowledgeGraph, node: str) -> int | None:
        for n in [node, *knowledge.graph.nodes[node]["aliases"]]:
            i = self.gold_id(n)
            if i is not None:
                return i
        return None

    def score(self, knowledge: KnowledgeGraph) -> dict[str, float]:
        """Entity recall and relation recall on the topic's gold subgraph; fact precision: the share of the
        graph's relations that are gold relations."""
        ids = {node: self.map_entity(knowledge, node) for node in knowledge.graph.nodes}
        found = {i for i in ids.values() if i is not None}
        triples = {(ids[s], r, ids[o]) for s, r, o in knowledge.triples()}
        gold = {(r.subject, r.relation, r.object) for r in self.relations}
        topic_e, topic_r = self.topic_entities(), self.topic_relations()
        return {
            "entity_recall": len(found & topic_e) / len(topic_e),
            "relation_recall": len(triples & topic_r) / len(topic_r),
            "fact_precision": len(triples & gold) / len(triples) if triples else 1.0,
        }

    # the scripted model -----------------------------------------------------------------------------
    def outline_json(self) -> dict:
        return {
            "sections": [
                {"title": f"The {self.industries[c][0]} industry", "intent": self.industries[c][1]}
                for c in sorted(self.topic_set)
            ]
        }

    def extraction(self, doc_id: str, noise: float = 0.0) -> dict:
        gold = self.gold[doc_id]
        if noise == 0:
            return gold
        rng = np.random.default_rng([self.seed, int(doc_id[1:]), 7])
        entities = []
        for e in gold.get("entities", []):
            facts = [f for f in e["facts"] if rng.random() >= noise]
            entities.append({**e, "facts": facts})
        relations = []
        for r in gold.get("relations", []):
            if rng.random() < noise:
                continue
            if rng.random() < noise / 2:
                r = {**r, "object": self.entities[int(rng.integers(0, len(self.entities)))].name}
            relations.append(r)
        return {"entities": entities, "relations": relations}

    def backend(self, noise: float = 0.0) -> ScriptedBackend:
        """The scripted model: answers the outline and extraction prompts of :mod:`icml_agents.research`."""
        doc = re.compile(r"^Document (\S+):$", re.M)

        def answer(request: Request) -> str:
            prompt = request.prompt if isinstance(request.prompt, str) else request.prompt[0][1]
            if prompt.startswith("TASK: outline"):
                return json.dumps(self.outline_json())
            if prompt.startswith("TASK: extract"):
                found = doc.search(prompt)
                if found is None or found.group(1) not in self.gold:
                    return json.dumps({"entities": [], "relations": []})
                return json.dumps(self.extraction(found.group(1), noise))
            raise LookupError(f"the world's model has no answer for {prompt[:80]!r}")

        return ScriptedBackend(answer, name=f"world{self.seed}")


class OracleSearch:
    """A search tool that ignores the query and returns the unseen documents stating the most gold topic
    relations not yet returned (greedy cover): the upper bound of the headroom check."""

    def __init__(self, world: World) -> None:
        self.world = world
        t = world.topic_entities()
        self.covers: dict[str, set[tuple[str, str, str]]] = {}
        for doc_id, gold in world.gold.items():
            rels = {
                (r["subject"], r["relation"], r["object"])
                for r in gold.get("relations", [])
                if world.gold_id(r["subject"]) in t and world.gold_id(r["object"]) in t
            }
            if rels:
                self.covers[doc_id] = rels
        self.returned: set[str] = set()
        self.covered: set[tuple[str, str, str]] = set()

    def search(self, query: str, k: int):
        from icml_agents.research import SearchHit

        hits = []
        for _ in range(k):
            best = max(
                (d for d in self.covers if d not in self.returned),
                key=lambda d: (len(self.covers[d] - self.covered), d),
                default=None,
            )
            if best is None or not self.covers[best] - self.covered:
                break
            self.returned.add(best)
            self.covered |= self.covers[best]
            hits.append(SearchHit(self.world.by_id[best], 1.0))
        return hits
