"""Values at a matched cost along a threshold sweep, shared by the frontier (forwards) and the trace study (skips)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable


def interp_at(points: Iterable[tuple[float, float]], target: float) -> float:
    """Linear interpolation of a sweep's ``(cost, value)`` points at ``target`` cost; NaN if no two points bracket
    it. Points with the same cost (two thresholds that skipped the same steps) are averaged first, so no method
    is judged by an arbitrary one of them; non-finite values are left out."""
    groups: dict[float, list[float]] = {}
    for cost, value in points:
        if math.isfinite(value):
            groups.setdefault(cost, []).append(value)
    pts = sorted((cost, sum(vs) / len(vs)) for cost, vs in groups.items())
    for cost, value in pts:
        if cost == target:
            return value
    for (c0, v0), (c1, v1) in itertools.pairwise(pts):
        if c0 < target < c1:
            return v0 + (v1 - v0) * (target - c0) / (c1 - c0)
    return math.nan
