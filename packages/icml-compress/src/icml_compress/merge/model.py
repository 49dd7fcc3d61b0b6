"""SpeechCombine on models in memory: :func:`plan_merge` (the dry run) and :func:`combine`."""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from torch import nn

from icml_compress.merge.rules import (
    MergeReport,
    MergeSettings,
    TensorAction,
    merge_tensor,
    module_kind,
    plan_tensor,
    settings_from,
)
from icml_compress.validation import check_bool, check_instance


def check_same_architecture(configs: dict[str, Any]) -> None:
    """Refuse models whose Hugging Face configs (``{which: config, its dict or None}``) name different model
    types or layer counts: ``ValueError`` naming both."""

    def get(c: Any, key: str) -> Any:
        return c.get(key) if isinstance(c, dict) else getattr(c, key, None)

    seen = {
        which: (get(c, "model_type"), get(c, "num_hidden_layers"))
        for which, c in configs.items()
        if c is not None
    }
    items = list(seen.items())
    for which, arch in items[1:]:
        if arch != items[0][1]:
            raise ValueError(
                f"the architectures differ: the {items[0][0]} model is (model_type, layers) = {items[0][1]}, the "
                f"{which} model {arch}"
            )


def _tensors(model: nn.Module, which: str) -> dict[str, torch.Tensor]:
    check_instance(model, which, nn.Module, "torch.nn.Module")
    return model.state_dict(keep_vars=True)


def _plan(cpt: nn.Module, instruct: nn.Module, base: nn.Module, settings: MergeSettings):
    models = {"cpt_model": cpt, "instruct_model": instruct, "base_model": base}
    c, i, b = (_tensors(m, which) for which, m in models.items())
    check_same_architecture({which: getattr(m, "config", None) for which, m in models.items()})
    for which, names in (("instruct_model", i), ("base_model", b)):
        extra = [n for n in names if n not in c]
        if extra:
            raise ValueError(f"{extra[0]} is in {which} but not in cpt_model: the architectures differ")
    first: dict[int, str] = {}  # id of a tensor object -> the first name it has (tied ones share it)
    actions: list[TensorAction] = []
    for name, t in c.items():
        primary = first.setdefault(id(t), name)
        if primary != name:
            why = f"the same tensor as {primary} in cpt_model: merged once, with that name's delta"
            actions.append(TensorAction(name, "tied", why, tuple(t.shape), module_kind(name), source=primary))
            continue
        meta = [(tuple(d[name].shape), d[name].dtype) if name in d else None for d in (i, b)]
        actions.append(
            plan_tensor(name, (tuple(t.shape), t.dtype), meta[0], meta[1], settings, tuple(models))
        )
    return MergeReport(settings, actions), (c, i, b)


def plan_merge(
    cpt_model: nn.Module,
    instruct_model: nn.Module,
    base_model: nn.Module,
    lam: float = 1.0,
    *,
    per_module: dict[str, float] | None = None,
    method: str = "task_arithmetic",
    density: float = 1.0,
) -> MergeReport:
    """The dry run of :func:`combine`: every tensor's action and why, nothing changed. Raises what
    :func:`combine` raises for models that cannot be merged."""
    report, _ = _plan(
        cpt_model, instruct_model, base_model, settings_from(lam, per_module, method, density, False, 0)
    )
    return report


@torch.no_grad()
def combine(
    cpt_model: nn.Module,
    instruct_model: nn.Module,
    base_model: nn.Module,
    lam: float = 1.0,
    *,
    per_module: dict[str, float] | None = None,
    method: str = "task_arithmetic",
    density: float = 1.0,
    normalize: bool = False,
    seed: int = 0,
    inplace: bool = False,
) -> nn.Module:
    """SpeechCombine: ``θ_cpt + λ (θ_instruct − θ_base)`` on every tensor the three models share, the CPT
    model's new vocabulary rows kept exactly (see :mod:`icml_compress.merge.rules`).

    Args:
        cpt_model: the model continually pre-trained from the base (new tokens allowed: more rows in its
            embeddings); its architecture, config and tied weights are the merged model's.
        instruct_model: the instruction-tuned model of the same base (more rows allowed: its chat tokens).
        base_model: the model both started from.
        lam: λ, a finite float (0 returns the CPT model's weights exactly).
        per_module: λ per module kind (``attention``, ``mlp``, ``embeddings``, ``norms``, ``other``; see
            :func:`~icml_compress.merge.rules.module_kind`), overriding ``lam`` for those kinds.
        method: ``task_arithmetic`` (SpeechCombine's formula), ``ties`` or ``dare`` (ablations; see
            :func:`~icml_compress.merge.rules.merge_tensor`), with ``density``, ``normalize`` and ``seed``.
        inplace: change ``cpt_model``'s tensors in place (memory: one model) instead of a copy. All or
            nothing: every merged tensor is computed and checked before the first is written (the merge is
            computed twice, one tensor at a time), so a raise leaves ``cpt_model`` unchanged.

    Returns the merged model, with ``icml_merge`` (:meth:`MergeReport.to_dict`) recording every tensor's action.
    Tied tensors of the CPT model stay tied (merged once). Models whose architectures differ (config model
    types or layer counts, tensor names) or whose shapes cannot be aligned raise ``ValueError`` naming the
    tensor; a non-finite result raises too.
    """
    check_bool(inplace, "inplace")
    settings = settings_from(lam, per_module, method, density, normalize, seed)
    report, (c, i, b) = _plan(cpt_model, instruct_model, base_model, settings)
    deltas = [a for a in report.actions if a.action in ("delta", "delta-shared-rows")]
    if inplace:
        # all or nothing without a copy: every merged tensor is computed and checked (then dropped) before any
        # is written, so a raise leaves cpt_model as it was; the writing pass below recomputes the same bits
        for a in deltas:
            merge_tensor(a, c[a.name], i[a.name], b[a.name], settings)
    model = cpt_model if inplace else copy.deepcopy(cpt_model)
    target = model.state_dict(keep_vars=True)
    for a in deltas:  # one tensor at a time: memory stays near one model (plus a copy if not inplace)
        target[a.name].data.copy_(merge_tensor(a, c[a.name], i[a.name], b[a.name], settings))
    cast(Any, model).icml_merge = report.to_dict()
    return model
