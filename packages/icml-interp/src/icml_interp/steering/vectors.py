"""Additive steering vectors: the difference of mean activations between two prompt sets (Turner et al.
2023, ActAdd; Rimsky et al. 2024, CAA), added to the residual stream at one layer."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.validation import (
    check_choice,
    check_finite,
    check_int,
    check_number,
    check_token_ids,
    eval_mode,
)

COMPONENTS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")


def steering_hook_name(hooked, component, layer) -> str:
    """The hook name of a residual-width ``component`` at ``layer``, both checked."""
    check_choice(component, "component", COMPONENTS)
    check_int(layer, "layer", minimum=0, maximum=hooked.n_layers - 1)
    name = act_name(component, layer)
    if name not in hooked.hook_names:
        raise ValueError(f"component {component!r} has no hook point in this model ({name!r})")
    return name


def difference_of_means(
    model,
    positive_ids: torch.Tensor,
    negative_ids: torch.Tensor,
    layer: int,
    *,
    component: str = "resid_post",
    position: int = -1,
) -> torch.Tensor:
    """``mean(act | positive) - mean(act | negative)`` at ``blocks.layer.hook_<component>``, ``position``:
    a ``(d_model,)`` steering vector. The two sets may differ in size and length.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask."""
    hooked = wrap(model)
    sets = [
        check_token_ids(positive_ids, hooked.d_vocab, "positive_ids"),
        check_token_ids(negative_ids, hooked.d_vocab, "negative_ids"),
    ]
    name = steering_hook_name(hooked, component, layer)
    seq = min(ids.shape[1] for ids in sets)
    check_int(position, "position", minimum=-seq, maximum=seq - 1)
    means = []
    with torch.no_grad(), eval_mode(hooked.model):
        for ids in sets:
            _, cache = hooked.run_with_cache(ids, [name])
            means.append(cache[name][:, position].float().mean(0))
    return means[0] - means[1]


def check_vector(vector, d_model: int) -> torch.Tensor:
    """``vector`` is a finite real tensor shaped ``(d_model,)`` or ``(batch, d_model)``."""
    if (
        not isinstance(vector, torch.Tensor)
        or vector.ndim not in (1, 2)
        or vector.shape[-1] != d_model
        or vector.numel() == 0
    ):
        raise ValueError(
            f"vector must be a tensor shaped ({d_model},) or (batch, {d_model}), "
            f"got {getattr(vector, 'shape', vector)}"
        )
    if not (vector.is_floating_point() or vector.dtype in (torch.int32, torch.int64)):
        raise TypeError(f"vector must be a real floating-point tensor, got {vector.dtype}")
    return check_finite(vector, "vector")


@contextmanager
def add_steering_vector(
    model,
    layer: int,
    vector: torch.Tensor,
    alpha: float = 1.0,
    *,
    component: str = "resid_post",
    positions: str = "all",
):
    """Within the context, add ``alpha * vector`` to ``blocks.layer.hook_<component>`` at every position
    (``positions="all"``), only at the last position of each forward pass (``"last"``), or at every position
    of each forward pass over more than one token (``"prefill"``: during ``generate`` with the KV cache, the
    default, that is the prompt's pass; the tokens generated one at a time are left alone, as in CRH). A
    one-token prompt is indistinguishable from a decoding step and is not steered under ``"prefill"``.

    ``vector`` is ``(d_model,)`` (the same for every sequence) or ``(batch, d_model)`` (one per sequence of the
    batch, e.g. CRH's per-sample penalty vectors)."""
    hooked = wrap(model)
    name = steering_hook_name(hooked, component, layer)
    check_vector(vector, hooked.d_model)
    alpha = check_number(alpha, "alpha")
    check_choice(positions, "positions", ("all", "last", "prefill"))

    def add(act, hook):
        if vector.ndim == 2 and vector.shape[0] != act.shape[0]:
            raise ValueError(
                f"vector holds {vector.shape[0]} per-sequence rows, the batch has {act.shape[0]}"
            )
        delta = (alpha * vector.to(device=act.device, dtype=act.dtype)).to(act.dtype)
        if not bool(torch.isfinite(delta).all()):
            raise ValueError(
                f"alpha * vector overflows the activations' dtype {act.dtype} (alpha={alpha:g}); lower alpha"
            )
        if positions == "all":
            return act + (delta if delta.ndim == 1 else delta[:, None])
        if positions == "prefill":
            return act + (delta if delta.ndim == 1 else delta[:, None]) if act.shape[1] > 1 else None
        new = act.clone()
        new[:, -1] += delta
        return new

    with hooked.hooks([(name, add)]):
        yield hooked
