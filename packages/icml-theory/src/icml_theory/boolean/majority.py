"""The majority function and its Fourier spectrum in closed form (O'Donnell, *Analysis of Boolean
Functions*, 2014, Thm. 5.19 and Thm. 5.18: ``W^1[Maj_n]`` decreases to ``2/pi``)."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from icml_theory.boolean.fourier import subset_sizes
from icml_theory.validation import check_int


def majority(n: int) -> torch.Tensor:
    """Truth table of ``Maj_n(x) = sign(x_1 + ... + x_n)`` for odd ``n`` (float64 ``(2^n,)`` of ±1).

    Index convention of :mod:`icml_theory.boolean.fourier`: bit ``i`` set means ``x_i = -1``, so the
    sum of the coordinates is ``n - 2 popcount(j)``.
    """
    _check_odd(n)
    minus_ones = subset_sizes(n)  # (2^n,) number of coordinates equal to -1
    return torch.where(2 * minus_ones < n, 1.0, -1.0).to(torch.float64)


def majority_coefficient(n: int, k: int) -> float:
    """``Maj_n^(S)`` for any ``|S| = k`` (it depends only on ``|S|``), exact then rounded to float.

    O'Donnell Thm. 5.19: zero for even ``k``; for odd ``k``
    ``(-1)^((k-1)/2) * C((n-1)/2, (k-1)/2) / C(n-1, k-1) * 2^-(n-1) * C(n-1, (n-1)/2)``.
    """
    n, k = _check_odd(n), check_int(k, "k", 0, n)
    if k % 2 == 0:
        return 0.0
    m, j = (n - 1) // 2, (k - 1) // 2
    value = Fraction(math.comb(m, j), math.comb(n - 1, k - 1)) * Fraction(math.comb(n - 1, m), 2 ** (n - 1))
    return float(-value if j % 2 else value)


def majority_spectrum(n: int) -> torch.Tensor:
    """All ``2^n`` coefficients of ``Maj_n`` from the closed form, indexed like :func:`fourier_coefficients`."""
    n = _check_odd(n)
    by_level = torch.tensor([majority_coefficient(n, k) for k in range(n + 1)], dtype=torch.float64)
    return by_level[subset_sizes(n)]  # (2^n,)


def _check_odd(n) -> int:
    """``n`` odd (majority needs no ties) and in [1, 29] (a truth table of 2^n float64 values)."""
    if isinstance(n, int) and n % 2 == 0:
        raise ValueError(f"n must be an odd integer (majority needs no ties), got {n!r}")
    return check_int(n, "n", 1, 29)
