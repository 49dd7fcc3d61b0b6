"""Per-step decisions of a cache run (matplotlib, imported lazily: ``pip install icml-generative[plot]``)."""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

from icml_generative.cache.hooks import CacheStats, StepRecord
from icml_generative.validation import check_positive


def _figure_class():
    """matplotlib's ``Figure``: built without pyplot, so the caller's backend and open figures stay as they were."""
    try:
        import matplotlib.figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plotting needs matplotlib: pip install 'icml-generative[plot]' (or pip install matplotlib)"
        ) from exc
    return matplotlib.figure.Figure


def _records(stats: Any) -> list[StepRecord]:
    """The step records of a ``CacheStats`` or of its ``as_dict()`` (e.g. read back from JSON)."""
    if isinstance(stats, CacheStats):
        records = stats.records
    elif isinstance(stats, dict) and isinstance(stats.get("records"), list):
        try:
            records = [StepRecord(**r) for r in stats["records"]]
        except TypeError as exc:
            raise ValueError(
                f"stats['records'] must hold StepRecord fields (step, computed, forced, predicted, measured, "
                f"ratio): {exc}"
            ) from exc
    else:
        raise TypeError(
            "stats must be a CacheStats (get_cache_stats(model)) or its as_dict(), "
            f"got {type(stats).__name__}"
        )
    if not records:
        raise ValueError("stats has no step records: run the model with the cache applied first")
    for r in records:
        values = (r.predicted, r.measured, r.ratio)
        if (
            not isinstance(r.step, int)
            or isinstance(r.step, bool)
            or r.step < 0
            or not isinstance(r.computed, bool)
            or not isinstance(r.forced, bool)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            or any(math.isinf(v) for v in values[:2])
        ):
            raise ValueError(
                "stats' records must have an integer step >= 0, boolean computed and forced, and predicted / "
                f"measured changes that are finite or NaN, got {r}"
            )
    return records


def plot_cache_stats(
    stats: CacheStats | dict,
    path: str | os.PathLike | None = None,
    *,
    threshold: float | None = None,
    title: str = "Cache decisions per step",
):
    """Plot a cache run step by step: the predicted and the measured relative output change, and which steps
    were computed (forced ones apart) and which skipped.

    Args:
        stats: :func:`~icml_generative.cache.get_cache_stats` of a NaviCache, EasyCache or TeaCache run, or
            its ``as_dict()``.
        path: where to write the PNG (``None``: do not save).
        threshold: the config's threshold, drawn as a horizontal line (``None``: not drawn).
        title: the figure's title.

    Returns:
        the matplotlib ``Figure``, built without pyplot: the caller's backend and open pyplot figures are left
        as they were (no ``plt.close`` is needed). Predicted changes are the accumulated estimate compared with the
        threshold (none on forced steps); measured ones are known on computed steps (the change since the
        previous computed step).
    """
    records = _records(stats)
    if threshold is not None:
        threshold = check_positive(threshold, "threshold")
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or os.PathLike) or None, got {type(path).__name__}")
    figure_class = _figure_class()
    steps = [r.step for r in records]
    fig = figure_class(figsize=(8, 4.8), layout="constrained")
    ax, rug = fig.subplots(2, 1, sharex=True, height_ratios=[4, 1])
    for r in records:
        if not r.computed:  # skipped steps shaded
            ax.axvspan(r.step - 0.5, r.step + 0.5, color="0.92", lw=0)
    ax.plot(steps, [r.predicted for r in records], marker="o", ms=4, lw=1.4, label="predicted change")
    measured = [(r.step, r.measured) for r in records if r.computed and math.isfinite(r.measured)]
    if measured:
        ax.plot(
            *zip(*measured, strict=True), ls="", marker="s", ms=5, label="measured change (computed steps)"
        )
    if threshold is not None:
        ax.axhline(threshold, color="0.4", ls="--", lw=1, label=f"threshold {threshold:g}")
    ax.set_ylabel("relative output change")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    # the decisions: one row each for forced computes, decided computes and skips
    rows = (
        ("computed (forced)", lambda r: r.computed and r.forced, "C3", "s"),
        ("computed", lambda r: r.computed and not r.forced, "C2", "s"),
        ("skipped", lambda r: not r.computed, "0.5", "x"),
    )
    for y, (_, keep, color, marker) in enumerate(rows):
        decided = [r.step for r in records if keep(r)]
        rug.plot(decided, [y] * len(decided), ls="", marker=marker, ms=5, color=color)
    rug.set_yticks(range(len(rows)), [f"{label} ({sum(map(keep, records))})" for label, keep, *_ in rows])
    rug.set_ylim(-0.6, len(rows) - 0.4)
    rug.tick_params(axis="y", labelsize=8)
    rug.set_xlabel("denoising step")
    rug.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
    if path is not None:
        _save(fig, os.fspath(path))
    return fig


def _save(fig, path: str) -> None:
    """Write the PNG through a temporary file beside ``path``: a failed save leaves no half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(suffix=".png", prefix=".plot-", dir=folder)
    os.close(handle)
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
