"""A response cache in SQLite, so that reruns of agent experiments are reproducible and cost nothing.

Each entry is keyed by the SHA-256 of the backend's ``cache_id``, the request kind, the prompt and every
decoding parameter (the prompt's own seed included), written as canonical JSON. Every entry is committed in
its own transaction (SQLite's write-ahead log), so a process killed mid-write leaves a readable cache
holding every entry committed before. Sampled requests without a seed are never cached: they are not meant
to repeat.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icml_agents.backends.base import Backend, Completion, Request, TokenLogprobs

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    kind TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def request_key(backend_id: str, kind: str, request: dict[str, Any]) -> str:
    """The cache key: SHA-256 of the canonical JSON of the backend id, the kind and the request."""
    for value, name in ((backend_id, "backend_id"), (kind, "kind")):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    if not isinstance(request, dict):
        raise TypeError(f"request must be a dict of JSON data, got {type(request).__name__}")
    try:
        blob = json.dumps(
            [backend_id, kind, request], sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as err:
        raise TypeError(f"request must hold JSON data with string keys only: {err}") from None
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """An SQLite file of responses (``path`` is created with its folder; ``":memory:"`` keeps it in memory).

    Thread-safe; use it as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a file path, got {type(path).__name__}")
        self.path = os.fspath(path)
        if not isinstance(self.path, str) or not self.path or "\0" in self.path:
            raise ValueError(f"path must be a non-empty file path without NUL characters, got {path!r}")
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                if Path(self.path).is_dir():
                    raise ValueError(f"path must be a file, got the folder {self.path!r}")
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except (sqlite3.DatabaseError, OSError) as err:
            raise ValueError(f"path {self.path!r} cannot hold a response cache: {err}") from None

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r}, entries={len(self)})"

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def get(self, key: str) -> Any:
        """The stored response (JSON data) under ``key``, or ``None``."""
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, backend_id: str, kind: str, request: Any, response: Any) -> None:
        """Store one response, committed at once (an existing key is overwritten)."""
        row = (key, backend_id, kind, json.dumps(request, sort_keys=True), json.dumps(response), time.time())
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CachedBackend(Backend):
    """Wraps any backend: answers found in ``cache`` are served from it, only the others reach the backend.

    A request repeated within one call (greedy, or the same seed and occurrence) is computed once.
    :attr:`misses` counts the requests sent to the backend, :attr:`hits` the others; :attr:`usage` counts
    what was served (cached or not), the wrapped backend's own ``usage`` what it computed.
    """

    def __init__(self, backend: Backend, cache: ResponseCache | str | os.PathLike[str]) -> None:
        super().__init__()
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be an icml_agents Backend, got {type(backend).__name__}")
        if not isinstance(cache, (ResponseCache, str, os.PathLike)):
            raise TypeError(f"cache must be a ResponseCache or a file path, got {type(cache).__name__}")
        self.backend = backend
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.hits = 0
        self.misses = 0

    @property
    def cache_id(self) -> str:
        return self.backend.cache_id

    def __repr__(self) -> str:
        return f"CachedBackend({self.backend!r}, {self.cache!r}, hits={self.hits}, misses={self.misses})"

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def key(self, request: Request) -> str:
        return request_key(self.cache_id, request.kind, request.to_json())

    def run(self, requests: Sequence[Request]) -> list[Completion]:
        backend_id = self.cache_id  # read once per call: a derived id checks the backend's weights
        out: list[Completion | None] = [None] * len(requests)
        todo: dict[str, list[int]] = {}  # a request missing from the cache -> where it occurs in this call
        for i, request in enumerate(requests):
            if request.temperature > 0 and request.seed is None:  # not meant to repeat: never cached
                todo[f"unseeded:{i}"] = [i]
                continue
            key = request_key(backend_id, request.kind, request.to_json())
            found = self.cache.get(key)
            if found is None:
                todo.setdefault(key, []).append(i)
            else:
                out[i] = Completion.from_json(found)
        self.hits += len(requests) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = self.backend.serve([requests[where[0]] for where in todo.values()])
            for (key, where), completion in zip(todo.items(), fresh, strict=True):
                request = requests[where[0]]
                if not key.startswith("unseeded:"):
                    self.cache.put(key, backend_id, request.kind, request.to_json(), completion.to_json())
                for i in where:
                    out[i] = completion
        return [c for c in out if c is not None]

    def _logprobs(self, prompts: list[str], continuations: list[str]) -> list[TokenLogprobs]:
        backend_id = self.cache_id  # read once per call
        keys = [
            request_key(backend_id, "logprobs", {"prompt": p, "continuation": c})
            for p, c in zip(prompts, continuations, strict=True)
        ]
        out: list[TokenLogprobs | None] = []
        for key in keys:
            found = self.cache.get(key)
            out.append(None if found is None else TokenLogprobs.from_json(found))
        missing = [i for i, v in enumerate(out) if v is None]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = self.backend.logprobs([prompts[i] for i in missing], [continuations[i] for i in missing])
            for i, value in zip(missing, fresh, strict=True):
                request = {"prompt": prompts[i], "continuation": continuations[i]}
                self.cache.put(keys[i], backend_id, "logprobs", request, value.to_json())
                out[i] = value
        return [v for v in out if v is not None]
