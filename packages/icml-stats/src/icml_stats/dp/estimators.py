"""scikit-learn estimators for label-private linear regression with public features.

- :class:`CondDPRegressor`: Cond-DP (conditioned DP-SGD) or, with ``conditioning="identity"``, DP-SGD;
  the noise multiplier is calibrated to ``(epsilon, delta)`` by icml-theory's optimal RDP -> f-DP
  accountant (label DP: ``relation="replace-one"``).
- :class:`LaplaceLabelRegressor`: the feature-agnostic baseline, labels clipped to ``[-label_bound,
  label_bound]`` plus Laplace noise of scale ``2 label_bound / epsilon`` (pure ``epsilon``-label DP), then
  ordinary least squares. (RR-on-bins of Ghazi et al. 2023 is not implemented.)

The features are public: centering them and deriving the conditioning matrix cost no privacy. The labels
enter only through the private mechanism (the intercept is a trained parameter, never the label mean).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from icml_stats.dp.conditioning import conditioning_matrix, frequency_conditioning
from icml_stats.validation import check_choice, check_int, check_real, check_seed, validate_features

__all__ = ["CONDITIONINGS", "RELATIONS", "CondDPRegressor", "DivergedError", "LaplaceLabelRegressor"]

CONDITIONINGS = ("svd", "identity", "frequency")
RELATIONS = ("replace-one", "add-remove")  # label DP (one label changed) first: the default


def _seed(random_state) -> int:
    """An int seed from a scikit-learn ``random_state`` (None draws a fresh one)."""
    return int(check_random_state(check_seed(random_state)).randint(0, 2**31 - 1))


class DivergedError(ValueError):
    """DP-SGD diverged (non-finite weights): the learning rate or the clip bound is too large."""


def _check_xy(estimator, X, y):
    try:
        X, y = validate_data(estimator, X, y, dtype=float, y_numeric=True, ensure_min_samples=2)
    except (TypeError, ValueError) as err:
        if any(word in str(err).split() for word in ("X", "y")):
            raise
        raise type(err)(f"X and y are not valid: {err}") from err
    try:
        y = np.asarray(y, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"y must hold numbers, got dtype {np.asarray(y).dtype}") from None
    if not np.isfinite(y).all():
        raise ValueError("y must be finite (no NaN or inf)")
    return X, y


class CondDPRegressor(RegressorMixin, BaseEstimator):
    """Label-private linear regression by Cond-DP (conditioned DP-SGD) with public features.

    Parameters
    ----------
    epsilon, delta : the ``(epsilon, delta)`` label-DP target (``delta=None``: ``1 / n``); the noise
        multiplier is the smallest meeting it. Ignored when ``noise_multiplier`` is given.
    conditioning : ``"svd"`` (the paper's ``V Sigma^-1 V^T`` of the centered public features, tempered by
        ``power`` and ``reg``, see :func:`~icml_stats.dp.conditioning_matrix`), ``"identity"`` (DP-SGD),
        ``"frequency"`` (one-hot features, :func:`~icml_stats.dp.frequency_conditioning`) or a ``(d, d)``
        matrix.
    lr, max_grad_norm, batch_size, epochs : DP-SGD's learning rate, clip bound, expected (Poisson) batch
        size and number of passes; ``steps = round(epochs * n / batch_size)``.
    noise_multiplier : a fixed noise multiplier instead of calibration (``epsilon_`` then reports its cost).
    relation : ``"replace-one"`` (label DP: one label changed) or ``"add-remove"`` (opacus' convention).
    fit_intercept : center the public features and train an (unconditioned, private) intercept.
    random_state : seeds the batch sampling and the noise.

    Attributes: ``coef_``, ``intercept_``, ``conditioning_`` (the matrix used; ``None`` for DP-SGD),
    ``noise_multiplier_``, ``epsilon_``, ``delta_``, ``sample_rate_``, ``steps_``.
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float | None = None,
        *,
        conditioning="svd",
        power: float = 1.0,
        reg: float = 0.0,
        lr: float = 0.5,
        max_grad_norm: float = 1.0,
        batch_size: int = 256,
        epochs: float = 5.0,
        noise_multiplier: float | None = None,
        relation: str = "replace-one",
        fit_intercept: bool = True,
        random_state=None,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.conditioning = conditioning
        self.power = power
        self.reg = reg
        self.lr = lr
        self.max_grad_norm = max_grad_norm
        self.batch_size = batch_size
        self.epochs = epochs
        self.noise_multiplier = noise_multiplier
        self.relation = relation
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def _conditioning(self, X: np.ndarray, Xc: np.ndarray) -> np.ndarray | None:
        d = X.shape[1]
        if isinstance(self.conditioning, str):
            kind = check_choice(self.conditioning, "conditioning", CONDITIONINGS)
            if kind == "identity":
                return None
            if kind == "frequency":
                return frequency_conditioning(X)
            return conditioning_matrix(Xc, power=self.power, reg=self.reg)
        try:
            C = np.asarray(self.conditioning, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(
                f"conditioning must be one of {CONDITIONINGS} or a (d, d) matrix, got {self.conditioning!r}"
            ) from None
        if C.shape != (d, d) or not np.isfinite(C).all():
            raise ValueError(f"conditioning must be a finite ({d}, {d}) matrix, got shape {C.shape}")
        return C

    def fit(self, X, y):
        import torch
        from torch import nn

        from icml_stats.dp.sgd import CondDPSGD, calibrate_noise

        X, y = _check_xy(self, X, y)
        n, d = X.shape
        lr = check_real(self.lr, "lr", "(0, inf)")
        clip = check_real(self.max_grad_norm, "max_grad_norm", "(0, inf)")
        batch = check_int(self.batch_size, "batch_size", 1)
        epochs = check_real(self.epochs, "epochs", "(0, 1e6]")
        relation = check_choice(self.relation, "relation", RELATIONS)
        delta = 1.0 / n if self.delta is None else check_real(self.delta, "delta", "(0, 1)")
        if not isinstance(self.fit_intercept, bool | np.bool_):
            raise TypeError(f"fit_intercept must be a bool, got {self.fit_intercept!r}")
        q = min(1.0, batch / n)
        steps = max(1, round(epochs * n / batch)) if q < 1 else max(1, round(epochs))
        x_mean = X.mean(0) if self.fit_intercept else np.zeros(d)
        Xc = X - x_mean
        C = self._conditioning(X, Xc)  # before the (slow) noise calibration: bad input fails fast
        if self.noise_multiplier is None:
            epsilon = check_real(self.epsilon, "epsilon", "(0, inf)")
            sigma = calibrate_noise(epsilon, delta, q, steps, relation)
        else:
            sigma = check_real(self.noise_multiplier, "noise_multiplier", "(0, inf)")
            epsilon = None  # computed when epsilon_ is first read

        gen = torch.Generator().manual_seed(_seed(self.random_state))
        model = nn.Linear(d, 1, bias=bool(self.fit_intercept), dtype=torch.float64)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        opt = CondDPSGD(
            model,
            lr=lr,
            max_grad_norm=clip,
            noise_multiplier=sigma,
            expected_batch_size=q * n,
            conditioning=None if C is None else {"weight": C},
            generator=gen,
        )
        Xt = torch.tensor(Xc, dtype=torch.float64)
        yt = torch.tensor(y, dtype=torch.float64)
        diverged = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow on the way to divergence: raised below
            for t in range(steps):
                idx = opt.poisson_batch(n, q)
                try:
                    opt.step(Xt[idx], yt[idx])
                except ValueError as err:  # the gradients overflowed
                    if t == 0:  # at the zero start: the data themselves are too large
                        raise ValueError(f"X or y is too large for DP-SGD's gradients: {err}") from err
                    diverged = True  # the weights are blowing up: reported below
                    break
        w = model.weight.detach().numpy().reshape(-1).copy()
        b = float(model.bias.detach()) if self.fit_intercept else 0.0
        if diverged or not (np.isfinite(w).all() and math.isfinite(b)):
            raise DivergedError(
                f"DP-SGD diverged (non-finite weights): lower lr (now {lr}), max_grad_norm (now {clip}) "
                f"or noise_multiplier (now {sigma:.4g})"
            )
        self.coef_ = w
        self.intercept_ = b - float(w @ x_mean)
        self.conditioning_ = C
        self.noise_multiplier_ = sigma
        self._epsilon = epsilon
        self.delta_ = delta
        self.sample_rate_ = q
        self.steps_ = steps
        return self

    @property
    def epsilon_(self) -> float:
        """The ``epsilon`` (at ``delta_``, by icml-theory's optimal accountant) that the fit spent: the target
        when the noise was calibrated, else that of ``noise_multiplier`` (computed on first read)."""
        check_is_fitted(self, "coef_")
        if self._epsilon is None:
            from icml_stats.dp.sgd import privacy_spent

            self._epsilon = privacy_spent(
                self.noise_multiplier_, self.sample_rate_, self.steps_, self.delta_, self.relation
            )
        return self._epsilon

    def predict(self, X):
        check_is_fitted(self, "coef_")
        X = validate_features(self, X, reset=False)
        return X @ self.coef_ + self.intercept_


class LaplaceLabelRegressor(RegressorMixin, BaseEstimator):
    """Baseline: ``epsilon``-label-DP by clipped labels plus Laplace noise, then least squares.

    Each label is clipped to ``[-label_bound, label_bound]`` and released once with Laplace noise of scale
    ``2 label_bound / epsilon`` (changing one label moves it by at most ``2 label_bound``); the public
    features and the noisy labels then fit ordinary least squares.
    """

    def __init__(
        self, epsilon: float = 1.0, *, label_bound: float = 1.0, fit_intercept: bool = True, random_state=None
    ):
        self.epsilon = epsilon
        self.label_bound = label_bound
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = (
            True  # the label noise is the point: scikit-learn's R^2 > 0.5 check does not apply
        )
        return tags

    def fit(self, X, y):
        X, y = _check_xy(self, X, y)
        epsilon = check_real(self.epsilon, "epsilon", "(0, inf)")
        bound = check_real(self.label_bound, "label_bound", "(0, inf)")
        rng = np.random.default_rng(_seed(self.random_state))
        noisy = np.clip(y, -bound, bound) + rng.laplace(0.0, 2 * bound / epsilon, size=len(y))
        x_mean = X.mean(0) if self.fit_intercept else np.zeros(X.shape[1])
        A = X - x_mean
        w = np.linalg.lstsq(A, noisy - (noisy.mean() if self.fit_intercept else 0.0), rcond=None)[0]
        self.coef_ = w
        self.intercept_ = (float(noisy.mean()) if self.fit_intercept else 0.0) - float(w @ x_mean)
        return self

    def predict(self, X):
        check_is_fitted(self, "coef_")
        X = validate_features(self, X, reset=False)
        return X @ self.coef_ + self.intercept_
