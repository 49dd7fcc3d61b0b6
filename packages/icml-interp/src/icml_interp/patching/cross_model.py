"""Cross-model layer patching: put model B's layer outputs into model A.

This is what the Anchor–Adapter authors' ``path_patching_analysis.py`` computes under the name "path
patching" (Yan et al. 2026): cache the attention and MLP outputs of the *after* model B on a prompt, then run
(or generate from) the *before* model A with one layer's attention or MLP output replaced by B's, at the
prompt positions only (prefill), once. Layers where this moves A's behaviour towards B's carry the change.
Both models must share the architecture's shapes (B is typically a fine-tuned copy of A).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

import torch

from icml_interp.hooks import ActivationCache, act_name, wrap
from icml_interp.patching.activation import PATCHABLE, check_source_names, resolve_names
from icml_interp.patching.result import (
    Metric,
    PatchingResult,
    check_components,
    check_layers,
    check_metric,
    logits_width,
    metric_value,
)
from icml_interp.validation import check_indices, eval_mode


def _wrap_named(model, name: str):
    """``wrap(model)`` with any refusal prefixed by the argument's name."""
    try:
        return wrap(model)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None


@contextmanager
def prefill_patch(model, source: ActivationCache | dict, names: Sequence[str]):
    """Within the context, the first forward pass whose activation at each of ``names`` has the cached shape
    (the prefill of ``generate``) takes ``source``'s activation; later passes (decoding) are untouched."""
    hooked = wrap(model)
    names = check_source_names(source, resolve_names(hooked, names))
    for name in names:
        if name not in hooked.hook_names:
            raise ValueError(
                f"names: {name!r} is not a hook point of this model (see HookedModel.hook_names)"
            )
    done: set[str] = set()

    def hook(act, h):
        if h.name in done or act.shape != source[h.name].shape:
            return None
        done.add(h.name)
        return source[h.name].to(act.dtype)

    with hooked.hooks([(n, hook) for n in hooked.resolve(names)]):
        yield hooked


def cross_model_layer_patching(
    model_a,
    model_b,
    input_ids: torch.Tensor,
    metric: Metric,
    *,
    components: Sequence[str] = ("attn_out", "mlp_out"),
    layers=None,
    positions=None,
) -> PatchingResult:
    """Scan: run ``model_a`` with one (component, layer) output replaced by ``model_b``'s on the same input.

    ``metric`` maps logits ``(n_prompts, seq, vocab)`` to a scalar; ``positions`` restricts the patch (default
    all prompt positions). Rows carry ``effect = (patched - A) / (B - A)``: 1 means the layer's output alone
    carries B's behaviour into A. ``clean`` is model A's metric and ``corrupt`` model B's.

    Runs both models in eval mode; every submodule's mode is restored (also on a raise): the passes it
    compares must see the same networks, where in training mode each would draw its own dropout mask.
    """
    a, b = _wrap_named(model_a, "model_a"), _wrap_named(model_b, "model_b")
    shape_a, shape_b = ((m.n_layers, m.d_model, m.n_heads, m.d_vocab) for m in (a, b))
    if shape_a != shape_b:
        raise ValueError(
            "model_a and model_b must have the same layers, width, heads and vocabulary, "
            f"got {shape_a} and {shape_b}"
        )
    ids = a.token_ids(input_ids)
    check_metric(metric, ids.shape[0], ids.shape[1], logits_width(a))
    components = check_components(components, PATCHABLE[:-1])
    layers = check_layers(layers, a.n_layers)
    positions = check_indices(positions, ids.shape[1], "positions")
    names = {(c, layer): act_name(c, layer) for c in components for layer in layers}
    for name in names.values():
        a.hook_point(name)
    with torch.no_grad(), eval_mode(a.model), eval_mode(b.model):
        logits_b, cache_b = b.run_with_cache(ids, list(names.values()))
        result = PatchingResult(
            "cross-model layer patching", metric_value(metric, a(ids)), metric_value(metric, logits_b)
        )
        for (component, layer), name in names.items():

            def patch(act, hook, src=cache_b[name]):
                if positions is None:
                    return src
                new = act.clone()
                new[:, positions] = src[:, positions]
                return new

            value = metric_value(metric, a.run_with_hooks(ids, [(name, patch)]))
            result.add(value, component=component, layer=layer)
    return result
