"""Input checks of the similarity metrics: representations and Gram matrices as float64 numpy arrays."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch


def as_matrix(x, name: str, what: str = "(n_samples, n_features)") -> np.ndarray:
    """``x`` (a numpy array or a torch tensor of real numbers) as a 2-d float64 array of finite values.

    Lists, bools, complex numbers and strings are refused with ``TypeError``; a shape other than 2-d, an
    empty array and NaN or inf with ``ValueError``, each naming ``name``."""
    if isinstance(x, torch.Tensor):
        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers, got a {x.dtype} tensor")
        arr = x.detach().cpu().to(torch.float64).numpy()
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "iuf":
            raise TypeError(f"{name} must be an array of real numbers (int or float), got dtype {x.dtype}")
        arr = x.astype(np.float64, copy=False)
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor {what}, got {type(x).__name__}")
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-d array {what}, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must hold finite values, got NaN or inf")
    return arr


def as_pair(X, Y, min_samples: int = 2, why: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Two representations of the same ``n >= min_samples`` samples (rows); ``why`` explains the minimum."""
    x, y = as_matrix(X, "X"), as_matrix(Y, "Y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and Y must hold the same samples (rows): X has {x.shape[0]} rows, Y has {y.shape[0]}"
        )
    if x.shape[0] < min_samples:
        raise ValueError(f"X and Y must hold at least {min_samples} samples{why}, got {x.shape[0]}")
    return x, y


def unit_scale(x: np.ndarray) -> tuple[np.ndarray, float]:
    """``x / max|x|`` and ``max|x|`` (1 for a zero array): metrics that do not change under isotropic scaling
    then work for values near float64's limits (1e300 squared overflows, 1e-300 squared underflows)."""
    top = float(np.abs(x).max())
    return (x / top, top) if top > 0 else (x, 1.0)


def centred(x: np.ndarray, name: str, what: str = "CKA") -> tuple[np.ndarray, float]:
    """``(c, scale)``: the columns of ``x`` minus their means are ``c * scale``, with ``c`` computed after
    dividing ``x`` by its largest entry (no overflow near float64's limits) and rescaled so that its largest
    entry is 1. A representation that is constant over the samples (zero after centring) leaves ``what``
    undefined: ``ValueError`` naming ``name``."""
    unit, top = unit_scale(x)
    c = unit - unit.mean(0)
    if not np.any(c):
        raise ValueError(f"{name} is the same for every sample (zero after centring): {what} is undefined")
    c, spread = unit_scale(c)
    return c, top * spread


def as_gram(K, name: str) -> np.ndarray:
    """``K`` a square float64 Gram matrix ``(n, n)``, symmetric to 1e-6 of its largest entry; returned
    symmetrised, ``(K + K^T) / 2``."""
    k = as_matrix(K, name, "(n_samples, n_samples)")
    if k.shape[0] != k.shape[1]:
        raise ValueError(f"{name} must be a square Gram matrix (n_samples, n_samples), got shape {k.shape}")
    unit, _ = unit_scale(k)
    if not np.allclose(unit, unit.T, rtol=0, atol=1e-6):
        raise ValueError(f"{name} must be symmetric (a Gram matrix of a kernel), got an asymmetric matrix")
    return k / 2 + k.T / 2


def gram_pair(K, L, min_samples: int = 2, why: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Two Gram matrices of the same ``n >= min_samples`` samples."""
    k, l_ = as_gram(K, "K"), as_gram(L, "L")
    if k.shape != l_.shape:
        raise ValueError(
            f"K and L must be Gram matrices of the same samples, got shapes {k.shape} and {l_.shape}"
        )
    if k.shape[0] < min_samples:
        raise ValueError(
            f"K and L must be Gram matrices of at least {min_samples} samples{why}, got {k.shape[0]}"
        )
    return k, l_


def metric_value(metric: Callable, x, y) -> float:
    """``metric(x, y)`` as a float; anything else than a finite real number is the metric's fault."""
    value = metric(x, y)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"metric must return a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"metric returned {value!r}, not a finite number")
    return float(value)
