"""Regression tasks for Cond-DP with a known ground truth (synthetic) or bundled data (no download).

``spectral(a, seed)``: ``X = Z diag(k^-a) R`` (``Z`` standard normal, ``k = 1..d``, ``R`` a random
orthogonal matrix), ``y = X w* + N(0, 0.1^2)``, ``w* = R^T u / ||diag(k^-a) u||`` with ``u`` standard
normal, so the signal ``X w*`` has unit variance for every decay ``a``; ``n = 10,000`` training and 5,000
test points, ``d = 50``. ``a = 0`` is isotropic; the condition number of ``X^T X`` grows like ``d^(2a)``.

Real data, features standardized with their own (public) mean and scale, a random 75/25 split per seed:
scikit-learn's ``load_diabetes`` (442 x 10; the target, disease progression in [25, 346], divided by the
public constant 100) and statsmodels' bundled ``fair`` (6,366 x 8; ``affairs``, in [0, 57.6]). Label
scaling uses constants fixed from the datasets' documented ranges, never from the private labels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

N_TRAIN, N_TEST, D, NOISE = 10_000, 5_000, 50, 0.1
LABEL_SCALE = {"diabetes": 100.0, "fair": 1.0}


class Task(NamedTuple):
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    label_bound: float  # a public bound on |y| for the label-noise baseline (before scaling back)


def spectral(a: float, seed: int, n: int = N_TRAIN, d: int = D) -> Task:
    """The synthetic task with spectral decay ``a`` (see the module doc)."""
    rng = np.random.default_rng([seed, round(100 * a)])
    R = np.linalg.qr(rng.standard_normal((d, d)))[0]
    scale = np.arange(1, d + 1, dtype=float) ** (-a)
    u = rng.standard_normal(d)
    w = R.T @ u / np.linalg.norm(scale * u)
    X = rng.standard_normal((n + N_TEST, d)) * scale @ R
    y = X @ w + NOISE * rng.standard_normal(n + N_TEST)
    return Task(X[:n], y[:n], X[n:], y[n:], label_bound=3.0)


def _real(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
    elif name == "fair":
        import statsmodels.api as sm

        data = sm.datasets.fair.load_pandas().data
        y = data.pop("affairs").to_numpy(dtype=float)
        X = data.to_numpy(dtype=float)
    else:
        raise ValueError(f"unknown dataset {name!r}")
    return X, y / LABEL_SCALE[name]


def real(name: str, seed: int) -> Task:
    """A 75/25 split (seed ``seed``) of a bundled dataset, features standardized (public statistics)."""
    X, y = _real(name)
    X = (X - X.mean(0)) / X.std(0)
    idx = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.75 * len(y))
    tr, te = idx[:cut], idx[cut:]
    bound = {"diabetes": 3.5, "fair": 5.0}[name]
    return Task(X[tr], y[tr], X[te], y[te], label_bound=bound)


def condition_number(a: float, seed: int = 0) -> float:
    """Condition number of ``X^T X`` of the synthetic training features."""
    s = np.linalg.svd(spectral(a, seed).x, compute_uv=False)
    return float((s[0] / s[-1]) ** 2)
