"""Helpers for testing kernels against their references (used by the icml packages' tests too)."""

from __future__ import annotations

import torch


def rel_rms_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``rms(actual - expected) / rms(expected)`` computed in float64; ``inf`` when either holds a NaN,
    so an output element a kernel never wrote (NaN-poisoned buffers) fails any tolerance."""
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: actual {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    a, e = actual.detach().double(), expected.detach().double()
    if torch.isnan(a).any() or torch.isnan(e).any():
        return float("inf")
    denom = e.pow(2).mean().sqrt().item() if e.numel() else 0.0
    err = (a - e).pow(2).mean().sqrt().item() if e.numel() else 0.0
    return err / denom if denom > 0 else err
