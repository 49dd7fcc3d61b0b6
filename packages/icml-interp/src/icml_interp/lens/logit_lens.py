"""The logit lens: read any residual stream (or MLP value vector) through the model's own final norm and unembedding.

nostalgebraist, "interpreting GPT: the logit lens", LessWrong, 2020; Belrose et al., "Eliciting Latent
Predictions from Transformers with the Tuned Lens", 2023 (Sec. 2 defines the lens used here). Layer ``l`` of
:func:`logit_lens` is TransformerLens's ``blocks.{l-1}.hook_resid_post`` (layer 0: ``blocks.0.hook_resid_pre``,
the embeddings), so the last layer reproduces the model's logits. The value-vector lens (Geva et al. 2022;
``logit_lens_mlp.py`` of the Anchor–Adapter authors) decodes row ``i`` of an MLP's down projection, the
direction that key ``i`` writes, as if it were a residual stream.
"""

from __future__ import annotations

import torch
from torch import nn

from icml_interp.hooks import HookedModel, wrap
from icml_interp.validation import check_int, check_token_ids, eval_mode


def logit_lens(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits decoded from the residual stream before the first block and after every block.

    ``model`` is a Hugging Face causal LM of a mapped architecture (or a :class:`~icml_interp.hooks.HookedModel`);
    a plain torch module with the Llama-family layout (``model.model.layers``, ``model.model.norm``,
    ``model.lm_head``) and no Hugging Face config also works. ``input_ids`` is a ``torch.long`` tensor shaped
    ``(seq,)`` or ``(batch, seq)``. Returns ``(n_layers + 1, seq, vocab)`` (or ``(n_layers + 1, batch, seq,
    vocab)``): entry 0 decodes the embeddings, entry ``l`` the output of block ``l``; the last entry equals the
    model's logits. One forward pass without gradients; the hooks are removed afterwards even if it fails.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the lens would be one sample of it.
    """
    if getattr(getattr(model, "config", None), "model_type", None) is None and not isinstance(
        model, HookedModel
    ):
        return _plain_layout_lens(model, input_ids)
    hooked = wrap(model)
    ids = hooked.token_ids(input_ids)
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{i}.hook_resid_post" for i in range(hooked.n_layers))]
    with torch.no_grad(), eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(ids, names)
        logits = hooked.lens(torch.stack([cache[n] for n in names]))  # (n_layers + 1, batch, seq, vocab)
    return logits if input_ids.ndim == 2 else logits[:, 0]


def _plain_layout_lens(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The lens for a plain torch module laid out like a Llama (no config, so no HookedModel)."""
    inner = getattr(model, "model", None)
    layers, norm, head = (
        getattr(inner, "layers", None),
        getattr(inner, "norm", None),
        getattr(model, "lm_head", None),
    )
    if not (
        isinstance(layers, nn.ModuleList)
        and len(layers) > 0
        and isinstance(norm, nn.Module)
        and isinstance(head, nn.Module)
    ):
        raise TypeError(
            "model must be a Hugging Face causal LM with a config.model_type, or a torch module laid out "
            f"as model.model.layers / model.model.norm / model.lm_head; got {type(model).__name__}"
        )
    ids = check_token_ids(input_ids)
    resid: list[torch.Tensor] = []

    def record_input(module, args, kwargs):
        resid.append(args[0] if args else kwargs["hidden_states"])

    def record_output(module, args, output):
        resid.append(output[0] if isinstance(output, tuple) else output)

    handles = [layers[0].register_forward_pre_hook(record_input, with_kwargs=True)]
    try:
        handles += [layer.register_forward_hook(record_output) for layer in layers]
        with torch.no_grad(), eval_mode(model):
            model(input_ids=ids, use_cache=False)
            logits = head(norm(torch.stack(resid)))  # (n_layers + 1, batch, seq, vocab)
    finally:
        for handle in handles:
            handle.remove()
    return logits if input_ids.ndim == 2 else logits[:, 0]


def token_rank_by_layer(model, input_ids: torch.Tensor, target: int, position: int = -1) -> dict:
    """Rank (0 = top-1) and probability of token ``target`` under the logit lens at every layer.

    ``input_ids`` is one sequence ``(seq,)``; ``position`` the position whose next-token prediction is read.
    Returns ``{"rank": [n_layers + 1 ints], "prob": [n_layers + 1 floats]}`` (layer 0 = embeddings).
    Runs the model in eval mode (:func:`logit_lens`); every submodule's mode is restored.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 1:
        raise ValueError(
            f"input_ids must be one sequence shaped (seq,), got {getattr(input_ids, 'shape', input_ids)}"
        )
    lens = logit_lens(model, input_ids)  # (n_layers + 1, seq, vocab)
    check_int(position, "position", minimum=-input_ids.shape[0], maximum=input_ids.shape[0] - 1)
    lens = lens[:, position]  # (n_layers + 1, vocab)
    check_int(target, "target", minimum=0, maximum=lens.shape[-1] - 1)
    rank = (lens > lens[:, target : target + 1]).sum(-1)
    prob = torch.softmax(lens.float(), dim=-1)[:, target]
    return {"rank": rank.tolist(), "prob": prob.tolist()}


def _neuron_index(neurons, d_mlp: int) -> torch.Tensor:
    """``neurons`` (a sequence of ints or a 1-d integer tensor) as a long tensor of indices in ``[0, d_mlp)``."""
    if isinstance(neurons, torch.Tensor):
        if neurons.dtype.is_floating_point or neurons.is_complex() or neurons.dtype == torch.bool:
            raise TypeError(f"neurons must hold integer indices, got dtype {neurons.dtype}")
        index = neurons.long()
    elif isinstance(neurons, (list, tuple, range)):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in neurons):
            raise TypeError(f"neurons must be a sequence of int indices, got {neurons!r}")
        index = torch.tensor(list(neurons), dtype=torch.long)
    else:
        raise TypeError(
            f"neurons must be a sequence of ints or an index tensor, got {type(neurons).__name__}"
        )
    if index.ndim != 1 or index.numel() == 0 or index.min() < 0 or index.max() >= d_mlp:
        raise ValueError(f"neurons must be a non-empty list of indices in [0, {d_mlp})")
    return index


def mlp_value_lens(model, layer: int, top_k: int = 10, neurons=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top tokens of MLP value vectors under the logit lens.

    Each value vector (row ``i`` of the down projection's ``(d_mlp, d_model)`` view, the direction key ``i``
    writes) goes through the final norm and the unembedding. Returns ``(token_ids, logits)``, both
    ``(n_neurons, top_k)``, for ``neurons`` (default: all ``d_mlp``). As in the authors' code, the norm is
    applied to the bare value vector (so an RMSNorm only rescales it): a choice, since a value vector is never
    a residual stream on its own.
    """
    hooked = wrap(model)
    values = hooked.mlp_values(layer)  # (d_mlp, d_model)
    if neurons is not None:
        values = values[_neuron_index(neurons, values.shape[0])]
    check_int(top_k, "top_k", minimum=1, maximum=hooked.d_vocab)
    with torch.no_grad():
        logits = hooked.lens(values)  # (n_neurons, vocab)
        top = logits.topk(top_k, dim=-1)
    return top.indices, top.values
