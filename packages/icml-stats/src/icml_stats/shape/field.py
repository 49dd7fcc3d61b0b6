"""PRISM's conditional Gaussian displacement field as a scikit-learn-style estimator (needs torch).

``ShapeField`` learns ``d | p, t ~ N(μ(p, t), Σ(p, t))`` from point correspondences: template points
``p`` (2-D or 3-D), one covariate ``t`` per observation (time, age) and the displacement ``d`` observed at
``p``. The network (our design; the paper's code was not public, its abstract gives the model and the
Fisher metric): the standardized ``(p, t)``, optionally with random Fourier features (``n_frequencies``
frequencies drawn from ``N(0, frequency_scale²)``), an MLP with SiLU activations (smooth, so ``∂_t`` is
well defined everywhere), and a head giving ``μ`` and the Cholesky factor ``L`` of ``Σ = L Lᵀ`` (diagonal
through softplus plus ``min_std``, so ``Σ`` is symmetric positive definite for every network output).
Trained by the Gaussian negative log-likelihood, full batch, Adam with a cosine schedule, on
displacements scaled by their overall standard deviation (undone in every output).

Defaults measured on development data of the reproduction's testbed (seed 100, never the evaluation
seeds): without Fourier features, 1000 epochs at ``lr = 0.01``, the learned Fisher information ranks
like the analytic one (Spearman 0.98) with 90 % ellipse coverage 0.895; with 32 features at scale 1 (800 epochs, lr 3e-3) the
derivatives overfit (Spearman 0.36, coverage 0.81), with 8 at scale 0.3 Spearman 0.90. Use Fourier
features (``n_frequencies > 0``) for shapes with fine detail, and check the Fisher information's
stability when you do.
``heteroscedastic=False`` is the baseline: the same mean network with one learned covariance shared by
every point and covariate (its Fisher information has no covariance term).

Everything downstream takes the fitted field as a model (:mod:`.fisher`): :meth:`ShapeField.fisher_information`,
:meth:`~ShapeField.estimate_covariate`, :meth:`~ShapeField.anomaly_scores`. :meth:`~ShapeField.save` writes
atomically (a temporary file renamed over the target, so a failed save leaves the old file intact) and
:meth:`ShapeField.load` restores an identical field.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import numpy as np
from scipy import stats
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from icml_stats.shape import fisher as gaussian
from icml_stats.shape.fisher import (
    CovariateEstimate,
    as_covariates,
    as_points,
    require_torch,
)
from icml_stats.validation import as_array, check_bool, check_int, check_real, check_seed

__all__ = ["ShapeField", "cholesky_from_raw"]

MAX_STANDARDIZED = 1e3  # inputs further than this many training standard deviations are refused


def cholesky_from_raw(raw: Any, dimension: int, min_std: float = 1e-3):
    """A lower-triangular Cholesky factor ``(n, d, d)`` from unconstrained values ``(n, d(d+1)/2)`` (an
    array, or a float tensor taken as it is so gradients flow): the first ``d`` give the diagonal through
    ``softplus + min_std`` (> 0), the rest fill the strict lower triangle row by row. ``L Lᵀ`` is
    symmetric positive definite for every finite input (its smallest eigenvalue can still be tiny: the
    floor is on the diagonal of ``L``, not on the eigenvalues)."""
    torch = require_torch()
    if not (
        isinstance(raw, torch.Tensor) and raw.is_floating_point()
    ):  # float tensors pass as they are (gradients)
        raw = torch.as_tensor(as_array(raw, "raw"), dtype=torch.float64)
    dimension = check_int(dimension, "dimension", 1, 16)
    min_std = check_real(min_std, "min_std", "(0, 10]")
    width = dimension * (dimension + 1) // 2
    if raw.ndim != 2 or raw.shape[1] != width:
        raise ValueError(
            f"raw must have shape (n, {width}) for dimension {dimension}, got {tuple(raw.shape)}"
        )
    n = raw.shape[0]
    diag = torch.nn.functional.softplus(raw[:, :dimension]) + min_std
    chol = torch.diag_embed(diag)
    rows, cols = torch.tril_indices(dimension, dimension, offset=-1, device=raw.device)
    if len(rows):
        off = torch.zeros(n, dimension, dimension, dtype=raw.dtype, device=raw.device)
        off[:, rows, cols] = raw[:, dimension:]
        chol = chol + off
    return chol


class ShapeField(BaseEstimator):
    """Conditional Gaussian field of displacements (see the module doc).

    Parameters: ``hidden`` (widths of the MLP's SiLU layers), ``n_frequencies`` and ``frequency_scale``
    (random Fourier features of the standardized inputs), ``heteroscedastic`` (False: one shared
    covariance, the baseline), ``min_std`` (floor of the Cholesky diagonal, in units of the displacements'
    standard deviation), ``epochs`` and ``lr`` (full-batch Adam, cosine schedule), ``weight_decay``,
    ``random_state`` (an int for reproducible fits).

    Fitted attributes: ``dimension_``, ``input_mean_``, ``input_scale_`` (standardization of ``(p, t)``),
    ``scale_`` (the displacements' standard deviation), ``covariate_range_`` (``(min, max)`` of the training
    covariates), ``loss_curve_`` (NLL per epoch, in scaled units), ``network_`` (the torch module).
    """

    def __init__(
        self,
        hidden: tuple[int, ...] = (64, 64),
        n_frequencies: int = 0,
        frequency_scale: float = 0.3,
        heteroscedastic: bool = True,
        min_std: float = 1e-3,
        epochs: int = 1000,
        lr: float = 0.01,
        weight_decay: float = 0.0,
        random_state=None,
    ):
        self.hidden = hidden
        self.n_frequencies = n_frequencies
        self.frequency_scale = frequency_scale
        self.heteroscedastic = heteroscedastic
        self.min_std = min_std
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.random_state = random_state

    # ---- fitting --------------------------------------------------------------------------------------------

    def _check_params(self) -> tuple[tuple[int, ...], int]:
        try:
            hidden = tuple(self.hidden)
        except TypeError:
            raise TypeError(f"hidden must be a sequence of layer widths, got {self.hidden!r}") from None
        hidden = tuple(check_int(h, "hidden", 1, 100_000) for h in hidden)
        if not hidden:
            raise ValueError("hidden must name at least one layer width")
        n_freq = check_int(self.n_frequencies, "n_frequencies", 0, 100_000)
        check_real(self.frequency_scale, "frequency_scale", "[0, inf)")
        check_bool(self.heteroscedastic, "heteroscedastic")
        check_real(self.min_std, "min_std", "(0, 10]")
        check_int(self.epochs, "epochs", 1, 10_000_000)
        check_real(self.lr, "lr", "(0, inf)")
        check_real(self.weight_decay, "weight_decay", "[0, inf)")
        check_seed(self.random_state)
        return hidden, n_freq

    def _build(self, dimension: int, hidden: tuple[int, ...], n_freq: int, seed: int):
        torch = require_torch()
        gen = torch.Generator().manual_seed(seed)
        self.frequencies_ = float(self.frequency_scale) * torch.randn(
            n_freq, dimension + 1, generator=gen, dtype=torch.float64
        )
        width = dimension + 1 + 2 * n_freq
        layers: list[Any] = []
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.SiLU()]
            width = h
        n_cov = dimension * (dimension + 1) // 2
        layers.append(torch.nn.Linear(width, dimension + (n_cov if self.heteroscedastic else 0)))
        net = torch.nn.Sequential(*layers).to(torch.float64)
        with torch.no_grad():  # seeded initialization (torch's default draws from the global generator)
            for layer in net:
                if isinstance(layer, torch.nn.Linear):
                    bound = 1.0 / math.sqrt(layer.in_features)
                    layer.weight.uniform_(-bound, bound, generator=gen)
                    layer.bias.uniform_(-bound, bound, generator=gen)
        self.network_ = net
        # the shared covariance of the homoscedastic baseline (unused otherwise)
        self.shared_raw_ = torch.nn.Parameter(torch.zeros(n_cov, dtype=torch.float64))

    def _scaled(self, p, t):
        """``(μ, L)`` in scaled displacement units from torch inputs ``(n, d)``, ``(n,)``."""
        torch = require_torch()
        x = (torch.cat([p, t[:, None]], dim=1) - self.input_mean_t_) / self.input_scale_t_
        angles = 2 * math.pi * x @ self.frequencies_.T
        out = self.network_(torch.cat([x, torch.sin(angles), torch.cos(angles)], dim=1))
        d = self.dimension_
        raw = out[:, d:] if self.heteroscedastic else self.shared_raw_.expand(len(p), -1)
        return out[:, :d], cholesky_from_raw(raw, d, float(self.min_std))

    def distribution(self, p, t):
        """The fitted model as a torch callable, ``(mean (n, d), cov (n, d, d))`` from ``p`` ``(n, d)`` and
        ``t`` ``(n,)`` float64 tensors (differentiable; what :mod:`icml_stats.shape.fisher` takes)."""
        check_is_fitted(self, "network_")
        mean, chol = self._scaled(p, t)
        return self.scale_ * mean, self.scale_**2 * (chol @ chol.transpose(-1, -2))

    def fit(self, points, covariates, displacements):
        """Fit on correspondences: ``points`` ``(n, d)``, ``covariates`` ``(n,)`` (or a scalar),
        ``displacements`` ``(n, d)``, ``d`` 2 or 3."""
        torch = require_torch()
        hidden, n_freq = self._check_params()
        p = as_points(points)
        t = as_covariates(covariates, len(p))
        d = as_points(displacements, "displacements", len(p))
        if d.shape[1] != p.shape[1]:
            raise ValueError(f"displacements must have {p.shape[1]} columns like points, got {d.shape[1]}")
        if len(p) < 2:
            raise ValueError(f"points must hold at least 2 observations, got {len(p)}")
        inputs = np.column_stack([p, t])
        with np.errstate(all="ignore"):
            mean, spread, scale = inputs.mean(0), inputs.std(0), float(np.sqrt((d**2).mean()))
        if not (np.isfinite(mean).all() and np.isfinite(spread).all() and np.isfinite(scale)):
            raise ValueError(
                "points, covariates or displacements are too large in magnitude (their spread overflows)"
            )
        if not scale > 0:
            raise ValueError("displacements must not all be zero: there is nothing to model")
        seed = (
            int(np.random.default_rng(self.random_state).integers(2**31))
            if not isinstance(self.random_state, np.random.RandomState)
            else int(self.random_state.randint(2**31))
        )
        self.dimension_ = p.shape[1]
        self.input_mean_, self.input_scale_ = mean, np.where(spread > 0, spread, 1.0)
        self.input_mean_t_ = torch.as_tensor(self.input_mean_)
        self.input_scale_t_ = torch.as_tensor(self.input_scale_)
        self.scale_ = scale
        self.covariate_range_ = (float(t.min()), float(t.max()))
        self._build(p.shape[1], hidden, n_freq, seed)
        pt, tt = torch.as_tensor(p), torch.as_tensor(t)
        target = torch.as_tensor(d / scale)
        params = [*self.network_.parameters()] + ([] if self.heteroscedastic else [self.shared_raw_])
        epochs = int(self.epochs)
        opt = torch.optim.Adam(params, lr=float(self.lr), weight_decay=float(self.weight_decay))
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
        curve = np.empty(epochs)
        for epoch in range(epochs):
            opt.zero_grad()
            mu, chol = self._scaled(pt, tt)
            resid = torch.linalg.solve_triangular(chol, (target - mu).unsqueeze(-1), upper=False).squeeze(-1)
            logdet = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
            loss = (0.5 * (resid**2).sum(-1) + logdet).mean()
            loss.backward()
            opt.step()
            schedule.step()
            curve[epoch] = float(loss.detach())
            if not np.isfinite(curve[epoch]):
                raise ValueError(
                    f"ShapeField's training loss became non-finite at epoch {epoch}; lower lr (got {self.lr:g})"
                )
        self.loss_curve_ = curve
        for param in params:
            param.requires_grad_(False)
        return self

    # ---- inference ------------------------------------------------------------------------------------------

    def _inputs(self, points, covariates):
        torch = require_torch()
        check_is_fitted(self, "network_")
        p = as_points(points)
        if p.shape[1] != self.dimension_:
            raise ValueError(
                f"points must have {self.dimension_} columns like the training points, got {p.shape[1]}"
            )
        t = as_covariates(covariates, len(p))
        with np.errstate(all="ignore"):
            z = np.abs((np.column_stack([p, t]) - self.input_mean_) / self.input_scale_)
        if not (z <= MAX_STANDARDIZED).all():
            column = int(np.argmax(np.where(np.isfinite(z), z, np.inf).max(0)))
            name = "covariates" if column == self.dimension_ else "points"
            raise ValueError(
                f"{name} lie far outside the data the field was fitted on (more than {MAX_STANDARDIZED:g} standard "
                "deviations from its mean): the field is not defined there"
            )
        return torch.as_tensor(p), torch.as_tensor(t)

    def predict(self, points, covariates) -> tuple[np.ndarray, np.ndarray]:
        """The predicted law of the displacements: ``mean`` ``(n, d)`` and ``cov`` ``(n, d, d)``."""
        torch = require_torch()
        p, t = self._inputs(points, covariates)
        with torch.no_grad():
            mean, cov = self.distribution(p, t)
        return mean.numpy(), cov.numpy()

    def log_likelihood(self, points, covariates, displacements) -> np.ndarray:
        """``log N(d; μ, Σ)`` per observation, ``(n,)``."""
        self._inputs(points, covariates)
        return gaussian.gaussian_log_likelihood(self.distribution, points, covariates, displacements)

    def mahalanobis(self, points, covariates, displacements) -> np.ndarray:
        """Squared Mahalanobis distance of each displacement to its predicted law, ``(n,)`` (χ²_d under the model)."""
        mean, cov = self.predict(points, covariates)
        d = as_points(displacements, "displacements", len(mean))
        if d.shape[1] != self.dimension_:
            raise ValueError(f"displacements must have {self.dimension_} columns, got {d.shape[1]}")
        resid = d - mean
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.einsum("ni,ni->n", resid, np.linalg.solve(cov, resid[..., None])[..., 0])
        return gaussian.warn_if_not_finite(values, "mahalanobis")

    def ellipse_coverage(self, points, covariates, displacements, level: float = 0.9) -> float:
        """Fraction of displacements inside the predicted ``level`` ellipse (ellipsoid in 3-D)."""
        level = check_real(level, "level", "(0, 1)")
        return float(
            np.mean(
                self.mahalanobis(points, covariates, displacements) <= stats.chi2.ppf(level, self.dimension_)
            )
        )

    def fisher_information(self, points, covariates) -> np.ndarray:
        """``I(t; p)`` per point (see :mod:`icml_stats.shape.fisher`)."""
        self._inputs(points, covariates)
        return gaussian.fisher_information(self.distribution, points, covariates)

    def temporal_uncertainty(self, points, covariates) -> np.ndarray:
        """The local temporal uncertainty ``I(t; p)^(-1/2)`` per point (``inf`` where ``I = 0``)."""
        info = self.fisher_information(points, covariates)
        with np.errstate(divide="ignore"):
            return np.where(info > 0, info, 0.0) ** -0.5

    def estimate_covariate(
        self, points, displacements, *, groups=None, bounds=None, grid: int = 101
    ) -> CovariateEstimate:
        """Maximum-likelihood covariate per group (subject); ``bounds`` default to the training covariates'
        range widened by 10 % on each side."""
        check_is_fitted(self, "network_")
        if bounds is None:
            lo, hi = self.covariate_range_
            pad = 0.1 * (hi - lo) if hi > lo else 1.0
            bounds = (lo - pad, hi + pad)
        p = as_points(points)
        if p.shape[1] != self.dimension_:
            raise ValueError(
                f"points must have {self.dimension_} columns like the training points, got {p.shape[1]}"
            )
        return gaussian.estimate_covariate(
            self.distribution, points, displacements, bounds, groups=groups, grid=grid
        )

    def anomaly_scores(self, points, covariates, displacements, *, groups=None) -> np.ndarray:
        """Anomaly scores. Per point (``groups`` None): the squared Mahalanobis distance (χ²_d under the
        model). Per group (a subject): the standardized sum ``(Σ m_i - d·k) / sqrt(2·d·k)`` over its ``k``
        points, in the order of the sorted labels (our design: approximately N(0, 1) for a normal subject
        when the points are conditionally independent)."""
        m = self.mahalanobis(points, covariates, displacements)
        if groups is None:
            return m
        labels = np.asarray(groups)
        if labels.shape != m.shape:
            raise ValueError(f"groups must have one label per point ({len(m)}), got shape {labels.shape}")
        _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
        total = np.bincount(inverse, weights=m)
        d = self.dimension_
        return (total - d * counts) / np.sqrt(2.0 * d * counts)

    # ---- persistence ----------------------------------------------------------------------------------------

    def save(self, path) -> None:
        """Write the fitted field to ``path`` (torch's format, tensors and plain values only), atomically."""
        torch = require_torch()
        check_is_fitted(self, "network_")
        state = {
            "params": {k: _plain(v) for k, v in self.get_params().items() if k != "random_state"},
            # a RandomState cannot be stored as plain data: the loaded field's random_state is then None
            "random_state": _plain(self.random_state)
            if isinstance(self.random_state, int | np.integer)
            else None,
            "network": self.network_.state_dict(),
            "shared_raw": self.shared_raw_.detach().clone(),
            "frequencies": self.frequencies_,
            "input_mean": torch.as_tensor(self.input_mean_),
            "input_scale": torch.as_tensor(self.input_scale_),
            "scale": float(self.scale_),
            "dimension": int(self.dimension_),
            "covariate_range": list(self.covariate_range_),
            "loss_curve": torch.as_tensor(self.loss_curve_),
        }
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".shapefield-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(state, handle)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path) -> ShapeField:
        """A field written by :meth:`save`, identical in every output."""
        torch = require_torch()
        # the field fits and predicts on the CPU: tensors saved from another device are loaded there
        state = torch.load(os.fspath(path), weights_only=True, map_location="cpu")
        params = dict(state["params"])
        params["hidden"] = tuple(params["hidden"])
        field = cls(**params, random_state=state["random_state"])
        hidden, n_freq = field._check_params()
        field._build(int(state["dimension"]), hidden, n_freq, 0)
        field.network_.load_state_dict(state["network"])
        with torch.no_grad():
            field.shared_raw_.copy_(state["shared_raw"])
        field.frequencies_ = state["frequencies"]
        field.input_mean_ = state["input_mean"].numpy()
        field.input_scale_ = state["input_scale"].numpy()
        field.input_mean_t_ = state["input_mean"]
        field.input_scale_t_ = state["input_scale"]
        field.scale_ = float(state["scale"])
        field.dimension_ = int(state["dimension"])
        field.covariate_range_ = tuple(state["covariate_range"])
        field.loss_curve_ = state["loss_curve"].numpy()
        for param in [*field.network_.parameters(), field.shared_raw_]:
            param.requires_grad_(False)
        return field


def _plain(value: Any) -> Any:
    """A parameter as plain data for ``torch.load(weights_only=True)``: numpy scalars to Python, tuples to lists."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
