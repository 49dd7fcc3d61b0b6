"""The logit lens: read every layer's residual stream through the model's own final norm and unembedding.

nostalgebraist, "interpreting GPT: the logit lens", LessWrong, 2020; Belrose et al., "Eliciting Latent
Predictions from Transformers with the Tuned Lens", 2023 (Sec. 2 defines the lens used here). For Hugging
Face Llama-family causal LMs (``model.model.layers``, ``model.model.norm``, ``model.lm_head``): plain torch
forward hooks record the residual stream entering the first block and leaving every block, then
``lm_head(norm(h_l))`` decodes each. Layer ``l`` is TransformerLens's ``blocks.{l-1}.hook_resid_post``
(layer 0: ``blocks.0.hook_resid_pre``, the embeddings), so the last layer reproduces the model's logits.
"""

from __future__ import annotations

import torch
from torch import nn


def _check_model(model) -> tuple[nn.ModuleList, nn.Module, nn.Module]:
    inner = getattr(model, "model", None)
    layers, norm, head = getattr(inner, "layers", None), getattr(inner, "norm", None), getattr(model, "lm_head", None)
    if not (isinstance(layers, nn.ModuleList) and len(layers) > 0 and isinstance(norm, nn.Module)
            and isinstance(head, nn.Module)):
        raise TypeError("model must be a Llama-family causal LM with model.model.layers (a non-empty ModuleList), "
                        f"model.model.norm and model.lm_head; got {type(model).__name__}")
    return layers, norm, head


def logit_lens(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits decoded from the residual stream before the first block and after every block.

    ``input_ids`` is a ``torch.long`` tensor shaped ``(seq,)`` or ``(batch, seq)``. Returns
    ``(n_layers + 1, seq, vocab)`` (or ``(n_layers + 1, batch, seq, vocab)``): entry 0 decodes the
    embeddings, entry ``l`` the output of block ``l``; the last entry equals the model's logits. Runs one
    forward pass without gradients; the hooks are removed afterwards even if the forward pass fails.
    """
    layers, norm, head = _check_model(model)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.long:
        raise TypeError(f"input_ids must be a torch.LongTensor, got "
                        f"{getattr(input_ids, 'dtype', type(input_ids).__name__)}")
    if input_ids.ndim not in (1, 2) or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty tensor shaped (seq,) or (batch, seq), "
                         f"got {tuple(input_ids.shape)}")
    vocab = model.get_input_embeddings().num_embeddings
    if input_ids.min() < 0 or input_ids.max() >= vocab:
        raise ValueError(f"input_ids must lie in [0, {vocab}), got values in [{input_ids.min()}, {input_ids.max()}]")
    batched = input_ids.ndim == 2
    ids = input_ids if batched else input_ids[None]  # (batch, seq)

    resid: list[torch.Tensor] = []  # n_layers + 1 tensors shaped (batch, seq, hidden)

    def record_input(module, args, kwargs):
        resid.append(args[0] if args else kwargs["hidden_states"])

    def record_output(module, args, output):
        resid.append(output[0] if isinstance(output, tuple) else output)  # older transformers return tuples

    handles = [layers[0].register_forward_pre_hook(record_input, with_kwargs=True)]
    try:
        handles += [layer.register_forward_hook(record_output) for layer in layers]
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
            logits = head(norm(torch.stack(resid)))  # (n_layers + 1, batch, seq, vocab)
    finally:
        for handle in handles:
            handle.remove()
    if len(resid) != len(layers) + 1:
        raise RuntimeError(f"expected {len(layers) + 1} residual streams, recorded {len(resid)}")
    return logits if batched else logits[:, 0]
