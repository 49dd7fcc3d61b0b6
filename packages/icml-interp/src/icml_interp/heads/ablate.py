"""Ablating chosen attention heads: forward hooks on ``blocks.L.attn.hook_z`` for
:meth:`icml_interp.hooks.HookedModel.run_with_hooks`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from icml_interp.heads.scores import check_mask
from icml_interp.hooks import HookPoint, act_name, wrap
from icml_interp.validation import check_head, check_int, eval_mode

Hook = tuple[str, Callable[[torch.Tensor, HookPoint], torch.Tensor]]


def _heads_by_layer(heads, n_layers: int | None = None, n_heads: int | None = None) -> dict[int, list[int]]:
    """``heads`` (``(layer, head)`` tuples) grouped by layer, checked against the model's size if given."""
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
        raise TypeError(f"heads must be a list of (layer, head) tuples, got {type(heads).__name__}")
    by_layer: dict[int, list[int]] = {}
    for head in heads:
        if n_layers is not None and n_heads is not None:
            layer, h = check_head(head, "heads", n_layers, n_heads)
        else:  # the model's size is unknown here: the form and the sign are checked, the rest in the hook
            if not (isinstance(head, tuple) and len(head) == 2):
                raise TypeError(f"heads must be (layer, head) tuples of ints, got {head!r}")
            layer, h = (check_int(v, "heads", minimum=0) for v in head)
        by_layer.setdefault(layer, []).append(h)
    return by_layer


def _replace(layer: int, heads: list[int], value: Callable[[torch.Tensor], torch.Tensor]) -> Hook:
    """A ``hook_z`` hook of ``layer`` that sets the slices of ``heads`` to ``value(z)`` ``(heads, d_head)``."""
    index = torch.tensor(heads)

    def hook(z: torch.Tensor, point: HookPoint) -> torch.Tensor:  # z: (batch, seq, heads, d_head)
        if int(index.max()) >= z.shape[2]:
            raise ValueError(f"heads: layer {layer} has {z.shape[2]} heads, got head {int(index.max())}")
        out = z.clone()
        out[:, :, index.to(z.device)] = value(z)[index.to(z.device)].to(z.dtype)
        return out

    return act_name("z", layer), hook


def _constant(value: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda z: value


def zero_ablation_hooks(heads) -> list[Hook]:
    """Hooks that zero the outputs (``hook_z`` slices) of ``heads``, a list of ``(layer, head)`` tuples
    (one hook per layer; none for an empty list)."""
    by_layer = _heads_by_layer(heads)
    zeros = lambda z: z.new_zeros(z.shape[2:])  # noqa: E731 - (heads, d_head)
    return [_replace(layer, hs, zeros) for layer, hs in sorted(by_layer.items())]


def mean_ablation_hooks(
    model, heads, reference_ids: torch.Tensor, *, attention_mask: torch.Tensor | None = None
) -> list[Hook]:
    """Hooks that replace the outputs (``hook_z`` slices) of ``heads`` by their mean over the batch and the
    positions of a reference run on ``reference_ids`` (the real tokens of ``attention_mask``, if given).

    ``model``: a Hugging Face causal LM or a :class:`HookedModel`; ``heads``: ``(layer, head)`` tuples.
    Use the result as ``hooked.run_with_hooks(input_ids, fwd_hooks=hooks)``; an empty ``heads`` gives no
    hooks (and runs nothing).

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the means would be one sample of it.
    """
    hooked = wrap(model)
    by_layer = _heads_by_layer(heads, hooked.n_layers, hooked.n_heads)
    ids = hooked.token_ids(reference_ids).to(hooked.embed.weight.device)
    batch, seq = ids.shape
    mask = check_mask(attention_mask, "attention_mask", batch, seq, ids.device, like="reference_ids")
    if not bool(mask.any()):
        raise ValueError("attention_mask must keep at least one token of reference_ids")
    if not by_layer:
        return []
    kwargs: dict[str, Any] = {} if attention_mask is None else {"attention_mask": mask.long()}
    with eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(ids, [act_name("z", layer) for layer in by_layer], **kwargs)
    hooks = []
    for layer, hs in sorted(by_layer.items()):
        mean = cache["z", layer][mask].mean(0)  # (heads, d_head): over the batch and the real positions
        hooks.append(_replace(layer, hs, _constant(mean)))
    return hooks
