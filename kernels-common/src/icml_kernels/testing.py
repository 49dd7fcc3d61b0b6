"""Helpers for testing kernels against their references (used by the icml packages' tests too)."""

from __future__ import annotations

import math

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


def random_block_index(lead: tuple[int, ...], n_blocks: int, max_k: int, seed: int = 0) -> torch.Tensor:
    """A ``block_index`` for :func:`icml_kernels.block_sparse_attention` shaped ``lead + (n_blocks, max_k)``:
    per query block up to ``max_k`` distinct random key blocks, padded with ``-1`` at random places (some
    rows hold none)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(math.prod(lead) * n_blocks):
        kept = torch.randperm(n_blocks, generator=gen)[
            : int(torch.randint(0, max_k + 1, (1,), generator=gen))
        ]
        row = torch.full((max_k,), -1)
        row[torch.randperm(max_k, generator=gen)[: len(kept)]] = kept
        rows.append(row)
    return torch.stack(rows).view(*lead, n_blocks, max_k)
