"""Additive steering vectors: the difference of mean activations between two prompt sets (Turner et al.
2023, ActAdd; Rimsky et al. 2024, CAA), added to the residual stream at one layer."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.validation import check_choice


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
    a ``(d_model,)`` steering vector. The two sets may differ in size and length."""
    hooked = wrap(model)
    name = act_name(component, layer)
    means = []
    for ids in (positive_ids, negative_ids):
        with torch.no_grad():
            _, cache = hooked.run_with_cache(ids, [name])
        means.append(cache[name][:, position].float().mean(0))
    return means[0] - means[1]


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
    (``positions="all"``) or only at the last position of each forward pass (``"last"``)."""
    hooked = wrap(model)
    if not isinstance(vector, torch.Tensor) or vector.shape != (hooked.d_model,):
        raise ValueError(
            f"vector must be a tensor shaped ({hooked.d_model},), got {getattr(vector, 'shape', vector)}"
        )
    check_choice(positions, "positions", ("all", "last"))

    def add(act, hook):
        delta = (alpha * vector).to(act.dtype)
        if positions == "all":
            return act + delta
        new = act.clone()
        new[:, -1] += delta
        return new

    with hooked.hooks([(act_name(component, layer), add)]):
        yield hooked
