"""Feature-collapse diagnostics for latent thoughts: how alike the fed vectors are, how many directions they
span, and how their scale compares with the token embeddings the model was trained on."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml_agents.validation import check_tensor


@dataclass(frozen=True)
class CollapseDiagnostics:
    """``mean_cosine``: mean cosine similarity over distinct pairs (1 for identical vectors; the collapse
    score); ``effective_rank``: exp of the entropy of the normalised singular values (Roy & Vetterli 2007; 1
    for identical vectors, d for d orthonormal ones); ``norm_ratio``: mean latent norm over mean token-embedding
    norm (None without embeddings); ``n``: the number of vectors."""

    mean_cosine: float
    effective_rank: float
    norm_ratio: float | None
    n: int


def effective_rank(vectors: torch.Tensor) -> float:
    """Roy & Vetterli's effective rank of the rows of ``vectors`` (``(N, D)``, not centred)."""
    check_tensor(vectors, "vectors", ndim=2, floating=True)
    if not bool(torch.isfinite(vectors).all()):
        raise ValueError("vectors must be finite")
    v = vectors.detach().double()
    top = float(v.abs().max()) if v.numel() else 0.0
    if top == 0.0:
        raise ValueError("vectors must not all be zero")
    s = torch.linalg.svdvals(v / top)  # the rank is scale-free; unscaled, huge or tiny float64 over/underflow
    p = s / s.sum()
    p = p[p > 0]
    return float(math.exp(-float((p * p.log()).sum())))


def collapse_diagnostics(
    latents: torch.Tensor, embedding_weight: torch.Tensor | None = None
) -> CollapseDiagnostics:
    """Diagnostics of the latent inputs ``latents`` ``(N, D)``, N ≥ 2, against the input-embedding matrix."""
    check_tensor(latents, "latents", ndim=2, floating=True)
    if latents.shape[0] < 2:
        raise ValueError(f"latents must hold at least 2 vectors, got {latents.shape[0]}")
    x = latents.detach().double()
    if not bool(torch.isfinite(x).all()):
        raise ValueError("latents must be finite")
    if x.shape[1] == 0 or bool((x == 0).all(dim=-1).any()):
        raise ValueError("latents must not hold a zero vector (its cosine is undefined)")
    top = float(x.abs().max())
    x = x / top  # a common scale changes no cosine nor ratio; unscaled, huge or tiny float64 over/underflow
    unit = x / x.abs().amax(dim=-1, keepdim=True)  # per row as well, for rows far below the largest
    unit = unit / unit.norm(dim=-1, keepdim=True)
    gram = unit @ unit.T
    n = x.shape[0]
    mean_cos = float((gram.sum() - gram.diagonal().sum()) / (n * (n - 1)))
    ratio = None
    if embedding_weight is not None:
        check_tensor(embedding_weight, "embedding_weight", ndim=2, floating=True)
        if embedding_weight.shape[1] != x.shape[1]:
            raise ValueError(
                f"embedding_weight must have width {x.shape[1]} like latents, got {embedding_weight.shape[1]}"
            )
        e_norm = float((embedding_weight.detach().double() / top).norm(dim=-1).mean())
        if e_norm == 0.0 or not math.isfinite(e_norm):
            raise ValueError("embedding_weight must have a finite, non-zero mean row norm")
        ratio = float(x.norm(dim=-1).mean()) / e_norm
        if not math.isfinite(ratio):
            raise ValueError("embedding_weight is too small beside latents: their norm ratio overflows")
    return CollapseDiagnostics(mean_cos, effective_rank(x), ratio, n)
