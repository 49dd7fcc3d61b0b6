"""The reproduction protocol shared by every package, checked here so packages need no shared runtime type.

A reproduction is a function registered under the entry-point group ``icml.reproductions`` by a
package's unpublished experiments member::

    [project.entry-points."icml.reproductions"]
    proteus-gaussian = "icml_compress_experiments.proteus.repro:run"

with the signature ``run(budget: "quick" | "full", seed: int) -> dict``. The runner owns the protocol:
it checks ``budget`` and ``seed`` (:func:`check_run_args`) before the call, times it, checks the returned
dict (:func:`validate_result`) and writes the reports, so a reproduction only measures and decides. The
dict holds plain JSON data:

required
    ``system`` (str, the system's name), ``claim`` (str, the paper's claim in one sentence),
    ``metric`` (str, what ``ours`` and ``baseline`` measure, with its direction), ``ours`` and
    ``baseline`` (numbers, measured in this run), ``criterion`` (str, the rule fixed before looking at
    the results), ``passed`` (bool, computed from the measured numbers by that rule).
optional
    ``rows`` (list of flat dicts: the full result table), ``figures`` (list of figure specs, drawn to PNG
    by the runner), ``notes`` (str), ``cache`` (str: what this run found in or added to the user cache,
    e.g. ``"hit"`` or ``"built: trained testbed"``; the runner's table shows it, so a first run that
    trains or quantizes for longer than the quick budget says why), ``threads`` (str: why the run uses torch
    thread counts other than the default its process started with, which the runner records; the runner
    flags a run that changes them without saying why).

A figure spec is ``{"name": str, "title": str, "xlabel": str, "ylabel": str, "x": [...],
"series": {label: [y, ...]}, "kind": "line" | "bar" | "scatter", "logx": bool, "logy": bool}``
(``kind``, ``logx``, ``logy`` optional). Budgets: ``quick`` runs in at most ~2 minutes on 2 CPU cores.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

BUDGETS = ("quick", "full")
REQUIRED = {
    "system": str,
    "claim": str,
    "metric": str,
    "ours": numbers.Real,
    "baseline": numbers.Real,
    "criterion": str,
    "passed": bool,
}
FIGURE_KINDS = ("line", "bar", "scatter")


class ProtocolError(ValueError):
    """A reproduction returned something that does not follow the protocol."""


def check_run_args(budget: object, seed: object) -> None:
    """Raise ``ValueError``/``TypeError`` unless ``budget`` is one of :data:`BUDGETS` and ``seed`` is an int >= 0.

    The runners call this once before a reproduction or benchmark runs; the functions they call receive
    arguments that passed it.
    """
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")


def validate_result(result: Any) -> dict:
    """Check a reproduction's return value against the protocol; return it unchanged or raise ProtocolError."""
    if not isinstance(result, dict):
        raise ProtocolError(f"a reproduction must return a dict, got {type(result).__name__}")
    for key, kind in REQUIRED.items():
        if key not in result:
            raise ProtocolError(f"result is missing the required key {key!r}")
        value = result[key]
        if kind is numbers.Real:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ProtocolError(f"result[{key!r}] must be a number, got {value!r}")
        elif not isinstance(value, kind):
            raise ProtocolError(f"result[{key!r}] must be {kind.__name__}, got {type(value).__name__}")
    for key in ("cache", "threads", "notes"):
        if not isinstance(result.get(key, ""), str):
            raise ProtocolError(f"result[{key!r}] must be a str, got {type(result[key]).__name__}")
    rows = result.get("rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ProtocolError("result['rows'] must be a list of dicts")
    figures = result.get("figures", [])
    if not isinstance(figures, list):
        raise ProtocolError("result['figures'] must be a list of figure specs")
    for fig in figures:
        _validate_figure(fig)
    try:
        json.dumps(result, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"result must be plain JSON data: {exc}") from None
    return result


def _validate_figure(fig: Any) -> None:
    if not isinstance(fig, dict):
        raise ProtocolError(f"a figure spec must be a dict, got {type(fig).__name__}")
    for key in ("name", "title", "xlabel", "ylabel", "x", "series"):
        if key not in fig:
            raise ProtocolError(f"figure spec {fig.get('name', '?')!r} is missing {key!r}")
    if fig.get("kind", "line") not in FIGURE_KINDS:
        raise ProtocolError(f"figure kind must be one of {FIGURE_KINDS}, got {fig.get('kind')!r}")
    if not isinstance(fig["series"], dict) or not fig["series"]:
        raise ProtocolError(f"figure {fig['name']!r}: series must be a non-empty dict label -> values")
    n = len(fig["x"])
    for label, ys in fig["series"].items():
        if len(ys) != n:
            raise ProtocolError(
                f"figure {fig['name']!r}: series {label!r} has {len(ys)} values for {n} x values"
            )


def format_number(value: float) -> str:
    """Short human formatting for the results table."""
    if isinstance(value, bool):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.4g}"
