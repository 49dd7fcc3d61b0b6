"""The two graphs of DualGraph memory: a knowledge graph (what the agent knows) and an outline graph (how it
writes), entity resolution, fact and citation tracking, and exact SQLite persistence of both.

- :class:`KnowledgeGraph`: a ``networkx.MultiDiGraph`` whose nodes are canonical entity names carrying
  ``aliases`` and ``facts`` (``(text, source)`` pairs) and whose edges are keyed by relation type, carrying
  ``evidence`` (``(text, source)`` pairs). Every fact and relation keeps the documents it came from.
- :class:`EntityResolver`: names and aliases are matched after normalization (case, punctuation, white space,
  a leading article); nothing fuzzier, so distinct entities that share a word stay distinct.
- :class:`OutlineGraph`: a tree of sections (``title``, ``intent``, ``status``, linked entities) under a root
  that holds the topic.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

_PUNCT = re.compile(r"[^\w\s]")
_ARTICLE = re.compile(r"^(the|a|an)\s+")


def normalize_name(name: str) -> str:
    """The resolution key of a name: case-folded, punctuation removed, white space collapsed, a leading
    article dropped (``"The  Varno-Dynamics."`` → ``"varno dynamics"``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    key = " ".join(_PUNCT.sub(" ", name.casefold()).split())
    return _ARTICLE.sub("", key)


def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str) or not normalize_name(value):
        raise ValueError(f"{name} must be a string with at least one letter or digit, got {value!r}")
    return value.strip()


def _check_names(value: object, name: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of strings, got {value!r}")
    names = list(value)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{name} must be a list of strings, got {names!r}")
    return names


def _check_source(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"source must be a non-empty document id string, got {value!r}")
    return value


class EntityResolver:
    """Maps names and aliases to canonical entity names by their normalized key."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}

    def find(self, name: str) -> str | None:
        """The canonical name ``name`` resolves to, or ``None``."""
        return self.keys.get(normalize_name(name))

    def add(self, canonical: str, names: Iterable[str]) -> None:
        if not isinstance(canonical, str):
            raise TypeError(f"canonical must be a string, got {type(canonical).__name__}")
        for n in _check_names(names, "names"):
            key = normalize_name(n)
            if key:
                self.keys.setdefault(key, canonical)

    def rename(self, old: str, new: str) -> None:
        for key, value in self.keys.items():
            if value == old:
                self.keys[key] = new


@dataclass(frozen=True)
class Relation:
    """A typed, directed relation with its evidence: ``(text, source)`` pairs, one per supporting document."""

    subject: str
    relation: str
    object: str
    evidence: tuple[tuple[str, str], ...]

    @property
    def sources(self) -> set[str]:
        return {s for _, s in self.evidence}


class KnowledgeGraph:
    """Entities, their facts and typed relations, each tracked to the documents that state them."""

    def __init__(self) -> None:
        self.graph = nx.MultiDiGraph()
        self.resolver = EntityResolver()

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve(name) is not None

    def resolve(self, name: str) -> str | None:
        """The canonical entity ``name`` (or an alias of it) refers to, or ``None``."""
        return self.resolver.find(name)

    def add_entity(self, name: str, aliases: Iterable[str] = ()) -> str:
        """Add an entity, or merge ``name`` and ``aliases`` into the entities they resolve to; returns the
        canonical name. Names that resolve to two known entities merge them: the survivor is the entity ``name``
        resolves to, else the one the first resolving alias names (the extractor's main name keeps its entity,
        whose name the agents search with)."""
        name = _check_name(name, "name")
        aliases = [_check_name(a, "aliases[]") for a in _check_names(aliases, "aliases")]
        found: list[str] = []
        for n in [name, *aliases]:
            canon = self.resolve(n)
            if canon is not None and canon not in found:
                found.append(canon)
        if not found:
            self.graph.add_node(name, aliases=[], facts=[])
            canonical = name
        else:
            canonical = found[0]
            for other in found[1:]:
                self._merge(canonical, other)
        self.resolver.add(canonical, [name, *aliases])
        known = self.graph.nodes[canonical]["aliases"]
        for a in [name, *aliases]:
            if normalize_name(a) != normalize_name(canonical) and a not in known:
                known.append(a)
        return canonical

    def _merge(self, keep: str, other: str) -> None:
        data = self.graph.nodes[other]
        node = self.graph.nodes[keep]
        for a in [other, *data["aliases"]]:
            if a not in node["aliases"] and normalize_name(a) != normalize_name(keep):
                node["aliases"].append(a)
        for fact in data["facts"]:
            if fact not in node["facts"]:
                node["facts"].append(fact)
        for u, v, key, edge in list(self.graph.in_edges(other, keys=True, data=True)) + list(
            self.graph.out_edges(other, keys=True, data=True)
        ):
            s, o = (keep if u == other else u), (keep if v == other else v)
            for text, source in edge["evidence"]:
                self._add_evidence(s, key, o, text, source)
        self.graph.remove_node(other)
        self.resolver.rename(other, keep)

    def add_fact(self, entity: str, text: str, source: str) -> bool:
        """Attach a fact sentence from document ``source`` to ``entity`` (added if new); False if known."""
        text, source = _check_name(text, "text"), _check_source(source)
        canon = self.add_entity(_check_name(entity, "entity"))
        facts = self.graph.nodes[canon]["facts"]
        if (text, source) in facts:
            return False
        facts.append((text, source))
        return True

    def add_relation(self, subject: str, relation: str, obj: str, evidence: str, source: str) -> bool:
        """Add ``subject -relation-> obj`` stated by ``evidence`` in document ``source`` (entities added as
        needed); a known relation gains the evidence. Returns True if anything was new."""
        relation = " ".join(_check_name(relation, "relation").lower().split())
        subject, obj = _check_name(subject, "subject"), _check_name(obj, "obj")
        evidence, source = _check_name(evidence, "evidence"), _check_source(source)
        s, o = self.add_entity(subject), self.add_entity(obj)
        return self._add_evidence(s, relation, o, evidence, source)

    def _add_evidence(self, s: str, relation: str, o: str, text: str, source: str) -> bool:
        if self.graph.has_edge(s, o, key=relation):
            evidence = self.graph.edges[s, o, relation]["evidence"]
            if (text, source) in evidence:
                return False
            evidence.append((text, source))
            return True
        self.graph.add_edge(s, o, key=relation, evidence=[(text, source)])
        return True

    # views ----------------------------------------------------------------------------------------
    def entities(self) -> list[str]:
        return list(self.graph.nodes)

    def facts(self, entity: str) -> list[tuple[str, str]]:
        canon = self.resolve(entity)
        return [] if canon is None else list(self.graph.nodes[canon]["facts"])

    def relations(self) -> list[Relation]:
        return [
            Relation(u, k, v, tuple(d["evidence"])) for u, v, k, d in self.graph.edges(keys=True, data=True)
        ]

    def triples(self) -> set[tuple[str, str, str]]:
        return {(u, k, v) for u, v, k in self.graph.edges(keys=True)}

    def undirected(self) -> nx.Graph:
        """The simple undirected graph of who is related to whom (the topology the gap signals read)."""
        g = nx.Graph()
        g.add_nodes_from(self.graph.nodes)
        g.add_edges_from((u, v) for u, v in self.graph.edges() if u != v)
        return g

    def support(self, entity: str) -> int:
        """How much the agent knows about an entity: its facts plus the evidence of its relations."""
        canon = self.resolve(entity)
        if canon is None:
            return 0
        edges = list(self.graph.in_edges(canon, data=True)) + list(self.graph.out_edges(canon, data=True))
        return len(self.graph.nodes[canon]["facts"]) + sum(len(d["evidence"]) for _, _, d in edges)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entities": [
                {"name": n, "aliases": list(d["aliases"]), "facts": [list(f) for f in d["facts"]]}
                for n, d in self.graph.nodes(data=True)
            ],
            "relations": [
                {
                    "subject": r.subject,
                    "relation": r.relation,
                    "object": r.object,
                    "evidence": [list(e) for e in r.evidence],
                }
                for r in self.relations()
            ],
            "resolver": dict(self.resolver.keys),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnowledgeGraph:
        kg = cls()
        for e in data["entities"]:
            kg.graph.add_node(e["name"], aliases=list(e["aliases"]), facts=[tuple(f) for f in e["facts"]])
        for r in data["relations"]:
            kg.graph.add_edge(
                r["subject"], r["object"], key=r["relation"], evidence=[tuple(e) for e in r["evidence"]]
            )
        kg.resolver.keys = dict(data["resolver"])
        return kg


@dataclass
class Section:
    """An outline section: what it is about (``title``, ``intent``), where it sits (``parent``) and the
    knowledge-graph entities linked to it."""

    section_id: str
    title: str
    intent: str = ""
    parent: str | None = None
    status: str = "open"
    entities: list[str] = field(default_factory=list)


class OutlineGraph:
    """The report's outline: a tree of :class:`Section` under a root holding the topic."""

    ROOT = "root"

    def __init__(self, topic: str) -> None:
        self.topic = _check_name(topic, "topic")
        self.graph = nx.DiGraph()
        self.graph.add_node(self.ROOT)
        self._sections: dict[str, Section] = {}

    def __len__(self) -> int:
        return len(self._sections)

    def add_section(self, title: str, intent: str = "", parent: str | None = None) -> Section:
        title = _check_name(title, "title")
        if not isinstance(intent, str):
            raise TypeError(f"intent must be a string, got {type(intent).__name__}")
        if parent is not None and (not isinstance(parent, str) or parent not in self._sections):
            raise ValueError(f"parent must be None or a known section id, got {parent!r}")
        section = Section(f"s{len(self._sections) + 1}", title, intent, parent)
        self._sections[section.section_id] = section
        self.graph.add_edge(parent or self.ROOT, section.section_id)
        return section

    def section(self, section_id: str) -> Section:
        try:
            return self._sections[section_id]
        except (KeyError, TypeError):
            raise ValueError(f"section_id must be a known section, got {section_id!r}") from None

    def sections(self) -> list[Section]:
        return list(self._sections.values())

    def children(self, section_id: str | None = None) -> list[Section]:
        if section_id is not None:
            self.section(section_id)
        return [self._sections[c] for c in self.graph.successors(section_id or self.ROOT)]

    def siblings(self, section_id: str) -> list[Section]:
        parent = self.section(section_id).parent
        return [s for s in self.children(parent) if s.section_id != section_id]

    def link(self, section_id: str, entity: str) -> None:
        entities = self.section(section_id).entities
        entity = _check_name(entity, "entity")
        if entity not in entities:
            entities.append(entity)

    def section_of(self, entity: str) -> Section | None:
        return next((s for s in self._sections.values() if entity in s.entities), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "sections": [
                {
                    "section_id": s.section_id,
                    "title": s.title,
                    "intent": s.intent,
                    "parent": s.parent,
                    "status": s.status,
                    "entities": list(s.entities),
                }
                for s in self._sections.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OutlineGraph:
        og = cls(data["topic"])
        for s in data["sections"]:
            section = Section(**{**s, "entities": list(s["entities"])})
            og._sections[section.section_id] = section
            og.graph.add_edge(section.parent or cls.ROOT, section.section_id)
        return og


def _check_path(path: object) -> str | os.PathLike[str]:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return path


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE kg_entities (position INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, aliases TEXT NOT NULL,
                          facts TEXT NOT NULL);
CREATE TABLE kg_relations (position INTEGER PRIMARY KEY, subject TEXT NOT NULL, relation TEXT NOT NULL,
                           object TEXT NOT NULL, evidence TEXT NOT NULL);
CREATE TABLE kg_resolver (key TEXT PRIMARY KEY, canonical TEXT NOT NULL);
CREATE TABLE og_sections (position INTEGER PRIMARY KEY, section_id TEXT UNIQUE NOT NULL, title TEXT NOT NULL,
                          intent TEXT NOT NULL, parent TEXT, status TEXT NOT NULL, entities TEXT NOT NULL);
"""


def save_graphs(path: str | os.PathLike[str], outline: OutlineGraph, knowledge: KnowledgeGraph) -> Path:
    """Write both graphs to one SQLite file. The file is built beside ``path`` and moved into place, so a
    failed save leaves an existing file as it was."""
    if not isinstance(outline, OutlineGraph):
        raise TypeError(f"outline must be an OutlineGraph, got {type(outline).__name__}")
    if not isinstance(knowledge, KnowledgeGraph):
        raise TypeError(f"knowledge must be a KnowledgeGraph, got {type(knowledge).__name__}")
    target = Path(_check_path(path))
    if target.is_dir():
        raise ValueError(f"path must name a file, not a folder, got {str(path)!r}")
    if not target.parent.is_dir():
        raise ValueError(f"path must be in an existing folder, got {str(path)!r}")
    kg, og = knowledge.to_dict(), outline.to_dict()
    fd, tmp = tempfile.mkstemp(suffix=".sqlite", dir=target.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        with conn:
            conn.executescript(_SCHEMA)
            conn.execute(
                "INSERT INTO meta VALUES ('format', 'icml-dualgraph-1'), ('topic', ?)", (og["topic"],)
            )
            conn.executemany(
                "INSERT INTO kg_entities VALUES (?, ?, ?, ?)",
                [
                    (i, e["name"], json.dumps(e["aliases"]), json.dumps(e["facts"]))
                    for i, e in enumerate(kg["entities"])
                ],
            )
            conn.executemany(
                "INSERT INTO kg_relations VALUES (?, ?, ?, ?, ?)",
                [
                    (i, r["subject"], r["relation"], r["object"], json.dumps(r["evidence"]))
                    for i, r in enumerate(kg["relations"])
                ],
            )
            conn.executemany("INSERT INTO kg_resolver VALUES (?, ?)", list(kg["resolver"].items()))
            conn.executemany(
                "INSERT INTO og_sections VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        i,
                        s["section_id"],
                        s["title"],
                        s["intent"],
                        s["parent"],
                        s["status"],
                        json.dumps(s["entities"]),
                    )
                    for i, s in enumerate(og["sections"])
                ],
            )
        conn.close()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_graphs(path: str | os.PathLike[str]) -> tuple[OutlineGraph, KnowledgeGraph]:
    """Read the outline and knowledge graphs :func:`save_graphs` wrote."""
    if not Path(_check_path(path)).is_file():
        raise ValueError(f"path must be an existing file written by save_graphs, got {str(path)!r}")
    conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        if meta.get("format") != "icml-dualgraph-1":
            raise ValueError(f"path is not a DualGraph memory file: {str(path)!r}")
        kg = {
            "entities": [
                {"name": n, "aliases": json.loads(a), "facts": json.loads(f)}
                for n, a, f in conn.execute("SELECT name, aliases, facts FROM kg_entities ORDER BY position")
            ],
            "relations": [
                {"subject": s, "relation": r, "object": o, "evidence": json.loads(e)}
                for s, r, o, e in conn.execute(
                    "SELECT subject, relation, object, evidence FROM kg_relations ORDER BY position"
                )
            ],
            "resolver": dict(conn.execute("SELECT key, canonical FROM kg_resolver")),
        }
        og = {
            "topic": meta["topic"],
            "sections": [
                {
                    "section_id": i,
                    "title": t,
                    "intent": n,
                    "parent": p,
                    "status": st,
                    "entities": json.loads(e),
                }
                for i, t, n, p, st, e in conn.execute(
                    "SELECT section_id, title, intent, parent, status, entities FROM og_sections ORDER BY position"
                )
            ],
        }
    except sqlite3.DatabaseError as err:
        raise ValueError(f"path is not a DualGraph memory file: {str(path)!r} ({err})") from None
    finally:
        conn.close()
    return OutlineGraph.from_dict(og), KnowledgeGraph.from_dict(kg)
