"""Tidy tables of patching scans, the metrics they measure, and their heatmaps."""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from icml_interp.validation import check_int, check_number

Metric = Callable[[torch.Tensor], torch.Tensor]


def _metric_ids(value, name: str) -> torch.Tensor:
    """Token ids for a metric: one int, or a sequence / 1-d tensor of ints, all >= 0; as a long tensor."""
    try:
        ids = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{name} must be a token id (an int) or a sequence of them, one per prompt, got {value!r}"
        ) from None
    if ids.ndim > 1 or ids.numel() == 0:
        raise ValueError(
            f"{name} must be one token id or a non-empty 1-d sequence of them (one per prompt), "
            f"got shape {tuple(ids.shape)}"
        )
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{name} must be integer token ids, got {value!r} ({ids.dtype})")
    if int(ids.min()) < 0:
        raise ValueError(f"{name} must be token ids >= 0, got {ids.tolist()}")
    return ids.long()


class TokenMetric:
    """A metric over the logits at one ``position`` that reads the token ids ``ids`` (argument name -> ids).

    Called on logits ``(n_prompts, seq, vocab)`` it first runs :meth:`check` with their shape, so a token id
    outside the vocabulary or a position outside the prompt raises ``ValueError`` naming the argument (not an
    ``IndexError`` from deep inside the scan); the patching scans call :meth:`check` before any forward pass.
    """

    def __init__(self, fn, ids: dict[str, torch.Tensor], position: int, description: str):
        self.fn, self.ids, self.position, self.description = fn, ids, position, description

    def check(self, n_prompts: int, seq: int, vocab: int) -> None:
        """Every id in ``[0, vocab)`` with one id or one per prompt, and ``position`` in ``[-seq, seq)``."""
        for name, ids in self.ids.items():
            if int(ids.max()) >= vocab:
                raise ValueError(
                    f"{name} must be token ids in [0, {vocab}) (the model's vocabulary), got {ids.tolist()}"
                )
            if ids.ndim == 1 and ids.shape[0] not in (1, n_prompts):
                raise ValueError(
                    f"{name} must hold one token id or one per prompt ({n_prompts} prompts), "
                    f"got {ids.shape[0]} ids"
                )
        if not -seq <= self.position < seq:
            raise ValueError(
                f"position must be in [-{seq}, {seq}) (the prompts have {seq} tokens), got {self.position}"
            )

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor) or logits.ndim != 3:
            raise ValueError(
                f"logits must be a (n_prompts, seq, vocab) tensor, got {getattr(logits, 'shape', logits)!r}"
            )
        self.check(*logits.shape)
        return self.fn(logits)

    def __repr__(self) -> str:
        return self.description


def check_metric(metric, n_prompts: int, seq: int, vocab: int) -> None:
    """``metric`` is callable; a :class:`TokenMetric` (:func:`logit_diff`, :func:`answer_logprob`) also has
    its token ids in ``[0, vocab)`` and its position inside the ``seq`` tokens (``ValueError`` naming the
    argument). Run by the patching scans before any forward pass."""
    if not callable(metric):
        raise TypeError(f"metric must be callable(logits) -> scalar tensor, got {type(metric).__name__}")
    if isinstance(metric, TokenMetric):
        metric.check(n_prompts, seq, vocab)


def metric_value(metric, logits: torch.Tensor) -> float:
    """``metric(logits)`` as a float, checked: a scalar (tensor or number) and finite on finite logits."""
    value = metric(logits)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex():
            raise ValueError(
                f"metric must return a real scalar, got a tensor of shape {tuple(value.shape)} ({value.dtype})"
            )
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"metric must return a scalar tensor or a number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"metric returned {out} on finite logits: it must give a finite scalar")
    return out


def check_components(components, allowed: Iterable[str]) -> list[str]:
    """``components``: a non-empty list of short hook names, each one of ``allowed``."""
    allowed = tuple(allowed)
    if isinstance(components, (str, bytes)) or not isinstance(components, Iterable):
        raise TypeError(f"components must be a list of short hook names {allowed}, got {components!r}")
    components = list(components)
    if not components:
        raise ValueError(f"components must name at least one of {allowed}")
    for c in components:
        if not isinstance(c, str) or c not in allowed:
            close = difflib.get_close_matches(c, allowed, n=3, cutoff=0.5) if isinstance(c, str) else []
            raise ValueError(
                f"components must be short hook names among {allowed}, got {c!r}; close matches: {close}"
            )
    return components


def check_layers(layers, n_layers: int) -> list[int]:
    """``layers`` (None: all) as a non-empty list of indices in ``[0, n_layers)`` (negative ones count back)."""
    from icml_interp.validation import check_indices

    if layers is None:
        return list(range(n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, (int, Iterable)):
        raise TypeError(f"layers must be None, an int or a list of ints, got {layers!r}")
    out = check_indices(layers, n_layers, "layers")
    if not out:
        raise ValueError("layers must name at least one layer")
    return out


def logits_width(hooked) -> int:
    """The number of logits the model's unembedding produces (its vocabulary as the metric sees it)."""
    width = getattr(hooked.unembed, "out_features", None)
    return width if isinstance(width, int) else hooked.d_vocab


def _at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """A half-precision model's logits in float32 for a metric (a bfloat16 difference keeps 8 bits)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def logit_diff(correct, wrong, position: int = -1) -> Metric:
    """Metric: mean over prompts of ``logit[correct] - logit[wrong]`` at ``position``.

    ``correct`` and ``wrong`` are token ids: one int for every prompt or a sequence with one per prompt.
    The returned callable maps logits ``(n_prompts, seq, vocab)`` to a scalar tensor. Checked: the ids are
    non-negative ints (here) and below the vocabulary size, one or one per prompt, and ``position`` lies
    inside the prompts (when the logits arrive, and by the patching scans before they run).
    """
    correct_t, wrong_t = _metric_ids(correct, "correct"), _metric_ids(wrong, "wrong")
    check_int(position, "position")

    def metric(logits: torch.Tensor) -> torch.Tensor:
        last = _at_least_float32(logits[:, position])  # (n, vocab)
        c, w = correct_t.expand(last.shape[0]), wrong_t.expand(last.shape[0])
        rows = torch.arange(last.shape[0])
        return (last[rows, c] - last[rows, w]).mean()

    description = f"logit_diff(correct={correct!r}, wrong={wrong!r}, position={position})"
    return TokenMetric(metric, {"correct": correct_t, "wrong": wrong_t}, position, description)


def logit_margin(target, position: int = -1) -> Metric:
    """Metric: mean over prompts of ``logit[target] - max(logit[t] for t != target)`` at ``position``.

    Positive where ``target`` is the argmax, by how much; a continuous stand-in for "is the answer recalled"
    that moves with an intervention even where the argmax does not flip. ``target`` is one id or one per
    prompt; checked as in :func:`logit_diff`.
    """
    target_t = _metric_ids(target, "target")
    check_int(position, "position")

    def metric(logits: torch.Tensor) -> torch.Tensor:
        last = _at_least_float32(logits[:, position])  # (n, vocab)
        if last.shape[-1] < 2:
            raise ValueError(
                f"logits must have a vocabulary of >= 2 tokens for a margin, got {last.shape[-1]}"
            )
        rows, t = torch.arange(last.shape[0]), target_t.expand(last.shape[0])
        other = last.clone()
        other[rows, t] = -torch.inf
        return (last[rows, t] - other.max(-1).values).mean()

    description = f"logit_margin(target={target!r}, position={position})"
    return TokenMetric(metric, {"target": target_t}, position, description)


def answer_logprob(target, position: int = -1) -> Metric:
    """Metric: mean over prompts of ``log p(target)`` at ``position`` (one id, or one per prompt). Checked as
    in :func:`logit_diff`."""
    target_t = _metric_ids(target, "target")
    check_int(position, "position")

    def metric(logits: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits[:, position].float(), dim=-1)
        return logp[torch.arange(logp.shape[0]), target_t.expand(logp.shape[0])].mean()

    description = f"answer_logprob(target={target!r}, position={position})"
    return TokenMetric(metric, {"target": target_t}, position, description)


def normalized_effect(patched: float, clean: float, corrupt: float) -> float:
    """``(patched - clean) / (corrupt - clean)``: 0 = no change from clean, 1 = the full corrupt effect.
    All three are finite numbers; a ratio that overflows (huge values) is returned with a warning."""
    patched = check_number(patched, "patched")
    clean = check_number(clean, "clean")
    corrupt = check_number(corrupt, "corrupt")
    if corrupt == clean:
        raise ValueError(
            f"the clean and corrupt runs give the same metric ({clean:g}): the normalized effect "
            "(patched - clean) / (corrupt - clean) is undefined; pick inputs or a metric that differ"
        )
    effect = (patched - clean) / (corrupt - clean)
    if not math.isfinite(effect):
        warnings.warn(
            f"normalized_effect({patched:g}, {clean:g}, {corrupt:g}) overflows: the differences exceed the "
            f"float range, the effect is {effect}",
            RuntimeWarning,
            stacklevel=2,
        )
    return effect


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
        from matplotlib.figure import Figure  # not pyplot: the caller's backend and figures are left alone

        table, idx, cols = self.grid(component, index, columns, value)
        fig = Figure(figsize=(max(4, 0.5 * len(cols) + 2), max(3, 0.3 * len(idx) + 1.5)))
        ax = fig.subplots()
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
