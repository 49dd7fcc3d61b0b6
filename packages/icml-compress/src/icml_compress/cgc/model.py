"""Cross-layer parameter sharing for Hugging Face causal LMs: per-layer whitened SVD (SVD-LLM), Basis Sharing
(adjacent layers share a basis) and CGC (curvature-aware graph coloring chooses which layers share).

:func:`collect_statistics` gathers each Linear's input second moments ``H = E[x x^T]`` with forward hooks
(the calibration of :mod:`icml_compress.quantize.calibration`; no Hessian files). :func:`compress_model`
groups the layers of each matrix family (``model.layers.*.self_attn.q_proj``, ...), fits one basis per
group (:mod:`.fit`) and swaps the Linear layers for :class:`SharedBasisLinear`; every group removes the same
fraction ``ratio`` of its parameters, so the three methods have equal parameter counts at one ratio.

CGC (``method="cgc"``): for each shared family, the pairwise sharing costs (:func:`.graph.pair_costs`), then
for each threshold ``tau`` of a sweep (:func:`.graph.thresholds`) the conflict graph ``cost > tau`` is
colored by capped DSatur (:func:`.graph.dsatur_coloring`); each coloring is fitted and the one with the
least total Hessian-weighted cost ``sum_l tr(dW_l H_l dW_l^T)`` is kept (the sweep includes ``tau = -inf``,
every layer alone). Choosing ``tau`` by the fitted calibration cost at the parameter budget is our reading
of the paper's threshold sweep (its text was not available).

:func:`save_shared`/:func:`load_shared` round-trip exactly (safetensors stores each shared basis once).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from tqdm.auto import tqdm

from icml_compress.cgc.fit import check_ratio, fit_shared_basis, rank_for_ratio
from icml_compress.cgc.graph import (
    COSTS,
    GroupCost,
    check_costs,
    color_groups,
    conflict_graph,
    dsatur_coloring,
    exact_pair_costs,
    pair_costs,
    thresholds,
)
from icml_compress.cgc.linear import SharedBasisLinear
from icml_compress.quantize.calibration import check_token_ids, collect_hessians, encode_texts, make_sequences
from icml_compress.quantize.model import (
    block_index,
    build_empty_model,
    check_dtype_name,
    check_path,
    check_save_extras,
    float_linears,
    load_generation_config,
    load_tensors,
    model_config,
    read_weights,
    save_generation_config,
    set_module,
    vocab_size,
    write_directory,
)
from icml_compress.validation import check_bool, check_instance, check_int, check_one_of, check_positive

METHODS = ("cgc", "basis-sharing", "svd")
FORMAT, CONFIG_FILE, WEIGHTS_FILE = "icml-compress-shared", "sharing.json", "model.safetensors"
# Basis Sharing's shared matrices; o_proj and down_proj keep a per-layer basis
SHARED_DEFAULT = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


class CorruptSharedModelError(ValueError):
    """A directory that :func:`load_shared` cannot load (missing, truncated or inconsistent files); the
    message names the file."""


@dataclass(frozen=True)
class ShareConfig:
    """How :func:`compress_model` shares bases.

    ``ratio``: the fraction of each group's parameters removed, in (0, 1). ``method``: ``"cgc"``,
    ``"basis-sharing"`` (consecutive layers of a family in groups of ``max_group``) or ``"svd"`` (every layer
    alone). ``shared``: the matrix names (last part of the module name) whose layers may share; the others
    get a basis of their own. ``max_group``: the most layers per group (CGC's cap; Basis Sharing's group
    size). ``cost``: CGC's pairwise cost, ``"exact"`` or ``"overlap"`` (:mod:`.graph`). ``taus``: how many
    quantile thresholds CGC's sweep tries (besides no sharing and no conflicts). ``seed``: the coloring's
    tie-break order. ``refit``: refit each layer's coefficients under its own moments. ``damping``: times
    the mean diagonal, added to the moments before the Cholesky factor. ``skip``: module-name patterns left
    alone; ``max_blocks``: compress only the first blocks. ``n_calibration``/``seq_len``: the calibration
    sequences :func:`collect_statistics` cuts.
    """

    ratio: float
    method: str = "cgc"
    shared: tuple[str, ...] = SHARED_DEFAULT
    max_group: int = 4
    cost: str = "exact"
    taus: int = 12
    seed: int = 0
    refit: bool = False
    damping: float = 0.01
    skip: tuple[str, ...] = ("lm_head",)
    max_blocks: int | None = None
    n_calibration: int = 32
    seq_len: int = 256
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_ratio(self.ratio)
        check_one_of(self.method, "method", METHODS)
        for key in ("shared", "skip"):
            value = getattr(self, key)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{key} must be a tuple of str, got {value!r}")
            object.__setattr__(self, key, tuple(value))
        check_int(self.max_group, "max_group", 1)
        check_one_of(self.cost, "cost", COSTS)
        check_int(self.taus, "taus", 1)
        check_int(self.seed, "seed", 0)
        check_bool(self.refit, "refit")
        check_positive(self.damping, "damping")
        if self.max_blocks is not None:
            check_int(self.max_blocks, "max_blocks", 1)
        check_int(self.n_calibration, "n_calibration", 1)
        check_int(self.seq_len, "seq_len", 1)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("extra")
        return out


def family(name: str) -> str:
    """The matrix family of a module name: its block number replaced by ``*``
    (``model.layers.3.mlp.up_proj`` -> ``model.layers.*.mlp.up_proj``)."""
    return re.sub(r"(^|\.)\d+(\.|$)", r"\1*\2", name, count=1)


def target_linears(model: nn.Module, config: ShareConfig) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` layers :func:`compress_model` replaces (``skip`` and ``max_blocks`` applied)."""
    check_instance(model, "model", nn.Module, "torch.nn.Module")
    check_instance(config, "config", ShareConfig)
    linears = float_linears(model, config.skip, config.max_blocks, "compress")
    return linears


def collect_statistics(
    model: nn.Module,
    calibration_texts,
    tokenizer=None,
    config: ShareConfig | None = None,
    *,
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """``{name: H}``: the input second moments ``E[x x^T]`` (float64, ``(in, in)``) of every Linear
    :func:`compress_model` replaces, over ``config.n_calibration`` sequences of ``config.seq_len`` tokens cut
    from ``calibration_texts`` (a str, a list of str with ``tokenizer``, or token ids). Layers that read one
    tensor (q/k/v, gate/up) share one matrix. Independent of ``ratio`` and ``method``: collect once, compress
    many ways."""
    config = config or ShareConfig(ratio=0.5)
    linears = target_linears(model, config)
    check_bool(progress, "progress")
    ids = check_token_ids(encode_texts(calibration_texts, tokenizer), "calibration_texts", vocab_size(model))
    sequences = make_sequences(ids, config.n_calibration, config.seq_len)
    return collect_hessians(model, linears, sequences.to(next(model.parameters()).device), progress=progress)


def _check_statistics(statistics, linears: dict[str, nn.Linear]) -> None:
    if not isinstance(statistics, dict):
        raise TypeError(
            f"statistics must be the dict collect_statistics returns, got {type(statistics).__name__}"
        )
    for name, lin in linears.items():
        H = statistics.get(name)
        if not isinstance(H, torch.Tensor) or H.shape != (lin.in_features, lin.in_features):
            raise ValueError(
                f"statistics must hold an ({lin.in_features}, {lin.in_features}) tensor for {name}, got "
                f"{type(H).__name__ if H is None else tuple(getattr(H, 'shape', ()))}"
            )
        if not torch.isfinite(H).all():
            raise ValueError(f"statistics[{name!r}] must be finite")


def _check_groups(groups, linears: dict[str, nn.Linear]) -> list[list[str]]:
    """Explicit groups: lists of module names, each name once, one weight shape per group; layers not named
    get a basis of their own."""
    if not isinstance(groups, (list, tuple)) or not all(
        isinstance(g, (list, tuple)) and g and all(isinstance(n, str) for n in g) for g in groups
    ):
        raise TypeError("groups must be a list of non-empty lists of module names")
    seen: set[str] = set()
    for g in groups:
        for n in g:
            if n not in linears:
                raise ValueError(f"groups names {n!r}, which is not a Linear layer this config compresses")
            if n in seen:
                raise ValueError(f"groups names {n!r} twice")
            seen.add(n)
        shapes = {tuple(linears[n].weight.shape) for n in g}
        if len(shapes) > 1:
            raise ValueError(
                f"groups: layers of different shapes forced into one group: {[(n, tuple(linears[n].weight.shape)) for n in g]}"
            )
    return [list(g) for g in groups] + [[n] for n in linears if n not in seen]


def plan_groups(
    model: nn.Module,
    statistics: dict,
    config: ShareConfig,
    *,
    costs: dict | None = None,
    progress: bool = False,
) -> dict:
    """The groups :func:`compress_model` fits, without changing ``model``: ``{"groups": [[names]], "families":
    {family: {"layers", "groups" (indices into layers), and for CGC "costs" (the pairwise matrix), "alone"
    (each layer's cost with a basis of its own), "sweep" (tau, number of groups, total cost) and the chosen
    "tau"}}}``. ``costs``: ``{family: pairwise matrix}`` from an earlier plan of the same model, statistics
    and ratio (the costs do not depend on the seed: a seed sweep computes them once)."""
    if costs is not None and not isinstance(costs, dict):
        raise TypeError(f"costs must be None or a dict {{family: (n, n) matrix}}, got {type(costs).__name__}")
    linears = target_linears(model, config)
    _check_statistics(statistics, linears)
    check_bool(progress, "progress")
    fams: dict[str, list[str]] = {}
    for n in linears:
        fams.setdefault(family(n), []).append(n)
    groups: list[list[str]] = []
    report: dict[str, dict] = {}
    for fam, names in tqdm(fams.items(), desc="families", disable=not progress):
        names = sorted(names, key=lambda n: (block_index(n) or 0, n))
        shared = fam.rsplit(".", 1)[-1] in config.shared and config.method != "svd"
        info: dict[str, Any] = {"layers": names}
        if not shared or len(names) == 1:
            idx = [[i] for i in range(len(names))]
        elif config.method == "basis-sharing":
            idx = [
                list(range(i, min(i + config.max_group, len(names))))
                for i in range(0, len(names), config.max_group)
            ]
        else:
            idx = _cgc_family(fam, names, linears, statistics, config, info, (costs or {}).get(fam))
        groups.extend([names[i] for i in g] for g in idx)
        info["groups"] = idx
        report[fam] = info
    return {"groups": groups, "families": report}


def _cgc_family(fam, names, linears, statistics, config: ShareConfig, info: dict, known) -> list[list[int]]:
    W = [linears[n].weight.detach() for n in names]
    H = [statistics[n] for n in names]
    cost_of = GroupCost(W, H, config.ratio, refit=config.refit, damping=config.damping)
    if known is not None:
        costs = check_costs(known)
        if costs.shape != (len(names), len(names)):
            raise ValueError(f"costs of {fam} must be ({len(names)}, {len(names)}), got {costs.shape}")
    elif config.cost == "exact":
        costs = exact_pair_costs(cost_of)
    else:
        costs = pair_costs(W, H, config.ratio, cost="overlap", damping=config.damping)

    def total(groups: list[list[int]]) -> float:
        return sum(cost_of(g) for g in groups)

    sweep = []
    best: tuple[float, list[list[int]], float] | None = None
    for tau in thresholds(costs, config.taus):
        colors = dsatur_coloring(conflict_graph(costs, tau), config.max_group, config.seed, costs)
        groups = color_groups(colors)
        cost = total(groups)
        sweep.append({"tau": tau, "groups": len(groups), "cost": cost})
        if best is None or cost < best[0]:
            best = (cost, groups, tau)
    assert best is not None  # thresholds always holds -inf and +inf
    info.update(
        costs=costs.tolist(), alone=[cost_of([i]) for i in range(len(names))], sweep=sweep, tau=best[2]
    )
    return best[1]


@torch.no_grad()
def compress_model(
    model: nn.Module,
    statistics: dict,
    config: ShareConfig,
    *,
    groups=None,
    costs: dict | None = None,
    progress: bool = True,
) -> nn.Module:
    """Replace the Linear layers of ``model`` (in place; the model is returned) by :class:`SharedBasisLinear`
    layers: groups from ``config.method`` (:func:`plan_groups`) or, if given, ``groups`` (lists of module
    names of one weight shape; unnamed layers alone), each fitted at ``config.ratio``. ``statistics``: from
    :func:`collect_statistics`; ``costs``: as :func:`plan_groups` takes them. The record ``model.icml_sharing`` holds the config, the groups with their
    ranks and per-layer costs ``tr(dW H dW^T)``, the CGC sweep and the parameter counts."""
    linears = target_linears(model, config)
    _check_statistics(statistics, linears)
    check_bool(progress, "progress")
    if groups is None:
        plan = plan_groups(model, statistics, config, costs=costs, progress=progress)
    else:
        plan = {"groups": _check_groups(groups, linears), "families": {}}
    records = []
    # swapped in at the end: a failed fit leaves the model as it was
    shared: dict[str, SharedBasisLinear] = {}
    before = after = 0
    for g in tqdm(plan["groups"], desc="fitting", disable=not progress):
        mods = [linears[n] for n in g]
        d_out, d_in = mods[0].weight.shape
        k = rank_for_ratio(d_in, d_out, len(g), config.ratio)
        k = min(k, d_in, len(g) * d_out)
        fit = fit_shared_basis(
            [m.weight for m in mods],
            [statistics[n] for n in g],
            k,
            refit=config.refit,
            damping=config.damping,
            name=str(g),
        )
        dtype = mods[0].weight.dtype
        basis = nn.Parameter(fit.basis.T.contiguous().to(dtype), requires_grad=False)
        after += basis.numel()
        for n, m, C in zip(g, mods, fit.coeffs, strict=True):
            bias = None if m.bias is None else m.bias.detach().clone()
            new = SharedBasisLinear(basis, C.T.contiguous().to(dtype).requires_grad_(False), bias)
            shared[n] = new.train(m.training)  # not nn.Module's default train mode in an eval model
            before += m.weight.numel()
            after += new.coeff.numel()
        records.append({"layers": g, "rank": k, "costs": fit.costs})
    for n, new in shared.items():
        set_module(model, n, new)
    cast(Any, model).icml_sharing = {  # an attribute on a torch module
        "config": config.to_dict(),
        "groups": records,
        "families": plan["families"],
        "parameters": {"before": before, "after": after, "removed_fraction": 1 - after / before},
    }
    return model


def sharing_record(model: nn.Module) -> dict:
    """The record ``model.icml_sharing`` that :func:`compress_model` and :func:`load_shared` attach: the
    config, the groups (layers, rank, per-layer costs), CGC's families (pairwise costs, sweep, threshold) and
    the parameter counts. A model without one raises ``ValueError``."""
    check_instance(model, "model", nn.Module, "torch.nn.Module")
    info = getattr(model, "icml_sharing", None)
    if not isinstance(info, dict):
        raise ValueError("model must come from compress_model or load_shared (no icml_sharing record)")
    return info


def save_shared(model: nn.Module, path, *, tokenizer=None, extra: dict | None = None) -> Path:
    """Save a model returned by :func:`compress_model` to the directory ``path``: ``model.safetensors`` (each
    shared basis and tied tensor once), ``sharing.json`` (the record ``icml_sharing``, the model's Hugging
    Face config and class, ``extra``), the model's ``generation_config.json`` (``load_shared`` restores it,
    so ``generate`` keeps its defaults) and the tokenizer if given. Atomic: a failed save leaves ``path`` as
    it was; files saved beside an earlier save (a tokenizer, a model card) are kept, as ``save_pretrained``
    keeps them."""
    from safetensors.torch import save_model

    check_instance(model, "model", nn.Module, "torch.nn.Module")
    info = sharing_record(model)
    path = check_path(path)
    check_save_extras(tokenizer, extra)
    cfg = model_config(model)
    if cfg is None:
        raise ValueError("model must be a transformers model (it has no config to rebuild it from)")

    def write(tmp: Path) -> None:
        doc = {
            "format": FORMAT,
            "version": 1,
            "sharing": info,
            "model_class": type(model).__name__,
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "model_config": cfg,
            "extra": extra or {},
        }
        save_model(model, str(tmp / WEIGHTS_FILE))
        (tmp / CONFIG_FILE).write_text(json.dumps(doc, indent=1, default=str))
        save_generation_config(model, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))

    return write_directory(path, write, CONFIG_FILE, "save_shared")


def load_shared(path) -> nn.Module:
    """Rebuild a model saved by :func:`save_shared` (needs transformers); its logits are bit-identical.
    A missing, truncated or inconsistent save raises :class:`CorruptSharedModelError` naming the file."""
    path = check_path(path)
    f = path / CONFIG_FILE
    if not f.is_file():
        raise CorruptSharedModelError(f"path {path} is not a save_shared directory (no {CONFIG_FILE})")
    try:
        doc = json.loads(f.read_bytes())
    except (OSError, ValueError) as exc:
        raise CorruptSharedModelError(f"{f} is not valid JSON (truncated or corrupted?): {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CorruptSharedModelError(f"{f} is not a {FORMAT} document")
    for key, kind in (("sharing", dict), ("model_class", str), ("dtype", str), ("model_config", dict)):
        if not isinstance(doc.get(key), kind):
            raise CorruptSharedModelError(f"{f}: {key} is missing or not a {kind.__name__}")
    try:
        check_dtype_name(doc["dtype"], str(f))
    except ValueError as exc:
        raise CorruptSharedModelError(str(exc)) from None
    weights, state = read_weights(path, "save_shared", CorruptSharedModelError)
    model = build_empty_model(doc, f, CorruptSharedModelError)
    _replace_groups(model, doc["sharing"].get("groups"), f)
    load_tensors(model, state, weights, CONFIG_FILE, CorruptSharedModelError)
    load_generation_config(model, path, CorruptSharedModelError)
    cast(Any, model).icml_sharing = doc["sharing"]
    return model.eval()


def _replace_groups(model: nn.Module, groups: Any, f: Path) -> None:
    """Empty :class:`SharedBasisLinear` layers (one basis per group) in place of the saved groups' Linears."""
    if not isinstance(groups, list):
        raise CorruptSharedModelError(f"{f}: sharing.groups must be a list")
    for rec in groups:
        layers, k = (rec.get("layers"), rec.get("rank")) if isinstance(rec, dict) else (None, None)
        if (
            not isinstance(layers, list)
            or not layers
            or isinstance(k, bool)
            or not isinstance(k, int)
            or k < 1
        ):
            raise CorruptSharedModelError(
                f"{f}: a group must hold a list of layers and a positive rank, got {rec!r:.120}"
            )
        basis = None
        for n in layers:
            try:
                old = model.get_submodule(n)
            except (AttributeError, TypeError):
                old = None
            if not isinstance(old, nn.Linear):
                raise CorruptSharedModelError(f"{f}: layer {n!r} is not an nn.Linear of the model")
            dtype = old.weight.dtype
            if basis is None:
                basis = nn.Parameter(torch.empty(k, old.in_features, dtype=dtype), requires_grad=False)
            elif basis.shape[1] != old.in_features:
                raise CorruptSharedModelError(
                    f"{f}: layer {n!r} has {old.in_features} inputs, its group's basis {basis.shape[1]}"
                )
            coeff = torch.empty(old.out_features, k, dtype=dtype)
            bias = None if old.bias is None else torch.empty(old.out_features, dtype=old.bias.dtype)
            set_module(model, n, SharedBasisLinear(basis, coeff, bias))
