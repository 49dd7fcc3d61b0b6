"""Reproduction ``ert-benchmark``: ERT ranks conformal regression methods by conditional coverage.

Four split-conformal methods at alpha = 0.1 (all from :mod:`icml_stats.conformal`): absolute residuals
around a 50-NN regressor and around a linear model (its mean is misspecified), locally weighted
conformal (50-NN mean, 100-NN scale) and CQR (gradient-boosted quantiles).

* Synthetic heteroscedastic regression (``icml_tools.assets.heteroscedastic_regression``, d = 3: mean
  sin(2 pi x0), normal noise with sd 0.1 + x0): the true conditional coverage of an interval is
  ``Phi((hi - m(x)) / s(x)) - Phi((lo - m(x)) / s(x))``, so each method's true L1 miscoverage
  ``E|p(x) - 0.9|`` is known. ERT-L1 (default classifier) should rank the methods as the truth does.
* scikit-learn's diabetes data (442 patients, no truth): 5 outer folds give every patient a cover from
  a method fitted and calibrated without them (fit 60% / calibration 40% of the other folds); ERT-L1
  with a logistic-regression classifier (n is too small for boosting) and CovGap rank the methods.

Method choices, sizes, the diabetes fold scheme and the Spearman criterion are our own design.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import norm, spearmanr
from sklearn.datasets import load_diabetes
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import KFold
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits  # a scikit-learn dependency

from icml_stats.conformal import (
    ConformalizedQuantileRegressor,
    NormalizedConformalRegressor,
    SplitConformalRegressor,
)
from icml_stats.coverage.ert import ert
from icml_stats.coverage.metrics import coverage_gap, worst_slab_coverage

ALPHA = 0.1
TARGET = 1 - ALPHA
D = 3
METHODS = ("split-knn", "split-linear", "normalized-knn", "cqr-gbm")
BUDGETS: dict[str, dict[str, Any]] = {
    # synthetic: (n_fit, n_calib, n_test) and repetitions; diabetes: repetitions of the 5-fold scheme
    "quick": {"sizes": (1000, 1000, 2000), "reps": 3, "diabetes_reps": 3},
    "full": {"sizes": (2000, 2000, 10000), "reps": 10, "diabetes_reps": 20},
}
SPEARMAN_MIN = 0.8
CRITERION = (
    "synthetic data: (1) Spearman correlation between the methods' mean ERT-L1 and their true L1 "
    f"miscoverage >= {SPEARMAN_MIN}; (2) every method's mean ERT-L1 <= its true L1 + 2 SE (conservative); "
    "(3) every method's marginal coverage within 0.9 +- 3 SE, SE^2 = alpha(1-alpha)(1/n_test + 1/(n_cal+2))/reps"
)


def intervals(method: str, x_fit, y_fit, x_cal, y_cal, x_test, k: int = 50) -> np.ndarray:
    """``(n_test, 2)`` intervals of one method at level 0.9."""
    if method == "split-knn":
        model: Any = SplitConformalRegressor(KNeighborsRegressor(k), TARGET, prefit=False)
    elif method == "split-linear":
        model = SplitConformalRegressor(LinearRegression(), TARGET, prefit=False)
    elif method == "normalized-knn":
        model = NormalizedConformalRegressor(KNeighborsRegressor(k), KNeighborsRegressor(2 * k), TARGET)
    elif method == "cqr-gbm":
        model = ConformalizedQuantileRegressor(*gbm_quantiles(), TARGET)
    else:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return model.fit(x_fit, y_fit).conformalize(x_cal, y_cal).predict_interval(x_test)[1][:, :, 0]


def gbm_quantiles() -> tuple[HistGradientBoostingRegressor, HistGradientBoostingRegressor]:
    """Gradient-boosted quantile models at alpha / 2 and 1 - alpha / 2."""
    low, high = (
        HistGradientBoostingRegressor(loss="quantile", quantile=q, random_state=0)
        for q in (ALPHA / 2, 1 - ALPHA / 2)
    )
    return low, high


def _synthetic(cfg: dict, seed: int) -> list[dict]:
    from icml_tools.assets import heteroscedastic_regression  # lazy: tools are not a runtime dependency

    n_fit, n_cal, n_test = cfg["sizes"]
    per: dict[str, list[dict]] = {m: [] for m in METHODS}
    for rep in range(cfg["reps"]):
        data = heteroscedastic_regression(n_fit + n_cal + n_test, d=D, seed=seed * 1000 + rep)
        fit, cal, test = np.split(np.arange(data.y.size), [n_fit, n_fit + n_cal])
        x_test, y_test = data.x[test], data.y[test]
        for method in METHODS:
            box = intervals(method, data.x[fit], data.y[fit], data.x[cal], data.y[cal], x_test)
            cover = ((box[:, 0] <= y_test) & (y_test <= box[:, 1])).astype(int)
            m, s = data.mean[test], data.noise_sd[test]
            p = norm.cdf((box[:, 1] - m) / s) - norm.cdf((box[:, 0] - m) / s)  # true conditional coverage
            result = ert(x_test, cover, TARGET, loss="l1", random_state=rep)
            per[method].append(
                {
                    "coverage": cover.mean(),
                    "width": float(np.mean(box[:, 1] - box[:, 0])),
                    "ert_l1": result.estimate,
                    "ert_l1_se": result.std_error,
                    "ert_p": result.p_value,
                    "true_l1": float(np.mean(np.abs(p - TARGET))),
                    "true_l2": float(np.mean((p - TARGET) ** 2)),
                    "covgap": coverage_gap(x_test, cover, TARGET, random_state=rep),
                    "wsc_split": worst_slab_coverage(
                        x_test, cover, n_directions=200, split=True, random_state=rep
                    ),
                }
            )
    return [_summarise("synthetic", method, per[method]) for method in METHODS]


def _diabetes(cfg: dict, seed: int) -> list[dict]:
    x, y = load_diabetes(return_X_y=True)
    per: dict[str, list[dict]] = {m: [] for m in METHODS}
    classifier = make_pipeline(StandardScaler(), LogisticRegression())
    for rep in range(cfg["diabetes_reps"]):
        rng = np.random.default_rng([seed, rep])
        covers = {m: np.zeros(y.size, dtype=int) for m in METHODS}
        widths = {m: np.zeros(y.size) for m in METHODS}
        for rest, test in KFold(5, shuffle=True, random_state=int(rng.integers(2**31))).split(x):
            rest = rng.permutation(rest)
            fit, cal = rest[: int(0.6 * rest.size)], rest[int(0.6 * rest.size) :]
            for method in METHODS:
                box = intervals(method, x[fit], y[fit], x[cal], y[cal], x[test], k=20)
                covers[method][test] = (box[:, 0] <= y[test]) & (y[test] <= box[:, 1])
                widths[method][test] = box[:, 1] - box[:, 0]
        for method in METHODS:
            result = ert(x, covers[method], TARGET, loss="l1", classifier=classifier, random_state=rep)
            per[method].append(
                {
                    "coverage": covers[method].mean(),
                    "width": float(widths[method].mean()),
                    "ert_l1": result.estimate,
                    "ert_l1_se": result.std_error,
                    "ert_p": result.p_value,
                    "covgap": coverage_gap(x, covers[method], TARGET, random_state=rep),
                    "wsc_split": worst_slab_coverage(
                        x, covers[method], n_directions=200, split=True, random_state=rep
                    ),
                }
            )
    return [_summarise("diabetes", method, per[method]) for method in METHODS]


def _summarise(dataset: str, method: str, reps: list[dict]) -> dict:
    row = {"dataset": dataset, "method": method, "reps": len(reps)}
    for key in reps[0]:
        row[key] = float(np.mean([r[key] for r in reps]))
    ert_values = np.array([r["ert_l1"] for r in reps])
    # SE of the mean ERT: the spread over repetitions, or the within-run SE when there is one repetition
    spread = ert_values.std(ddof=1) / math.sqrt(len(reps)) if len(reps) > 1 else reps[0]["ert_l1_se"]
    row["ert_l1_se"] = float(max(spread, np.mean([r["ert_l1_se"] for r in reps]) / math.sqrt(len(reps))))
    return row


def _rank(rows: list[dict], key: str) -> dict:
    order = sorted(rows, key=lambda r: r[key])
    return {r["method"]: i + 1 for i, r in enumerate(order)}


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Rank the conformal methods by ERT on synthetic (with truth) and diabetes data; sizes by ``budget``."""
    cfg = BUDGETS[budget]
    with threadpool_limits(limits=1):  # one OpenMP thread: steady timings on shared cores
        synthetic, diabetes = _synthetic(cfg, seed), _diabetes(cfg, seed)
    for rows in (synthetic, diabetes):
        for key in ("ert_l1", "covgap"):
            for method, rank in _rank(rows, key).items():
                next(r for r in rows if r["method"] == method)[f"rank_by_{key}"] = rank
    for method, rank in _rank(synthetic, "true_l1").items():
        next(r for r in synthetic if r["method"] == method)["rank_by_true_l1"] = rank
    truth = [r["true_l1"] for r in synthetic]
    rho_ert = float(spearmanr([r["ert_l1"] for r in synthetic], truth).statistic)
    rho_covgap = float(spearmanr([r["covgap"] for r in synthetic], truth).statistic)
    _, n_cal, n_test = cfg["sizes"]
    se_cov = math.sqrt(ALPHA * (1 - ALPHA) * (1 / n_test + 1 / (n_cal + 2)) / cfg["reps"])
    checks = {
        "ranking": rho_ert >= SPEARMAN_MIN,
        "conservative": all(r["ert_l1"] <= r["true_l1"] + 2 * r["ert_l1_se"] for r in synthetic),
        "marginal": all(abs(r["coverage"] - TARGET) <= 3 * se_cov for r in synthetic),
    }
    return {
        "system": "ert-benchmark",
        "claim": "ERT can benchmark conformal prediction methods by their conditional coverage.",
        "metric": (
            "Spearman correlation, over 4 conformal methods on synthetic heteroscedastic data, between a "
            "metric and the true L1 miscoverage (higher is better); ours: ERT-L1, baseline: CovGap"
        ),
        "ours": rho_ert,
        "baseline": rho_covgap,
        "criterion": CRITERION,
        "passed": all(checks.values()),
        "rows": synthetic + diabetes,
        "figures": [
            {
                "name": "ert_benchmark_methods",
                "title": "Synthetic heteroscedastic regression: ERT-L1 (conservative) vs true L1 miscoverage",
                "xlabel": "method",
                "ylabel": "L1 miscoverage",
                "x": list(METHODS),
                "series": {
                    "true L1": [r["true_l1"] for r in synthetic],
                    "ERT-L1": [r["ert_l1"] for r in synthetic],
                    "CovGap": [r["covgap"] for r in synthetic],
                },
                "kind": "bar",
            }
        ],
        "notes": (
            f"budget={budget}, seed={seed}: synthetic sizes fit/calib/test {cfg['sizes']} x {cfg['reps']} reps; "
            f"diabetes 5-fold scheme x {cfg['diabetes_reps']} reps; coverage SE {se_cov:.4f}; checks: "
            + ", ".join(f"{k}={'ok' if v else 'FAILED'}" for k, v in checks.items())
        ),
    }
