"""Search for research agents: documents, the search-tool protocol, offline BM25 and the one budget counter.

Any object with ``search(query, k) -> list[SearchHit]`` is a search tool (a web-search client for users who
have one). :class:`BM25Search` is the offline default over a local corpus. :class:`SearchBudget` wraps a tool
and is the single counter every agent's searches go through: it refuses the call that would exceed the limit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from icml_agents.validation import check_int, check_real

_TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were with".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs without English stop words: the BM25 and linking vocabulary."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


@dataclass(frozen=True)
class Document:
    """A retrievable document: a unique ``doc_id``, its ``text`` and an optional ``title``."""

    doc_id: str
    text: str
    title: str = ""

    def __post_init__(self) -> None:
        for name in ("doc_id", "text", "title"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a string, got {type(getattr(self, name)).__name__}")
        if not self.doc_id.strip():
            raise ValueError(f"doc_id must be a non-empty string, got {self.doc_id!r}")


@dataclass(frozen=True)
class SearchHit:
    """One search result: the document and its score (higher is better)."""

    document: Document
    score: float


@runtime_checkable
class SearchTool(Protocol):
    """The search-tool protocol: ranked hits for a query, at most ``k`` of them."""

    def search(self, query: str, k: int) -> list[SearchHit]: ...


class BudgetExhausted(RuntimeError):
    """A search was asked of a :class:`SearchBudget` whose limit is spent."""


def check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"query must be a non-empty string, got {query!r}")
    return query


class BM25Search:
    """Okapi BM25 over a local corpus (``k1``, ``b``; Lucene's non-negative IDF
    ``log(1 + (N - n + 0.5) / (n + 0.5))``); ties are broken by corpus order. Documents that share no term
    with the query are never returned."""

    def __init__(self, documents: Iterable[Document], *, k1: float = 1.5, b: float = 0.75) -> None:
        ok = isinstance(documents, Iterable) and not isinstance(documents, (str, bytes))
        docs = list(documents) if ok else None
        if docs is None or not all(isinstance(d, Document) for d in docs):
            raise TypeError("documents must be an iterable of Document")
        if not docs:
            raise ValueError("documents must hold at least one Document (the corpus is empty)")
        ids = [d.doc_id for d in docs]
        if len(set(ids)) != len(ids):
            dup = next(i for i, c in Counter(ids).items() if c > 1)
            raise ValueError(f"documents must have unique doc_id values, {dup!r} repeats")
        self.k1 = check_real(k1, "k1", "[0, inf)")
        self.b = check_real(b, "b", "[0, 1]")
        self.documents = docs
        self.by_id = {d.doc_id: d for d in docs}
        self._tf = [Counter(tokenize(f"{d.title} {d.text}")) for d in docs]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = max(sum(self._len) / len(docs), 1e-12)
        df: Counter[str] = Counter()
        self._postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self._tf):
            df.update(tf.keys())
            for term in tf:
                self._postings.setdefault(term, []).append(i)
        n = len(docs)
        self.idf = {t: math.log(1.0 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every document (by corpus position) that shares a term with ``query``."""
        out: dict[int, float] = {}
        for term, qtf in Counter(tokenize(check_query(query))).items():
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self._postings[term]:
                tf = self._tf[i][term]
                norm = tf + self.k1 * (1.0 - self.b + self.b * self._len[i] / self._avg)
                out[i] = out.get(i, 0.0) + qtf * idf * tf * (self.k1 + 1.0) / norm
        return out

    def search(self, query: str, k: int) -> list[SearchHit]:
        k = check_int(k, "k", minimum=1)
        ranked = sorted(self.scores(query).items(), key=lambda item: (-item[1], item[0]))[:k]
        return [SearchHit(self.documents[i], score) for i, score in ranked]


class SearchBudget:
    """The one counter that enforces a search budget: every search an agent makes goes through it.

    ``limit`` is the number of searches allowed (``None``: unlimited). A search beyond it raises
    :class:`BudgetExhausted` without reaching the tool; :attr:`queries` keeps every query served, in order.
    """

    def __init__(self, tool: SearchTool, limit: int | None) -> None:
        if isinstance(tool, type) or not callable(getattr(tool, "search", None)):
            raise TypeError(f"tool must have a search(query, k) method, got {type(tool).__name__}")
        self.tool = tool
        self.limit = None if limit is None else check_int(limit, "limit (the search budget)", minimum=1)
        self.queries: list[str] = []

    @property
    def used(self) -> int:
        return len(self.queries)

    @property
    def remaining(self) -> float:
        return math.inf if self.limit is None else self.limit - self.used

    def search(self, query: str, k: int) -> list[SearchHit]:
        check_query(query)
        k = check_int(k, "k", minimum=1)
        if self.remaining < 1:
            raise BudgetExhausted(f"the search budget of {self.limit} queries is spent")
        self.queries.append(query)
        hits = list(self.tool.search(query, k))
        if not all(isinstance(h, SearchHit) for h in hits):
            raise TypeError("the search tool must return a list of SearchHit")
        return hits[:k]
