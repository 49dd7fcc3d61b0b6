"""Global and local Fréchet regression (Petersen & Müller 2019) as scikit-learn estimators.

Both predict a weighted Fréchet mean of the training objects with weights that depend on the query:

* global: ``s_i(x) = 1 + (X_i - Xbar)^T Sigma^-1 (x - Xbar)`` (``Sigma`` the covariance with ``1/n``),
  ``w_i = s_i / n``; with the Euclidean metric this is the least-squares prediction.
* local (one predictor ``u``): ``mu_j = n^-1 sum_i K_h(U_i - u) (U_i - u)^j``,
  ``s_i = K_h(U_i - u) [mu_2 - mu_1 (U_i - u)] / (mu_0 mu_2 - mu_1^2)``, ``w_i = s_i / n``; with the
  Euclidean metric this is the local-linear smoother. The bandwidth is chosen by K-fold cross-validation
  of the mean squared distance when not given.

``fit(X, y)`` takes ``X (n, p)`` and the objects ``y`` of the ``space`` (see
:mod:`icml_stats.frechet.spaces`); ``predict`` returns objects of the space; ``score`` is the Fréchet
R^2, ``1 - sum d^2(y_i, m(x_i)) / sum d^2(y_i, ybar)`` with ``ybar`` the Fréchet mean of ``y``.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.model_selection import KFold
from sklearn.utils.validation import check_is_fitted

from icml_stats.frechet.spaces import FrechetMeanError, Space, as_space
from icml_stats.validation import (
    as_array,
    as_samples,
    check_choice,
    check_cv,
    check_real,
    check_seed,
    keep_state_on_failure,
    validate_features,
)

__all__ = [
    "KERNELS",
    "GlobalFrechetRegressor",
    "LocalFrechetRegressor",
    "global_weights",
    "local_weights",
]

KERNELS = ("gaussian", "epanechnikov")


def _global_weights(xt: np.ndarray, xq: np.ndarray) -> np.ndarray:
    n = len(xt)
    centre = xt.mean(0)
    # the weights do not change when a column is rescaled: bring every column to unit spread, so that the
    # pseudo-inverse's cut-off (relative to the largest eigenvalue) does not drop a feature of small scale
    # next to one of large scale. A constant column carries no information (its centred values are only the
    # rounding of the mean): it is zeroed, as the pseudo-inverse of an exact zero variance treats it.
    dt, dq = xt - centre, xq - centre
    scale = np.abs(dt).max(0)
    varies = np.ptp(xt, 0) > 0
    dt = np.where(varies, dt / np.where(varies, scale, 1.0), 0.0)
    dq = np.where(varies, dq / np.where(varies, scale, 1.0), 0.0)
    cov = dt.T @ dt / n
    inv = np.linalg.pinv(cov, hermitian=True)
    w = (1.0 + dq @ inv @ dt.T) / n
    return w / w.sum(1, keepdims=True)  # exact in theory (the centred rows sum to 0); removes rounding


def global_weights(x_train, x_query) -> np.ndarray:
    """Global Fréchet regression weights ``(k, n)`` of the training rows for each query row (sum to 1).
    A singular covariance is replaced by its pseudo-inverse (the least-norm least-squares fit)."""
    xt = as_samples(x_train, "x_train")
    xq = as_samples(x_query, "x_query")
    if xq.shape[1] != xt.shape[1]:
        raise ValueError(f"x_query must have {xt.shape[1]} columns like x_train, got {xq.shape[1]}")
    with np.errstate(all="ignore"):
        w = _global_weights(xt, xq)
    if not np.isfinite(w).all():
        raise ValueError("x_train and x_query must be small enough in magnitude for the weights to be finite")
    return w


def _local_weights(ut: np.ndarray, uq: np.ndarray, h: float, kernel: str) -> np.ndarray:
    t = (ut[None, :] - uq[:, None]) / h
    if kernel == "gaussian":
        logk = -0.5 * t**2
        k = np.exp(logk - logk.max(1, keepdims=True))  # a constant factor per row cancels in the weights
    else:
        k = np.maximum(1.0 - t**2, 0.0)
    # the weights do not change when the offsets are rescaled: measure them in units of the data's spread,
    # so that huge or tiny bandwidths do not underflow the moments
    scale = float(np.ptp(ut)) or 1.0
    d = (ut[None, :] - uq[:, None]) / scale
    mu0, mu1, mu2 = k.sum(1), (k * d).sum(1), (k * d**2).sum(1)
    det = mu0 * mu2 - mu1**2
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        w = k * (mu2[:, None] - mu1[:, None] * d) / det[:, None]
        w = w / w.sum(1, keepdims=True)  # exact in theory; removes the rounding of near-singular windows
    w[~(det > 1e-10 * np.maximum(mu0 * mu2, 1e-300)) | ~np.isfinite(w).all(1)] = np.nan
    return w


def local_weights(u_train, u_query, bandwidth: float, kernel: str = "gaussian") -> np.ndarray:
    """Local-linear Fréchet regression weights ``(k, n)`` for a scalar predictor (each row sums to 1).

    Rows of query points whose window holds too little data for a local line (``mu_0 mu_2 - mu_1^2``
    vanishing: fewer than two distinct neighbours under the Epanechnikov kernel, or a bandwidth so small
    that one neighbour takes all the kernel weight) are NaN, with a warning."""
    ut = as_array(u_train, "u_train")
    uq = as_array(u_query, "u_query")
    if ut.ndim != 1 or len(ut) < 2:
        raise ValueError(f"u_train must be a 1-D array of at least 2 predictor values, got shape {ut.shape}")
    if uq.ndim != 1:
        raise ValueError(f"u_query must be a 1-D array of predictor values, got shape {uq.shape}")
    h = check_real(bandwidth, "bandwidth", "(0, inf)")
    check_choice(kernel, "kernel", KERNELS)
    with np.errstate(all="ignore"):
        w = _local_weights(ut, uq, h, kernel)
    bad = np.isnan(w).any(1)
    if bad.any():
        warnings.warn(
            f"local_weights: {int(bad.sum())} of {len(uq)} query points have fewer than two distinct "
            f"neighbours within bandwidth {h:.4g} ({kernel} kernel); their rows are NaN",
            RuntimeWarning,
            stacklevel=2,
        )
    return w


class BaseFrechetRegressor(BaseEstimator):
    """What the Fréchet regressors share: the space, the checks of y and the Fréchet R^2 score."""

    space: Space | str

    def _reset(self) -> None:
        """Drop what an earlier ``fit`` learned (scikit-learn's convention: ``fit`` starts afresh), so that a
        refit that sets fewer attributes (a fixed bandwidth after a cross-validated one kept the old
        ``cv_losses_``) leaves nothing of the old model behind. A refit that raises puts the earlier fit
        back whole (``fit``): a reset model with only ``n_features_in_`` and ``space_`` passed
        ``check_is_fitted`` while ``predict`` raised AttributeError."""
        for key in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, key)

    def fit(self, X, y):
        """Fit on ``X`` ``(n, p)`` and the objects ``y`` of the space; returns self. A fit that raises
        leaves the estimator as it was (an earlier fit whole, still predicting as before)."""
        with keep_state_on_failure(self):
            self._reset()
            self._fit(X, y)
        return self

    def _fit(self, X, y) -> None:
        raise NotImplementedError

    def _fit_space(self, y) -> np.ndarray:
        self.space_ = as_space(self.space)
        yy = self.space_.check(y, "y")
        # a 1-D y (Euclidean, one output) is checked as a column; predict gives it back 1-D, as
        # scikit-learn's regressors do, while a 2-D y of one column keeps its column
        self._y_1d = yy.ndim == 2 and np.ndim(y) == 1
        return yy

    def _predict_objects(self, X) -> np.ndarray:
        raise NotImplementedError

    def predict(self, X) -> np.ndarray:
        """Predicted objects ``(k, *object_shape)`` for the rows of ``X``; ``(k,)`` when the fitted ``y``
        was 1-D (Euclidean, one output)."""
        check_is_fitted(self)
        pred = self._predict_objects(X)
        return pred[:, 0] if getattr(self, "_y_1d", False) else pred  # False: fitted before the flag existed

    def _check_y(self, X, y):
        if len(y) != len(X):
            raise ValueError(f"y must hold one object per row of X ({len(X)}), got {len(y)}")

    def score(self, X, y) -> float:
        """Fréchet R^2 of the predictions for ``X`` against the objects ``y`` (1 is perfect, 0 is the
        Fréchet mean of ``y``)."""
        check_is_fitted(self)
        yy = self.space_.check(y, "y")
        if yy.shape[1:] != self.y_fit_.shape[1:]:
            raise ValueError(
                f"y must hold objects of shape {self.y_fit_.shape[1:]} like those fitted, got {yy.shape[1:]}"
            )
        pred = self._predict_objects(X)
        self._check_y(pred, yy)
        total = float(self.space_.dist2(yy, self.space_.mean(yy)[None]).sum())
        resid = float(self.space_.dist2(yy, pred).sum())
        return 1.0 - resid / total if total > 0 else float(resid == 0)


class GlobalFrechetRegressor(BaseFrechetRegressor):
    """Global Fréchet regression of objects of ``space`` (a :class:`~icml_stats.frechet.Space` or its
    name) on a vector predictor. With ``space="euclidean"`` it is ordinary least squares."""

    def __init__(self, space: Space | str = "euclidean"):
        self.space = space

    def _fit(self, X, y) -> None:
        X = validate_features(self, X, ensure_min_samples=2)
        yy = self._fit_space(y)
        self._check_y(X, yy)
        self.X_fit_, self.y_fit_ = X, yy

    def weights(self, X) -> np.ndarray:
        """The regression weights ``(k, n_train)`` for the query rows ``X``."""
        check_is_fitted(self)
        X = validate_features(self, X, reset=False)
        with np.errstate(all="ignore"):
            w = _global_weights(self.X_fit_, X)
        if not np.isfinite(w).all():
            raise ValueError("X is too large in magnitude (the regression weights overflow)")
        return w

    def _predict_objects(self, X) -> np.ndarray:
        return self.space_.means(self.y_fit_, self.weights(X))


class LocalFrechetRegressor(BaseFrechetRegressor):
    """Local (local-linear) Fréchet regression of objects of ``space`` on one predictor column.

    ``bandwidth``: a positive number, or None to choose it from ``bandwidths`` by ``cv``-fold
    cross-validation of the mean squared distance (folds shuffled with ``random_state``). With
    ``space="euclidean"`` it is the local-linear smoother. Candidates whose held-out means overflow
    (:class:`~icml_stats.frechet.FrechetMeanError`) or leave a scored held-out point's window with fewer
    than two distinct training neighbours are skipped; solver warnings are silenced during cross-validation
    (the final ``predict`` still warns).

    The default ``bandwidths`` (None): for the gaussian kernel, 15 values from 1 % to 100 % of the
    predictor's standard deviation ``sd``, geometrically spaced, every held-out point scored. For the
    compact epanechnikov kernel, following the R package ``frechet`` (``SetBwRange``/``bwCV``), the grid
    starts where every training point has a neighbour in its window and the tails are not scored: 15 values
    geometrically spaced from ``lo = max(1.1 x the largest distance from a predictor value to its nearest
    other value, 1 % of sd)`` (``frechet`` uses the largest gap, which over-smooths clustered predictors) to
    ``sd`` (``1.5 sd`` when ``sd < lo <= 1.5 sd``, ``1.01 lo`` when ``lo > 1.5 sd``, as ``frechet``), and
    only held-out points more than a fifth of the range from either end, and that the largest candidate
    leaves two training neighbours, are scored (the same points for every candidate). Scoring the tails
    made every candidate fail on plain Gaussian data (a held-out extreme point has no training neighbour
    within sd). An explicit ``bandwidths`` grid scores every held-out point under either kernel."""

    def __init__(
        self,
        space: Space | str = "euclidean",
        bandwidth: float | None = None,
        kernel: str = "gaussian",
        bandwidths=None,
        cv=5,
        random_state=None,
    ):
        self.space = space
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.bandwidths = bandwidths
        self.cv = cv
        self.random_state = random_state

    def _fit(self, X, y) -> None:
        X = validate_features(self, X, ensure_min_samples=3)
        if X.shape[1] != 1:
            raise ValueError(
                f"X must have one column (local Fréchet regression on a scalar predictor; use DeSI for an index "
                f"of several), got {X.shape[1]}"
            )
        check_choice(self.kernel, "kernel", KERNELS)
        check_seed(self.random_state)
        yy = self._fit_space(y)
        self._check_y(X, yy)
        u = X[:, 0]
        with np.errstate(all="ignore"):
            spread = float(np.std(u))
        if not np.isfinite(spread):
            raise ValueError("X is too large in magnitude (its spread overflows)")
        if spread == 0:
            raise ValueError("X must vary (its column is constant): local regression needs distinct values")
        self.X_fit_, self.y_fit_ = X, yy
        if self.bandwidth is not None:
            self.bandwidth_ = check_real(self.bandwidth, "bandwidth", "(0, inf)")
            return
        grid = self._grid(u)
        # a compact kernel's default grid scores only some held-out points (frechet's bwCV); else all
        restrict = self.bandwidths is None and self.kernel != "gaussian"
        scored = self._interior(u) if restrict else np.ones(len(u), bool)
        folds = check_cv(self.cv, len(u))
        splitter = (
            KFold(folds, shuffle=True, random_state=self.random_state) if isinstance(folds, int) else folds
        )
        losses = np.zeros(len(grid))
        n_scored = 0
        for train, test in splitter.split(X):
            test = test[scored[test]]
            if len(test) and restrict:
                # nor the held-out points that even the largest candidate leaves without two training
                # neighbours (the same points are left out for every candidate, so the losses compare)
                w = _local_weights(u[train], u[test], grid[-1], self.kernel)
                test = test[~np.isnan(w).any(1)]
            n_scored += len(test)
            if len(test) == 0:
                continue
            for j, h in enumerate(grid):
                if not np.isfinite(losses[j]):
                    continue
                w = _local_weights(u[train], u[test], h, self.kernel)
                if np.isnan(w).any():
                    losses[j] = np.inf
                    continue
                try:
                    with warnings.catch_warnings():  # solver warnings are not repeated for every candidate
                        warnings.simplefilter("ignore", RuntimeWarning)
                        pred = self.space_.means(yy[train], w)
                except FrechetMeanError:
                    losses[j] = np.inf
                    continue
                losses[j] += float(self.space_.dist2(yy[test], pred).sum())
        if n_scored == 0 or not np.isfinite(losses).any():
            what = "bandwidths" if self.bandwidths is not None else "the default bandwidths (bandwidths=None)"
            raise ValueError(
                f"bandwidths must include a bandwidth that leaves every scored held-out point two distinct "
                f"neighbours under the {self.kernel} kernel; {what} gave {grid.tolist()}"
            )
        self.bandwidths_ = grid
        self.cv_losses_ = losses / (n_scored if restrict else len(u))  # len(u): as before this fix
        self.bandwidth_ = float(grid[int(np.argmin(losses))])

    def _grid(self, u) -> np.ndarray:
        if self.bandwidths is None:
            sd = float(np.std(u))
            if self.kernel == "gaussian":
                return sd * np.geomspace(0.01, 1.0, 15)
            # a compact kernel: below the largest distance from a value to its nearest other value, some
            # training point has no neighbour in its window and the fitted model could not predict there.
            # frechet's SetBwRange starts at 1.1 x the largest gap instead (every point of the range covered),
            # which also spans the gap between clusters and over-smooths them (mean squared error 0.0128 ->
            # 0.0480 on two clusters, n = 30), so the nearest-neighbour distance is used
            gaps = np.diff(np.unique(u))
            nearest = np.minimum(np.r_[np.inf, gaps], np.r_[gaps, np.inf])
            lo = max(1.1 * float(nearest.max()), 0.01 * sd)
            hi = sd if sd >= lo else (1.01 * lo if lo > 1.5 * sd else 1.5 * sd)
            return np.geomspace(lo, hi, 15)
        grid = as_array(self.bandwidths, "bandwidths", ("k",), interval="(0, inf)")
        return np.sort(grid)

    @staticmethod
    def _interior(u) -> np.ndarray:
        """The points more than a fifth of the range from either end (all of them when there are none), as
        frechet's ``bwCV`` scores: a held-out tail point is often left with no training neighbour within any
        useful bandwidth of a compact kernel, and would veto every candidate."""
        lo, hi = float(u.min()), float(u.max())
        inner = (u > lo + (hi - lo) / 5) & (u < hi - (hi - lo) / 5)
        return inner if inner.any() else np.ones(len(u), bool)

    def weights(self, X) -> np.ndarray:
        """The regression weights ``(k, n_train)`` for the query rows ``X`` (one column)."""
        check_is_fitted(self)
        X = validate_features(self, X, reset=False)
        with np.errstate(all="ignore"):
            w = _local_weights(self.X_fit_[:, 0], X[:, 0], self.bandwidth_, self.kernel)
        bad = np.isnan(w).any(1)
        if bad.any():
            hint = "a larger bandwidth" + (" or the gaussian kernel" if self.kernel != "gaussian" else "")
            raise ValueError(
                f"X has {int(bad.sum())} query points with fewer than two distinct training neighbours within "
                f"bandwidth {self.bandwidth_:.4g} ({self.kernel} kernel); use {hint}"
            )
        return w

    def _predict_objects(self, X) -> np.ndarray:
        return self.space_.means(self.y_fit_, self.weights(X))
