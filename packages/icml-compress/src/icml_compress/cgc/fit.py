"""Shared low-rank bases: Basis Sharing's whitened-SVD fit of a group of layers, and its Hessian-weighted cost.

A group of ``n`` Linear layers with weights ``W_l (out, in)`` and input second moments ``H_l = E[x x^T]``
shares one basis ``B (in, k)``; each layer keeps its coefficients ``C_l (k, out)``, so ``W_l^T ~ B C_l`` and
the layer computes ``(x B) C_l``. The fit is Basis Sharing's closed form (SVD-LLM's whitening on the group):
with ``H_g = sum_l H_l`` (damped) and its Cholesky factor ``H_g = L L^T``, the truncated SVD
``L^T [W_1^T | ... | W_n^T] ~ U_k S_k V_k^T`` gives ``B = L^{-T} U_k S_k`` and ``C = V_k^T`` cut into ``n``
blocks: the rank-``k`` minimizer of ``sum_l tr(dW_l H_g dW_l^T)``. ``refit=True`` then replaces each
``C_l`` by the least-squares coefficients under the layer's own moments, ``(B^T H_l B)^{-1} B^T H_l W_l^T``
(Basis Sharing's optional update). One layer alone (``n = 1``) is SVD-LLM's per-layer whitened SVD.

The cost of a layer is the second-order (K-FAC) proxy of the output error its perturbation causes,
``tr(dW_l H_l dW_l^T)`` with ``dW_l = W_l - (B C_l)^T`` and the layer's own, undamped ``H_l``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml_compress.quantize.calibration import regularize
from icml_compress.validation import check_bool, check_float_tensor, check_int, check_positive


def check_ratio(ratio, name: str = "ratio") -> float:
    """A fraction of parameters to remove, strictly between 0 and 1."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        raise TypeError(
            f"{name} must be a number in (0, 1) (the fraction of parameters removed), got {ratio!r}"
        )
    if not 0 < ratio < 1:
        raise ValueError(f"{name} must be in (0, 1) (the fraction of parameters removed), got {ratio!r}")
    return float(ratio)


def rank_for_ratio(d_in: int, d_out: int, n: int, ratio: float) -> int:
    """The rank ``k`` of a basis shared by ``n`` layers of shape ``(d_out, d_in)`` that removes the fraction
    ``ratio`` of their parameters: ``k (d_in + n d_out) ~ (1 - ratio) n d_in d_out``, rounded to the nearest
    integer, at least 1."""
    for value, name in ((d_in, "d_in"), (d_out, "d_out"), (n, "n")):
        check_int(value, name, 1)
    ratio = check_ratio(ratio)
    return max(1, round((1 - ratio) * n * d_in * d_out / (d_in + n * d_out)))


@dataclass
class SharedFit:
    """One group's fit: ``basis (in, k)``, ``coeffs[l] (k, out)`` and each layer's cost
    ``tr(dW_l H_l dW_l^T)`` (float64 tensors; ``costs`` as floats), in the order the layers were given."""

    basis: torch.Tensor
    coeffs: list[torch.Tensor]
    costs: list[float]

    @property
    def rank(self) -> int:
        return self.basis.shape[1]

    def weight(self, i: int) -> torch.Tensor:
        """The reconstructed weight ``(B C_i)^T`` of layer ``i`` (out, in)."""
        return (self.basis @ self.coeffs[i]).T


def layer_cost(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """``tr((W - W_hat) H (W - W_hat)^T)`` in float64 (``W``, ``W_hat``: (out, in); ``H``: (in, in))."""
    check_weight_and_moments(W, H)
    check_float_tensor(W_hat, "W_hat")
    if W_hat.shape != W.shape:
        raise ValueError(f"W_hat must have W's shape {tuple(W.shape)}, got {tuple(W_hat.shape)}")
    dW = W.double() - W_hat.double()
    return finite(float(((dW @ H.double()) * dW).sum()), "the cost tr(dW H dW^T) (W, W_hat or H too large)")


def finite(value: float, what: str) -> float:
    """``value`` if it is finite; a ValueError naming ``what`` (numerical overflow) otherwise."""
    if not math.isfinite(value):
        raise ValueError(f"{what} is not finite: {value}")
    return value


def check_weight_and_moments(W, H) -> None:
    """``W`` a finite 2-D (out, in) float tensor and ``H`` a finite (in, in) one."""
    check_float_tensor(W, "W")
    if W.dim() != 2:
        raise ValueError(f"W must be a 2-D weight (out, in), got shape {tuple(W.shape)}")
    check_float_tensor(H, "H")
    if H.shape != (W.shape[1], W.shape[1]):
        raise ValueError(f"H must have shape ({W.shape[1]}, {W.shape[1]}), got {tuple(H.shape)}")


def check_group(weights, hessians, name: str = "weights") -> None:
    """``weights`` (a non-empty list of (out, in) float tensors of one shape) and ``hessians`` (as many
    finite (in, in) float tensors)."""
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(f"{name} must be a non-empty list of weight tensors (out, in)")
    if not isinstance(hessians, (list, tuple)) or len(hessians) != len(weights):
        raise ValueError(f"hessians must be a list of {len(weights)} tensors (one per weight)")
    for i, W in enumerate(weights):
        check_float_tensor(W, f"{name}[{i}]")
        if W.dim() != 2 or W.shape != weights[0].shape:
            raise ValueError(
                f"layers of one group must share one 2-D weight shape: {name}[{i}] has shape "
                f"{tuple(W.shape)}, {name}[0] {tuple(weights[0].shape)}"
            )
    d_in = weights[0].shape[1]
    for i, H in enumerate(hessians):
        check_float_tensor(H, f"hessians[{i}]")
        if H.shape != (d_in, d_in):
            raise ValueError(f"hessians[{i}] must have shape ({d_in}, {d_in}), got {tuple(H.shape)}")


def fit_shared_basis(
    weights, hessians, rank: int, *, refit: bool = False, damping: float = 0.01, name: str = "group"
) -> SharedFit:
    """Fit one basis of rank ``rank`` shared by ``weights`` (list of (out, in) tensors of one shape) with input
    moments ``hessians`` (list of (in, in)); see the module docstring. ``damping`` (times the mean diagonal)
    makes the summed moments positive definite for the Cholesky factor (repaired with a warning if not
    enough); ``name`` labels that warning."""
    check_group(weights, hessians)
    d_out, d_in = weights[0].shape
    n = len(weights)
    check_int(rank, "rank", 1)
    if rank > min(d_in, n * d_out):
        raise ValueError(f"rank must be at most min(in, n * out) = {min(d_in, n * d_out)}, got {rank}")
    check_bool(refit, "refit")
    check_positive(damping, "damping")
    Hs = [H.double() for H in hessians]
    Hg = regularize(sum(Hs), damping, f"the summed input moments of {name}")
    L = torch.linalg.cholesky(Hg)
    W_cat = torch.cat([W.detach().double().T for W in weights], dim=1)  # (in, n * out)
    U, S, Vh = torch.linalg.svd(L.T @ W_cat, full_matrices=False)
    basis = torch.linalg.solve_triangular(L.T, U[:, :rank] * S[:rank], upper=True)  # L^{-T} U_k S_k
    coeffs = list(Vh[:rank].split(d_out, dim=1))
    if refit:
        coeffs = [refit_coefficients(basis, W, H) for W, H in zip(weights, Hs, strict=True)]
    if not (torch.isfinite(basis).all() and all(torch.isfinite(c).all() for c in coeffs)):
        raise ValueError(f"the fit of {name} overflowed: weights or hessians too large for float64")
    costs = [layer_cost(W, (basis @ C).T, H) for W, C, H in zip(weights, coeffs, Hs, strict=True)]
    return SharedFit(basis, [c.contiguous() for c in coeffs], costs)


def group_costs(grams, hessians, rank: int, *, damping: float = 0.01) -> list[float]:
    """The per-layer costs of :func:`fit_shared_basis` (``refit=False``) from the weights' Gram matrices
    ``grams[l] = W_l^T W_l (in, in)`` alone, without forming the basis. With ``G_l = L^T K_l L``, the
    discarded directions ``V`` (the ``in - k`` bottom eigenvectors of ``sum_l G_l``, i.e. of the left
    singular vectors of ``L^T W_cat``) and ``Y = L^{-T} V``, the cost of layer ``l`` is
    ``tr(P A_l P G_l) = <Y^T H_l Y, (L V)^T K_l (L V)>`` where ``P = V V^T`` and ``A_l = L^{-1} H_l L^{-T}``.
    Every step is an ``(in, in)``-sized product, whatever the output size: the fast path of CGC's pairwise
    costs and threshold sweep (checked against the fit in the tests)."""
    Hs = [H.double() for H in hessians]
    Ks = [K.double() for K in grams]
    L = torch.linalg.cholesky(regularize(sum(Hs), damping, "the summed input moments of a group"))
    _, U = torch.linalg.eigh(L.T @ sum(Ks) @ L)
    V = U[:, : L.shape[0] - rank]  # eigh sorts ascending: the directions the rank-k basis leaves out
    Y = torch.linalg.solve_triangular(L.T, V, upper=True)
    Z = L @ V
    return [
        finite(float(((Y.T @ H @ Y) * (Z.T @ K @ Z)).sum()), "a group's cost (weights or moments too large)")
        for H, K in zip(Hs, Ks, strict=True)
    ]


def refit_coefficients(
    basis: torch.Tensor, W: torch.Tensor, H: torch.Tensor, damping: float = 1e-8
) -> torch.Tensor:
    """The coefficients ``C (k, out)`` minimizing ``tr((W - (B C)^T) H (W - (B C)^T)^T)`` for a fixed basis
    ``B (in, k)``: ``(B^T H B)^{-1} B^T H W^T``, with ``damping`` (times the mean diagonal; only for numerical
    safety, since it biases the solution) on ``B^T H B``."""
    check_float_tensor(basis, "basis")
    if basis.dim() != 2:
        raise ValueError(f"basis must be (in, k), got shape {tuple(basis.shape)}")
    check_weight_and_moments(W, H)
    if W.shape[1] != basis.shape[0]:
        raise ValueError(f"basis must have W's {W.shape[1]} input rows, got shape {tuple(basis.shape)}")
    check_positive(damping, "damping")
    H, basis = H.double(), basis.double()  # a basis in a half model's dtype too
    G = basis.T @ H @ basis
    eye = torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    G = G + damping * G.diagonal().mean().clamp_min(1e-30) * eye
    C = torch.linalg.solve(G, basis.T @ H @ W.detach().double().T)
    if not torch.isfinite(C).all():
        raise ValueError("the refitted coefficients are not finite: W, H or basis too large for float64")
    return C


def top_eigenspace(H: torch.Tensor, r: int) -> torch.Tensor:
    """The top-``r`` eigenvectors ``(in, r)`` of the symmetric ``H`` (the highest-curvature directions)."""
    check_float_tensor(H, "H")
    check_int(r, "r", 1)
    if H.dim() != 2 or H.shape[0] != H.shape[1] or r > H.shape[0]:
        raise ValueError(f"H must be square with at least r={r} rows, got shape {tuple(H.shape)}")
    _, vecs = torch.linalg.eigh((H.double() + H.double().T) / 2)
    return vecs[:, -r:]
