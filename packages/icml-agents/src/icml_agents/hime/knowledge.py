"""HiMe's self-correcting knowledge base: concept schemas that new facts add to, update or delete.

HiMe (hierarchical embodied memory) is known to us from its abstract only: this module is OUR
RECONSTRUCTION of its knowledge layer, not the authors' code. Its update protocol is mem0's (Chhikara et
al., "Mem0: building production-ready AI agents with scalable long-term memory", arXiv 2504.19413): each new
:class:`Fact` is compared with the stored :class:`Schema` objects and turned into memory operations, ``ADD``
(new knowledge), ``UPDATE`` (changed or new attributes of a known concept), ``DELETE`` (the fact says that
the knowledge no longer holds) or ``NONE`` (already known, or nothing to delete).

- :meth:`KnowledgeBase.manage` decides the operations without changing anything: by deterministic rules,
  or by a language model (``decider``) asked in mem0's style for JSON, validated and retried with
  :func:`~icml_agents.backends.complete_json`. The rules merge a fact only into schemas of the SAME concept
  (case-insensitive, exact): text and visual similarity are retrieval keys and never merge two concepts.
- :meth:`KnowledgeBase.apply` carries the operations out as one transaction (in memory and, given a path,
  in SQLite): a failure part-way leaves both exactly as they were.
- :meth:`KnowledgeBase.query` retrieves across modalities: the score of a schema is
  ``max(text_weight * text cosine, visual_weight * visual cosine)``, the text cosine between TF-IDF vectors
  (scikit-learn's ``smooth_idf=True`` weighting over the schemas' texts, word tokens lower-cased).
- :class:`AddOnlyKnowledgeBase` is the baseline of naive memory stores: it adds every fact and never
  corrects anything.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from icml_agents.backends.base import Backend
from icml_agents.backends.structured import complete_json
from icml_agents.validation import check_bool, check_choice, check_int, check_list, check_real

__all__ = ["KINDS", "SOURCES", "AddOnlyKnowledgeBase", "Fact", "KnowledgeBase", "Operation", "Schema"]

KINDS = ("ADD", "UPDATE", "DELETE", "NONE")
SOURCES = ("observation", "human", "planner")
FORMAT = "icml_agents.hime.knowledge/1"
DECIDER_K = 5  # schemas of other concepts retrieved for the decider's prompt
DECIDER_RETRIES = 2
_TOKEN = re.compile(r"\w+")


# validation -----------------------------------------------------------------------------------------
def _check_str(value: Any, name: str, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if nonempty and not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid Unicode (no lone surrogates), got {value!r}") from None
    return value


def _check_attributes(value: Any, name: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of strings to strings, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, item in value.items():
        _check_str(key, f"{name} key", nonempty=True)
        out[key] = _check_str(item, f"{name}[{key!r}]")
    return out


def _check_visual(value: Any, name: str) -> np.ndarray | None:
    if value is None:
        return None
    if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
        kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"{name} must be None or a float numpy array, got {kind}")
    if value.ndim != 1 or value.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D feature vector, got shape {value.shape}")
    if not np.isfinite(value).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    out = value.copy()
    out.flags.writeable = False
    return out


def _visual_equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def _default_text(concept: str, attributes: Mapping[str, str]) -> str:
    """``"cup: place=shelf_left, color=red"``: the text of a fact or schema given none."""
    pairs = ", ".join(f"{k}={v}" for k, v in attributes.items())
    return f"{concept}: {pairs}" if pairs else concept


# records --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Fact:
    """A piece of knowledge about a concept, e.g. ``Fact("cup", {"place": "shelf_left"}, source="human")``.

    ``text`` defaults to ``"concept: key=value, ..."``; ``visual`` is a 1-D finite float feature vector (kept
    read-only, dtype preserved); ``negate`` says that the concept's knowledge given by ``attributes`` is wrong
    or no longer holds; ``source`` is one of :data:`SOURCES`; ``confidence`` is in [0, 1].
    """

    concept: str
    attributes: dict[str, str] = field(default_factory=dict)
    text: str = ""
    visual: np.ndarray | None = None
    negate: bool = False
    source: str = "observation"
    confidence: float = 1.0

    def __post_init__(self) -> None:
        _check_str(self.concept, "concept", nonempty=True)
        attributes = _check_attributes(self.attributes, "attributes")
        text = _check_str(self.text, "text") or _default_text(self.concept, attributes)
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "visual", _check_visual(self.visual, "visual"))
        object.__setattr__(self, "negate", check_bool(self.negate, "negate"))
        check_choice(self.source, "source", SOURCES)
        object.__setattr__(self, "confidence", check_real(self.confidence, "confidence", "[0, 1]"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fact):
            return NotImplemented
        return (
            (self.concept, list(self.attributes.items()), self.text, self.negate, self.source)
            == (other.concept, list(other.attributes.items()), other.text, other.negate, other.source)
            and self.confidence == other.confidence
            and _visual_equal(self.visual, other.visual)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False)
class Schema:
    """A stored piece of concept knowledge; ``created``/``updated`` are the ticks of its ADD and last UPDATE.

    Equality is exact: attributes in the same order, visual vectors of the same dtype and shape and equal
    values, the same floats.
    """

    id: int
    concept: str
    attributes: dict[str, str]
    text: str
    visual: np.ndarray | None
    source: str
    confidence: float
    created: int
    updated: int

    def __post_init__(self) -> None:
        self.id = check_int(self.id, "id", minimum=1)
        _check_str(self.concept, "concept", nonempty=True)
        self.attributes = _check_attributes(self.attributes, "attributes")
        _check_str(self.text, "text")
        self.visual = _check_visual(self.visual, "visual")
        check_choice(self.source, "source", SOURCES)
        self.confidence = check_real(self.confidence, "confidence", "[0, 1]")
        self.created = check_int(self.created, "created", minimum=0)
        self.updated = check_int(self.updated, "updated", minimum=0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        mine = (self.id, self.concept, list(self.attributes.items()), self.text, self.source)
        theirs = (other.id, other.concept, list(other.attributes.items()), other.text, other.source)
        return (
            mine == theirs
            and (self.confidence, self.created, self.updated)
            == (other.confidence, other.created, other.updated)
            and _visual_equal(self.visual, other.visual)
        )

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> Schema:
        """An independent copy (its own attributes dict and visual array)."""
        return Schema(
            self.id,
            self.concept,
            dict(self.attributes),
            self.text,
            self.visual,
            self.source,
            self.confidence,
            self.created,
            self.updated,
        )


@dataclass(frozen=True)
class Operation:
    """One memory operation: ``kind`` in :data:`KINDS`, the schema it acts on (``schema_id``; none for ADD),
    the ``fact`` it comes from (required for ADD, whose fact must not be negated), ``patch`` (the attributes
    an UPDATE sets) and a ``reason``. UPDATE and DELETE need a ``schema_id``; an UPDATE needs a patch or a
    fact."""

    kind: str
    schema_id: int | None = None
    fact: Fact | None = None
    patch: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", KINDS)
        if self.schema_id is not None:
            check_int(self.schema_id, "schema_id", minimum=1)
        if self.fact is not None and not isinstance(self.fact, Fact):
            raise TypeError(f"fact must be None or a Fact, got {type(self.fact).__name__}")
        object.__setattr__(self, "patch", _check_attributes(self.patch, "patch"))
        _check_str(self.reason, "reason")
        if self.kind == "ADD":
            if self.schema_id is not None:
                raise ValueError(f"schema_id must be None for ADD (ids are assigned), got {self.schema_id}")
            if self.fact is None or self.fact.negate:
                raise ValueError("fact must be a fact that is not negated for ADD")
        if self.kind in ("UPDATE", "DELETE") and self.schema_id is None:
            raise ValueError(f"schema_id must be given for {self.kind}")
        if self.kind == "UPDATE" and not self.patch and self.fact is None:
            raise ValueError("patch must be non-empty for an UPDATE without a fact")
        if self.kind != "UPDATE" and self.patch:
            raise ValueError(f"patch must be empty for {self.kind}, got {self.patch!r}")


# the knowledge base ---------------------------------------------------------------------------------
_CREATE = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS schemas (
    id INTEGER PRIMARY KEY, concept TEXT NOT NULL, attributes TEXT NOT NULL, text TEXT NOT NULL,
    visual BLOB, visual_dtype TEXT, visual_shape TEXT, source TEXT NOT NULL, confidence REAL NOT NULL,
    created INTEGER NOT NULL, updated INTEGER NOT NULL
);
"""


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class KnowledgeBase:
    """Concept schemas with mem0's ADD/UPDATE/DELETE/NONE protocol and cross-modal retrieval.

    ``path``: an SQLite file to load (if it exists) and to persist every :meth:`apply` to; ``None`` keeps the
    schemas in memory only. One writer per file at a time. ``text_weight`` and ``visual_weight`` (>= 0)
    weight the two cosines of :meth:`query`; ``match_threshold`` (>= 0) is the least retrieval score for a
    schema of another concept to be shown to a ``decider`` as related knowledge. Schemas returned by any
    method are copies.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        text_weight: float = 1.0,
        visual_weight: float = 1.0,
        match_threshold: float = 0.5,
    ) -> None:
        self.text_weight = check_real(text_weight, "text_weight", "[0, inf)")
        self.visual_weight = check_real(visual_weight, "visual_weight", "[0, inf)")
        self.match_threshold = check_real(match_threshold, "match_threshold", "[0, inf)")
        self._schemas: dict[int, Schema] = {}
        self._next_id = 1
        self._index: tuple[dict[str, float], dict[int, dict[str, float]]] | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self.path: Path | None = None
        if path is not None:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"path must be None, a string or a path, got {type(path).__name__}")
            if not os.fspath(path):
                raise ValueError("path must be a file path, got ''")
            self.path = Path(path)
            self._open(self.path)

    # persistence ------------------------------------------------------------------------------------
    def _open(self, path: Path) -> None:
        try:
            conn = sqlite3.connect(path, isolation_level=None)
        except sqlite3.Error as err:
            raise ValueError(f"path {str(path)!r} cannot be opened as a knowledge base: {err}") from None
        where = f"path {str(path)!r}"
        try:
            if not self._tables(conn):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if not self._tables(conn):  # still empty now that we hold the write lock
                        for statement in _CREATE.split(";"):
                            if statement.strip():
                                conn.execute(statement)
                        conn.execute("INSERT INTO meta VALUES ('format', ?), ('next_id', '1')", (FORMAT,))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            row = None
            if {"meta", "schemas"} <= self._tables(conn):
                row = conn.execute("SELECT value FROM meta WHERE key='format'").fetchone()
            if row is None or row[0] != FORMAT:
                raise ValueError(f"{where} is an SQLite file but not a knowledge base ({FORMAT})")
            next_id = int(conn.execute("SELECT value FROM meta WHERE key='next_id'").fetchone()[0])
            for values in conn.execute("SELECT * FROM schemas ORDER BY id"):
                try:
                    schema = self._from_row(values)
                except (TypeError, ValueError) as err:
                    raise ValueError(f"{where} holds a corrupt schema (row {values[0]!r}): {err}") from None
                self._schemas[schema.id] = schema
        except sqlite3.Error as err:
            conn.close()
            raise ValueError(f"{where} is not a readable knowledge base: {err}") from None
        except BaseException:
            conn.close()
            raise
        self._next_id = max(next_id, max(self._schemas, default=0) + 1)
        self._conn = conn

    @staticmethod
    def _tables(conn: sqlite3.Connection) -> set[str]:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    @staticmethod
    def _from_row(values: tuple[Any, ...]) -> Schema:
        sid, concept, attributes, text, blob, dtype, shape, source, confidence, created, updated = values
        visual = None
        if blob is not None:
            visual = np.frombuffer(blob, dtype=np.dtype(dtype)).reshape(json.loads(shape))
        return Schema(
            sid, concept, json.loads(attributes), text, visual, source, confidence, created, updated
        )

    def _store(self, schema: Schema) -> None:
        """Write one schema (insert or replace) inside the open transaction."""
        if self._conn is None:
            return
        v = schema.visual
        self._conn.execute(
            "INSERT OR REPLACE INTO schemas VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                schema.id,
                schema.concept,
                json.dumps(schema.attributes, sort_keys=False),
                schema.text,
                None if v is None else np.ascontiguousarray(v).tobytes(),
                None if v is None else v.dtype.str,
                None if v is None else json.dumps(list(v.shape)),
                schema.source,
                schema.confidence,
                schema.created,
                schema.updated,
            ),
        )

    def _remove(self, schema_id: int) -> None:
        if self._conn is not None:
            self._conn.execute("DELETE FROM schemas WHERE id = ?", (schema_id,))

    def close(self) -> None:
        """Close the file; later :meth:`apply` calls raise ``ValueError``. Idempotent."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._closed = True

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, schemas={len(self)})"

    # reading ----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._schemas)

    def schemas(self) -> list[Schema]:
        """Every schema, by id."""
        return [self._schemas[i].copy() for i in sorted(self._schemas)]

    def get(self, schema_id: int) -> Schema | None:
        """The schema with id ``schema_id``, or ``None`` if there is none."""
        schema = self._schemas.get(check_int(schema_id, "schema_id"))
        return None if schema is None else schema.copy()

    def _dimension(self) -> int | None:
        return next((s.visual.size for s in self._schemas.values() if s.visual is not None), None)

    def _check_dimension(self, visual: np.ndarray | None, name: str, dim: int | None) -> None:
        if visual is not None and dim is not None and visual.size != dim:
            raise ValueError(
                f"{name} must have the knowledge base's visual dimension {dim}, got {visual.size}"
            )

    def _text_index(self) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        """Smoothed idf over the schemas' texts and each schema's l2-normalised TF-IDF vector."""
        if self._index is None:
            counts = {i: Counter(_tokens(s.text)) for i, s in self._schemas.items()}
            df: Counter[str] = Counter()
            for c in counts.values():
                df.update(c.keys())
            n = len(counts)
            idf = {t: math.log((1 + n) / (1 + d)) + 1.0 for t, d in df.items()}
            self._index = (idf, {i: _normalised(c, idf) for i, c in counts.items()})
        return self._index

    def query(
        self, text: str | None = None, visual: np.ndarray | None = None, k: int = 5
    ) -> list[tuple[Schema, float]]:
        """The ``k`` schemas that best match a text and/or a visual feature vector, with their scores.

        score = ``max(text_weight * text cosine, visual_weight * visual cosine)`` over the modalities given;
        only scores > 0, by score descending, ties by id ascending.
        """
        if text is None and visual is None:
            raise ValueError("text and visual are both None: give at least one of them")
        if text is not None:
            _check_str(text, "text")
        visual = _check_visual(visual, "visual")
        k = check_int(k, "k", minimum=1)
        self._check_dimension(visual, "visual", self._dimension())
        scores: dict[int, float] = {i: -math.inf for i in self._schemas}
        if text is not None:
            idf, vectors = self._text_index()
            q = _normalised(Counter(_tokens(text)), idf)
            for i, vec in vectors.items():
                cos = sum(w * vec.get(t, 0.0) for t, w in q.items())
                scores[i] = max(scores[i], self.text_weight * cos)
        if visual is not None:
            v = visual.astype(np.float64)
            vn = float(np.linalg.norm(v))
            for i, s in self._schemas.items():
                cos = 0.0
                if s.visual is not None and vn > 0:
                    sv = s.visual.astype(np.float64)
                    sn = float(np.linalg.norm(sv))
                    cos = float(v @ sv) / (vn * sn) if sn > 0 else 0.0
                scores[i] = max(scores[i], self.visual_weight * cos)
        ranked = sorted((i for i in scores if scores[i] > 0), key=lambda i: (-scores[i], i))
        return [(self._schemas[i].copy(), scores[i]) for i in ranked[:k]]

    # deciding ---------------------------------------------------------------------------------------
    def _same_concept(self, concept: str) -> list[Schema]:
        key = concept.casefold()
        return [self._schemas[i] for i in sorted(self._schemas) if self._schemas[i].concept.casefold() == key]

    def manage(self, fact: Fact, tick: int = 0, decider: Backend | None = None) -> list[Operation]:
        """The operations that ``fact`` calls for, without changing the knowledge base.

        Without ``decider`` (mem0's protocol, deterministic; only schemas of the fact's concept, compared
        case-insensitively, are candidates):

        - no such schema: ``[NONE]`` for a negated fact (nothing to delete), else ``[ADD]``;
        - negated fact: DELETE each schema whose attributes agree with every attribute the fact gives (all
          of them if it gives none), ``[NONE]`` if none agrees;
        - otherwise, for the best match (most shared attribute keys, then highest id): ``[NONE]`` if it holds
          every attribute of the fact, else ``[UPDATE]`` with the attributes that differ or are new.

        With ``decider``, a language model is shown the fact, the schemas of its concept and the related
        schemas retrieved for it (score >= ``match_threshold``) and answers with JSON operations, validated
        (kinds, existing ids, no id for ADD) and retried by :func:`~icml_agents.backends.complete_json`;
        :class:`~icml_agents.backends.StructuredOutputError` if it never answers validly.
        """
        fact, _ = self._check_fact(fact, tick)
        if decider is not None:
            if not isinstance(decider, Backend):
                raise TypeError(f"decider must be None or a Backend, got {type(decider).__name__}")
            return self._decide(fact, decider)
        same = self._same_concept(fact.concept)
        if not same:
            if fact.negate:
                return [Operation("NONE", None, fact, {}, f"no schema of {fact.concept!r} to delete")]
            return [Operation("ADD", None, fact, {}, f"new concept {fact.concept!r}")]
        if fact.negate:
            agree = [s for s in same if all(s.attributes.get(k) == v for k, v in fact.attributes.items())]
            if not agree:
                return [Operation("NONE", None, fact, {}, "no schema agrees with the negated attributes")]
            return [Operation("DELETE", s.id, fact, {}, "the fact negates it") for s in agree]
        best = max(same, key=lambda s: (len(fact.attributes.keys() & s.attributes.keys()), s.id))
        patch = {k: v for k, v in fact.attributes.items() if best.attributes.get(k) != v}
        if not patch:
            return [Operation("NONE", best.id, fact, {}, "already known")]
        return [Operation("UPDATE", best.id, fact, patch, "attributes changed or new")]

    def _check_fact(self, fact: Any, tick: Any) -> tuple[Fact, int]:
        if not isinstance(fact, Fact):
            raise TypeError(f"fact must be a Fact, got {type(fact).__name__}")
        tick = check_int(tick, "tick", minimum=0)
        self._check_dimension(fact.visual, "fact.visual", self._dimension())
        return fact, tick

    def _decide(self, fact: Fact, decider: Backend) -> list[Operation]:
        same = self._same_concept(fact.concept)
        shown = {s.id for s in same}
        related = [
            s
            for s, score in self.query(fact.text, fact.visual, DECIDER_K)
            if score >= self.match_threshold and s.id not in shown
        ]

        def describe(s: Schema) -> dict[str, Any]:
            return {
                "id": s.id,
                "concept": s.concept,
                "attributes": s.attributes,
                "text": s.text,
                "source": s.source,
                "confidence": s.confidence,
            }

        new = {
            "concept": fact.concept,
            "attributes": fact.attributes,
            "text": fact.text,
            "negate": fact.negate,
            "source": fact.source,
            "confidence": fact.confidence,
        }
        prompt = (
            "You manage the knowledge base of an embodied agent: schemas of concepts with attributes. "
            "Compare the new fact with the existing schemas and decide how to change the knowledge base, "
            "with one or more operations:\n"
            "- ADD: the fact is new knowledge that no schema holds (no id);\n"
            "- UPDATE: the fact changes or adds attributes of a schema (its id, and patch: the attributes "
            "to set);\n"
            '- DELETE: the fact contradicts a schema or says it no longer holds ("negate": true) (its id);\n'
            "- NONE: the knowledge is already there or nothing is to be changed.\n"
            "Merge a fact only into schemas of the same concept; related schemas are shown for context.\n\n"
            f"Schemas of the same concept: {json.dumps([describe(s) for s in same], ensure_ascii=False)}\n"
            f"Related schemas: {json.dumps([describe(s) for s in related], ensure_ascii=False)}\n"
            f"New fact: {json.dumps(new, ensure_ascii=False)}\n\n"
            'Reply with JSON only: {"operations": [{"kind": "ADD|UPDATE|DELETE|NONE", "id": <int or '
            'null>, "patch": {"<attribute>": "<value>"}, "reason": "<why>"}]}'
        )
        return complete_json(
            decider,
            prompt,
            validate=lambda value: self._parse_decision(value, fact),
            max_retries=DECIDER_RETRIES,
            max_new_tokens=512,
        )

    def _parse_decision(self, value: Any, fact: Fact) -> list[Operation]:
        """The decider's JSON as operations; ``ValueError``/``TypeError`` (shown to the model) if invalid."""
        if not isinstance(value, dict) or not isinstance(value.get("operations"), list):
            raise ValueError('the reply must be an object {"operations": [...]}')
        items = value["operations"]
        if not items:
            raise ValueError("operations must hold at least one operation (NONE if nothing changes)")
        ops, targets = [], set()
        for j, item in enumerate(items):
            where = f"operations[{j}]"
            if not isinstance(item, dict):
                raise ValueError(f"{where} must be an object, got {item!r}")
            kind = item.get("kind")
            if kind not in KINDS:
                raise ValueError(f"{where}['kind'] must be one of {KINDS}, got {kind!r}")
            sid = item.get("id")
            if kind == "ADD" and sid is not None:
                raise ValueError(f"{where}: ADD takes no id (ids are assigned), got {sid!r}")
            if kind != "ADD" and (sid is not None or kind != "NONE"):
                if isinstance(sid, bool) or not isinstance(sid, int) or sid not in self._schemas:
                    raise ValueError(f"{where}['id'] must be the id of an existing schema, got {sid!r}")
                if kind != "NONE":
                    if sid in targets:
                        raise ValueError(f"{where}: schema {sid} is the target of two operations")
                    targets.add(sid)
            patch = item.get("patch") or {}
            reason = item.get("reason") or ""
            if not isinstance(reason, str):
                raise ValueError(f"{where}['reason'] must be a string, got {reason!r}")
            try:
                ops.append(Operation(kind, sid, fact, patch, reason))
            except (TypeError, ValueError) as err:
                raise ValueError(f"{where}: {err}") from None
        if sum(op.kind == "ADD" for op in ops) > 1:
            raise ValueError("operations may ADD the fact once only")
        return ops

    # changing ---------------------------------------------------------------------------------------
    def apply(self, ops: list[Operation], tick: int = 0) -> list[int]:
        """Carry out ``ops`` at ``tick`` as one transaction; the ids of the schemas added, updated or deleted.

        ADD creates a schema from the fact (id: the highest id ever given + 1, never reused); UPDATE sets the
        patch's attributes and, when the op carries a fact, takes the fact's text, source, confidence and
        visual vector (a fact without one keeps the schema's); a text that is the default of its concept and
        attributes is derived again from the merged attributes; DELETE removes; NONE does nothing. If any
        operation fails (an unknown id, a wrong visual dimension, an exception while writing) the knowledge
        base, in memory and on disk, is left exactly as it was.
        """
        check_list(ops, "ops")
        for i, op in enumerate(ops):
            if not isinstance(op, Operation):
                raise TypeError(f"ops[{i}] must be an Operation, got {type(op).__name__}")
        tick = check_int(tick, "tick", minimum=0)
        if self._closed:
            raise ValueError("the knowledge base is closed")
        state = dict(self._schemas)
        next_id = self._next_id
        touched: list[int] = []
        if self._conn is not None:
            self._conn.execute("BEGIN IMMEDIATE")
        try:
            for i, op in enumerate(ops):
                sid, next_id = self._apply_one(state, next_id, op, tick, f"ops[{i}]")
                if sid is not None:
                    touched.append(sid)
            if self._conn is not None:
                self._conn.execute("UPDATE meta SET value = ? WHERE key = 'next_id'", (str(next_id),))
                self._conn.execute("COMMIT")
        except BaseException:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        self._schemas, self._next_id, self._index = state, next_id, None
        return touched

    def _apply_one(
        self, state: dict[int, Schema], next_id: int, op: Operation, tick: int, where: str
    ) -> tuple[int | None, int]:
        """Apply one operation to ``state`` (a copy) and write it; the id touched and the next free id."""
        if op.kind == "NONE":
            return None, next_id
        assert op.schema_id is not None or op.kind == "ADD"
        if op.kind != "ADD" and op.schema_id not in state:
            raise ValueError(f"{where}: {op.kind} of schema {op.schema_id}, which does not exist")
        if op.kind == "DELETE":
            assert op.schema_id is not None
            del state[op.schema_id]
            self._remove(op.schema_id)
            return op.schema_id, next_id
        fact = op.fact
        if fact is not None and fact.visual is not None:
            others = [s.visual.size for s in state.values() if s.visual is not None and s.id != op.schema_id]
            if others and fact.visual.size != others[0]:
                raise ValueError(
                    f"{where}: fact.visual has dimension {fact.visual.size}, the knowledge base {others[0]}"
                )
        if op.kind == "ADD":
            assert fact is not None
            schema = Schema(
                next_id,
                fact.concept,
                dict(fact.attributes),
                fact.text,
                fact.visual,
                fact.source,
                fact.confidence,
                tick,
                tick,
            )
            next_id += 1
        else:
            assert op.schema_id is not None
            old = state[op.schema_id]
            attributes = {**old.attributes, **op.patch}
            text, visual, source, confidence = old.text, old.visual, old.source, old.confidence
            if fact is not None:
                text = fact.text
                derived = fact.text == _default_text(fact.concept, fact.attributes)
                visual = old.visual if fact.visual is None else fact.visual
                source, confidence = fact.source, fact.confidence
            else:
                derived = old.text == _default_text(old.concept, old.attributes)
            if derived:
                text = _default_text(old.concept, attributes)
            schema = Schema(
                old.id, old.concept, attributes, text, visual, source, confidence, old.created, tick
            )
        state[schema.id] = schema
        self._store(schema)
        return schema.id, next_id

    def observe(self, fact: Fact, tick: int = 0, decider: Backend | None = None) -> list[Operation]:
        """:meth:`manage` then :meth:`apply` at ``tick``; the operations carried out."""
        ops = self.manage(fact, tick, decider)
        self.apply(ops, tick)
        return ops


def _normalised(counts: Counter[str], idf: Mapping[str, float]) -> dict[str, float]:
    weights = {t: c * idf[t] for t, c in counts.items() if t in idf}
    norm = math.sqrt(sum(w * w for w in weights.values()))
    return {t: w / norm for t, w in weights.items()} if norm > 0 else {}


class AddOnlyKnowledgeBase(KnowledgeBase):
    """The baseline of naive memory stores: every fact is added, nothing is ever updated or deleted."""

    def manage(self, fact: Fact, tick: int = 0, decider: Backend | None = None) -> list[Operation]:
        """``[ADD]`` for a fact, ``[NONE]`` for a negated one; ``decider`` is checked and not used."""
        fact, _ = self._check_fact(fact, tick)
        if decider is not None and not isinstance(decider, Backend):
            raise TypeError(f"decider must be None or a Backend, got {type(decider).__name__}")
        if fact.negate:
            return [Operation("NONE", None, fact, {}, "an add-only store never deletes")]
        return [Operation("ADD", None, fact, {}, "an add-only store adds every fact")]
