"""True path patching (Wang et al. 2022, "Interpretability in the Wild", Sec. 3.1; Goldowsky-Dill et al. 2023).

The effect of a *sender* head on the metric that flows only through chosen *receivers*:

1. cache every head's output (``hook_z``) on the clean and the corrupt input;
2. run the clean input with the sender's output taken from the corrupt run and every other head frozen at
   its clean output (MLPs are recomputed unless ``freeze_mlps``); record the receivers' inputs (their
   queries, keys and/or values, or the final residual stream for ``"resid_final"``);
3. run the clean input again, patching only those receiver inputs, and measure the metric.

Effects are normalized as ``(patched - clean) / (corrupt - clean)``. This is *not* what the Anchor–Adapter
authors' ``path_patching_analysis.py`` does: that swaps whole layer outputs between two models, which is
:func:`~icml_interp.patching.cross_model_layer_patching` here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.patching.activation import check_pair
from icml_interp.patching.result import Metric, PatchingResult, check_metric, logits_width, metric_value
from icml_interp.validation import check_bool, check_head, eval_mode

RESID_FINAL = "resid_final"


def path_patching(
    model,
    clean_ids: torch.Tensor,
    corrupt_ids: torch.Tensor,
    metric: Metric,
    *,
    receivers: Sequence | str = RESID_FINAL,
    senders: Sequence | None = None,
    receiver_input: Sequence[str] = ("q", "k", "v"),
    freeze_mlps: bool = False,
) -> PatchingResult:
    """Path-patching effect of each sender head through ``receivers`` (one row per sender).

    ``receivers`` is ``"resid_final"`` (the direct path to the logits) or a list of ``(layer, head)``;
    ``receiver_input`` which of the receivers' q/k/v carry the sender's effect (with grouped-query attention
    a key/value receiver is its key/value head, shared by its group). ``senders`` defaults to every head in the
    layers before the earliest receiver (all layers for ``"resid_final"``).

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask.
    """
    hooked = wrap(model)
    clean, corrupt = check_pair(hooked, clean_ids, corrupt_ids)
    check_metric(metric, clean.shape[0], clean.shape[1], logits_width(hooked))
    if isinstance(receivers, str):
        if receivers != RESID_FINAL:
            raise ValueError(
                f"receivers must be {RESID_FINAL!r} or a list of (layer, head), got {receivers!r}"
            )
        recv, first = [], hooked.n_layers
    else:
        if not isinstance(receivers, (list, tuple)):
            raise TypeError(
                f"receivers must be {RESID_FINAL!r} or a list of (layer, head), got {type(receivers).__name__}"
            )
        recv = [check_head(r, "receivers", hooked.n_layers, hooked.n_heads) for r in receivers]
        if not recv:
            raise ValueError("receivers must not be empty")
        first = min(layer for layer, _ in recv)
    if not isinstance(receiver_input, (list, tuple)) or not all(isinstance(r, str) for r in receiver_input):
        raise TypeError(f"receiver_input must be a list or tuple of 'q', 'k', 'v', got {receiver_input!r}")
    bad = set(receiver_input) - {"q", "k", "v"}
    if bad or not receiver_input:
        raise ValueError(
            f"receiver_input must be a non-empty subset of ('q', 'k', 'v'), got {receiver_input!r}"
        )
    if senders is None:
        senders = [(layer, h) for layer in range(first) for h in range(hooked.n_heads)]
    if not isinstance(senders, (list, tuple)):
        raise TypeError(f"senders must be None or a list of (layer, head), got {type(senders).__name__}")
    senders = [check_head(s, "senders", hooked.n_layers, hooked.n_heads) for s in senders]
    if not senders:
        raise ValueError("senders must hold at least one (layer, head) upstream of the receivers")
    check_bool(freeze_mlps, "freeze_mlps")
    for s in senders:
        if s[0] >= first:
            raise ValueError(
                f"senders must lie upstream of the receivers: sender {s} is not upstream of the earliest "
                f"receiver layer {first}"
            )

    z_names = [act_name("z", layer) for layer in range(hooked.n_layers)]
    mlp_names = [act_name("mlp_out", layer) for layer in range(hooked.n_layers)] if freeze_mlps else []
    group = hooked.n_heads // hooked.n_kv_heads
    # receiver input hook name -> head indices in that hook's head dimension
    recv_index: dict[str, list[int]] = {}
    for layer, h in recv:
        for part in receiver_input:
            index = h if part == "q" else h // group
            recv_index.setdefault(act_name(part, layer), [])
            if index not in recv_index[act_name(part, layer)]:
                recv_index[act_name(part, layer)].append(index)
    record = list(recv_index) if recv else [act_name("resid_post", hooked.n_layers - 1)]

    with torch.no_grad(), eval_mode(hooked.model):
        clean_logits, clean_cache = hooked.run_with_cache(clean, z_names + mlp_names)
        corrupt_logits, corrupt_cache = hooked.run_with_cache(corrupt, z_names)
        result = PatchingResult(
            "path patching", metric_value(metric, clean_logits), metric_value(metric, corrupt_logits)
        )
        for s_layer, s_head in senders:

            def freeze(act, hook, s_layer=s_layer, s_head=s_head):
                new = clean_cache[hook.name].clone()
                if hook.layer == s_layer:
                    new[:, :, s_head] = corrupt_cache[hook.name][:, :, s_head]
                return new

            freeze_hooks = [(n, freeze) for n in z_names] + [
                (n, lambda a, hk: clean_cache[hk.name]) for n in mlp_names
            ]
            # step 2: sender corrupt, everything else frozen clean; record the receivers' inputs
            _, recorded = hooked.run_with_cache(clean, record, fwd_hooks=freeze_hooks)
            # step 3: clean run with only the receivers' inputs replaced
            if recv:

                def patch(act, hook, recorded=recorded):
                    new = act.clone()
                    idx = recv_index[hook.name]
                    new[:, :, idx] = recorded[hook.name][:, :, idx]
                    return new

                value = metric_value(metric, hooked.run_with_hooks(clean, [(n, patch) for n in recv_index]))
            else:
                value = metric_value(metric, hooked.lens(recorded[record[0]]))
            result.add(
                value,
                component="head",
                layer=s_layer,
                head=s_head,
                receivers=RESID_FINAL if not recv else ",".join(f"{a}.{b}" for a, b in recv),
            )
    return result
