"""Kernels, kernel ridge regression with the closed-form leave-one-out loss, and conditional mean embeddings.

* :class:`RBF` ``k(x, y) = exp(-|x - y|^2 / (2 bandwidth^2))`` with the median heuristic
  (:func:`median_bandwidth`), :class:`Linear` ``k(x, y) = <x, y>``, and :class:`RBFLinear`, their sum
  ``exp(-|x - y|^2 / (2 h^2)) + <x, y> / h^2`` (a regression with it fits linear trends without the
  shrinkage an RBF alone gives them), and :class:`Affine` ``1 + <x, y> / h^2`` (ridge regression on
  ``(1, x / h)``); :func:`choose_kernel_and_ridge` picks an input kernel and a ridge by the LOO loss.
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
* :class:`GaussianConditional`: a Gaussian ``A | C ~ N(m(C), s^2 I)``; its embedding under an RBF
  kernel is closed-form, so the centered Gram is exact (SKCI's *oracle* mode when it is known;
  :meth:`GaussianConditional.estimate` fits ``m`` by kernel ridge regression and ``s`` from the
  leave-one-out residuals, SKCI's default online estimate).

The ridge is the absolute diagonal term ``r``; we search ``r = n * lam`` over a log-grid of ``lam``
(the parameterisation of the official SKCI code). Bandwidths and ridges are chosen on at most
``max_select`` points (our own choice, to keep the search cubic in a small number).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from icml_stats.validation import as_array, as_matched_samples, as_rng, as_samples, check_int, check_real

RIDGE_GRID = tuple(10.0 ** np.arange(-5, 1))  # lam; the absolute ridge is n * lam
MEDIAN_MAX = 500  # the median heuristic looks at most at this many points


def sq_distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances ``(n, m)`` between the rows of ``x (n, d)`` and ``y (m, d)``.

    Entries beyond 1e100 in size are scaled down first, so that the squares cannot overflow into
    ``inf - inf = NaN``; a distance beyond the float range is then ``inf``. The rows are measured from
    their common mean (distances do not change under a translation), so that a common offset does not
    cancel the digits of ``|x|^2 + |y|^2 - 2 x.y``."""
    top = max(float(np.abs(x).max(initial=0.0)), float(np.abs(y).max(initial=0.0)))
    if top > 1e100:
        with np.errstate(over="ignore"):
            return top * (top * sq_distances(x / top, y / top))  # 0 stays 0 (inf * 0 would be NaN)
    if len(x) + len(y):
        centre = (x.sum(0) + y.sum(0)) / (len(x) + len(y))
        x, y = x - centre, y - centre
    d = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T
    return np.maximum(d, 0.0)


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    """Two finite sample arrays ``(n, d)`` and ``(m, d)`` with the same columns, for a kernel's Gram."""
    x, y = as_samples(x, "x"), as_samples(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    return x, y


def median_bandwidth(x, max_points: int = MEDIAN_MAX, rng=None) -> float:
    """The median heuristic: median pairwise distance between distinct rows (at most ``max_points`` rows).

    Falls back to 1.0 when all distances are zero (a constant variable). Data beyond 1e100 or below
    1e-100 in size are measured in units of their largest entry, so that squared distances neither
    overflow nor underflow: the bandwidth scales with the data at every magnitude.
    """
    x = as_samples(x, "x")
    max_points = check_int(max_points, "max_points", 2)
    rng = as_rng(0 if rng is None else rng, "rng")
    if x.shape[0] > max_points:
        x = x[rng.choice(x.shape[0], max_points, replace=False)]
    # squared distances of huge entries would overflow, those of tiny ones (below ~1e-154) underflow to 0
    scale = _unit(x)
    d = sq_distances(x / scale, x / scale)[np.triu_indices(x.shape[0], 1)]
    d = d[d > 0]
    return min(scale * float(math.sqrt(np.median(d))), np.finfo(float).max) if d.size else 1.0


class _Scaled:
    """A kernel with a length scale ``bandwidth``, None until :meth:`fitted` sets it by the median heuristic."""

    def __init__(self, bandwidth: float | None = None):
        self.bandwidth = None if bandwidth is None else check_real(bandwidth, "bandwidth", "(0, inf)")

    def fitted(self, x, rng=None):
        """This kernel if its bandwidth is set, else a copy with the median-heuristic bandwidth of ``x``."""
        return self if self.bandwidth is not None else type(self)(median_bandwidth(x, rng=rng))

    def _scale(self) -> float:
        if self.bandwidth is None:
            raise ValueError(
                f"{type(self).__name__} bandwidth is not set: pass bandwidth= or call fitted(x) first"
            )
        return self.bandwidth

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bandwidth={self.bandwidth!r})"


class RBF(_Scaled):
    """Gaussian kernel ``exp(-|x - y|^2 / (2 bandwidth^2))``; ``bandwidth=None`` until :meth:`fitted` on data."""

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        h = self._scale()
        x, y = _pair(x, y)
        if 1e-100 < h < 1e100:
            return np.exp(-sq_distances(x, y) / (2.0 * h**2))
        with np.errstate(over="ignore", under="ignore"):  # h^2 would overflow or underflow to 0
            return np.exp(-sq_distances(x / h, y / h) / 2.0)


class Linear:
    """Linear kernel ``<x, y>``."""

    def fitted(self, x, rng=None) -> Linear:
        return self

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x, y = _pair(x, y)
        gram = x @ y.T
        if not np.isfinite(gram).all():
            warnings.warn("Linear kernel: inner products overflowed to inf", RuntimeWarning, stacklevel=2)
        return gram

    def __repr__(self) -> str:
        return "Linear()"


class RBFLinear(_Scaled):
    """``exp(-|x - y|^2 / (2 h^2)) + <x, y> / h^2``: an RBF plus a linear kernel on the same scale.

    ``bandwidth=None`` until :meth:`fitted` on data (median heuristic). Dividing the linear part by ``h^2``
    keeps both parts of order one whatever the units of ``x``.
    """

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        h = self._scale()
        x, y = _pair(x, y)
        x, y = x / h, y / h  # in units of h: no overflow of h^2
        return np.exp(-sq_distances(x, y) / 2.0) + x @ y.T


class Affine(_Scaled):
    """``1 + <x, y> / h^2``: kernel ridge regression with it is ridge regression on ``(1, x / h)``.

    ``bandwidth=None`` until :meth:`fitted` on data (median heuristic), as for :class:`RBFLinear`.
    """

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        h = self._scale()
        x, y = _pair(x, y)
        return 1.0 + (x / h) @ (y / h).T


def _gram(K, name: str, n: int | None = None) -> np.ndarray:
    """A finite square Gram matrix (``(n, n)`` when ``n`` is given): symmetric, with a nonnegative diagonal
    (what every positive semi-definite matrix has; a LOO loss of anything else can turn negative)."""
    K = as_array(K, name, ("n", "n") if n is None else (n, n), hint="" if n is None else " (like K_x)")
    top = float(np.abs(K).max())
    if np.any(np.diag(K) < 0) or not np.allclose(K, K.T, rtol=1e-7, atol=1e-9 * top):
        raise ValueError(f"{name} must be a Gram matrix: symmetric, with a nonnegative diagonal")
    return K


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
    if r < n * np.finfo(float).eps * float(np.abs(K_x).max()):
        # K_x + r I is singular to float precision: the direct solve returns garbage (even a negative
        # loss); the eigendecomposition of loo_losses stays a sum of squares
        warnings.warn(
            f"ridge = {r:g} is below float precision relative to K_x: the leave-one-out loss is computed "
            "from the eigendecomposition of K_x and is only as accurate as its smallest eigenvalues",
            RuntimeWarning,
            stacklevel=2,
        )
        return float(loo_losses(K_x, K_y, [r])[0])
    try:
        W = np.linalg.solve(K_x + r * np.eye(n), np.eye(n))  # (K_x + rI)^-1
    except np.linalg.LinAlgError:  # K_x not positive semi-definite: -r is one of its eigenvalues
        raise ValueError(
            f"K_x + ridge I is singular (K_x is not a PSD Gram matrix?), ridge = {r:g}"
        ) from None
    resid = r * W  # I - H
    with np.errstate(all="ignore"):  # reported below
        num = ((resid @ K_y) * resid).sum(1)  # diag((I - H) K_y (I - H)^T)
        loss = float(np.mean(num / np.diag(resid) ** 2))
    _warn_if_not_finite(np.array([loss]))
    return loss


def _warn_if_not_finite(losses: np.ndarray) -> None:
    """LOO losses overflow or divide 0 by 0 when a ridge is tiny against K_x's scale: say so."""
    if not np.isfinite(losses).all():
        warnings.warn(
            "the leave-one-out loss is not finite for some ridge: the ridge is too small (or the Gram "
            "matrices too large) for float precision; use a larger ridge",
            RuntimeWarning,
            stacklevel=3,
        )


def loo_losses(K_x, K_y, ridges) -> np.ndarray:
    """:func:`krr_loo_loss` for each absolute ridge in ``ridges``, from one eigendecomposition of ``K_x``."""
    K_x = _gram(K_x, "K_x")
    K_y = _gram(K_y, "K_y", K_x.shape[0])
    ridges = as_array(ridges, "ridges", ("n_ridges",), interval="(0, inf)", hint=" (at least one ridge)")
    s, U = np.linalg.eigh(K_x)
    s = np.maximum(s, 0.0)
    M = U.T @ K_y @ U  # (n, n)
    U2 = U * U
    out = []
    with np.errstate(all="ignore"):  # reported below
        for r in ridges:
            g = r / (s + r)  # eigenvalues of I - H
            Ug = U * g  # (n, n)
            num = ((Ug @ M) * Ug).sum(1)  # diag(U g M g U^T)
            out.append(float(np.mean(num / (U2 @ g) ** 2)))
    losses = np.array(out)
    _warn_if_not_finite(losses)
    return losses


def select_ridge(K_x, K_y, grid=RIDGE_GRID) -> float:
    """The ``lam`` of ``grid`` whose absolute ridge ``n * lam`` has the smallest closed-form LOO loss."""
    n = _gram(K_x, "K_x").shape[0]
    lams = _ridge_grid(grid)
    with np.errstate(over="ignore"):
        ridges = n * lams
    if not np.isfinite(ridges).all():
        raise ValueError(f"grid must hold ridges lam with n * lam finite (n = {n}), got max {lams.max():g}")
    losses = loo_losses(K_x, K_y, ridges)
    if not np.isfinite(losses).any():
        raise ValueError("grid holds no ridge with a finite leave-one-out loss: use larger ridges")
    return float(lams[int(np.argmin(np.where(np.isfinite(losses), losses, np.inf)))])


def _ridge_grid(grid) -> np.ndarray:
    """A non-empty 1-D grid of ridges ``lam > 0``."""
    return as_array(grid, "grid", ("n_ridges",), interval="(0, inf)", hint=" (at least one ridge)")


def choose_kernel_and_ridge(
    input_kernels,
    output_kernel,
    c: np.ndarray,
    y: np.ndarray,
    grid=RIDGE_GRID,
    max_select: int = 300,
    rng=None,
) -> tuple:
    """The ``(input kernel, lam)`` pair, over ``input_kernels`` x ``grid``, with the smallest closed-form LOO
    loss of the regression of ``phi(y)`` on ``c`` (on at most ``max_select`` random rows)."""
    c, y = _subsample(c, y, max_select, rng)
    lams = _ridge_grid(grid)
    K_y = _target_gram(output_kernel, y)
    best: tuple | None = None
    for kernel in input_kernels:
        losses = loo_losses(kernel(c, c), K_y, c.shape[0] * lams)
        i = int(np.argmin(np.where(np.isfinite(losses), losses, np.inf)))
        if np.isfinite(losses[i]) and (best is None or losses[i] < best[0]):
            best = (losses[i], kernel, float(lams[i]))
    if best is None:
        raise ValueError("no input kernel and ridge has a finite leave-one-out loss: use larger ridges")
    return best[1], best[2]


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
    c, y = _subsample(c, y, max_select, rng)
    return select_ridge(input_kernel(c, c), _target_gram(output_kernel, y), grid)


def _unit(y: np.ndarray) -> float:
    """The largest entry's size when ``y`` is beyond 1e100 or below 1e-100 in size (its squares and
    products would overflow or underflow), else 1.0 (dividing by it is then exact)."""
    top = float(np.abs(y).max(initial=0.0))
    return top if top > 1e100 or 0.0 < top < 1e-100 else 1.0


def _target_gram(output_kernel, y: np.ndarray) -> np.ndarray:
    """The target Gram of a ridge choice. A :class:`Linear` Gram is taken in units of :func:`_unit` of
    ``y``, so that ``y @ y.T`` neither overflows to inf nor underflows to 0 (where every ridge had loss 0
    and the first candidate won): the LOO losses are then all divided by one constant, which leaves
    their argmin, the choice, as at an ordinary scale."""
    if isinstance(output_kernel, Linear):
        y = y / _unit(y)
    return output_kernel(y, y)


def _subsample(c: np.ndarray, y: np.ndarray, max_select: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_select`` random matched rows of ``c`` and ``y`` (all of them, in order, if fewer)."""
    n = c.shape[0]
    if n <= max_select:
        return c, y
    rng = np.random.default_rng(0) if rng is None else rng
    idx = np.sort(rng.choice(n, max_select, replace=False))
    return c[idx], y[idx]


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
        _check_kernel(self.input_kernel, "input_kernel")
        _check_kernel(self.output_kernel, "output_kernel")
        if self.ridge is not None:
            check_real(self.ridge, "ridge", "(0, inf)")
        _ridge_grid(self.grid)
        check_int(self.max_select, "max_select", 2)
        rng = as_rng(self.random_state)
        self.input_kernel_: RBF | Linear = (RBF() if self.input_kernel is None else self.input_kernel).fitted(
            C, rng
        )
        self.output_kernel_: RBF | Linear = (
            RBF() if self.output_kernel is None else self.output_kernel
        ).fitted(Y, rng)
        n = C.shape[0]
        K_CC, K_YY = self.input_kernel_(C, C), self.output_kernel_(Y, Y)  # (n, n) each
        for name, K in (("c", K_CC), ("y", K_YY)):
            if not np.isfinite(K).all():
                raise ValueError(
                    f"{name} is too large for its kernel: the Gram matrix overflows; rescale {name}"
                )
        self.ridge_: float
        if self.ridge is None:
            self.ridge_ = choose_ridge(
                self.input_kernel_, self.output_kernel_, C, Y, self.grid, self.max_select, rng
            )
        else:
            self.ridge_ = check_real(self.ridge, "ridge", "(0, inf)")
        self.C_, self.Y_, self.n_ = C, Y, n
        self._dual: np.ndarray | None = None
        self.K_YY_ = K_YY
        self._chol = cho_factor(K_CC + n * self.ridge_ * np.eye(n))
        return self

    def weights(self, c) -> np.ndarray:
        """``beta (m, n)``: ``mu(c_u) = sum_j beta[u, j] phi(Y_j)``."""
        c = as_samples(c, "c")
        if c.shape[1] != self.C_.shape[1]:
            raise ValueError(f"c must have {self.C_.shape[1]} columns like the fitted c, got {c.shape[1]}")
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


def _check_kernel(kernel, name: str) -> None:
    """None (the default RBF) or a kernel object with ``fitted`` and a Gram ``__call__``."""
    if kernel is not None and (
        isinstance(kernel, type) or not (callable(kernel) and hasattr(kernel, "fitted"))
    ):
        raise TypeError(f"{name} must be a kernel such as RBF() or Linear() (or None), got {kernel!r}")


class GaussianConditional:
    """A conditional ``A | C ~ N(mean(C), std^2 I)``: known (SKCI's oracle mode) or fitted (:meth:`estimate`).

    Args:
        mean: callable ``c (n, d_c) -> (n, d_a)`` (or ``(n,)``), the conditional mean E[A | C].
        std: the conditional standard deviation of each coordinate.

    Under ``RBF(h)`` on ``a`` the embedding is closed-form: for ``A ~ N(m, s^2 I_p)``,
    ``E k(x, A) = (h^2 / (h^2 + s^2))^(p/2) exp(-|x - m|^2 / (2 (h^2 + s^2)))`` and for independent
    ``A ~ N(m1, s^2 I)``, ``A' ~ N(m2, s^2 I)``, ``E k(A, A') = (h^2 / (h^2 + 2 s^2))^(p/2) exp(-|m1 - m2|^2 / (2 (h^2 + 2 s^2)))``.
    """

    ridge_: float  # set by estimate()
    input_kernel_: Any
    explained_: float

    def __init__(self, mean: Callable[[np.ndarray], Any], std: float):
        if not callable(mean):
            raise TypeError(f"mean must be a callable c -> E[A | C = c], got {type(mean).__name__}")
        self.mean = mean
        self.std = check_real(std, "std", "[0, inf)")

    @classmethod
    def estimate(
        cls,
        c,
        y,
        input_kernel=None,
        ridge: float | None = None,
        grid=RIDGE_GRID,
        max_select: int = 300,
        random_state=None,
    ) -> GaussianConditional:
        """Fit ``y | c ~ N(m(c), s^2 I)``: ``m`` by kernel ridge regression (default input kernel
        :class:`RBFLinear` with the median heuristic; ``ridge`` is ``lam``, the absolute ridge ``n * lam``,
        None: chosen by the closed-form LOO loss over ``grid`` on at most ``max_select`` points) and ``s``
        the root mean square of the exact leave-one-out residuals (not the in-sample ones, which the fit
        shrinks).

        The result has ``ridge_``, ``input_kernel_`` and ``explained_`` (one minus the LOO mean squared
        error over the variance of ``y``: the fraction of ``y`` that ``c`` explains out of sample).
        """
        C, Y = as_matched_samples(c=c, y=y)
        _check_kernel(input_kernel, "input_kernel")
        _ridge_grid(grid)
        check_int(max_select, "max_select", 2)
        rng = as_rng(random_state)
        kernel = (RBFLinear() if input_kernel is None else input_kernel).fitted(C, rng)
        lam = (
            choose_ridge(kernel, Linear(), C, Y, grid, max_select, rng)
            if ridge is None
            else check_real(ridge, "ridge", "(0, inf)")
        )
        n = C.shape[0]
        K = kernel(C, C)
        if not np.isfinite(K).all():
            raise ValueError("c is too large for its kernel: the Gram matrix overflows; rescale c")
        W = cho_solve(cho_factor(K + n * lam * np.eye(n)), np.eye(n))  # (K + r I)^-1
        dual = W @ Y  # (n, p)
        loo = dual / np.diag(W)[:, None]  # exact leave-one-out residuals y_i - m_(-i)(c_i)
        unit = _unit(Y)  # squares in units of Y's largest entry beyond 1e+-100: no overflow or underflow
        mse = float(np.mean((loo / unit) ** 2))
        total = float(np.mean(((Y - Y.mean(0)) / unit) ** 2))

        def mean(cc):
            return kernel(as_samples(cc, "c"), C) @ dual

        out = cls(mean, unit * math.sqrt(mse))
        out.ridge_, out.input_kernel_ = lam, kernel
        out.explained_ = 1.0 - mse / total if total > 0 else 0.0
        return out

    def _means(self, c: np.ndarray, p: int) -> np.ndarray:
        m = np.asarray(self.mean(c), dtype=float).reshape(c.shape[0], -1)
        if m.shape[1] != p:
            raise ValueError(f"mean(c) must return {p} column(s) like a, got shape {m.shape}")
        return m

    def centered_gram(self, kernel: RBF, c1, a1, c2, a2) -> np.ndarray:
        """Exact ``<phi(a1_u) - mu(c1_u), phi(a2_v) - mu(c2_v)>`` ``(n1, n2)`` under ``kernel`` (an RBF)."""
        if not isinstance(kernel, RBF) or kernel.bandwidth is None:
            raise TypeError(
                f"kernel must be an RBF kernel with its bandwidth set (the exact Gaussian embedding), got {kernel!r}"
            )
        c1, a1 = as_matched_samples(c1=c1, a1=a1)
        c2, a2 = as_matched_samples(c2=c2, a2=a2)
        for name, got, like in (("c2", c2, c1), ("a2", a2, a1)):
            if got.shape[1] != like.shape[1]:
                raise ValueError(
                    f"{name} must have {like.shape[1]} columns like {name[0]}1, got {got.shape[1]}"
                )
        h = kernel.bandwidth
        p = a1.shape[1]
        m1, m2 = self._means(c1, p), self._means(c2, p)
        with np.errstate(over="ignore", under="ignore"):  # s / h beyond the float range: r = inf or 0
            r = (self.std / h) ** 2 if self.std < h * 1e150 else math.inf  # s^2 / h^2

            def smoothed(x, y, k):  # exp(-|x - y|^2 / (2 (h^2 + k s^2))), in units of h
                return np.exp(-sq_distances(x / h, y / h) / (2.0 * (1.0 + k * r)))

            one, two = (1.0 + r) ** (-p / 2), (1.0 + 2.0 * r) ** (-p / 2)
            return (
                kernel(a1, a2)
                - one * smoothed(a1, m2, 1)
                - one * smoothed(m1, a2, 1)
                + two * smoothed(m1, m2, 2)
            )
