"""The ``markov-stages`` model as a Hugging Face GPT-2, so that the interpretability core
(:mod:`icml_interp.hooks`) reads its attention pattern with the hooks users run on real models.

A one-layer GPT-2 reproduces our model's attention exactly: the token and position embeddings write the
two one-hot blocks (their sum is the concatenation); ``ln_1`` sees inputs with exactly two ones among
``n_embd`` entries, so its mean and variance are the same for every input and a weight of
``sqrt(var + eps)`` with a bias of the mean makes it the identity; ``c_attn`` holds ``W_Q, W_K, W_V`` head
by head (GPT-2's head size is ``n_embd / n_head = d_head`` and it scales scores by ``1 / sqrt(d_head)``, as
ours does). Only the attention (queries, keys, values, scores, pattern, head outputs) matches: GPT-2's
residual stream, MLP and final norm are not part of our model, so its logits differ.
"""

from __future__ import annotations

import torch

from icml_theory.markov import AttentionOnlyTransformer


def as_gpt2(model: AttentionOnlyTransformer):
    """A ``transformers.GPT2LMHeadModel`` whose attention pattern on any tokens equals ``model``'s."""
    from transformers import GPT2Config, GPT2LMHeadModel

    heads, d_in, d_head = model.heads, model.d_in, model.d_head
    n_embd = heads * d_head
    if n_embd < d_in:
        raise ValueError(
            f"heads * d_head ({n_embd}) must be >= n_states + context ({d_in}) for the embedding"
        )
    config = GPT2Config(
        vocab_size=model.n_states, n_positions=model.context, n_embd=n_embd, n_layer=1, n_head=heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    gpt2 = GPT2LMHeadModel(config).eval()
    a = model.attn
    with torch.no_grad():
        for p in gpt2.parameters():
            p.zero_()
        t = gpt2.transformer
        t.wte.weight[:, : model.n_states] = torch.eye(model.n_states)
        t.wpe.weight[:, model.n_states : d_in] = torch.eye(model.context)
        mean = 2.0 / n_embd
        var = 2.0 / n_embd - mean**2
        ln = t.h[0].ln_1
        ln.weight.fill_((var + ln.eps) ** 0.5)
        ln.bias.fill_(mean)
        w = t.h[0].attn.c_attn.weight  # Conv1D: (n_embd, 3 n_embd), output laid out q | k | v, heads within
        for which, weight in enumerate((a.W_Q, a.W_K, a.W_V)):
            for h in range(heads):
                col = which * n_embd + h * d_head
                w[:d_in, col : col + d_head] = weight[h].detach().to(w.dtype)
    return gpt2
