"""Kernels, kernel ridge regression with the closed-form leave-one-out loss, and conditional mean embeddings.

* :class:`RBF` ``k(x, y) = exp(-|x - y|^2 / (2 bandwidth^2))`` with the median heuristic
  (:func:`median_bandwidth`), :class:`Linear` ``k(x, y) = <x, y>``.
* Kernel ridge regression of a target with Gram matrix ``K_Y`` (``y y^T`` for a scalar target; a kernel
  Gram matrix for a conditional mean embedding, a regression in feature space) on inputs with Gram
  ``K_X``: the fit on all ``n`` points has hat matrix ``H = K_X (K_X + r I)^-1``, and the leave-one-out
  residual of point ``i`` (the model fitted without ``i``, same ``r``) is
  ``(phi(y_i) - sum_j H_ij phi(y_j)) / (1 - H_ii)``, so the mean LOO loss is
  ``mean_i [(I - H) K_Y (I - H)]_ii / (1 - H_ii)^2`` (:func:`krr_loo_loss`) and one eigendecomposition of
  ``K_X`` scores a whole grid of ridges (:func:`select_ridge`).
* :class:`ConditionalMeanEmbedding`: ``mu(c) = sum_j beta_j(c) phi(y_j)``, ``beta(c) = (K_CC + r I)^-1 k_C(C, c)``,
  and the centered Gram ``K~[u, v] = <phi(y_u) - mu(c_u), phi(y_v) - mu(c_v)>``
  ``= k(y_u, y_v) - beta_u . k(Y, y_v) - beta_v . k(Y, y_u) + beta_u K_YY beta_v`` (:meth:`centered_gram`).
* :class:`GaussianConditional`: a known Gaussian ``A | C ~ N(m(C), s^2 I)``; its embedding under an RBF
  kernel is closed-form, so the centered Gram is exact (SKCI's *oracle* mode).

The ridge is the absolute diagonal term ``r``; we search ``r = n * lam`` over a log-grid of ``lam``
(the parameterisation of the official SKCI code). Bandwidths and ridges are chosen on at most
``max_select`` points (our own choice, to keep the search cubic in a small number).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from icml_stats.validation import as_array, as_matched_samples, as_samples, check_real

RIDGE_GRID = tuple(10.0 ** np.arange(-5, 1))  # lam; the absolute ridge is n * lam
MEDIAN_MAX = 500  # the median heuristic looks at most at this many points


def sq_distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances ``(n, m)`` between the rows of ``x (n, d)`` and ``y (m, d)``."""
    d = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T
    return np.maximum(d, 0.0)


def median_bandwidth(x, max_points: int = MEDIAN_MAX, rng=None) -> float:
    """The median heuristic: median pairwise distance between distinct rows (at most ``max_points`` rows).

    Falls back to 1.0 when all distances are zero (a constant variable).
    """
    x = as_samples(x, "x")
    if x.shape[0] > max_points:
        rng = np.random.default_rng(0) if rng is None else rng
        x = x[rng.choice(x.shape[0], max_points, replace=False)]
    d = sq_distances(x, x)[np.triu_indices(x.shape[0], 1)]
    d = d[d > 0]
    return float(math.sqrt(np.median(d))) if d.size else 1.0


class RBF:
    """Gaussian kernel ``exp(-|x - y|^2 / (2 bandwidth^2))``; ``bandwidth=None`` until :meth:`fitted` on data."""

    def __init__(self, bandwidth: float | None = None):
        self.bandwidth = None if bandwidth is None else check_real(bandwidth, "bandwidth", "(0, inf)")

    def fitted(self, x, rng=None) -> RBF:
        """This kernel if its bandwidth is set, else a copy with the median-heuristic bandwidth of ``x``."""
        return self if self.bandwidth is not None else RBF(median_bandwidth(x, rng=rng))

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.bandwidth is None:
            raise ValueError("RBF bandwidth is not set: pass bandwidth= or call fitted(x) first")
        return np.exp(-sq_distances(x, y) / (2.0 * self.bandwidth**2))

    def __repr__(self) -> str:
        return f"RBF(bandwidth={self.bandwidth!r})"


class Linear:
    """Linear kernel ``<x, y>``."""

    def fitted(self, x, rng=None) -> Linear:
        return self

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return x @ y.T

    def __repr__(self) -> str:
        return "Linear()"


def _gram(K, name: str, n: int | None = None) -> np.ndarray:
    """A finite square Gram matrix (``(n, n)`` when ``n`` is given)."""
    return as_array(K, name, ("n", "n") if n is None else (n, n), hint="" if n is None else " (like K_x)")


def krr_loo_loss(K_x, K_y, ridge: float) -> float:
    """Exact mean leave-one-out squared error of kernel ridge regression, in closed form.

    Args:
        K_x: ``(n, n)`` input Gram matrix.
        K_y: ``(n, n)`` target Gram matrix (``y @ y.T`` for targets ``y (n, p)``; a kernel Gram for a
            conditional mean embedding, where the error is the squared RKHS norm).
        ridge: the absolute ridge ``r`` in ``(K_x + r I)``; the leave-one-out fits use the same ``r``.
    """
    K_x = _gram(K_x, "K_x")
    K_y = _gram(K_y, "K_y", K_x.shape[0])
    r = check_real(ridge, "ridge", "(0, inf)")
    n = K_x.shape[0]
    W = np.linalg.solve(K_x + r * np.eye(n), np.eye(n))  # (K_x + rI)^-1
    resid = r * W  # I - H
    num = ((resid @ K_y) * resid).sum(1)  # diag((I - H) K_y (I - H)^T)
    return float(np.mean(num / np.diag(resid) ** 2))


def loo_losses(K_x, K_y, ridges) -> np.ndarray:
    """:func:`krr_loo_loss` for each absolute ridge in ``ridges``, from one eigendecomposition of ``K_x``."""
    K_x = _gram(K_x, "K_x")
    K_y = _gram(K_y, "K_y", K_x.shape[0])
    s, U = np.linalg.eigh(K_x)
    s = np.maximum(s, 0.0)
    M = U.T @ K_y @ U  # (n, n)
    U2 = U * U
    out = []
    for r in ridges:
        g = check_real(r, "ridge", "(0, inf)") / (s + r)  # eigenvalues of I - H
        Ug = U * g  # (n, n)
        num = ((Ug @ M) * Ug).sum(1)  # diag(U g M g U^T)
        out.append(float(np.mean(num / (U2 @ g) ** 2)))
    return np.array(out)


def select_ridge(K_x, K_y, grid=RIDGE_GRID) -> float:
    """The ``lam`` of ``grid`` whose absolute ridge ``n * lam`` has the smallest closed-form LOO loss."""
    n = np.asarray(K_x).shape[0]
    grid = tuple(grid)
    if not grid:
        raise ValueError("grid must hold at least one ridge")
    return float(grid[int(np.argmin(loo_losses(K_x, K_y, [n * lam for lam in grid])))])


def choose_ridge(
    input_kernel,
    output_kernel,
    c: np.ndarray,
    y: np.ndarray,
    grid=RIDGE_GRID,
    max_select: int = 300,
    rng=None,
) -> float:
    """:func:`select_ridge` for the regression of ``phi(y)`` on ``c`` with fitted kernels, on at most
    ``max_select`` random rows."""
    n = c.shape[0]
    if n > max_select:
        rng = np.random.default_rng(0) if rng is None else rng
        idx = np.sort(rng.choice(n, max_select, replace=False))
        c, y = c[idx], y[idx]
    return select_ridge(input_kernel(c, c), output_kernel(y, y), grid)


class ConditionalMeanEmbedding:
    """Kernel ridge estimate of ``mu(c) = E[phi(Y) | C = c]`` (a conditional mean embedding).

    Args:
        input_kernel: kernel on ``c`` (default :class:`RBF` with the median heuristic).
        output_kernel: kernel on ``y`` (default :class:`RBF` with the median heuristic); the centered
            Grams are inner products in its feature space.
        ridge: ``lam`` (the absolute ridge is ``n * lam``); None chooses it by the closed-form LOO loss
            over ``grid`` on at most ``max_select`` of the training points.
        random_state: seeds the subsample for the median heuristic and the ridge search.

    Attributes after ``fit``: ``input_kernel_``, ``output_kernel_``, ``ridge_`` (lam), ``n_`` (training size).
    """

    def __init__(
        self,
        input_kernel=None,
        output_kernel=None,
        ridge: float | None = None,
        grid=RIDGE_GRID,
        max_select: int = 300,
        random_state=None,
    ):
        self.input_kernel = input_kernel
        self.output_kernel = output_kernel
        self.ridge = ridge
        self.grid = grid
        self.max_select = max_select
        self.random_state = random_state

    def fit(self, c, y) -> ConditionalMeanEmbedding:
        C, Y = as_matched_samples(c=c, y=y)
        rng = np.random.default_rng(self.random_state)
        self.input_kernel_: RBF | Linear = (RBF() if self.input_kernel is None else self.input_kernel).fitted(
            C, rng
        )
        self.output_kernel_: RBF | Linear = (
            RBF() if self.output_kernel is None else self.output_kernel
        ).fitted(Y, rng)
        n = C.shape[0]
        self.ridge_: float
        if self.ridge is None:
            self.ridge_ = choose_ridge(
                self.input_kernel_, self.output_kernel_, C, Y, self.grid, self.max_select, rng
            )
        else:
            self.ridge_ = check_real(self.ridge, "ridge", "(0, inf)")
        self.C_, self.Y_, self.n_ = C, Y, n
        self._dual: np.ndarray | None = None
        self.K_YY_ = self.output_kernel_(Y, Y)  # (n, n)
        self._chol = cho_factor(self.input_kernel_(C, C) + n * self.ridge_ * np.eye(n))
        return self

    def weights(self, c) -> np.ndarray:
        """``beta (m, n)``: ``mu(c_u) = sum_j beta[u, j] phi(Y_j)``."""
        c = as_samples(c, "c")
        return cho_solve(self._chol, self.input_kernel_(self.C_, c)).T

    def predict_mean(self, c) -> np.ndarray:
        """``beta(c) @ Y`` ``(m, p)``: the kernel ridge prediction of ``y`` (the embedding's mean under a
        :class:`Linear` output kernel), from dual coefficients ``(K_CC + r I)^-1 Y`` computed once."""
        if self._dual is None:
            self._dual = cho_solve(self._chol, self.Y_)  # (n, p)
        return self.input_kernel_(as_samples(c, "c"), self.C_) @ self._dual

    def centered_gram(self, c1, y1, c2=None, y2=None, beta1=None, beta2=None) -> np.ndarray:
        """``K~[u, v] = <phi(y1_u) - mu(c1_u), phi(y2_v) - mu(c2_v)>`` ``(n1, n2)`` (``c2, y2`` default to ``c1, y1``).

        ``beta1``/``beta2`` reuse weights already computed by :meth:`weights`.
        """
        y1 = as_samples(y1, "y1")
        b1 = self.weights(c1) if beta1 is None else beta1
        if c2 is None and y2 is None:
            y2, b2 = y1, b1
        else:
            y2 = as_samples(y2, "y2")
            b2 = self.weights(c2) if beta2 is None else beta2
        L1 = self.output_kernel_(self.Y_, y1)  # (n, n1)
        L2 = L1 if y2 is y1 else self.output_kernel_(self.Y_, y2)  # (n, n2)
        return self.output_kernel_(y1, y2) - b1 @ L2 - (b2 @ L1).T + b1 @ self.K_YY_ @ b2.T


class GaussianConditional:
    """A known conditional ``A | C ~ N(mean(C), std^2 I)`` for SKCI's oracle mode.

    Args:
        mean: callable ``c (n, d_c) -> (n, d_a)`` (or ``(n,)``), the conditional mean E[A | C].
        std: the conditional standard deviation of each coordinate.

    Under ``RBF(h)`` on ``a`` the embedding is closed-form: for ``A ~ N(m, s^2 I_p)``,
    ``E k(x, A) = (h^2 / (h^2 + s^2))^(p/2) exp(-|x - m|^2 / (2 (h^2 + s^2)))`` and for independent
    ``A ~ N(m1, s^2 I)``, ``A' ~ N(m2, s^2 I)``, ``E k(A, A') = (h^2 / (h^2 + 2 s^2))^(p/2) exp(-|m1 - m2|^2 / (2 (h^2 + 2 s^2)))``.
    """

    def __init__(self, mean: Callable[[np.ndarray], Any], std: float):
        if not callable(mean):
            raise TypeError(f"mean must be a callable c -> E[A | C = c], got {type(mean).__name__}")
        self.mean = mean
        self.std = check_real(std, "std", "[0, inf)")

    def _means(self, c: np.ndarray, p: int) -> np.ndarray:
        m = np.asarray(self.mean(c), dtype=float).reshape(c.shape[0], -1)
        if m.shape[1] != p:
            raise ValueError(f"mean(c) must return {p} column(s) like a, got shape {m.shape}")
        return m

    def centered_gram(self, kernel: RBF, c1, a1, c2, a2) -> np.ndarray:
        """Exact ``<phi(a1_u) - mu(c1_u), phi(a2_v) - mu(c2_v)>`` ``(n1, n2)`` under ``kernel`` (an RBF)."""
        if not isinstance(kernel, RBF) or kernel.bandwidth is None:
            raise TypeError("the exact Gaussian embedding needs an RBF kernel with its bandwidth set")
        h2, s2 = kernel.bandwidth**2, self.std**2
        p = a1.shape[1]
        m1, m2 = self._means(c1, p), self._means(c2, p)
        one = (h2 / (h2 + s2)) ** (p / 2)
        two = (h2 / (h2 + 2 * s2)) ** (p / 2)
        return (
            kernel(a1, a2)
            - one * np.exp(-sq_distances(a1, m2) / (2 * (h2 + s2)))
            - one * np.exp(-sq_distances(m1, a2) / (2 * (h2 + s2)))
            + two * np.exp(-sq_distances(m1, m2) / (2 * (h2 + 2 * s2)))
        )
