"""Evaluation: KL(float || quantized) per token and perplexity on held-out text.

:func:`split_corpus` cuts a text into a calibration part and a disjoint held-out part (at a paragraph
boundary); :func:`evaluate` runs the float reference and the quantized model on the same sequences.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from icml_compress.quantize.distill import kl_per_token


def split_corpus(text: str, calibration_fraction: float = 0.8) -> tuple[str, str]:
    """``(calibration, held_out)``: the text before and after the first paragraph break past the fraction."""
    if not isinstance(text, str) or not text:
        raise ValueError("text must be a non-empty str")
    if not 0 < calibration_fraction < 1:
        raise ValueError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    cut = int(len(text) * calibration_fraction)
    brk = text.find("\n\n", cut)
    cut = cut if brk < 0 else brk
    return text[:cut], text[cut:]


@torch.no_grad()
def reference_logprobs(reference: nn.Module, sequences: torch.Tensor) -> torch.Tensor:
    """Float16 log-probabilities ``(n, seq_len, vocab)`` of the reference model (reused across methods)."""
    return torch.stack(
        [torch.log_softmax(reference(s.unsqueeze(0)).logits[0].float(), -1).half() for s in sequences]
    )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    sequences: torch.Tensor,
    *,
    reference: nn.Module | None = None,
    reference_lp: torch.Tensor | None = None,
) -> dict:
    """Mean KL(reference || model) per token over all positions (also per sequence, ``kl_per_sequence``, for
    paired comparisons between models), and both perplexities (next token).

    Give either the ``reference`` model or its :func:`reference_logprobs` for ``sequences (n, seq_len)``.
    """
    if (reference is None) == (reference_lp is None):
        raise ValueError("give exactly one of reference and reference_lp")
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2 or sequences.shape[1] < 2:
        raise ValueError("sequences must be an integer tensor (n, seq_len >= 2)")
    kl_seq = []
    nll_sum = ref_nll_sum = 0.0
    n_nll = 0
    for i, seq in enumerate(sequences):
        lq = torch.log_softmax(model(seq.unsqueeze(0)).logits[0].float(), -1)  # (seq_len, vocab)
        if reference_lp is not None:
            lp = reference_lp[i].float()
        else:
            assert reference is not None  # exactly one of the two is given
            lp = torch.log_softmax(reference(seq.unsqueeze(0)).logits[0].float(), -1)
        kl_seq.append(kl_per_token(lp, lq).mean().item())
        tgt = seq[1:].unsqueeze(-1)
        nll_sum += -lq[:-1].gather(-1, tgt).sum().item()
        ref_nll_sum += -lp[:-1].gather(-1, tgt).sum().item()
        n_nll += seq.numel() - 1
    return {
        "kl": sum(kl_seq) / len(kl_seq),
        "kl_per_sequence": kl_seq,
        "ppl": math.exp(nll_sum / n_nll),
        "ppl_reference": math.exp(ref_nll_sum / n_nll),
        "tokens": sequences.numel(),
    }
