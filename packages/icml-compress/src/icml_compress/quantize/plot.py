"""Per-layer quantization error plot (matplotlib, imported lazily: ``pip install icml-compress[plot]``).

The error plotted is the one :func:`~icml_compress.quantize.quantize_model` records per trellis layer in
``model.icml_quantization["layers"]``: the Hessian proxy ``tr(dW H dW^T) / tr(W H W^T)`` (the relative
layer-output error on the calibration inputs), and after channel compensation when it ran.
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from icml_compress.quantize.model import check_path

SERIES = {"proxy": "proxy error", "proxy_compensated": "after compensation"}


def _figure_class():
    """matplotlib's ``Figure``: built without pyplot, so the user's backend and open figures stay as they
    are (``savefig`` picks the canvas from the file type)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plotting needs matplotlib: pip install 'icml-compress[plot]' (or pip install matplotlib)"
        ) from exc
    return Figure


def layer_errors(model_or_stats: Any) -> dict[str, list]:
    """The per-layer errors of a quantized model, in layer order: ``{"layers": [name, ...], "proxy":
    [...]}`` and ``"proxy_compensated"`` when every layer has it.

    ``model_or_stats``: a model returned by ``quantize_model``/``load_quantized``/``from_pretrained`` (its
    ``icml_quantization``), that record itself (a dict with ``layers``) or its ``layers`` dict
    (``{name: statistics}``). Raises TypeError for anything else, ValueError naming the layer for a missing
    or non-finite error, and ValueError for a record without any (RTN records none).
    """
    stats: Any = model_or_stats
    if isinstance(stats, nn.Module):
        stats = getattr(stats, "icml_quantization", None)
        if stats is None:
            raise ValueError(
                "model_or_stats is a model without icml_quantization (not from quantize_model, "
                "load_quantized or from_pretrained of a save_quantized directory)"
            )
    if not isinstance(stats, dict):
        raise TypeError(
            "model_or_stats must be a quantized model, its icml_quantization dict or that dict's 'layers', "
            f"got {type(model_or_stats).__name__}"
        )
    if isinstance(stats.get("layers"), dict):
        stats = stats["layers"]
    if not stats or not all(isinstance(s, dict) for s in stats.values()):
        raise TypeError(
            "model_or_stats must map layer names to statistics dicts (icml_quantization['layers'])"
        )
    if not any("proxy" in s for s in stats.values()):
        raise ValueError(
            "model_or_stats records no per-layer proxy error (RTN layers record none; trellis and Proteus do)"
        )
    out: dict[str, list] = {"layers": list(stats)}
    for key in SERIES:
        if key == "proxy_compensated" and not all(key in s for s in stats.values()):
            continue
        values = []
        for name, s in stats.items():
            v = s.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"model_or_stats: layer {name} has {key}={v!r}, expected a finite number")
            values.append(float(v))
        out[key] = values
    return out


def plot_layer_errors(model_or_stats: Any, path=None, *, title: str = "Per-layer quantization error"):
    """Bar chart of the per-layer proxy error (and after compensation when recorded), log scale, one bar
    group per quantized layer in model order.

    Args:
        model_or_stats: a quantized model, its ``icml_quantization`` or that record's ``layers`` (see
            :func:`layer_errors`).
        path: where to write the PNG (``None``: do not save).
        title: the figure title.

    Returns:
        the matplotlib ``Figure``.
    """
    errors = layer_errors(model_or_stats)
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    if path is not None:
        path = check_path(path)
    figure = _figure_class()
    names = errors["layers"]
    keys = [k for k in SERIES if k in errors]
    width = 0.8 / len(keys)
    fig = figure(figsize=(max(6.0, 0.25 * len(names) + 2), 4.5))
    ax = fig.subplots()
    for i, key in enumerate(keys):
        x = [j + (i - (len(keys) - 1) / 2) * width for j in range(len(names))]
        ax.bar(x, errors[key], width=width, label=SERIES[key])
    ax.set_xticks(
        range(len(names)), [n.removeprefix("model.layers.") for n in names], rotation=90, fontsize=7
    )
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("tr(dW H dW^T) / tr(W H W^T)")
    ax.set_title(title)
    if len(keys) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
