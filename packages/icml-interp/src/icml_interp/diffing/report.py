"""A diff report: one tidy table (a row per latent) and a PNG with the frequency scatter and the top latents."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from icml_interp.validation import check_int, check_type


def diff_report(
    table: list[dict],
    *,
    attribution: torch.Tensor | None = None,
    alignment=None,
    labels: dict[int, str] | None = None,
) -> list[dict]:
    """Join :func:`~icml_interp.diffing.cohort_latent_table` rows with an attribution vector ``(d_sae,)``, the
    matched partner and score of an :class:`~icml_interp.diffing.Alignment` (this SAE as its first side), and
    optional human labels; rows sorted by ``freq_diff`` (largest first)."""
    if (
        not isinstance(table, list)
        or not table
        or not all(isinstance(r, dict) and "latent" in r for r in table)
    ):
        raise ValueError("table must be a non-empty list of rows from cohort_latent_table")
    if not all(isinstance(r["latent"], int) and "freq_diff" in r for r in table):
        raise ValueError("table must be a non-empty list of rows from cohort_latent_table")
    d = len(table)
    if attribution is not None:
        try:
            attribution = torch.as_tensor(attribution).flatten()
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"attribution must be a (d_sae,) tensor of numbers, got {attribution!r}"
            ) from None
        if attribution.numel() != d:
            raise ValueError(f"attribution must have one value per latent ({d}), got {attribution.numel()}")
        if attribution.is_complex() or attribution.dtype == torch.bool:
            raise TypeError(f"attribution must be real numbers, got {attribution.dtype}")
        if not bool(torch.isfinite(attribution.double()).all()):
            raise ValueError("attribution must hold finite values, got NaN or inf")
        if max(r["latent"] for r in table) >= d or min(r["latent"] for r in table) < 0:
            raise ValueError(f"table's latents must lie in [0, {d}) to index attribution")
    if alignment is not None:
        from icml_interp.diffing.align import Alignment

        check_type(alignment, "alignment", Alignment, "an Alignment (or None)")
    if labels is not None and not isinstance(labels, dict):
        raise TypeError(f"labels must be None or a dict latent -> label, got {type(labels).__name__}")
    rows = []
    unmatched = 0
    for r in table:
        j = r["latent"]
        row = dict(r)
        if attribution is not None:
            row["attribution"] = float(attribution[j])
        if alignment is not None:
            hit = (alignment.pairs[:, 0] == j).nonzero()[0]
            row["partner"] = int(alignment.pairs[hit[0], 1]) if hit.size else -1
            row[f"partner_{alignment.kind}"] = float(alignment.score[hit[0]]) if hit.size else float("nan")
            unmatched += 0 if hit.size else 1
        if labels and j in labels:
            row["label"] = labels[j]
        rows.append(row)
    if unmatched:
        warnings.warn(
            f"{unmatched} latents have no partner in alignment: their partner is -1 and their "
            f"partner_{alignment.kind} NaN",
            RuntimeWarning,
            stacklevel=2,
        )
    return sorted(rows, key=lambda r: -r["freq_diff"])


def plot_diff_report(
    rows: list[dict], path: str | Path, *, cohorts: tuple[str, str] = ("A", "B"), top: int = 12
) -> Path:
    """Write a two-panel PNG: firing frequency on ``cohorts[0]`` vs ``cohorts[1]`` per latent (log–log), and
    the ``top`` latents by frequency difference (bars per cohort). Needs matplotlib (imported here)."""
    check_type(path, "path", (str, Path), "a str or Path")
    if not str(path).strip():
        raise ValueError("path must name a PNG file, got ''")
    if not (
        isinstance(cohorts, (tuple, list)) and len(cohorts) == 2 and all(isinstance(c, str) for c in cohorts)
    ):
        raise TypeError(f"cohorts must be two cohort names (strings), got {cohorts!r}")
    check_int(top, "top", minimum=1)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"rows must be a list of row dicts from diff_report, got {type(rows).__name__}")
    a, b = cohorts
    if not rows or f"freq_{a}" not in rows[0] or f"freq_{b}" not in rows[0]:
        raise ValueError(
            f"rows must come from diff_report with freq_{a} and freq_{b} columns (cohorts={tuple(cohorts)!r})"
        )
    for r in rows:
        for key in (f"freq_{a}", f"freq_{b}"):
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"rows must hold frequencies in [0, 1] under {key!r}, got {value!r}")
    from matplotlib.figure import Figure  # not pyplot: the caller's backend and figures are left alone

    path = Path(path)
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    fa = [max(r[f"freq_{a}"], 1e-5) for r in rows]
    fb = [max(r[f"freq_{b}"], 1e-5) for r in rows]
    color = [r.get("attribution", 0.0) for r in rows]
    sc = ax1.scatter(fa, fb, c=color, cmap="coolwarm", s=14)
    ax1.plot([1e-5, 1], [1e-5, 1], "k--", lw=0.5)
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel=f"firing frequency, cohort {a}",
        ylabel=f"firing frequency, cohort {b}",
        title="latents (colour: attribution)",
    )
    fig.colorbar(sc, ax=ax1)
    best = rows[:top]
    x = range(len(best))
    ax2.bar([i - 0.2 for i in x], [r[f"freq_{a}"] for r in best], 0.4, label=a)
    ax2.bar([i + 0.2 for i in x], [r[f"freq_{b}"] for r in best], 0.4, label=b)
    ax2.set_xticks(list(x), [r.get("label", str(r["latent"])) for r in best], rotation=60, fontsize=7)
    ax2.set(ylabel="firing frequency", title=f"top {len(best)} differential latents")
    ax2.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
