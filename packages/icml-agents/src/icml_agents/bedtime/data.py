"""A loader for BEDTime's released files, for users who have them (they cannot be downloaded here).

The released data (Hugging Face dataset ``HartvigsenGroup/BEDTime``: TRUCE-Stock, TRUCE-Synthetic,
SUSHI-Tiny, TaxoSynth) could not be read from this machine, so the format below is what we accept, not a
copy of theirs: **JSON Lines** (``.jsonl``/``.json``, one object per line) or **CSV** (``.csv``, a header
row), one series per record, with

- ``series``: the values, a list of numbers (in CSV a JSON list in one cell; ``null`` is a missing value);
- ``description`` (one string) or ``descriptions`` (a list of strings; in CSV a JSON list);
- optionally ``id`` and ``dataset``.

``fields`` renames columns when the file names them otherwise, e.g. ``{"series": "values",
"descriptions": "captions"}``. Every record is validated; an error names the file, the record and the field.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

FIELDS = ("series", "description", "descriptions", "id", "dataset")


def _field_map(fields: Mapping[str, str] | None) -> dict[str, str]:
    if fields is None:
        return {f: f for f in FIELDS}
    if not isinstance(fields, Mapping) or not all(isinstance(v, str) for v in fields.values()):
        raise TypeError(f"fields must map our field names to the file's column names, got {fields!r}")
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"fields has unknown names {sorted(unknown)}: expected some of {FIELDS}")
    return {f: fields.get(f, f) for f in FIELDS}


def _record(raw: Mapping[str, Any], names: dict[str, str], where: str, index: int) -> dict[str, Any]:
    def fail(msg: str) -> ValueError:
        return ValueError(f"{where}: record {index}: {msg}")

    values = raw.get(names["series"])
    if isinstance(values, str):
        try:
            values = json.loads(values)
        except json.JSONDecodeError:
            raise fail(f"field {names['series']!r} is not a JSON list of numbers") from None
    if not isinstance(values, list) or len(values) < 2:
        raise fail(f"field {names['series']!r} must be a list of at least 2 numbers")
    try:
        series = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise fail(f"field {names['series']!r} holds something that is not a number") from None
    if np.isinf(series).any() or np.isnan(series).all():
        raise fail(f"field {names['series']!r} must be finite numbers (null for missing), not all missing")
    texts: Any = raw.get(names["descriptions"])
    if texts is None and raw.get(names["description"]) is not None:
        texts = [raw[names["description"]]]
    if isinstance(texts, str):
        try:
            texts = json.loads(texts) if texts.startswith("[") else [texts]
        except json.JSONDecodeError:
            texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise fail(
            f"needs {names['description']!r} (a string) or {names['descriptions']!r} (a list of strings)"
        )
    return {
        "id": raw.get(names["id"], index),
        "dataset": raw.get(names["dataset"], ""),
        "series": series,
        "descriptions": texts,
    }


def load_released(path: str | Path, fields: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The records of one released file: ``[{"id", "dataset", "series" (float64, NaN missing),
    "descriptions" (list of str)}]`` (module docstring for the format)."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or a Path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path {str(p)!r} is not a file")
    names = _field_map(fields)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows = []
        with p.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as err:
                        raise ValueError(f"{p}: line {i + 1} is not JSON: {err}") from None
                    if not isinstance(obj, dict):
                        raise ValueError(f"{p}: line {i + 1} must be a JSON object")
                    rows.append(obj)
    elif suffix == ".csv":
        with p.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    else:
        raise ValueError(f"path must end in .jsonl, .json or .csv, got {p.name!r}")
    if not rows:
        raise ValueError(f"{p} holds no records")
    return [_record(r, names, str(p), i) for i, r in enumerate(rows)]
