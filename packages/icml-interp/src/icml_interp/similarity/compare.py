"""Model-pair similarity over depth-matched layers, per depth bucket, and the matrix over a set of models."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from icml_interp.similarity._checks import as_matrix, metric_value
from icml_interp.similarity.baseline import MAX_PERMUTATIONS
from icml_interp.similarity.cka import linear_cka
from icml_interp.similarity.layers import bucket_names, depth_buckets, match_layers_by_depth
from icml_interp.validation import check_choice, check_int, check_type

REDUCTIONS = ("mean", "max")


def _layer_list(reps, name: str) -> list[np.ndarray]:
    """A model's per-layer representations (a list of ``(n, d)`` arrays or tensors, or one ``(layers, n,
    d)`` array), each checked, as numpy arrays in their own dtype (metrics convert them to float64)."""
    if isinstance(reps, (np.ndarray, torch.Tensor)) and reps.ndim == 3:
        reps = list(reps)
    if isinstance(reps, (str, bytes)) or not isinstance(reps, Sequence) or len(reps) == 0:
        raise TypeError(
            f"{name} must be a non-empty list of (n_texts, d) arrays, one per layer, "
            f"got {type(reps).__name__}"
        )
    layers: list[np.ndarray] = []
    for i, layer in enumerate(reps):
        checked = as_matrix(layer, f"{name}[{i}]", "(n_texts, d)")
        if layers and checked.shape[0] != len(layers[0]):
            raise ValueError(
                f"{name}[{i}] has {checked.shape[0]} rows, {name}[0] has {len(layers[0])}: every layer must "
                "hold the same texts"
            )
        if isinstance(layer, torch.Tensor):
            layer = layer.detach().cpu()
            layer = (layer if layer.dtype in (torch.float32, torch.float64) else layer.double()).numpy()
        layers.append(layer)
    return layers


def _pair(
    a: list[np.ndarray],
    b: list[np.ndarray],
    metric: Callable,
    buckets: int,
    reduce: str,
    n_permutations: int,
    seed: int,
) -> dict[str, dict]:
    pairs = match_layers_by_depth(len(a), len(b))  # one pair per layer of the shallower model, in its order
    groups = depth_buckets(min(len(a), len(b)), buckets)
    fold = np.mean if reduce == "mean" else np.max

    def per_bucket(perm: np.ndarray | None) -> dict[str, float]:
        values = [metric_value(metric, a[i], b[j] if perm is None else b[j][perm]) for i, j in pairs]
        return {name: float(fold([values[layer] for layer in layers])) for name, layers in groups.items()}

    observed = per_bucket(None)
    result: dict[str, dict] = {
        name: {"similarity": observed[name], "pairs": [pairs[layer] for layer in layers]}
        for name, layers in groups.items()
    }
    if n_permutations:
        rng = np.random.default_rng(seed)
        nulls = [per_bucket(rng.permutation(len(b[0]))) for _ in range(n_permutations)]
        for name, entry in result.items():
            null = np.array([values[name] for values in nulls])
            entry["chance"] = float(null.mean())
            entry["chance_q95"] = float(np.quantile(null, 0.95))
            entry["p_value"] = float((1 + np.sum(null >= observed[name])) / (1 + n_permutations))
    return result


def _check_options(metric, buckets, reduce) -> tuple[int, str]:
    if not callable(metric):
        raise TypeError(f"metric must be a callable f(X, Y) -> float, got {type(metric).__name__}")
    return check_int(buckets, "buckets", minimum=1), check_choice(reduce, "reduce", REDUCTIONS)


def _check_depths(shallow: int, buckets: int, names: str) -> None:
    if shallow < buckets:
        raise ValueError(f"{names}: the shallower model has {shallow} layers, fewer than buckets = {buckets}")


def pair_similarity(
    reps_a,
    reps_b,
    metric: Callable = linear_cka,
    buckets: int = 3,
    reduce: str = "mean",
    n_permutations: int = 0,
    seed: int = 0,
) -> dict[str, dict]:
    """The similarity of two models per depth bucket: ``metric`` over their depth-matched layer pairs
    (:func:`match_layers_by_depth`: one pair per layer of the shallower model), grouped by that layer's
    :func:`depth_buckets` and reduced by ``reduce`` (``"mean"``, the default, or ``"max"``).

    ``reps_a``, ``reps_b``: per-layer representations of the same texts (lists of ``(n_texts, d)`` arrays,
    e.g. from :func:`layer_representations`; the widths may differ). ``metric``: ``f(X, Y) -> float``.
    Returns ``{bucket: {"similarity": float, "pairs": [(layer_a, layer_b), ...]}}`` with bucket names
    ``"early"``, ``"middle"``, ``"late"`` for 3 buckets. With ``n_permutations > 0``, each bucket also gets
    its chance level: the same statistic with the texts of B shuffled (one permutation shared by all layers,
    from ``numpy.random.default_rng(seed)``): ``"chance"`` (the null mean), ``"chance_q95"`` and the add-one
    ``"p_value"``.
    """
    buckets, reduce = _check_options(metric, buckets, reduce)
    n_permutations = check_int(n_permutations, "n_permutations", minimum=0, maximum=MAX_PERMUTATIONS)
    seed = check_int(seed, "seed", minimum=0)
    a, b = _layer_list(reps_a, "reps_a"), _layer_list(reps_b, "reps_b")
    if len(a[0]) != len(b[0]):
        raise ValueError(
            f"reps_a and reps_b must hold the same texts: {len(a[0])} rows in reps_a, {len(b[0])} in reps_b"
        )
    _check_depths(min(len(a), len(b)), buckets, "reps_a and reps_b")
    return _pair(a, b, metric, buckets, reduce, n_permutations, seed)


def similarity_matrix(
    representations: Mapping[str, Sequence],
    metric: Callable = linear_cka,
    bucket: str | None = None,
    buckets: int = 3,
    reduce: str = "mean",
) -> tuple[list[str], np.ndarray]:
    """The similarity of every pair of models: ``(names, matrix)``, ``matrix[i, j]`` the
    :func:`pair_similarity` of models ``i`` and ``j`` in depth bucket ``bucket`` (e.g. ``"early"`` of 3
    ``buckets``), or over all depth-matched layers (``bucket=None``). ``representations``: model name ->
    per-layer representations of one shared set of texts. The matrix is symmetric: the upper triangle is
    computed (``metric(model i, model j)`` for ``i <= j``) and mirrored, so use a symmetric metric; its
    diagonal is each model against itself."""
    buckets, reduce = _check_options(metric, buckets, reduce)
    if bucket is not None:
        bucket = check_choice(bucket, "bucket", bucket_names(buckets))
    check_type(
        representations, "representations", Mapping, "a dict of model name -> per-layer representations"
    )
    if not representations:
        raise ValueError("representations must hold at least one model")
    names = list(representations)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"representations must be keyed by model names (str), got {name!r}")
    models = {name: _layer_list(representations[name], f"representations[{name!r}]") for name in names}
    rows = {len(m[0]) for m in models.values()}
    if len(rows) > 1:
        raise ValueError(f"representations must all hold the same texts, got row counts {sorted(rows)}")
    key, groups = (bucket, buckets) if bucket is not None else ("all", 1)
    _check_depths(min(len(m) for m in models.values()), groups, "representations")
    matrix = np.zeros((len(names), len(names)))
    for i, first in enumerate(names):
        for j in range(i, len(names)):
            value = _pair(models[first], models[names[j]], metric, groups, reduce, 0, 0)[key]["similarity"]
            matrix[i, j] = matrix[j, i] = value
    return names, matrix


def plot_similarity_matrix(
    names: Sequence[str], matrix, path=None, title: str = "Representational similarity"
):
    """A heatmap of a model-by-model similarity matrix (e.g. from :func:`similarity_matrix`) with the
    values written in the cells; saved as PNG if ``path``; returns the matplotlib figure. Needs matplotlib
    (``pip install 'icml-interp[plot]'``)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence) or not names:
        raise TypeError(f"names must be a non-empty list of model names, got {names!r:.80}")
    if not all(isinstance(n, str) for n in names):
        raise TypeError("names must be strings (model names)")
    m = as_matrix(matrix, "matrix", "(n_models, n_models)")
    if m.shape != (len(names), len(names)):
        raise ValueError(
            f"matrix must be shaped ({len(names)}, {len(names)}) (one row per name), got {m.shape}"
        )
    check_type(title, "title", str, "a string")
    try:
        from matplotlib.figure import Figure  # not pyplot: the caller's backend and figures are left alone
    except ImportError:
        raise ImportError(
            "plot_similarity_matrix needs matplotlib: pip install 'icml-interp[plot]'"
        ) from None
    size = max(4.0, 0.6 * len(names) + 2.5)
    fig = Figure(figsize=(size + 1, size))
    ax = fig.subplots()
    image = ax.imshow(m, cmap="viridis", vmin=min(0.0, float(m.min())), vmax=max(1.0, float(m.max())))
    ax.set_xticks(range(len(names)), list(names), rotation=45, ha="right")
    ax.set_yticks(range(len(names)), list(names))
    if len(names) <= 20:
        for i in range(len(names)):
            for j in range(len(names)):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=8, color="white")
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
