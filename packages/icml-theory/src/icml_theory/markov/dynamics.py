"""Reading stages off training curves: plateaus of a loss curve, competitive and cooperative phases of the
heads' attention, and the matching of plateaus to the Bayes losses of the partial predictors.

These are our own definitions (the paper's detection rules were not available): a plateau is a run of at
least ``min_length`` logged points where the smoothed loss drops by at most ``tol`` across ``window``
points; a head *points at* a lag when its attention mass there is at least ``threshold`` and larger than on
every other lag.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icml_theory.validation import as_array, check_int, check_real


@dataclass(frozen=True)
class Plateau:
    """A flat stretch of a loss curve, from step ``start`` to step ``end``, at ``level`` (median loss)."""

    start: float
    end: float
    level: float


def _curve(steps, loss) -> tuple[np.ndarray, np.ndarray]:
    x = as_array(steps, "steps", "(-inf, inf)", "step counts").ravel()
    y = as_array(loss, "loss", "(-inf, inf)", "finite losses").ravel()
    if x.size != y.size or x.size < 2:
        raise ValueError(f"steps and loss must have equal lengths >= 2, got {x.size} and {y.size}")
    if np.any(np.diff(x) <= 0):
        raise ValueError("steps must be strictly increasing")
    return x, y


def _smooth(y: np.ndarray, width: int) -> np.ndarray:
    """Centred running median over ``width`` points (shrinking at the ends)."""
    half = width // 2
    return np.array([np.median(y[max(0, i - half) : i + half + 1]) for i in range(y.size)])


def find_plateaus(steps, loss, tol: float = 0.01, window: int = 10, min_length: int = 10, smooth: int = 5):
    """The plateaus of a loss curve, in time order (see the module docstring for the rule). Consecutive
    plateaus whose levels differ by less than ``tol`` merge into one."""
    x, y = _curve(steps, loss)
    tol = check_real(tol, "tol", "(0, inf)")
    window = check_int(window, "window", minimum=1)
    min_length = check_int(min_length, "min_length", minimum=2)
    s = _smooth(y, check_int(smooth, "smooth", minimum=1))
    n, half = y.size, window // 2
    lo = np.clip(np.arange(n) - half, 0, n - 1)
    hi = np.clip(np.arange(n) + (window - half), 0, n - 1)
    flat = np.abs(s[lo] - s[hi]) <= tol
    runs, i = [], 0
    while i < n:
        if not flat[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and flat[j + 1]:
            j += 1
        if j - i + 1 >= min_length:
            runs.append([i, j])
        i = j + 1
    merged: list[list[int]] = []
    for run in runs:
        if (
            merged
            and abs(np.median(y[run[0] : run[1] + 1]) - np.median(y[merged[-1][0] : merged[-1][1] + 1])) < tol
        ):
            merged[-1][1] = run[1]
        else:
            merged.append(run)
    return [Plateau(float(x[a]), float(x[b]), float(np.median(y[a : b + 1]))) for a, b in merged]


def match_plateaus(
    plateaus, levels: dict, tol: float = 0.02
) -> list[tuple[object, Plateau] | tuple[None, Plateau]]:
    """Each plateau with the key of the nearest reference level within ``tol`` (None when none is)."""
    tol = check_real(tol, "tol", "(0, inf)")
    if not levels:
        raise ValueError("levels must map at least one stage to its loss")
    keys = list(levels)
    ref = np.array([float(levels[k]) for k in keys])
    out: list = []
    for p in plateaus:
        i = int(np.argmin(np.abs(ref - p.level)))
        out.append((keys[i] if abs(ref[i] - p.level) <= tol else None, p))
    return out


def crossing_times(steps, loss, levels) -> np.ndarray:
    """For consecutive reference levels ``L_0 > L_1 > ...``: the first step at which the loss falls below
    the midpoint of ``L_{k-1}`` and ``L_k`` (NaN when it never does); one time per level after the first."""
    x, y = _curve(steps, loss)
    lv = as_array(levels, "levels", "(-inf, inf)", "losses").ravel()
    if lv.size < 2 or np.any(np.diff(lv) >= 0):
        raise ValueError(f"levels must hold at least two strictly decreasing losses, got {lv.tolist()}")
    out = np.full(lv.size - 1, np.nan)
    for k in range(1, lv.size):
        below = np.nonzero(y <= (lv[k - 1] + lv[k]) / 2)[0]
        if below.size:
            out[k - 1] = x[below[0]]
    return out


@dataclass(frozen=True)
class PhaseTrace:
    """Per logged point: each head's lag (``-1``: points at none) and the phase label."""

    head_lag: np.ndarray  # (n_logs, heads) index into the lags given, -1 when a head points at none
    labels: tuple[str, ...]  # "unfocused", "single", "competitive" or "cooperative"

    def first(self, label: str) -> int | None:
        """The index of the first logged point with ``label`` (None when it never occurs)."""
        hits = [i for i, lab in enumerate(self.labels) if lab == label]
        return hits[0] if hits else None


def detect_phases(mass, threshold: float = 0.3) -> PhaseTrace:
    """Phases from attention masses ``(n_logs, heads, n_lags)``: *unfocused* when no head points at a lag,
    *single* when one head does, *competitive* when two or more do and all at the same lag, *cooperative*
    when the heads that point cover two or more lags."""
    m = as_array(mass, "mass", "[0, 1]", "attention masses")
    if m.ndim != 3 or m.shape[2] < 1 or m.shape[1] < 1:
        raise ValueError(f"mass must have shape (n_logs, heads, n_lags), got {m.shape}")
    threshold = check_real(threshold, "threshold", "(0, 1]")
    best = m.argmax(axis=2)
    top = np.take_along_axis(m, best[..., None], axis=2)[..., 0]
    unique_top = (m >= top[..., None]).sum(axis=2) == 1
    head_lag = np.where((top >= threshold) & unique_top, best, -1)
    labels = []
    for row in head_lag:
        pointing = row[row >= 0]
        if pointing.size == 0:
            labels.append("unfocused")
        elif len(set(pointing.tolist())) >= 2:
            labels.append("cooperative")
        elif pointing.size >= 2:
            labels.append("competitive")
        else:
            labels.append("single")
    return PhaseTrace(head_lag, tuple(labels))
