"""What the LLM does in the research loop: draft an outline and extract entities, facts and relations from a
document, both as validated JSON through :func:`~icml_agents.backends.complete_json`.

Extracted facts and relation evidence are sentences copied from the document; :func:`merge_extraction` keeps
only those whose quote the document really contains (``verify_quotes``), so every fact in the knowledge graph
is tied to a document that states it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from icml_agents.backends import Backend, StructuredOutputError, complete_json
from icml_agents.research.graphs import KnowledgeGraph, OutlineGraph, normalize_name
from icml_agents.research.search import Document
from icml_agents.validation import check_bool, check_int

OUTLINE_PROMPT = """TASK: outline
Write the outline of a research report on the topic below as JSON:
{{"sections": [{{"title": "...", "intent": "what the section must cover"}}]}} with 2 to {max_sections} sections.
Topic: {topic}"""

EXTRACT_PROMPT = """TASK: extract
Extract the entities and the relations the document states, as JSON:
{{"entities": [{{"name": "...", "aliases": ["..."], "facts": ["a sentence copied from the document"]}}],
 "relations": [{{"subject": "...", "relation": "...", "object": "...", "evidence": "the sentence copied from the document"}}]}}
Copy facts and evidence verbatim from the document. Use [] where the document states nothing.
Document {doc_id}:
{text}"""


@dataclass(frozen=True)
class ExtractedEntity:
    name: str
    aliases: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedRelation:
    subject: str
    relation: str
    object: str
    evidence: str


@dataclass(frozen=True)
class Extraction:
    """What one document states: entities (with aliases and fact sentences) and relations (with evidence)."""

    entities: tuple[ExtractedEntity, ...] = ()
    relations: tuple[ExtractedRelation, ...] = ()


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings")
    return tuple(v for v in value if normalize_name(v))


def parse_extraction(data: Any) -> Extraction:
    """Validate the extraction JSON (raises ``ValueError`` saying what is wrong, so the backend can retry)."""
    if not isinstance(data, Mapping):
        raise ValueError("data (the reply) must be a JSON object with 'entities' and 'relations'")
    for key in ("entities", "relations"):
        if not isinstance(data.get(key, []), list):
            raise ValueError(f"{key} must be a list")
    entities, relations = [], []
    for i, e in enumerate(data.get("entities", [])):
        if not isinstance(e, Mapping) or not isinstance(e.get("name"), str):
            raise ValueError(f"entities[{i}] must be an object with a string 'name'")
        if normalize_name(e["name"]):
            entities.append(
                ExtractedEntity(
                    e["name"],
                    _strings(e.get("aliases", []), f"entities[{i}].aliases"),
                    _strings(e.get("facts", []), f"entities[{i}].facts"),
                )
            )
    for i, r in enumerate(data.get("relations", [])):
        keys = ("subject", "relation", "object", "evidence")
        if not isinstance(r, Mapping) or not all(isinstance(r.get(k), str) for k in keys):
            raise ValueError(f"relations[{i}] must be an object with string {keys}")
        if all(normalize_name(r[k]) for k in keys):
            relations.append(ExtractedRelation(*(r[k] for k in keys)))
    return Extraction(tuple(entities), tuple(relations))


def extract(backend: Backend, document: Document, *, max_new_tokens: int = 768) -> Extraction:
    """Ask ``backend`` what ``document`` states; a reply that never validates gives an empty extraction
    (the loop goes on; :class:`~icml_agents.research.Researcher` counts these failures)."""
    if not isinstance(document, Document):
        raise TypeError(f"document must be a Document, got {type(document).__name__}")
    prompt = EXTRACT_PROMPT.format(doc_id=document.doc_id, text=document.text)
    try:
        return complete_json(backend, prompt, validate=parse_extraction, max_new_tokens=max_new_tokens)
    except StructuredOutputError:
        return Extraction()


def _squash(text: str) -> str:
    return " ".join(text.split())


def quoted(quote: str, document: Document) -> bool:
    """Whether ``document`` contains ``quote`` (white space normalized)."""
    return _squash(quote) in _squash(document.text)


def merge_extraction(
    knowledge: KnowledgeGraph, extraction: Extraction, document: Document, *, verify_quotes: bool = True
) -> dict[str, int]:
    """Add an extraction from ``document`` to the knowledge graph (entity resolution by name and alias);
    with ``verify_quotes`` facts and relations whose quote is not in the document are dropped and counted.
    Returns counts: ``entities`` (new), ``facts`` and ``relations`` (new or newly supported), ``dropped``.
    Bad names raise before anything is merged: a call that raises leaves ``knowledge`` as it was."""
    for value, name, kind in [
        (knowledge, "knowledge", KnowledgeGraph),
        (extraction, "extraction", Extraction),
        (document, "document", Document),
    ]:
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    verify_quotes = check_bool(verify_quotes, "verify_quotes")
    # a dry run into an empty graph first: a bad name raises there, before the first write to ``knowledge``
    _merge(KnowledgeGraph(), extraction, document, verify_quotes)
    return _merge(knowledge, extraction, document, verify_quotes)


def _merge(
    knowledge: KnowledgeGraph, extraction: Extraction, document: Document, verify_quotes: bool
) -> dict[str, int]:
    counts = {"entities": 0, "facts": 0, "relations": 0, "dropped": 0}
    source = document.doc_id
    for e in extraction.entities:
        new = knowledge.resolve(e.name) is None
        knowledge.add_entity(e.name, e.aliases)
        counts["entities"] += new
        for fact in e.facts:
            if verify_quotes and not quoted(fact, document):
                counts["dropped"] += 1
            else:
                counts["facts"] += knowledge.add_fact(e.name, fact, source)
    for r in extraction.relations:
        if verify_quotes and not quoted(r.evidence, document):
            counts["dropped"] += 1
            continue
        counts["entities"] += (knowledge.resolve(r.subject) is None) + (knowledge.resolve(r.object) is None)
        counts["relations"] += knowledge.add_relation(r.subject, r.relation, r.object, r.evidence, source)
    return counts


def _parse_outline(data: Any, max_sections: int) -> list[tuple[str, str]]:
    sections = data.get("sections") if isinstance(data, Mapping) else None
    if not isinstance(sections, list) or not sections:
        raise ValueError("the reply must be a JSON object with a non-empty list 'sections'")
    out = []
    for i, s in enumerate(sections[:max_sections]):
        if (
            not isinstance(s, Mapping)
            or not isinstance(s.get("title"), str)
            or not normalize_name(s["title"])
        ):
            raise ValueError(f"sections[{i}] must be an object with a non-empty string 'title'")
        intent = s.get("intent", "")
        out.append((s["title"], intent if isinstance(intent, str) else ""))
    return out


def draft_outline(backend: Backend | None, topic: str, *, max_sections: int = 8) -> OutlineGraph:
    """The initial outline: sections drafted by ``backend``; without a backend, or when its reply never
    validates, a single section on the topic itself."""
    max_sections = check_int(max_sections, "max_sections", minimum=1)
    outline = OutlineGraph(topic)
    sections: list[tuple[str, str]] = [(topic, topic)]
    if backend is not None:
        prompt = OUTLINE_PROMPT.format(topic=topic, max_sections=max_sections)
        try:
            sections = complete_json(backend, prompt, validate=lambda d: _parse_outline(d, max_sections))
        except StructuredOutputError:
            pass
    for title, intent in sections:
        outline.add_section(title, intent)
    return outline
