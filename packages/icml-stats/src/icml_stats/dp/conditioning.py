"""Conditioning matrices from public features (Cond-DP, Jiang, Krichene and Mayoraz, ICML 2026).

The paper's matrix is ``C = V Sigma^-1 V^T`` from the SVD ``X = U Sigma V^T`` of the public feature
matrix. Reparametrizing a linear layer ``w = C theta`` makes the Hessian of least squares in ``theta``
``C X^T X C = V V^T`` (the identity on the row space): every direction of the feature spectrum is learned at
the same speed, so DP-SGD's isotropic noise no longer swamps the directions of small singular values.

Our additions (design choices, not from the paper's text, which we did not have):

- the regularized family ``C = V (Sigma^2 + reg)^(-power/2) V^T``: ``power = 0`` is the identity (DP-SGD),
  ``power = 1, reg = 0`` the paper's matrix; ``reg > 0`` or ``power < 1`` temper it;
- ``normalize="rms"`` (default) rescales ``C`` so that the conditioned features ``C x_i`` have the same
  root-mean-square norm as the raw ones. The scale of ``C`` trades against the learning rate and the clip
  bound (scaling ``C`` by ``s``, the clip by ``s`` and the learning rate by ``1/s^2`` gives the same run),
  so with it a clip bound and learning rate tuned for DP-SGD sit in the same range for Cond-DP;
  ``normalize=None`` returns the literal matrix;
- rank-deficient features (a squared singular value below ``rcond`` times the largest) are regularized
  with a warning: ``reg`` is raised to ``rcond * sigma_max^2``.

Everything here reads the public features only: the labels never enter, so the matrix costs no privacy.
"""

from __future__ import annotations

import warnings

import numpy as np

from icml_stats.validation import as_array, check_choice, check_real

__all__ = ["NORMALIZE", "conditioning_matrix", "frequency_conditioning"]

NORMALIZE = ("rms", None)


def _features(X, name: str = "X") -> np.ndarray:
    X = as_array(X, name, ("n", "d"), hint=" (samples x public features)")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} must be finite (no inf)")
    return X


def conditioning_matrix(
    X, *, power: float = 1.0, reg: float = 0.0, normalize: str | None = "rms", rcond: float = 1e-10
) -> np.ndarray:
    """The ``(d, d)`` conditioning matrix ``V (Sigma^2 + reg)^(-power/2) V^T`` of public features ``X``.

    ``X`` is ``(n, d)`` (center it first if the model has an intercept). ``power = 1, reg = 0`` is the
    paper's ``V Sigma^-1 V^T``; ``power = 0`` the identity. Directions outside the row space of ``X`` (``d >
    n`` or exact collinearity) keep the factor of the regularized smallest singular value. See the module
    doc for ``normalize`` and ``rcond``.
    """
    X = _features(X)
    power = check_real(power, "power", "[0, 4]")
    reg = check_real(reg, "reg", "[0, inf)")
    rcond = check_real(rcond, "rcond", "(0, 1)")
    check_choice(normalize, "normalize", NORMALIZE)
    # V and Sigma^2 from the (d, d) Gram matrix: no (n, n) factor, and d > n needs no padding
    with np.errstate(over="ignore", invalid="ignore"):
        gram = X.T @ X
    if not np.isfinite(gram).all():
        raise ValueError("X is too large: X^T X overflows float64; rescale the features")
    eig, V = np.linalg.eigh(gram)
    sv2 = np.maximum(eig, 0.0)
    d = X.shape[1]
    top2 = sv2.max()
    if top2 == 0:
        raise ValueError("X is all zeros: no conditioning can be derived from it")
    floor = rcond * top2
    if power > 0 and reg < floor and sv2.min() < floor:
        rank = int(np.sum(sv2 >= floor))
        warnings.warn(
            f"X has rank {rank} < {d} features (squared singular values below rcond * max): conditioning regularized "
            f"with reg = rcond * sigma_max^2 = {floor:.3g}",
            RuntimeWarning,
            stacklevel=2,
        )
        reg = floor
    factor = (sv2 + reg) ** (-power / 2)
    C = (V * factor) @ V.T
    C = 0.5 * (C + C.T)
    if normalize == "rms":
        C *= np.linalg.norm(X) / np.linalg.norm(X @ C)
    return C


def frequency_conditioning(X, *, normalize: str | None = "rms") -> np.ndarray:
    """Diagonal conditioning ``diag(count_j^-1/2)`` for one-hot (0/1) categorical features ``X`` ``(n, d)``.

    For one-hot columns ``X^T X = diag(counts)``, so this is :func:`conditioning_matrix` of ``X`` without an
    SVD: frequent categories get small steps, rare ones large steps. Columns that never occur get
    factor 1 (their weight receives no gradient anyway).
    """
    X = _features(X)
    check_choice(normalize, "normalize", NORMALIZE)
    if not np.isin(X, (0.0, 1.0)).all():
        raise ValueError("X must hold one-hot (0/1) columns for frequency conditioning")
    counts = X.sum(0)
    factor = np.where(counts > 0, 1 / np.sqrt(np.maximum(counts, 1)), 1.0)
    C = np.diag(factor)
    if normalize == "rms" and counts.sum() > 0:
        C *= np.linalg.norm(X) / np.linalg.norm(X @ C)
    return C
