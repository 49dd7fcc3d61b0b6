"""Tidy tables of patching scans, the metrics they measure, and their heatmaps."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

Metric = Callable[[torch.Tensor], torch.Tensor]


def logit_diff(correct, wrong, position: int = -1) -> Metric:
    """Metric: mean over prompts of ``logit[correct] - logit[wrong]`` at ``position``.

    ``correct`` and ``wrong`` are token ids: one int for every prompt or a sequence with one per prompt.
    The returned callable maps logits ``(n_prompts, seq, vocab)`` to a scalar tensor.
    """
    correct_t, wrong_t = torch.as_tensor(correct, dtype=torch.long), torch.as_tensor(wrong, dtype=torch.long)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        last = logits[:, position]  # (n, vocab)
        c, w = correct_t.expand(last.shape[0]), wrong_t.expand(last.shape[0])
        rows = torch.arange(last.shape[0])
        return (last[rows, c] - last[rows, w]).mean()

    return metric


def answer_logprob(target, position: int = -1) -> Metric:
    """Metric: mean over prompts of ``log p(target)`` at ``position`` (one id, or one per prompt)."""
    target_t = torch.as_tensor(target, dtype=torch.long)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits[:, position].float(), dim=-1)
        return logp[torch.arange(logp.shape[0]), target_t.expand(logp.shape[0])].mean()

    return metric


def normalized_effect(patched: float, clean: float, corrupt: float) -> float:
    """``(patched - clean) / (corrupt - clean)``: 0 = no change from clean, 1 = the full corrupt effect."""
    if corrupt == clean:
        raise ValueError(
            f"the clean and corrupt runs give the same metric ({clean:g}): the normalized effect "
            "(patched - clean) / (corrupt - clean) is undefined; pick inputs or a metric that differ"
        )
    return (patched - clean) / (corrupt - clean)


@dataclass
class PatchingResult:
    """One scan: ``rows`` (one dict per patched unit: ``component``, ``layer``, ``position``, ``head``,
    ``metric``, ``effect``; ``None`` where a unit spans all positions or heads), and the reference metrics.

    ``clean`` is the metric of the unpatched run, ``corrupt`` the metric of the run whose activations are
    patched in; ``effect`` is ``(metric - clean) / (corrupt - clean)``.
    """

    method: str
    clean: float
    corrupt: float
    rows: list[dict] = field(default_factory=list)

    def add(self, value: float, **unit) -> None:
        row = {"component": None, "layer": None, "position": None, "head": None, **unit}
        row["metric"] = float(value)
        row["effect"] = normalized_effect(float(value), self.clean, self.corrupt)
        self.rows.append(row)

    def to_frame(self):
        """The rows as a pandas DataFrame (pandas is imported lazily)."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def top(self, n: int = 5, key: str = "effect") -> list[dict]:
        """The ``n`` rows with the largest ``key``."""
        return sorted(self.rows, key=lambda r: -r[key] if not math.isnan(r[key]) else math.inf)[:n]

    def grid(
        self,
        component: str | None = None,
        index: str = "layer",
        columns: str = "position",
        value: str = "effect",
    ) -> tuple[np.ndarray, list, list]:
        """``(values, index labels, column labels)``: a 2-D table of ``value`` (NaN where no row)."""
        rows = [r for r in self.rows if component is None or r["component"] == component]
        if not rows:
            raise ValueError(
                f"no rows for component {component!r}; have {sorted({str(r['component']) for r in self.rows})}"
            )
        idx = sorted({r[index] for r in rows}, key=str)
        idx = sorted(idx, key=lambda v: (v is None, v if isinstance(v, int) else str(v)))
        cols = sorted(
            {r[columns] for r in rows}, key=lambda v: (v is None, v if isinstance(v, int) else str(v))
        )
        table = np.full((len(idx), len(cols)), np.nan)
        for r in rows:
            table[idx.index(r[index]), cols.index(r[columns])] = r[value]
        return table, idx, cols

    def heatmap(
        self,
        component: str | None = None,
        index: str = "layer",
        columns: str = "position",
        value: str = "effect",
        path=None,
        title: str | None = None,
        column_labels=None,
    ):
        """A matplotlib heatmap of :meth:`grid` (diverging colours centred at 0); saved as PNG if ``path``."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        table, idx, cols = self.grid(component, index, columns, value)
        fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(cols) + 2), max(3, 0.3 * len(idx) + 1.5)))
        bound = float(np.nanmax(np.abs(table))) if np.isfinite(table).any() else 1.0
        image = ax.imshow(table, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
        ax.set_xticks(
            range(len(cols)),
            column_labels if column_labels is not None else [str(c) for c in cols],
            rotation=90 if column_labels is not None else 0,
        )
        ax.set_yticks(range(len(idx)), [str(i) for i in idx])
        ax.set_xlabel(columns)
        ax.set_ylabel(index)
        ax.set_title(title or f"{self.method}: {component or 'all'} ({value})")
        fig.colorbar(image, ax=ax, label=value)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
        return fig
