"""Attribution patching (Nanda 2023; Syed, Rager & Conmy 2023): a first-order estimate of every activation
patching effect from one clean forward/backward pass and one corrupt forward pass,
``(a_corrupt - a_clean) · ∂metric/∂a`` evaluated at the clean activations, normalized like activation
patching by ``corrupt - clean``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.patching.activation import HEAD_COMPONENTS, PATCHABLE, check_pair
from icml_interp.patching.result import (
    Metric,
    PatchingResult,
    check_components,
    check_layers,
    check_metric,
    logits_width,
    metric_value,
)
from icml_interp.validation import check_bool, eval_mode


def attribution_patching(
    model,
    clean_ids: torch.Tensor,
    corrupt_ids: torch.Tensor,
    metric: Metric,
    *,
    components: Sequence[str] = ("resid_pre", "attn_out", "mlp_out"),
    layers=None,
    per_position: bool = True,
    per_head: bool = True,
) -> PatchingResult:
    """Linear estimate of :func:`activation_patching` for every (component, layer[, position][, head]).

    Same arguments and rows as :func:`activation_patching` (``resid_mid`` and ``pattern`` are not supported).
    Costs two forward passes and one backward pass whatever the number of units.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask (and transformers'
    gradient checkpointing, which runs in training mode only, stays off: its reentrant variant would leave the
    cached activations out of the backward pass).
    """
    hooked = wrap(model)
    clean, corrupt = check_pair(hooked, clean_ids, corrupt_ids)
    check_metric(metric, clean.shape[0], clean.shape[1], logits_width(hooked))
    components = check_components(components, PATCHABLE)
    layers = check_layers(layers, hooked.n_layers)
    check_bool(per_position, "per_position")
    check_bool(per_head, "per_head")
    for c in components:
        if c in ("resid_mid", "pattern"):
            raise ValueError(
                f"attribution patching does not support {c!r}; use resid_pre/resid_post/attn_out/"
                "mlp_out/post or the per-head z/q/k/v"
            )
    names = {(c, layer): act_name(c, layer) for c in components for layer in layers}
    for name in names.values():
        hooked.hook_point(name)

    def leaf_embed(act, hook):  # gradients must reach the activations even if the weights are frozen
        return act if act.requires_grad else act.detach().requires_grad_(True)

    with eval_mode(hooked.model):
        with torch.no_grad():
            corrupt_logits, corrupt_cache = hooked.run_with_cache(corrupt, list(names.values()))
        with torch.enable_grad():
            logits, cache = hooked.run_with_cache(
                clean, list(names.values()), grad=True, fwd_hooks=[("hook_embed", leaf_embed)]
            )
            value = metric(logits)
            if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.requires_grad):
                raise ValueError(
                    "metric must return a scalar tensor that depends on the logits (attribution patching "
                    f"differentiates it), got {value!r}"
                )
            metric_value(lambda _: value.detach(), logits)  # finite
            grads = torch.autograd.grad(value, [cache[n] for n in names.values()], allow_unused=True)
    result = PatchingResult("attribution patching", value.item(), metric_value(metric, corrupt_logits))
    for ((component, layer), name), grad in zip(names.items(), grads, strict=True):
        if grad is None:
            grad = torch.zeros_like(cache[name])
        contrib = ((corrupt_cache[name] - cache[name].detach()) * grad).sum(
            0
        )  # (seq, ...) summed over prompts
        split_heads = per_head and component in HEAD_COMPONENTS
        contrib = contrib.sum(-1) if split_heads else contrib.flatten(1).sum(-1)  # (seq, heads) or (seq,)
        if not per_position:
            contrib = contrib.sum(0, keepdim=True)
        for p in range(contrib.shape[0]):
            heads = range(contrib.shape[1]) if split_heads else [None]
            for h in heads:
                estimate = float(contrib[p, h] if h is not None else contrib[p]) / clean.shape[0]
                result.add(
                    result.clean + estimate,
                    component=component,
                    layer=layer,
                    position=p if per_position else None,
                    head=h,
                )
    return result
