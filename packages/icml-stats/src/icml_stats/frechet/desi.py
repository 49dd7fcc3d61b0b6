"""DeSI: deep single-index Fréchet regression (ICML 2026).

Model: ``m(x) = argmin_omega E[d^2(Y, omega) | theta^T X = theta^T x]`` with a unit index direction
``theta``. Two stages:

1. **Deep index.** ``theta = v / ||v||`` (learnable ``v``) and a small network ``g: R -> R^k`` whose output
   a space-specific map turns into an object (:meth:`~icml_stats.frechet.Space.torch_head`: monotone
   quantiles by cumulative softplus increments, ``expm`` of a symmetric matrix, a Laplacian with
   ``-softplus`` off-diagonal entries, a normalized vector); ``v`` and ``g`` minimize
   ``mean_i d^2(Y_i, Phi(g(theta^T X_i)))`` with full-batch Adam on standardized predictors.
2. **Local Fréchet regression** along the learned index: ``theta`` is frozen and
   :class:`~icml_stats.frechet.LocalFrechetRegressor` fits ``U = theta^T X`` with the bandwidth chosen by
   cross-validation. ``index_direction_`` (in the units of ``X``, unit norm, first non-zero entry positive)
   is the interpretable part.

The paper's text was not available to us: the architecture (two tanh layers), the optimizer, the
restarts and their first start (the leading left singular vector of the least-squares coefficients of the
responses' representation on ``X``), and the sign convention are our own design, consistent with the
abstract and the single-index Fréchet literature. Needs torch (``pip install icml-stats[deep]``).
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from icml_stats.frechet.regression import KERNELS, BaseFrechetRegressor, LocalFrechetRegressor
from icml_stats.frechet.spaces import Space
from icml_stats.validation import (
    check_choice,
    check_cv,
    check_int,
    check_real,
    check_seed,
    validate_features,
)

__all__ = ["DeSI"]


class DeSI(BaseFrechetRegressor):
    """Deep single-index Fréchet regression (see the module doc).

    Parameters: ``space`` (a :class:`~icml_stats.frechet.Space` or its name); ``hidden`` (width of the
    two tanh layers of ``g``); ``epochs`` and ``lr`` (full-batch Adam steps and step size);
    ``weight_decay`` (on ``g``'s weights); ``n_init`` (restarts, the one with the lowest training loss
    is kept; the first starts from the least-squares direction); ``bandwidth``, ``bandwidths``,
    ``kernel``, ``cv`` (stage 2, as in :class:`~icml_stats.frechet.LocalFrechetRegressor`);
    ``random_state`` (an int for reproducible fits: torch's generator is seeded from it).

    Fitted attributes: ``index_direction_`` ``(p,)``, ``bandwidth_``, ``local_`` (the stage-2
    regressor), ``y_fit_`` (the training objects), ``loss_curves_`` (training loss per epoch, one row per restart), ``train_loss_``.
    """

    def __init__(
        self,
        space: Space | str = "euclidean",
        hidden: int = 32,
        epochs: int = 600,
        lr: float = 0.01,
        weight_decay: float = 0.0,
        n_init: int = 3,
        bandwidth: float | None = None,
        bandwidths=None,
        kernel: str = "gaussian",
        cv=5,
        random_state=None,
    ):
        self.space = space
        self.hidden = hidden
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.n_init = n_init
        self.bandwidth = bandwidth
        self.bandwidths = bandwidths
        self.kernel = kernel
        self.cv = cv
        self.random_state = random_state

    def _fit(self, X, y) -> None:
        try:
            import torch
        except ImportError as err:  # pragma: no cover - the deep extra
            raise ImportError("DeSI needs torch: pip install 'icml-stats[deep]'") from err
        X = validate_features(self, X, ensure_min_samples=3)
        hidden = check_int(self.hidden, "hidden", 1, 100_000)
        epochs = check_int(self.epochs, "epochs", 1, 10_000_000)
        lr = check_real(self.lr, "lr", "(0, inf)")
        decay = check_real(self.weight_decay, "weight_decay", "[0, inf)")
        n_init = check_int(self.n_init, "n_init", 1, 1000)
        check_choice(self.kernel, "kernel", KERNELS)
        check_cv(self.cv, len(X))
        check_seed(self.random_state)
        yy = self._fit_space(y)
        self._check_y(X, yy)
        with np.errstate(all="ignore"):
            self.x_mean_ = X.mean(0)
            scale = X.std(0)
        if not (np.isfinite(self.x_mean_).all() and np.isfinite(scale).all()):
            raise ValueError("X is too large in magnitude (its mean or spread overflows)")
        if not (scale > 0).any():
            raise ValueError("X must vary (every column is constant): there is no index to learn")
        self.x_scale_ = np.where(scale > 0, scale, 1.0)
        xs = (X - self.x_mean_) / self.x_scale_
        n_out, represent, target, dist2 = self.space_.torch_head(yy)
        target = target.to(torch.float64)
        start = _least_squares_direction(xs, target.reshape(len(X), -1).numpy())
        seed = (
            np.random.default_rng(self.random_state).integers(2**31)
            if not isinstance(self.random_state, np.random.RandomState)
            else self.random_state.randint(2**31)
        )
        xt = torch.as_tensor(xs, dtype=torch.float64)
        best, curves = None, []
        for r in range(n_init):
            gen = torch.Generator().manual_seed(int(seed) + r)
            v0 = (
                torch.as_tensor(start)
                if r == 0
                else torch.randn(X.shape[1], generator=gen, dtype=torch.float64)
            )
            v = torch.nn.Parameter(v0.clone().to(torch.float64))
            net = _network(hidden, n_out, gen)
            opt = torch.optim.Adam(
                [{"params": [v]}, {"params": net.parameters(), "weight_decay": decay}], lr=lr
            )
            curve = np.empty(epochs)
            for epoch in range(epochs):
                opt.zero_grad()
                u = xt @ (v / v.norm())
                loss = dist2(represent(net(u[:, None])), target).mean()
                loss.backward()
                opt.step()
                curve[epoch] = float(loss.detach())
            if not np.isfinite(curve[-1]):
                raise ValueError(
                    f"DeSI's training loss became non-finite (restart {r}); lower lr (got {lr:g}) or check y"
                )
            curves.append(curve)
            if best is None or curve[-1] < best[0]:
                best = (curve[-1], v.detach().numpy() / float(v.detach().norm()))
        assert best is not None
        theta = best[1] / self.x_scale_
        theta /= np.linalg.norm(theta)
        nonzero = np.flatnonzero(np.abs(theta) > 1e-12)
        if len(nonzero) and theta[nonzero[0]] < 0:
            theta = -theta
        self.index_direction_ = theta
        self.y_fit_ = yy
        self.loss_curves_ = np.stack(curves)
        self.train_loss_ = float(best[0])
        self.local_ = LocalFrechetRegressor(
            self.space_, self.bandwidth, self.kernel, self.bandwidths, self.cv, self.random_state
        ).fit(self.index(X), yy)
        self.bandwidth_ = self.local_.bandwidth_

    def index(self, X) -> np.ndarray:
        """The learned index ``X @ index_direction_`` as a column ``(k, 1)``."""
        check_is_fitted(self)
        X = validate_features(self, X, reset=False)
        return (X @ self.index_direction_)[:, None]

    def _predict_objects(self, X) -> np.ndarray:
        # local Fréchet regression along the learned index (local_ was fitted on the checked, 2-D objects)
        return self.local_.predict(self.index(X))


def _network(hidden: int, n_out: int, gen):
    import torch

    net = torch.nn.Sequential(
        torch.nn.Linear(1, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, n_out),
    ).to(torch.float64)
    with torch.no_grad():  # seeded initialization (torch's default init draws from the global generator)
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                bound = 1.0 / np.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.uniform_(-bound, bound, generator=gen)
    return net


def _least_squares_direction(xs: np.ndarray, features: np.ndarray) -> np.ndarray:
    """The direction in which the least-squares fit of the responses' representation on the predictors
    varies most: the leading left singular vector of the coefficient matrix ``(p, k)``."""
    centred = features - features.mean(0)
    coef, *_ = np.linalg.lstsq(xs, centred, rcond=None)
    u, s, _ = np.linalg.svd(coef, full_matrices=False)
    if s[0] <= 0:
        return np.eye(xs.shape[1])[0]
    return u[:, 0]
