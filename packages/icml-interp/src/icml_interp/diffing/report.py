"""A diff report: one tidy table (a row per latent) and a PNG with the frequency scatter and the top latents."""

from __future__ import annotations

from pathlib import Path

import torch


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
    d = len(table)
    if attribution is not None:
        attribution = torch.as_tensor(attribution).flatten()
        if attribution.numel() != d:
            raise ValueError(f"attribution must have one value per latent ({d}), got {attribution.numel()}")
    rows = []
    for r in table:
        j = r["latent"]
        row = dict(r)
        if attribution is not None:
            row["attribution"] = float(attribution[j])
        if alignment is not None:
            hit = (alignment.pairs[:, 0] == j).nonzero()[0]
            row["partner"] = int(alignment.pairs[hit[0], 1]) if hit.size else -1
            row[f"partner_{alignment.kind}"] = float(alignment.score[hit[0]]) if hit.size else float("nan")
        if labels and j in labels:
            row["label"] = labels[j]
        rows.append(row)
    return sorted(rows, key=lambda r: -r["freq_diff"])


def plot_diff_report(
    rows: list[dict], path: str | Path, *, cohorts: tuple[str, str] = ("A", "B"), top: int = 12
) -> Path:
    """Write a two-panel PNG: firing frequency on ``cohorts[0]`` vs ``cohorts[1]`` per latent (log–log), and
    the ``top`` latents by frequency difference (bars per cohort). Needs matplotlib (imported here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = cohorts
    if not rows or f"freq_{a}" not in rows[0] or f"freq_{b}" not in rows[0]:
        raise ValueError(f"rows must come from diff_report with freq_{a} and freq_{b} columns")
    path = Path(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
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
    plt.close(fig)
    return path
