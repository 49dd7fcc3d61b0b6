"""Complexity measures of a Boolean function read off its Fourier spectrum (O'Donnell, *Analysis of Boolean
Functions*, 2014, ch. 2 and 3): influences, total influence (average sensitivity), low-degree weight and
the weight of the best k-junta. All take the coefficients of :func:`~icml_theory.boolean.fourier_coefficients`
(``(..., 2^n)``, a batch of functions in the leading dimensions) and work in float64.

- ``Inf_i[f] = sum_{S ∋ i} f̂(S)^2``; for Boolean ``f`` it is ``Pr_x[f(x) != f(x^{⊕i})]``
  (:func:`flip_influences` counts that directly from the truth table).
- ``I[f] = sum_i Inf_i[f] = sum_S |S| f̂(S)^2``: the total influence, which for Boolean ``f`` equals the
  average sensitivity (the expected number of coordinates whose flip changes ``f(x)``).
- ``W^{<=d}[f] = sum_{|S| <= d} f̂(S)^2``: the weight on degrees at most ``d``.
- Best ``k``-junta weight ``max_{|J| = k} sum_{S ⊆ J} f̂(S)^2``: how much of ``f`` (in ``L2``) one can
  explain with ``k`` of its inputs; ``f`` is a ``k``-junta iff it equals ``E[f^2]``. All ``k`` at once by
  one subset-sum (zeta) transform of the squared spectrum, ``n 2^n`` additions.
"""

from __future__ import annotations

import torch

from icml_theory.boolean.fourier import as_truth_table, spectral_weights, subset_sizes, warn_overflow
from icml_theory.validation import check_int


def _bit_view(t: torch.Tensor, i: int) -> torch.Tensor:
    """``t`` (``(..., 2^n)``) viewed as ``(..., 2^(n-i-1), 2, 2^i)``: axis -2 is bit ``i`` of the index."""
    return t.reshape(*t.shape[:-1], t.shape[-1] >> (i + 1), 2, 1 << i)


def influences(coeffs) -> torch.Tensor:
    """Influence of each variable, ``Inf_i[f] = sum_{S ∋ i} f̂(S)^2`` (O'Donnell Def. 2.13, Thm. 2.20).

    Args:
        coeffs: Fourier coefficients ``(..., 2^n)``.

    Returns:
        float64 tensor ``(..., n)``; entry ``i`` is the influence of coordinate ``i`` (bit ``i`` of the
        truth-table index).
    """
    c = as_truth_table(coeffs, "coeffs")
    n = c.shape[-1].bit_length() - 1
    squares = c * c
    out = [_bit_view(squares, i)[..., 1, :].sum(dim=(-2, -1)) for i in range(n)]
    return warn_overflow(torch.stack(out, dim=-1) if out else c.new_zeros((*c.shape[:-1], 0)), "coeffs")


def total_influence(coeffs) -> torch.Tensor:
    """Total influence ``I[f] = sum_S |S| f̂(S)^2`` (average sensitivity for Boolean ``f``), ``(...)``."""
    weights = spectral_weights(coeffs)  # (..., n + 1)
    degrees = torch.arange(weights.shape[-1], dtype=torch.float64, device=weights.device)
    return warn_overflow((weights * degrees).sum(-1), "coeffs")


def low_degree_weight(coeffs, degree: int) -> torch.Tensor:
    """``W^{<=d}[f] = sum_{|S| <= d} f̂(S)^2``, the Fourier weight at degrees ``0..d``, ``(...)``.

    ``degree`` may exceed ``n`` (then it is ``E[f^2]``); for Boolean ``f`` the result lies in [0, 1].
    """
    d = check_int(degree, "degree", 0)
    return warn_overflow(spectral_weights(coeffs)[..., : d + 1].sum(-1), "coeffs")


def junta_weights(coeffs) -> torch.Tensor:
    """Weight of the best ``k``-junta for every ``k = 0..n``: ``max_{|J| = k} sum_{S ⊆ J} f̂(S)^2``.

    Args:
        coeffs: Fourier coefficients ``(..., 2^n)``.

    Returns:
        float64 tensor ``(..., n + 1)``, non-decreasing in ``k``, ending at ``E[f^2]``; entry ``k`` is the
        squared ``L2`` norm of the projection of ``f`` on the best set of ``k`` variables (for Boolean ``f``,
        ``1 - 4 dist^2``-style closeness to a ``k``-junta). Use :func:`best_junta` for the set itself.
    """
    zeta = _subset_sums(coeffs)  # (..., 2^n)
    n = zeta.shape[-1].bit_length() - 1
    levels = subset_sizes(n).to(zeta.device).expand_as(zeta)
    out = torch.zeros((*zeta.shape[:-1], n + 1), dtype=torch.float64, device=zeta.device)
    return out.scatter_reduce_(-1, levels, zeta, reduce="amax", include_self=False)


def best_junta(coeffs, k: int) -> tuple[float, tuple[int, ...]]:
    """The best ``k``-junta of one function: ``(weight, variables)`` with ``variables`` sorted.

    Args:
        coeffs: Fourier coefficients ``(2^n,)`` of one function.
        k: the number of variables, ``0 <= k <= n``.
    """
    zeta = _subset_sums(coeffs)
    if zeta.dim() != 1:
        raise ValueError(f"coeffs must be one function's spectrum of shape (2^n,), got {tuple(zeta.shape)}")
    n = zeta.shape[-1].bit_length() - 1
    k = check_int(k, "k", 0, n)
    masked = torch.where(subset_sizes(n).to(zeta.device) == k, zeta, zeta.new_tensor(-1.0))
    best = int(masked.argmax())
    return float(warn_overflow(zeta[best], "coeffs")), tuple(i for i in range(n) if best >> i & 1)


def flip_influences(values) -> torch.Tensor:
    """Influences counted from the truth table by flipping each input: ``E_x[((f(x) - f(x^{⊕i})) / 2)^2]``.

    For Boolean (±1) ``f`` this is ``Pr_x[f(x) != f(x^{⊕i})]``; for any real ``f`` it equals
    :func:`influences` of its spectrum (O'Donnell Prop. 2.21), without computing the spectrum.

    Args:
        values: truth table ``(..., 2^n)``.

    Returns:
        float64 tensor ``(..., n)``.
    """
    t = as_truth_table(values, "values")
    n = t.shape[-1].bit_length() - 1
    out = []
    for i in range(n):
        pair = _bit_view(t, i)  # (..., 2^(n-i-1), 2, 2^i): the two values differing in bit i
        half_diff = (pair[..., 0, :] - pair[..., 1, :]) / 2
        out.append((half_diff * half_diff).sum(dim=(-2, -1)) * 2 / t.shape[-1])  # each pair counted twice
    return warn_overflow(torch.stack(out, dim=-1) if out else t.new_zeros((*t.shape[:-1], 0)), "values")


def _subset_sums(coeffs) -> torch.Tensor:
    """``g(J) = sum_{S ⊆ J} f̂(S)^2`` for every ``J`` (the zeta transform over the subset lattice)."""
    c = as_truth_table(coeffs, "coeffs")
    g = c * c
    for i in range(c.shape[-1].bit_length() - 1):
        view = _bit_view(g, i)
        view[..., 1, :] += view[..., 0, :]  # J with bit i collects J without it
    return warn_overflow(g, "coeffs")
