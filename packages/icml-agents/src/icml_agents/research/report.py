"""The report: each outline section written from its knowledge-graph subgraph, every claim with citations.

Without a backend the writer is extractive: a claim is a fact or relation-evidence sentence, cited to every
document that states it. With a backend, the model writes each section's sentences from its numbered facts
and cites them by number (validated JSON; a reply that never validates falls back to the extractive claims).
:func:`citation_validity` checks every claim against the documents it cites.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from icml_agents.backends import Backend, StructuredOutputError, complete_json
from icml_agents.research.extract import quoted
from icml_agents.research.graphs import KnowledgeGraph, OutlineGraph
from icml_agents.research.search import Document
from icml_agents.validation import check_int

WRITE_PROMPT = """TASK: write
Write the section "{title}" ({intent}) of a report on "{topic}" from the numbered facts below, as JSON:
{{"sentences": [{{"text": "...", "facts": [1, 2]}}]}}; every sentence cites the facts it rests on.
Facts:
{facts}"""


@dataclass(frozen=True)
class Claim:
    """A sentence of the report and its evidence: ``(quote, doc_id)`` pairs, the quotes it rests on."""

    text: str
    evidence: tuple[tuple[str, str], ...]

    @property
    def citations(self) -> list[str]:
        return sorted({d for _, d in self.evidence})


@dataclass(frozen=True)
class ReportSection:
    section_id: str
    title: str
    claims: tuple[Claim, ...]


@dataclass(frozen=True)
class Report:
    topic: str
    sections: tuple[ReportSection, ...]

    def claims(self) -> list[Claim]:
        return [c for s in self.sections for c in s.claims]

    def to_markdown(self) -> str:
        """The report with numbered citations and a reference list of document ids."""
        refs: dict[str, int] = {}
        lines = [f"# {self.topic}", ""]
        for s in self.sections:
            lines += [f"## {s.title}", ""]
            for c in s.claims:
                marks = "".join(f"[{refs.setdefault(d, len(refs) + 1)}]" for d in c.citations)
                lines.append(f"{c.text} {marks}")
            lines.append("")
        lines += ["## References", ""] + [f"[{n}] {d}" for d, n in refs.items()]
        return "\n".join(lines)


def section_evidence(outline: OutlineGraph, knowledge: KnowledgeGraph, section_id: str) -> list[Claim]:
    """The extractive claims of a section: its entities' facts and the relations they are the subject of,
    one claim per distinct sentence, cited to every document that states it."""
    claims: dict[str, list[tuple[str, str]]] = {}
    for entity in outline.section(section_id).entities:
        for text, doc in knowledge.facts(entity):
            claims.setdefault(text, []).append((text, doc))
        for _, _, data in knowledge.graph.out_edges(entity, data=True):
            for text, doc in data["evidence"]:
                claims.setdefault(text, []).append((text, doc))
    return [Claim(text, tuple(dict.fromkeys(ev))) for text, ev in claims.items()]


def _parse_sentences(data: Any, n_facts: int) -> list[tuple[str, list[int]]]:
    sentences = data.get("sentences") if isinstance(data, Mapping) else None
    if not isinstance(sentences, list):
        raise ValueError("the reply must be a JSON object with a list 'sentences'")
    out = []
    for i, s in enumerate(sentences):
        facts = s.get("facts") if isinstance(s, Mapping) else None
        if not isinstance(s, Mapping) or not isinstance(s.get("text"), str) or not s["text"].strip():
            raise ValueError(f"sentences[{i}] must have a non-empty string 'text'")
        if (
            not isinstance(facts, list)
            or not facts
            or not all(isinstance(f, int) and not isinstance(f, bool) and 1 <= f <= n_facts for f in facts)
        ):
            raise ValueError(f"sentences[{i}]['facts'] must be a non-empty list of fact numbers 1..{n_facts}")
        out.append((s["text"].strip(), facts))
    return out


def write_report(
    outline: OutlineGraph, knowledge: KnowledgeGraph, backend: Backend | None = None, *, max_facts: int = 40
) -> Report:
    """Write every section from its linked subgraph (see the module docstring)."""
    if not isinstance(outline, OutlineGraph):
        raise TypeError(f"outline must be an OutlineGraph, got {type(outline).__name__}")
    if not isinstance(knowledge, KnowledgeGraph):
        raise TypeError(f"knowledge must be a KnowledgeGraph, got {type(knowledge).__name__}")
    if backend is not None and not isinstance(backend, Backend):
        raise TypeError(f"backend must be None or an icml_agents Backend, got {type(backend).__name__}")
    max_facts = check_int(max_facts, "max_facts", minimum=1)
    sections = []
    for s in outline.sections():
        evidence = section_evidence(outline, knowledge, s.section_id)
        claims = evidence
        if backend is not None and evidence:
            facts = evidence[:max_facts]
            listing = "\n".join(f"[{i + 1}] {c.text}" for i, c in enumerate(facts))
            prompt = WRITE_PROMPT.format(title=s.title, intent=s.intent, topic=outline.topic, facts=listing)
            try:
                written = complete_json(
                    backend,
                    prompt,
                    validate=partial(_parse_sentences, n_facts=len(facts)),
                    max_new_tokens=512,
                )
                claims = [
                    Claim(text, tuple(dict.fromkeys(e for f in cited for e in facts[f - 1].evidence)))
                    for text, cited in written
                ]
            except StructuredOutputError:
                pass
        sections.append(ReportSection(s.section_id, s.title, tuple(claims)))
    return Report(outline.topic, tuple(sections))


def citation_validity(report: Report, documents: Mapping[str, Document] | Sequence[Document]) -> float:
    """The share of claims whose every quote is found in the document it cites (1.0 for a report without
    claims); a citation of an unknown document is invalid."""
    if not isinstance(report, Report):
        raise TypeError(f"report must be a Report, got {type(report).__name__}")
    if isinstance(documents, str) or not isinstance(documents, Mapping | Sequence):
        raise TypeError(f"documents must be a mapping or a list of Document, got {type(documents).__name__}")
    if not all(
        isinstance(d, Document) for d in (documents.values() if isinstance(documents, Mapping) else documents)
    ):
        raise TypeError("documents must hold Document values only")
    by_id = documents if isinstance(documents, Mapping) else {d.doc_id: d for d in documents}
    claims = report.claims()
    if not claims:
        return 1.0
    ok = sum(
        bool(c.evidence) and all(d in by_id and quoted(q, by_id[d]) for q, d in c.evidence) for c in claims
    )
    return ok / len(claims)


def section_balance(report: Report) -> float:
    """How evenly claims spread over the sections: the normalized entropy of the claim counts (1: equal
    counts; 0: all in one section, or fewer than two sections)."""
    if not isinstance(report, Report):
        raise TypeError(f"report must be a Report, got {type(report).__name__}")
    counts = [len(s.claims) for s in report.sections]
    total = sum(counts)
    if len(counts) < 2 or total == 0:
        return 0.0
    h = -sum(c / total * math.log(c / total) for c in counts if c)
    return h / math.log(len(counts))
