"""``ConditionalCoverageDiagnostic``: every conditional-coverage metric of one prediction in one estimator.

``fit(X, cover)`` (or ``fit(X, y, y_intervals=...)`` / ``fit(X, y, y_sets=...)``) cross-fits the
classifier once, computes ERT for each loss and side from the same out-of-fold predictions, the prior
metrics (CovGap, weighted CovGap, FSC, WSC in-sample and split, and with set sizes SSC, Pearson, HSIC;
with outcomes EOC), and refits the classifier on all samples for ``predict`` and held-out ``score``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils import ClassifierTags
from sklearn.utils.validation import check_is_fitted

from icml_stats.coverage import metrics as m
from icml_stats.coverage.ert import LOSSES, SIDES, classifier_or_default, cross_fit_proba, ert_from_proba
from icml_stats.validation import (
    as_cover,
    as_target,
    check_seed,
    cover_from_prediction,
    keep_state_on_failure,
    set_sizes,
    validate_features,
)


class ConditionalCoverageDiagnostic(BaseEstimator):
    """Conditional-coverage diagnostics of a prediction (scikit-learn estimator).

    Args:
        confidence_level: target coverage ``1 - alpha`` (a number in (0, 1)); a per-sample target t(x)
            is passed to ``fit`` as ``target=``.
        classifier: scikit-learn classifier with ``predict_proba``; None for :func:`default_classifier`.
        cv: folds of the cross-fitting (int or splitter).
        losses: the ERT losses to report; the first is the one ``score`` returns.
        n_groups: number of automatic groups for CovGap, FSC, SSC and EOC.
        delta, n_directions: WSC's minimum slab mass and number of random directions.
        level: confidence level of the one-sided ERT bounds.
        random_state: seeds folds, classifier, groups and WSC directions.

    Attributes (after ``fit``):
        ert_: ``{(loss, side): ERTResult}`` for each loss and side in (None, "over", "under").
        metrics_: ``{name: value}`` of the prior metrics.
        proba_: ``(n,)`` out-of-fold estimated conditional coverage p_hat(x_i).
        cover_, target_: ``(n,)`` covers and targets; fold_: ``(n,)`` held-out fold of each sample.
        x_mean_, x_scale_: ``(d,)`` feature means and standard deviations (for the plot's direction).
        classifier_: the classifier refitted on all samples (None when every cover is equal).
        n_features_in_: number of features.
    """

    def __init__(
        self,
        confidence_level=0.9,
        classifier=None,
        cv=5,
        losses=("l1", "l2", "kl"),
        n_groups=10,
        delta=0.1,
        n_directions=1000,
        level=0.95,
        random_state=None,
    ):
        self.confidence_level = confidence_level
        self.classifier = classifier
        self.cv = cv
        self.losses = losses
        self.n_groups = n_groups
        self.delta = delta
        self.n_directions = n_directions
        self.level = level
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # y holds the covers (or the outcomes of intervals / sets)
        tags.classifier_tags = ClassifierTags(multi_class=False)  # covers are binary
        return tags

    def fit(self, X, y=None, *, y_intervals=None, y_sets=None, sizes=None, target=None):
        """Fit on features ``X`` and covers ``y`` (or outcomes ``y`` with ``y_intervals`` / ``y_sets``).

        Args:
            X: ``(n, d)`` features.
            y: ``(n,)`` bool/0-1 covers; or the outcomes when ``y_intervals`` or ``y_sets`` is given.
            y_intervals, y_sets: the prediction in MAPIE's layout (see :func:`icml_stats.coverage.ert`).
            sizes: ``(n,)`` set sizes when only covers are given (enables SSC, Pearson, HSIC).
            target: ``(n,)`` per-sample target coverage t(x_i); overrides ``confidence_level``.

        A refused fit (any error) leaves the estimator as it was: a refused refit keeps the earlier
        results and model whole, a refused first fit leaves it unfitted.
        """
        # validate_data sets n_features_in_ first, and the results are stored one after the other: a
        # refusal further on (y, sizes, target, a parameter) would leave the new X's attributes and
        # covers beside the earlier fit's metrics_ and classifier_
        with keep_state_on_failure(self):
            return self._fit(X, y, y_intervals, y_sets, sizes, target)

    def _fit(self, X, y, y_intervals, y_sets, sizes, target):
        losses = self._check_losses()
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "pass the covers, or the outcomes together with y_intervals or y_sets"
            )
        check_seed(self.random_state)
        X = self._features(X, ensure_min_samples=2)
        n = X.shape[0]
        raw = y_intervals is not None or y_sets is not None
        cover = _covers(n, y, y_intervals, y_sets)
        t_name = "confidence_level" if target is None else "target"
        t = as_target(self.confidence_level if target is None else target, n, t_name)
        model = classifier_or_default(self.classifier, self.random_state)
        proba, fold = cross_fit_proba(X, cover, model, self.cv, self.random_state)
        self.cover_, self.target_, self.proba_, self.fold_ = cover, t, proba, fold
        self._X = X  # kept for plot()
        self.x_mean_, self.x_scale_ = X.mean(axis=0), np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
        self.ert_ = {
            (loss, side): ert_from_proba(cover, proba, fold, t, loss=loss, side=side, level=self.level)
            for loss in losses
            for side in SIDES
        }
        self.metrics_ = self._prior_metrics(X, cover, t, y if raw else None, y_intervals, y_sets, sizes)
        if np.unique(cover).size == 2:
            self.classifier_ = clone(model).fit(X, cover.astype(int))
        else:
            self.classifier_ = None
        return self

    def predict(self, X) -> np.ndarray:
        """Estimated conditional coverage p_hat(x) ``(n,)`` from the classifier refitted on all samples."""
        check_is_fitted(self)
        X = self._features(X, reset=False)
        if self.classifier_ is None:  # every training cover was the same value
            return np.full(X.shape[0], float(self.cover_[0]))
        return self.classifier_.predict_proba(X)[:, list(self.classifier_.classes_).index(1)]

    def score(self, X=None, y=None, *, y_intervals=None, y_sets=None, target=None) -> float:
        """ERT (first of ``losses``): the cross-fitted estimate when called without data, else the ERT of
        the refitted classifier on held-out ``(X, y)``. Larger means more miscoverage found: this is a
        diagnostic value, not a greater-is-better model score."""
        check_is_fitted(self)
        loss = self._check_losses()[0]
        if X is None:
            return self.ert_[(loss, None)].estimate
        X = self._features(X, reset=False)
        if y is None:
            raise ValueError("score(X, y) needs y: the covers, or the outcomes with y_intervals or y_sets")
        cover = _covers(X.shape[0], y, y_intervals, y_sets)
        t = as_target(self.confidence_level if target is None else target, X.shape[0])
        proba = self.predict(X)
        return ert_from_proba(
            cover, proba, np.zeros(X.shape[0], dtype=int), t, loss=loss, level=self.level
        ).estimate

    def report(self, as_frame: bool = False):
        """A tidy table, one row per metric: ``metric, loss, side, estimate, std_error, p_value, lower_bound``
        (NaN where a metric has no such quantity). A list of dicts, or a pandas DataFrame with ``as_frame``."""
        check_is_fitted(self)
        rows = [
            {
                "metric": "ERT",
                "loss": loss,
                "side": side or "both",
                "estimate": r.estimate,
                "std_error": r.std_error,
                "p_value": r.p_value,
                "lower_bound": r.lower_bound,
            }
            for (loss, side), r in self.ert_.items()
        ]
        nan = float("nan")
        rows += [
            {
                "metric": name,
                "loss": "",
                "side": "",
                "estimate": value,
                "std_error": nan,
                "p_value": nan,
                "lower_bound": nan,
            }
            for name, value in self.metrics_.items()
        ]
        if as_frame:
            try:
                import pandas as pd
            except ImportError:
                raise ImportError("report(as_frame=True) needs pandas: pip install pandas") from None
            return pd.DataFrame(rows)
        return rows

    def most_miscovered_direction(self) -> np.ndarray:
        """Unit vector ``(d,)`` (in standardised features) along which p_hat(x) - t(x) changes most:
        the least-squares fit of p_hat - t on the standardised features."""
        check_is_fitted(self)
        xs = self._standardised()
        coef, *_ = np.linalg.lstsq(
            xs, self.proba_ - self.target_ - np.mean(self.proba_ - self.target_), rcond=None
        )
        norm = float(np.linalg.norm(coef))
        if norm == 0:
            coef, norm = np.eye(xs.shape[1])[0], 1.0
        return coef / norm

    def plot(self, ax=None, n_bins: int = 20):
        """Draw p_hat(x) and the target along the most miscovered direction; returns the matplotlib Axes."""
        check_is_fitted(self)
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError(
                "ConditionalCoverageDiagnostic.plot needs matplotlib: pip install matplotlib"
            ) from None
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        proj = self._standardised() @ self.most_miscovered_direction()  # (n,)
        order = np.argsort(proj)
        ax.scatter(proj, self.proba_, s=4, alpha=0.3, label=r"out-of-fold $\hat p(x)$")
        ax.plot(proj[order], self.target_[order], color="black", lw=1.5, label="target t(x)")
        bins = np.array_split(order, min(n_bins, proj.size))
        centres = [proj[b].mean() for b in bins]
        ax.plot(
            centres,
            [self.cover_[b].mean() for b in bins],
            "o-",
            color="C3",
            ms=3,
            label="empirical coverage (bins)",
        )
        ax.set_xlabel("projection on the most miscovered direction (standardised x)")
        ax.set_ylabel("coverage")
        loss = self._check_losses()[0]
        r = self.ert_[(loss, None)]
        ax.set_title(f"{loss.upper()}-ERT = {r.estimate:.4g} (p = {r.p_value:.2g})")
        ax.legend(loc="best", fontsize=8)
        return ax

    def _features(self, X, **kwargs) -> np.ndarray:
        """``X`` by scikit-learn's ``validate_data``, its refusals naming ``X``."""
        return validate_features(self, X, **kwargs)

    def _standardised(self) -> np.ndarray:
        return (self._X - self.x_mean_) / self.x_scale_

    def _prior_metrics(self, X, cover, t, y, y_intervals, y_sets, sizes) -> dict:
        # one int drawn from a RandomState (advancing it, as scikit-learn does) seeds groups, WSC and HSIC
        rs = (
            self.random_state
            if not isinstance(self.random_state, np.random.RandomState)
            else int(self.random_state.randint(2**31))
        )
        groups = m.auto_groups(X, self.n_groups, rs)
        out = {
            "CovGap": m.coverage_gap(X, cover, t, groups=groups),
            "WeightedCovGap": m.coverage_gap(X, cover, t, groups=groups, weighted=True),
            "FSC": m.feature_stratified_coverage(X, cover, groups=groups),
            "WSC": m.worst_slab_coverage(
                X, cover, delta=self.delta, n_directions=self.n_directions, random_state=rs
            ),
            "WSC_split": m.worst_slab_coverage(
                X, cover, delta=self.delta, n_directions=self.n_directions, split=True, random_state=rs
            ),
        }
        s = set_sizes(X.shape[0], sizes, y_intervals, y_sets)
        if s is not None:
            out["SSC"] = m.size_stratified_coverage(cover, s, confidence_level=t, n_groups=self.n_groups)
            out["Pearson"] = m.pearson_correlation(cover, s)
            out["HSIC"] = m.hsic(cover, s, random_state=rs)
        if y is not None:
            out["EOC"] = m.equal_opportunity_coverage(y, cover, confidence_level=t, n_groups=self.n_groups)
        return out

    def _check_losses(self) -> tuple:
        try:
            losses = (self.losses,) if isinstance(self.losses, str) else tuple(self.losses)
        except TypeError:
            raise TypeError(f"losses must be a non-empty sequence of {LOSSES}, got {self.losses!r}") from None
        if not losses or any(loss not in LOSSES for loss in losses):
            raise ValueError(f"losses must be a non-empty sequence of {LOSSES}, got {self.losses!r}")
        return losses


def _covers(n: int, y, y_intervals, y_sets) -> np.ndarray:
    """The covers ``(n,)``: ``y`` itself, or computed from outcomes ``y`` with ``y_intervals`` / ``y_sets``."""
    if y_intervals is None and y_sets is None:
        return as_cover(y, n, "y")
    return cover_from_prediction(n, None, y, y_intervals, y_sets)
