"""Fourier expansion of real functions on the Boolean cube {-1, 1}^n (O'Donnell, *Analysis of Boolean
Functions*, 2014, ch. 1).

Truth-table convention: a function ``f: {-1, 1}^n -> R`` is given as the ``2^n`` values ``values[j]``,
where bit ``i`` of the index ``j`` encodes coordinate ``x_i``: bit value 0 means ``x_i = +1``, bit value
1 means ``x_i = -1``. The same indexing names subsets: coefficient ``S`` is the set of bits of ``S``. With
this convention ``chi_S(x) = prod_{i in S} x_i = (-1)^popcount(j & S)`` is the Sylvester–Hadamard
matrix, so the whole spectrum is one fast Walsh–Hadamard transform.
"""

from __future__ import annotations

import warnings

import torch

from icml_kernels import fwht
from icml_theory.validation import check_int


def fourier_coefficients(values, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """All ``2^n`` Fourier coefficients ``f̂(S) = E_x[f(x) chi_S(x)]`` of a function on {-1, 1}^n.

    Args:
        values: the truth table, shaped ``(..., 2^n)`` (a tensor, array or sequence of real numbers;
            leading dimensions are a batch of functions), indexed as in this module's docstring.
        dtype: ``torch.float64`` (default) or ``torch.float32``, which halves the memory (an exact
            25-input spectrum: 128 MiB instead of 256 MiB per copy). For a ±1-valued function the float32
            coefficients are exact up to ``n = 25``: every partial sum is an integer of magnitude at most
            ``2^25``, and those above ``2^24`` are sums of an even number of ±1 terms, hence even.

    Returns:
        tensor of the same shape in ``dtype``: entry ``S`` is ``f̂(S)``, so ``f = sum_S f̂(S) chi_S``.
        Computed by ``icml_kernels.fwht`` with scale ``2^-n``: ``n 2^n`` additions instead of ``4^n``.
    """
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    table = as_truth_table(values, "values", dtype)
    return warn_overflow(fwht(table, scale=1.0 / table.shape[-1]), "values")  # (..., 2^n)


def spectral_weights(coeffs) -> torch.Tensor:
    """Fourier weight per level, ``W^k[f] = sum_{|S| = k} f̂(S)^2`` for ``k = 0..n`` (O'Donnell, Def. 1.17).

    Args:
        coeffs: Fourier coefficients shaped ``(..., 2^n)``, as returned by :func:`fourier_coefficients`.

    Returns:
        float64 tensor ``(..., n + 1)``; by Parseval its sum is ``E[f^2]`` (1 for Boolean-valued f).
    """
    c = as_truth_table(coeffs, "coeffs")
    size = c.shape[-1]
    n = size.bit_length() - 1
    levels = subset_sizes(n).to(c.device)  # (2^n,) |S| of each index S
    weights = torch.zeros((*c.shape[:-1], n + 1), dtype=torch.float64, device=c.device)
    return warn_overflow(weights.index_add_(-1, levels, c * c), "coeffs")  # (..., n + 1)


def subset_sizes(n: int) -> torch.Tensor:
    """``|S|`` (the popcount) of every index ``S = 0..2^n - 1``, as an int64 tensor ``(2^n,)``."""
    n = check_int(n, "n", 0, 30)
    sizes = torch.zeros(1, dtype=torch.uint8)
    for _ in range(n):  # the indices with bit i set are the lower half's, plus one
        sizes = torch.cat((sizes, sizes + 1))
    return sizes.long()


def as_truth_table(values, name: str, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Check a ``(..., 2^n)`` table of finite real numbers and return it in ``dtype`` (float64)."""
    try:
        t = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{name} must be a tensor, array or sequence of real numbers, got {type(values).__name__}"
        ) from None
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must hold real numbers (a float or integer dtype), got {t.dtype}")
    if t.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension of length 2^n, got a scalar")
    size = t.shape[-1]
    if size < 1 or size & (size - 1):
        raise ValueError(
            f"{name}.shape[-1] must be a power of two 2^n (one value per point of the cube), got {size}"
        )
    t = t.to(dtype)
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return t


def warn_overflow(result, name: str):
    """``result`` of finite input ``name``, with a ``RuntimeWarning`` if it overflowed to inf (or NaN)."""
    values = result if isinstance(result, torch.Tensor) else torch.as_tensor(result)
    if not bool(torch.isfinite(values).all()):
        warnings.warn(
            f"{name} is too large: the result overflowed float64 (inf or NaN entries)",
            RuntimeWarning,
            stacklevel=3,
        )
    return result
