"""Confidence matrices ``A = λ I + Σ w_i g_i g_iᵀ`` and the effective dimension.

:class:`FullConfidence` keeps ``A⁻¹`` by Sherman–Morrison rank-one updates (``O(p²)`` a round) or, with
``method="explicit"``, re-inverts ``A`` every round (``O(p³)``; the baseline of the benchmark).
:class:`DiagonalConfidence` keeps only the diagonal, ``λ + Σ w_i g_i²`` (the approximation NeuralUCB's
reference code uses when ``p`` is large). Both answer ``norms(G) = sqrt(g_kᵀ A⁻¹ g_k)`` for the rows of ``G``.
"""

from __future__ import annotations

import math

import torch

from icml_theory.bandits._checks import as_tensor
from icml_theory.validation import check_choice, check_int, check_real

METHODS = ("sherman-morrison", "explicit")
_LIMIT = 1e300  # an update term above this could overflow float64 when added


def _square(v: torch.Tensor) -> float:
    """``max |v_i|²`` as a float (inf rather than Python's OverflowError)."""
    top = float(v.abs().max())
    return top * top


def _finite_norms(norms: torch.Tensor) -> torch.Tensor:
    if not torch.isfinite(norms).all():
        raise ValueError("G must have rows whose norms are finite: gᵀ A⁻¹ g overflows float64")
    return norms


class FullConfidence:
    """``A = λ I + Σ w g gᵀ`` with its inverse kept exactly (float64).

    ``method="sherman-morrison"`` (default) updates ``A⁻¹ ← A⁻¹ − w u uᵀ / (1 + w gᵀu)``, ``u = A⁻¹g``;
    ``"explicit"`` recomputes ``A⁻¹`` from ``A`` after every update."""

    def __init__(self, dim: int, lam: float = 1.0, *, method: str = "sherman-morrison") -> None:
        self.dim = check_int(dim, "dim", 1, 1 << 14)
        self.lam = check_real(lam, "lam", "(0, inf)")
        self.method = check_choice(method, "method", METHODS)
        self.matrix = torch.eye(self.dim, dtype=torch.float64) * self.lam
        self.inverse = torch.eye(self.dim, dtype=torch.float64) / self.lam
        self.count = 0

    def update(self, g, weight: float = 1.0) -> None:
        """Add ``weight · g gᵀ`` (``weight >= 0``)."""
        g = as_tensor(g, "g", 1, self.dim)
        w = check_real(weight, "weight", "[0, inf)")
        # refuse an overflowing update before anything changes (scalar checks; the updates below are
        # in-place rank-one BLAS calls, no p x p temporaries)
        if not w * _square(g) < _LIMIT:
            raise ValueError("g and weight must keep the matrix finite: weight * g gᵀ overflows float64")
        if self.method == "explicit":
            self.matrix.addr_(g, g, alpha=w)
            self.inverse = torch.linalg.inv(self.matrix)
        else:
            u = self.inverse @ g
            c = w / (1.0 + w * float(g @ u))
            if not (math.isfinite(c) and c * _square(u) < _LIMIT):
                raise ValueError(
                    "g and weight must keep the inverse finite: the rank-one update overflows float64"
                )
            self.matrix.addr_(g, g, alpha=w)
            self.inverse.addr_(u, u, alpha=-c)
        self.count += 1

    def norms(self, G) -> torch.Tensor:
        """``sqrt(g_kᵀ A⁻¹ g_k)`` for each row ``g_k`` of ``G`` (shape ``(n, dim)``)."""
        return _finite_norms(self._norms(as_tensor(G, "G", 2, self.dim, rows=False)))

    def _norms(self, G: torch.Tensor) -> torch.Tensor:
        return ((G @ self.inverse) * G).sum(-1).clamp_min(0.0).sqrt()

    def logdet(self) -> float:
        """``log det A``."""
        return float(torch.linalg.slogdet(self.matrix)[1])


class DiagonalConfidence:
    """The diagonal of ``A``: ``d = λ + Σ w g²`` (elementwise), so ``norms(G)² = Σ_j G_kj² / d_j``."""

    method = "diagonal"

    def __init__(self, dim: int, lam: float = 1.0) -> None:
        self.dim = check_int(dim, "dim", 1, 1 << 24)
        self.lam = check_real(lam, "lam", "(0, inf)")
        self.diagonal = torch.full((self.dim,), self.lam, dtype=torch.float64)
        self.count = 0

    def update(self, g, weight: float = 1.0) -> None:
        """Add ``weight · g²`` to the diagonal (``weight >= 0``)."""
        g = as_tensor(g, "g", 1, self.dim)
        w = check_real(weight, "weight", "[0, inf)")
        if not w * _square(g) < _LIMIT:
            raise ValueError("g and weight must keep the matrix finite: weight * g² overflows float64")
        self.diagonal.addcmul_(g, g, value=w)
        self.count += 1

    @property
    def inverse(self) -> torch.Tensor:
        """The diagonal approximation of ``A⁻¹`` as a vector."""
        return 1.0 / self.diagonal

    def norms(self, G) -> torch.Tensor:
        """``sqrt(Σ_j G_kj² / d_j)`` for each row of ``G``."""
        return _finite_norms(self._norms(as_tensor(G, "G", 2, self.dim, rows=False)))

    def _norms(self, G: torch.Tensor) -> torch.Tensor:
        return ((G * G) / self.diagonal).sum(-1).sqrt()

    def logdet(self) -> float:
        """``Σ log d_j``."""
        return float(torch.log(self.diagonal).sum())


def effective_dimension(gram, lam: float = 1.0, n: int | None = None) -> float:
    """``d̃ = log det(I + G/λ) / log(1 + n/λ)`` of a Gram matrix ``G`` (symmetric PSD, ``n × n``).

    With ``G`` the NTK Gram matrix over the ``n = TK`` contexts (:func:`~icml_theory.bandits.ntk_gram`)
    this is the effective dimension of NeuralUCB and the NeuralLog analysis; ``n`` defaults to the size of
    ``G``. Eigenvalues below zero by rounding (``>= -1e-9 · max|G|``) count as zero; larger ones raise."""
    G = as_tensor(gram, "gram", 2)
    if G.shape[0] != G.shape[1]:
        raise ValueError(f"gram must be square, got shape {tuple(G.shape)}")
    scale = float(G.abs().max())
    if not math.isfinite(scale * G.shape[0]) or scale > 1e150:
        raise ValueError("gram must hold entries below 1e150 (its eigenvalues overflow)")
    if not torch.allclose(G, G.T, rtol=1e-8, atol=1e-10 * max(scale, 1.0)):
        raise ValueError("gram must be symmetric")
    lam = check_real(lam, "lam", "(0, inf)")
    size = G.shape[0] if n is None else check_int(n, "n", 1)
    eig = torch.linalg.eigvalsh(G)
    if float(eig.min()) < -1e-9 * max(scale, 1e-300) * G.shape[0]:
        raise ValueError(f"gram must be positive semi-definite, got eigenvalue {float(eig.min()):.3g}")
    numerator = float(_log1p_ratio(eig.clamp_min(0.0), lam).sum())
    return numerator / float(_log1p_ratio(torch.tensor([float(size)], dtype=torch.float64), lam)[0])


def _log1p_ratio(x: torch.Tensor, lam: float) -> torch.Tensor:
    """``log(1 + x / λ)`` for ``x >= 0``, accurate at every scale: ``log1p(x / λ)`` where ``x <= λ`` (no
    cancellation, as ``log(λ + x) − log λ`` has when ``x << λ``), ``log(x / λ) + log1p(λ / x)`` where
    ``x > λ`` (``x / λ`` could overflow for tiny λ; the first term then dominates)."""
    small = x <= lam
    safe = torch.where(small, torch.ones_like(x), x)  # no log(0) or λ / 0 on the branch not taken
    large = (torch.log(safe) - math.log(lam)) + torch.log1p(lam / safe)
    return torch.where(small, torch.log1p(x / lam), large)
