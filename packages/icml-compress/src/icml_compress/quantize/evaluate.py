"""Evaluation: KL(float || quantized) per token and perplexity on held-out text.

:func:`split_corpus` cuts a text into a calibration part and a disjoint held-out part (at a paragraph
boundary); :func:`evaluate` runs the float reference and the quantized model on the same sequences.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from icml_compress.quantize.calibration import check_token_ids
from icml_compress.quantize.distill import kl_per_token
from icml_compress.validation import check_instance


def split_corpus(text: str, calibration_fraction: float = 0.8) -> tuple[str, str]:
    """``(calibration, held_out)``: the text before and after the first paragraph break past the fraction."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a non-empty str, got {type(text).__name__}")
    if not text:
        raise ValueError("text must be a non-empty str")
    if isinstance(calibration_fraction, bool) or not isinstance(calibration_fraction, int | float):
        raise TypeError(f"calibration_fraction must be a number in (0, 1), got {calibration_fraction!r}")
    if not 0 < calibration_fraction < 1:
        raise ValueError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    cut = int(len(text) * calibration_fraction)
    if cut == 0:
        raise ValueError(
            f"text ({len(text)} characters) is too short to split at calibration_fraction={calibration_fraction}: "
            "the calibration part would be empty"
        )
    brk = text.find("\n\n", cut)
    cut = cut if brk < 0 else brk
    return text[:cut], text[cut:]


@torch.no_grad()
def reference_logprobs(reference: nn.Module, sequences: torch.Tensor) -> torch.Tensor:
    """Float16 log-probabilities ``(n, seq_len, vocab)`` of the reference model (reused across methods)."""
    device = next(reference.parameters()).device
    return torch.stack(
        [
            torch.log_softmax(reference(s.unsqueeze(0).to(device)).logits[0].float(), -1).half()
            for s in sequences
        ]
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
    from icml_compress.quantize.model import vocab_size

    check_instance(model, "model", nn.Module, "torch.nn.Module")
    if (reference is None) == (reference_lp is None):
        raise ValueError("give exactly one of reference and reference_lp")
    if not isinstance(sequences, torch.Tensor) or sequences.is_floating_point() or sequences.is_complex():
        raise TypeError(f"sequences must be an integer tensor (n, seq_len >= 2), got {sequences!r:.80}")
    if (
        sequences.dtype == torch.bool
        or sequences.dim() != 2
        or sequences.shape[0] < 1
        or sequences.shape[1] < 2
    ):
        raise ValueError(
            f"sequences must be an integer tensor (n >= 1, seq_len >= 2), got {sequences.dtype} "
            f"of shape {tuple(sequences.shape)}"
        )
    check_token_ids(sequences, "sequences", vocab_size(model))
    if reference is not None:
        check_instance(reference, "reference", nn.Module, "torch.nn.Module")
        check_token_ids(sequences, "sequences", vocab_size(reference))
    else:
        check_instance(reference_lp, "reference_lp", torch.Tensor, "torch.Tensor")
        assert reference_lp is not None  # for the type checker: check_instance refused None
        if (
            not reference_lp.is_floating_point()
            or reference_lp.dim() != 3
            or reference_lp.shape[:2] != sequences.shape
        ):
            raise ValueError(
                f"reference_lp must be floating log-probabilities (n, seq_len, vocab) = "
                f"({sequences.shape[0]}, {sequences.shape[1]}, vocab), got {reference_lp.dtype} "
                f"of shape {tuple(reference_lp.shape)}"
            )
        if torch.isnan(reference_lp).any() or (reference_lp > 0).any():
            raise ValueError("reference_lp must hold log-probabilities (<= 0, no NaN)")
    kl_seq = []
    nll_sum = ref_nll_sum = 0.0
    n_nll = 0
    device = next(model.parameters()).device
    ref_device = None if reference is None else next(reference.parameters()).device
    for i, seq in enumerate(sequences):
        seq = seq.to(device)
        lq = torch.log_softmax(model(seq.unsqueeze(0)).logits[0].float(), -1)  # (seq_len, vocab)
        if reference_lp is not None:
            lp = reference_lp[i].to(device).float()
        else:
            assert reference is not None  # exactly one of the two is given
            ref_logits = reference(seq.unsqueeze(0).to(ref_device)).logits[0].float()
            lp = torch.log_softmax(ref_logits, -1).to(device)
        # the model's logits fix the vocabulary: checked on the first sequence
        if lp.shape[-1] != lq.shape[-1]:
            which = "reference_lp" if reference_lp is not None else "reference"
            raise ValueError(
                f"{which} must have the model's vocabulary size {lq.shape[-1]} (logits' last dimension), "
                f"got {lp.shape[-1]}"
            )
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
