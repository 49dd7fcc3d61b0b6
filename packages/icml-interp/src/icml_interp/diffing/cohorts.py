"""Shared versus cohort-specific latents from firing statistics of one SAE on several cohorts.

A latent is *specific* to cohort c when it fires at least ``min_freq`` of c's tokens and its firing frequency
there is at least ``ratio`` times that on every other cohort (frequency ratio with a floor ``eps``); *shared*
when it fires at least ``min_freq`` on every cohort with all pairwise ratios below ``ratio``; otherwise
``"mixed"``, or ``"dead"`` when it fires below ``min_freq`` everywhere. The thresholds are ours.
"""

from __future__ import annotations

import math

import torch

from icml_interp.validation import check_choice, check_finite, check_number, check_tensor


def firing_frequency(codes: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    """Fraction of tokens (rows of ``codes`` (n_tokens, d_sae)) on which each latent exceeds ``threshold``."""
    _check_codes(codes, "codes")
    threshold = check_number(threshold, "threshold")
    return (codes > threshold).float().mean(0)


def _check_codes(codes, name: str) -> torch.Tensor:
    check_tensor(codes, name, "(n_tokens, d_sae)", ndim=2)
    if codes.is_complex():
        raise TypeError(f"{name} must be a real tensor, got {codes.dtype}")
    return check_finite(codes, name)


def cohort_latent_table(
    codes: dict[str, torch.Tensor], *, min_freq: float = 1e-3, ratio: float = 4.0, eps: float = 1e-4
) -> list[dict]:
    """One row per latent: ``freq_<cohort>``, ``mean_<cohort>`` (mean activation), ``log_ratio`` (two cohorts:
    ``log((f_2 + eps) / (f_1 + eps))``, second over first), ``freq_diff`` (max − min frequency) and ``status``
    (a cohort name when specific to it, ``"shared"``, ``"mixed"`` or ``"dead"``)."""
    if not isinstance(codes, dict) or len(codes) < 2:
        raise ValueError(
            "codes must be a dict cohort name -> (n_tokens, d_sae) tensor with at least two cohorts"
        )
    widths = {n: _check_codes(c, f"codes[{n!r}]").shape[1] for n, c in codes.items()}
    if len(set(widths.values())) != 1:
        raise ValueError(f"codes: all cohorts must be encoded by the same SAE; got widths {widths}")
    check_number(min_freq, "min_freq", minimum=0, maximum=1, open_max=True)
    check_number(ratio, "ratio", minimum=1, open_min=True)
    eps = check_number(eps, "eps", minimum=0, open_min=True)
    names = list(codes)
    freq = torch.stack([firing_frequency(codes[n]) for n in names])  # (n_cohorts, d_sae)
    mean = torch.stack([codes[n].double().mean(0) for n in names])
    rows = []
    for j in range(freq.shape[1]):
        f = freq[:, j]
        row: dict[str, object] = {"latent": j}
        for i, n in enumerate(names):
            row[f"freq_{n}"] = float(f[i])
            row[f"mean_{n}"] = float(mean[i, j])
        if len(names) == 2:
            row["log_ratio"] = math.log((float(f[1]) + eps) / (float(f[0]) + eps))
        row["freq_diff"] = float(f.max() - f.min())
        if float(f.max()) < min_freq:
            status = "dead"
        else:
            top = int(f.argmax())
            others = torch.cat([f[:top], f[top + 1 :]])
            if (f[top] + eps >= ratio * (others + eps)).all():
                status = names[top]
            elif float(f.min()) >= min_freq:
                status = "shared"
            else:
                status = "mixed"
        row["status"] = status
        rows.append(row)
    return rows


def specific_latents(codes: dict[str, torch.Tensor], cohort: str, **kwargs) -> list[int]:
    """Latents specific to ``cohort`` (see :func:`cohort_latent_table`), most frequent-difference first."""
    if not isinstance(codes, dict) or len(codes) < 2:
        raise ValueError(
            "codes must be a dict cohort name -> (n_tokens, d_sae) tensor with at least two cohorts"
        )
    check_choice(cohort, "cohort", codes)
    rows = [r for r in cohort_latent_table(codes, **kwargs) if r["status"] == cohort]
    return [r["latent"] for r in sorted(rows, key=lambda r: -r["freq_diff"])]
