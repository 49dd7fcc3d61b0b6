"""The zero-flow criterion: the rectified-flow velocity at ``t = 1/2`` of an independent coupling.

Draw ``X0 ~ P`` and ``X1 ~ Q`` independently and pair them. The rectified-flow velocity at time ``t`` is
``v(x, t) = E[X1 - X0 | X_t = x]`` with ``X_t = (1 - t) X0 + t X1``. At ``t = 1/2`` write the midpoint
``M = (X0 + X1) / 2`` and the difference ``D = X1 - X0``. If ``P = Q`` the pair is exchangeable, and
swapping it maps ``(M, D)`` to ``(M, -D)``, so ``v(., 1/2) = E[D | M]`` is zero everywhere; the converse
holds too (the zero-flow criterion, Wang, Wang, Liu and Suzuki, ICML 2026). The zero-flow divergence is
``ZF(P, Q) = E ||v(M)||^2 = E ||D||^2 - min_v E ||v(M) - D||^2``: an excess risk of regressing ``D`` on
``M``, estimated here on held-out pairs by ``mean_j [2 <v(M_j), D_j> - ||v(M_j)||^2]`` with ``v`` fitted
on the other pairs (its expectation is ``ZF - E ||v - v*||^2``: a fitted field can only under-estimate).

For Gaussians the field is affine and the divergence closed-form (the test oracle):
``v*(m) = (mu1 - mu0) + 2 (S1 - S0)(S0 + S1)^-1 (m - (mu0 + mu1) / 2)`` and
``ZF = ||mu1 - mu0||^2 + tr((S1 - S0)(S0 + S1)^-1 (S1 - S0))``.

The velocity regressors (linear, Nyström kernel ridge, MLP) and the cross-fitted estimator are our
construction on the paper's criterion: the authors' public code has no training loss.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline, make_union
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from icml_stats.validation import (
    as_array,
    as_rng,
    as_samples,
    check_int,
    check_real,
    check_seed,
    keep_state_on_failure,
    validate_features,
)

__all__ = [
    "VELOCITY_MODELS",
    "MidpointVelocity",
    "gaussian_midpoint_velocity",
    "gaussian_zero_flow_divergence",
    "midpoint_pairs",
    "zero_flow_divergence",
]

VELOCITY_MODELS = ("linear", "kernel", "mlp")
# data beyond this magnitude make the regressions' squared errors overflow float64 (sqrt(max) ~ 1.3e154)
MAX_MAGNITUDE = 1e150
MAX_HIDDEN = 100_000


def validate_named(estimator, A, name: str, **kwargs) -> np.ndarray:
    """:func:`~icml_stats.validation.validate_features` for features passed as ``name`` (not ``X``): its
    refusals name the argument."""
    try:
        return validate_features(estimator, A, **kwargs)
    except (TypeError, ValueError) as err:
        kind = TypeError if isinstance(err, TypeError) else ValueError
        raise kind(f"{name} is not valid: {err}") from err


def check_magnitude(name: str, *arrays: np.ndarray) -> None:
    """Refuse finite data too large for the squared errors of a velocity regression (``MAX_MAGNITUDE``);
    ``name`` says which arguments the arrays come from."""
    top = max((float(np.abs(a).max()) for a in arrays if a.size), default=0.0)
    if not top <= MAX_MAGNITUDE:
        raise ValueError(
            f"{name} must stay below {MAX_MAGNITUDE:g} in magnitude (squared errors overflow float64), "
            f"got {top:.3g}: rescale the data"
        )


class MidpointVelocity(RegressorMixin, BaseEstimator):
    """A regressor of the difference ``D`` on the midpoint ``M`` (and any conditioning columns beside it).

    Parameters:
        model: ``"linear"`` (least squares with an intercept: exact for Gaussians), ``"kernel"`` (ridge
            regression on the standardized inputs and an RBF kernel's Nyström features of
            ``n_components`` points, bandwidth by the median heuristic), ``"mlp"`` (scikit-learn's ``MLPRegressor`` with
            ``hidden`` units per layer on standardized inputs and targets, early stopping), or any
            scikit-learn regressor (cloned; it must accept a 2-D ``y``).
        alpha: penalty per sample of ``"kernel"`` (the ridge's penalty is ``alpha * n``, as in kernel
            ridge regression with a mean loss), L2 penalty of ``"mlp"``.
        hidden: hidden-layer widths of ``"mlp"``.
        max_iter: epochs of ``"mlp"``.
        n_components: Nyström points of ``"kernel"`` (at most the number of samples).
        random_state: seeds the Nyström points and the MLP, and every unset ``random_state`` of a
            scikit-learn regressor given as ``model``.

    Fitted attributes: ``regressor_`` (the fitted scikit-learn model), ``n_features_in_``, ``n_outputs_``;
    for ``"linear"`` also ``coef_`` ``(n_outputs, n_features)`` and ``intercept_`` ``(n_outputs,)``.
    """

    def __init__(
        self,
        model="linear",
        *,
        alpha: float = 1e-2,
        hidden: tuple[int, ...] = (64, 64),
        max_iter: int = 300,
        n_components: int = 300,
        random_state=None,
    ):
        self.model = model
        self.alpha = alpha
        self.hidden = hidden
        self.max_iter = max_iter
        self.n_components = n_components
        self.random_state = random_state

    def _regressor(self, m: np.ndarray):
        check_real(self.alpha, "alpha", "[0, inf)")
        check_seed(self.random_state)
        if not isinstance(self.model, str):
            if isinstance(self.model, type) or not (
                hasattr(self.model, "fit") and hasattr(self.model, "predict")
            ):
                raise TypeError(
                    f"model must be one of {VELOCITY_MODELS} or a scikit-learn regressor instance, got {self.model!r}"
                )
            return self._seeded(clone(self.model))
        if self.model not in VELOCITY_MODELS:
            raise ValueError(
                f"model must be one of {VELOCITY_MODELS} or a scikit-learn regressor, got {self.model!r}"
            )
        if self.model == "linear":
            return LinearRegression()
        if self.model == "kernel":
            n_components = min(check_int(self.n_components, "n_components", 1), m.shape[0])
            z = StandardScaler().fit_transform(m)
            sub = z[check_random_state(self.random_state).permutation(len(z))[:1000]]
            sq = ((sub[:, None, :] - sub[None, :, :]) ** 2).sum(-1)
            median = float(np.median(sq[np.triu_indices(len(sub), 1)])) if len(sub) > 1 else 1.0
            gamma = 1.0 / max(median, 1e-12)
            # the inputs themselves beside the RBF features: an affine field (the Gaussian case) is exact
            features = make_union(
                FunctionTransformer(),
                Nystroem(gamma=gamma, n_components=n_components, random_state=self.random_state),
            )
            return make_pipeline(StandardScaler(), features, Ridge(alpha=max(self.alpha * len(m), 1e-10)))
        hidden = tuple(check_int(h, "hidden", 1, MAX_HIDDEN) for h in np.atleast_1d(self.hidden).tolist())
        # TransformedTargetRegressor clones (deep-copies) the MLP: a RandomState would never advance, so an
        # int is drawn from it here (each refit then differs, as with "kernel")
        seed = (
            self.random_state
            if not isinstance(self.random_state, np.random.RandomState)
            else int(self.random_state.randint(2**31))
        )
        mlp = MLPRegressor(
            hidden_layer_sizes=hidden,
            alpha=self.alpha,
            max_iter=check_int(self.max_iter, "max_iter", 1),
            early_stopping=m.shape[0] >= 50,
            n_iter_no_change=20,
            random_state=seed,
        )
        return TransformedTargetRegressor(make_pipeline(StandardScaler(), mlp), transformer=StandardScaler())

    def _seeded(self, model):
        """A user's regressor with each unset ``random_state`` among its (nested) parameters drawn from
        ``random_state``, as scikit-learn's ensembles seed their base estimators: a forest or a boosting
        model then refits the same for the same seed (seeds the user set are kept)."""
        if self.random_state is None or not hasattr(model, "get_params"):
            return model
        rs = check_random_state(self.random_state)
        names = sorted(
            k for k, v in model.get_params(deep=True).items() if k.endswith("random_state") and v is None
        )
        return model.set_params(**{name: int(rs.randint(2**31)) for name in names}) if names else model

    def fit(self, M, D):
        """Fit ``E[D | M]`` on matched rows of ``M`` ``(n, k)`` and ``D`` ``(n, d)`` (a 1-D array is one column).
        A fit that raises leaves the estimator as it was (an earlier fit whole, still predicting as before)."""
        with keep_state_on_failure(self):  # validate_named sets n_features_in_ before D is checked
            return self._fit(M, D)

    def _fit(self, M, D):
        m = validate_named(self, M, "M", reset=True)
        d = as_samples(D, "D", m.shape[0])
        check_magnitude("M", m)
        check_magnitude("D", d)
        regressor = self._regressor(m)
        try:
            regressor.fit(m, d)
        except ValueError as err:
            if isinstance(self.model, str):
                raise
            raise ValueError(f"model {self.model!r} could not fit D of shape {d.shape}: {err}") from err
        # the fitted state is stored only once the fit succeeded (a failed refit left an unfitted regressor_
        # beside the old coef_), and coef_/intercept_ exist only for "linear": a refit with another model
        # kept the old linear fit's coefficients, as scikit-learn's estimators reset such attributes
        self.n_outputs_, self.regressor_ = d.shape[1], regressor
        if isinstance(regressor, LinearRegression):
            self.coef_, self.intercept_ = regressor.coef_, regressor.intercept_
        else:
            for attr in ("coef_", "intercept_"):
                self.__dict__.pop(attr, None)
        return self

    def predict(self, M) -> np.ndarray:
        """The fitted field at ``M``: ``(n, n_outputs)``, always 2-D."""
        check_is_fitted(self, "regressor_")
        m = validate_named(self, M, "M", reset=False)
        check_magnitude("M", m)
        out = np.asarray(self.regressor_.predict(m), dtype=float)
        if out.size != m.shape[0] * self.n_outputs_:
            raise ValueError(
                f"model {self.model!r} predicted shape {out.shape}, expected {(m.shape[0], self.n_outputs_)}"
            )
        return out.reshape(m.shape[0], self.n_outputs_)


def midpoint_pairs(x0, x1, random_state=None) -> tuple[np.ndarray, np.ndarray]:
    """Pair the two samples at random (an independent coupling) and return ``(M, D)``.

    ``x0`` ``(n0, d)`` and ``x1`` ``(n1, d)``: ``min(n0, n1)`` pairs, each sample shuffled by
    ``random_state``; ``M = (x0 + x1) / 2`` and ``D = x1 - x0``."""
    a, b = as_samples(x0, "x0"), as_samples(x1, "x1")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"x0 and x1 must have the same number of features, got {a.shape[1]} and {b.shape[1]}"
        )
    rng = as_rng(random_state)
    n = min(len(a), len(b))
    a, b = a[rng.permutation(len(a))[:n]], b[rng.permutation(len(b))[:n]]
    with np.errstate(over="ignore", invalid="ignore"):
        m, d = (a + b) / 2.0, b - a
    if not (np.isfinite(m).all() and np.isfinite(d).all()):
        raise ValueError("x0 and x1 are too large in magnitude: their midpoints or differences overflow")
    return m, d


def excess_risk_scores(velocity: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair ``<v_j, D_j>`` (the part that flips sign with ``D``) and ``||v_j||^2``."""
    return np.einsum("ij,ij->i", velocity, D), np.einsum("ij,ij->i", velocity, velocity)


def is_regressor_instance(model) -> bool:
    """Whether ``model`` is an estimator instance (not a class) with ``fit`` and ``predict``."""
    return not isinstance(model, type) and hasattr(model, "fit") and hasattr(model, "predict")


def seeded_velocity(velocity, rng: np.random.Generator) -> MidpointVelocity:
    """``velocity`` as an unfitted :class:`MidpointVelocity` (from a model name, a scikit-learn regressor or
    one of ours, cloned), its ``random_state`` drawn from ``rng`` when it has none."""
    known = velocity in VELOCITY_MODELS if isinstance(velocity, str) else is_regressor_instance(velocity)
    if isinstance(velocity, MidpointVelocity):
        model = clone(velocity)
    elif known:
        model = MidpointVelocity(velocity)
    else:
        raise (ValueError if isinstance(velocity, str) else TypeError)(
            f"velocity must be one of {VELOCITY_MODELS}, a scikit-learn regressor instance or a "
            f"MidpointVelocity, got {velocity!r}"
        )
    if model.random_state is None:
        model.set_params(random_state=int(rng.integers(2**31)))
    return model


def zero_flow_divergence(x0, x1, *, velocity="linear", cv: int = 2, random_state=None) -> float:
    """Cross-fitted estimate of ``ZF(P, Q) = E ||v*(M)||^2`` from samples ``x0 ~ P`` and ``x1 ~ Q``.

    The pairs are split into ``cv`` folds; on each, a :class:`MidpointVelocity` fitted on the others
    scores ``2 <v(M), D> - ||v(M)||^2``; the estimate is the mean over all pairs. ``velocity``: a model
    name (see :class:`MidpointVelocity`), a scikit-learn regressor or a :class:`MidpointVelocity`.
    ``random_state`` (None, an int or a numpy Generator) draws the pairing, the folds and the models'
    seeds. Not clipped at 0: under ``P = Q`` it is centred slightly below 0."""
    cv = check_int(cv, "cv", 2)
    rng = as_rng(random_state)
    m, d = midpoint_pairs(x0, x1, rng)
    check_magnitude("x0 and x1", m, d)
    if len(m) < 2 * cv:
        raise ValueError(f"x0 and x1 need at least {2 * cv} pairs for cv={cv} folds, got {len(m)}")
    folds = np.array_split(rng.permutation(len(m)), cv)
    total = 0.0
    for k, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != k])
        v = seeded_velocity(velocity, rng).fit(m[train], d[train]).predict(m[test])
        inner, norm = excess_risk_scores(v, d[test])
        total += float(np.sum(2.0 * inner - norm))
    if not np.isfinite(total):
        raise ValueError("x0 and x1 are too large in magnitude: the held-out scores overflow; rescale them")
    return total / len(m)


def _gaussian(mean0, cov0, mean1, cov1):
    mu0 = as_array(mean0, "mean0", ("d",))
    d = len(mu0)
    mu1 = as_array(mean1, "mean1", (d,), hint=" (like mean0)")
    s0 = as_array(cov0, "cov0", (d, d), hint=" (d = len(mean0))")
    s1 = as_array(cov1, "cov1", (d, d), hint=" (d = len(mean0))")
    for name, s in (("cov0", s0), ("cov1", s1)):
        if not np.allclose(s, s.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(s).max())):
            raise ValueError(f"{name} must be symmetric")
        if np.linalg.eigvalsh(s).min() < -1e-10 * max(1.0, np.abs(s).max()):
            raise ValueError(f"{name} must be positive semi-definite")
    with np.errstate(over="ignore"):
        total = s0 + s1
    if not np.isfinite(total).all():
        raise ValueError("cov0 and cov1 are too large in magnitude: their sum overflows")
    if np.linalg.eigvalsh(total).min() <= 1e-12 * max(1.0, np.abs(total).max()):
        raise ValueError("cov0 + cov1 must be positive definite (the midpoint's covariance is singular)")
    return mu0, s0, mu1, s1, total


def gaussian_midpoint_velocity(mean0, cov0, mean1, cov1) -> tuple[np.ndarray, np.ndarray]:
    """The exact field ``v*(m) = A m + b`` at ``t = 1/2`` between ``N(mean0, cov0)`` and ``N(mean1, cov1)``:
    returns ``(A, b)`` with ``A = 2 (S1 - S0)(S0 + S1)^-1`` and ``b = (mu1 - mu0) - A (mu0 + mu1) / 2``."""
    mu0, s0, mu1, s1, total = _gaussian(mean0, cov0, mean1, cov1)
    a = 2.0 * np.linalg.solve(total, s1 - s0).T  # (S0 + S1) symmetric: (S1 - S0) S^-1 = (S^-1 (S1 - S0))^T
    with np.errstate(over="ignore", invalid="ignore"):
        b = (mu1 - mu0) - a @ (mu0 + mu1) / 2.0
    if not np.isfinite(b).all():
        raise ValueError("mean0 and mean1 are too large in magnitude: the field's offset overflows")
    return a, b


def gaussian_zero_flow_divergence(mean0, cov0, mean1, cov1) -> float:
    """Closed-form ``ZF`` between ``N(mean0, cov0)`` and ``N(mean1, cov1)``:
    ``||mu1 - mu0||^2 + tr((S1 - S0)(S0 + S1)^-1 (S1 - S0))``."""
    mu0, s0, mu1, s1, total = _gaussian(mean0, cov0, mean1, cov1)
    with np.errstate(over="ignore", invalid="ignore"):
        means = float(np.sum((mu1 - mu0) ** 2))
        delta = s1 - s0
        covs = float(np.trace(delta @ np.linalg.solve(total, delta)))
    for name, term in (("mean0 and mean1", means), ("cov0 and cov1", covs)):
        if not np.isfinite(term):
            raise ValueError(f"{name} are too large in magnitude: their term of ZF overflows")
    return means + covs
