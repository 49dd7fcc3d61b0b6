"""Metric spaces for Fréchet regression, each with its weighted Fréchet mean for signed weights.

A weighted Fréchet mean is ``argmin_w sum_i w_i d^2(Y_i, w)`` with weights summing to 1; the weights of
global and local Fréchet regression (Petersen & Müller 2019) are signed, so every solver here accepts
negative weights. An object space holds ``n`` objects as one array whose first axis is the sample:

* :class:`Euclidean`: vectors ``(n, d)``; the mean is the weighted average.
* :class:`Wasserstein`: 1-D distributions under W2, as quantile functions on a fixed grid of levels
  ``(n, m)``; the mean is the L2 projection of the weighted average onto non-decreasing functions
  (isotonic regression), clipped to the optional support bounds.
* :class:`SPD`: symmetric positive-definite matrices ``(n, d, d)`` with the Frobenius metric (weighted
  average projected onto ``{eigenvalues >= floor x its largest}``), the log-Euclidean metric (``expm`` of
  the weighted average of ``logm``: exact for signed weights) or the affine-invariant metric (Karcher
  fixed point with damped steps from the log-Euclidean mean).
* :class:`Laplacian`: graph Laplacians ``(n, d, d)`` (symmetric, rows summing to 0, off-diagonal entries in
  ``[-max_weight, 0]``) with the Frobenius metric; the mean projects the weighted average onto that set,
  a box-constrained quadratic program (solved with L-BFGS-B over the off-diagonal entries).
* :class:`Sphere`: unit vectors ``(n, d)`` with the geodesic metric; the mean is found by damped Riemannian
  gradient steps. :class:`Compositional`: compositions ``(n, d)`` (non-negative, summing to 1) through the
  square-root map onto the positive orthant of the sphere.

Every space has ``check(Y)`` (validate objects), ``dist2(A, B)`` (squared distances between matched
objects, or from each of ``A`` to one object ``B``), ``objective(Y, weights, omega)``, ``mean(Y, weights)``, ``means(Y, W)`` (one mean per row
of ``W``), and ``torch_head(n_features)`` for :class:`~icml_stats.frechet.DeSI` (an output map from
network features to objects and the squared distance to observed objects, in torch).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy.optimize import minimize
from sklearn.isotonic import isotonic_regression

from icml_stats.validation import as_array, check_choice, check_int, check_real

__all__ = [
    "SPACES",
    "SPD",
    "Compositional",
    "Euclidean",
    "FrechetMeanError",
    "Laplacian",
    "Space",
    "Sphere",
    "Wasserstein",
    "as_space",
    "check_weights",
    "quantiles",
]

_SUM_TOL = 1e-6
_CONDITION = 1e-12  # the largest condition number of an SPD object is 1e12
_ROUNDING = 1e-12  # a step that raises the objective by less than this (relative) is rounding, not a rise
_LAPLACIAN_SLACK = 1e-8  # rounding in a Laplacian's constraints, relative to its largest entry


class FrechetMeanError(ValueError):
    """A weighted Fréchet mean that floating point cannot represent (weights so extreme that it overflows)."""


def check_weights(weights, n: int, name: str = "weights") -> np.ndarray:
    """Weights ``(n,)`` or ``(k, n)`` (one set per row), finite, each set summing to 1 (signed allowed);
    None means equal weights."""
    if weights is None:
        return np.full(check_int(n, "n", 1, 2**31), 1.0 / n)
    w = as_array(weights, name)
    if w.ndim not in (1, 2) or w.shape[-1] != n:
        raise ValueError(f"{name} must have shape ({n},) or (k, {n}) (one weight per object), got {w.shape}")
    sums = w.sum(-1)
    scale = np.maximum(1.0, np.abs(w).sum(-1))
    bad = np.abs(sums - 1.0) > _SUM_TOL * scale
    if np.any(bad):
        got = float(np.atleast_1d(sums)[np.argmax(np.atleast_1d(bad))])
        raise ValueError(
            f"{name} must sum to 1 (signed weights are allowed; a Fréchet mean's weights sum to 1), got a sum of {got:.6g}"
        )
    return w


def _sym(a: np.ndarray) -> np.ndarray:
    return (a + np.swapaxes(a, -1, -2)) / 2


def _eig_apply(a: np.ndarray, fn) -> np.ndarray:
    """``fn`` applied to the eigenvalues of the symmetric matrices ``a (..., d, d)``."""
    vals, vecs = np.linalg.eigh(_sym(a))
    return (vecs * fn(vals)[..., None, :]) @ np.swapaxes(vecs, -1, -2)


class Space:
    """A metric space of objects with weighted Fréchet means (see the module doc)."""

    name = "space"
    #: the number of axes of one object (1: vectors, 2: matrices)
    ndim = 1

    def check(self, y, name: str = "y") -> np.ndarray:
        """``y`` as a float array of objects of this space (first axis: the sample); raises otherwise."""
        a = as_array(y, name)
        if a.ndim != self.ndim + 1 or a.shape[0] < 1 or 0 in a.shape:
            raise ValueError(
                f"{name} must hold {self.name} objects with shape {self._shape_text()}, got {a.shape}"
            )
        self._check_objects(a, name)
        return a

    def _shape_text(self) -> str:
        return "(n, d)" if self.ndim == 1 else "(n, d, d)"

    def _check_objects(self, a: np.ndarray, name: str) -> None:
        pass

    def _objects(self, v, name: str) -> tuple[np.ndarray, bool]:
        """``v`` as checked objects ``(n, *shape)`` and whether it was one object."""
        a = as_array(v, name)
        single = a.ndim == self.ndim
        return self.check(a[None] if single else a, name), single

    def dist2(self, a, b):
        """Squared distances between objects: ``a`` and ``b`` are each one object or ``n`` objects (equal
        ``n``, or one of them a single object); returns ``(n,)``, or a float for two single objects."""
        xa, one_a = self._objects(a, "a")
        xb, one_b = self._objects(b, "b")
        if xa.shape[1:] != xb.shape[1:]:
            raise ValueError(f"b must hold objects of the shape of a's, {xa.shape[1:]}, got {xb.shape[1:]}")
        if len(xa) != len(xb) and len(xa) != 1 and len(xb) != 1:
            raise ValueError(f"b must hold one object or as many as a ({len(xa)}), got {len(xb)}")
        out = self._dist2(xa, xb)
        return float(out[0]) if one_a and one_b else out

    def _dist2(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def objective(self, y, weights, omega) -> float:
        """``sum_i w_i d^2(Y_i, omega)``: what the weighted Fréchet mean minimizes (``weights`` ``(n,)``
        summing to 1, ``omega`` one object)."""
        y = self.check(y)
        w = check_weights(weights, len(y))
        if w.ndim != 1:
            raise ValueError(f"weights must have shape ({len(y)},) for objective, got {w.shape}")
        om, single = self._objects(omega, "omega")
        if not single or om.shape[1:] != y.shape[1:]:
            raise ValueError(f"omega must be one object of shape {y.shape[1:]}, got {np.shape(omega)}")
        return float(np.dot(w, self._dist2(y, om)))

    def mean(self, y, weights=None) -> np.ndarray:
        """The weighted Fréchet mean of the objects ``y`` (weights summing to 1, signed allowed)."""
        y = self.check(y)
        w = check_weights(weights, len(y))
        if w.ndim != 1:
            raise ValueError(
                f"weights must have shape ({len(y)},) for mean (use means for several), got {w.shape}"
            )
        return self._solve(y, w[None])[0]

    def means(self, y, weights) -> np.ndarray:
        """One weighted Fréchet mean per row of ``weights (k, n)``: ``(k, *object_shape)``."""
        y = self.check(y)
        w = check_weights(weights, len(y))
        if w.ndim != 2:
            raise ValueError(f"weights must have shape (k, {len(y)}) for means, got {w.shape}")
        return self._solve(y, w)

    def _solve(self, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        if len(w) == 0:
            return np.empty((0, *y.shape[1:]))
        out = np.full(1, np.nan)
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                out = self._means(y, w)
        except np.linalg.LinAlgError:
            pass
        ok = bool(np.isfinite(out).all())
        if ok:
            try:  # an under- or overflowed mean leaves the space
                self._check_objects(out, "mean")
            except ValueError:
                ok = False
        if not ok:
            raise FrechetMeanError(
                f"weights too extreme for the {self.name} mean: it overflows in floating point "
                f"(largest |weight| {np.abs(w).max():.3g}); use less extreme weights (e.g. a larger bandwidth)"
            )
        return out

    def _means(self, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # the stage-1 network of DeSI: an output map and a loss, in torch
    def torch_head(self, y: np.ndarray) -> tuple[int, Any, Any, Any]:
        """``(n_outputs, represent, target, dist2)`` for DeSI's network, given the checked objects ``y``:
        ``represent(z)`` maps network outputs ``(n, n_outputs)`` to a representation of objects of this
        space (torch; e.g. the matrix logarithm for the log-Euclidean metric), ``target`` is ``y`` in the
        form ``dist2(represented, target[rows])`` compares against (a float64 torch tensor), and
        ``dist2`` returns the squared distances ``(n,)``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))


class Euclidean(Space):
    """Vectors ``(n, d)`` with the Euclidean metric; the Fréchet mean is the weighted average, so global
    Fréchet regression is least squares and local Fréchet regression the local-linear smoother."""

    name = "euclidean"

    def check(self, y, name: str = "y") -> np.ndarray:
        a = as_array(y, name)
        return super().check(a[:, None] if a.ndim == 1 else a, name)

    def _dist2(self, a, b):
        return np.sum((np.asarray(a) - np.asarray(b)) ** 2, axis=-1)

    def _means(self, y, w):
        return w @ y

    def torch_head(self, y):
        import torch

        return y.shape[-1], lambda z: z, torch.as_tensor(y), lambda o, t: ((o - t) ** 2).sum(-1)


class Wasserstein(Space):
    """1-D distributions under the 2-Wasserstein metric, as quantile functions evaluated on a grid of
    levels ``(n, m)`` (non-decreasing along the grid and inside the support, up to a rounding of ``1e-10``
    times each function's largest ``|value|``). ``d^2`` is the mean over the grid of squared
    differences (the midpoint rule on equally spaced levels). ``lower``/``upper`` bound the support (the
    mean is clipped to them, which keeps it the projection)."""

    name = "wasserstein"

    def __init__(self, lower: float = -np.inf, upper: float = np.inf):
        self.lower = lower
        self.upper = upper

    def _bounds(self) -> tuple[float, float]:
        lo = check_real(self.lower, "lower", "[-inf, inf)")
        hi = check_real(self.upper, "upper", "(-inf, inf]")
        if lo >= hi:
            raise ValueError(f"lower must be below upper, got lower={lo}, upper={hi}")
        return lo, hi

    def _check_objects(self, a, name):
        if a.shape[1] < 2:
            raise ValueError(f"{name} must hold quantile functions on at least 2 levels, got {a.shape[1]}")
        steps = np.diff(a, axis=1)
        # rounding may leave a decrease of a few ulps: tolerated relative to the function's own scale (its
        # largest |value|), so that a decrease is judged alike in every unit (an absolute floor of 1e-10
        # accepted a function at scale 1e-12 falling by 1e-12)
        scale = np.abs(a).max(axis=1, keepdims=True)  # (n, 1)
        bad = (steps < -1e-10 * scale).any(1)
        if np.any(bad):
            row = int(np.argmax(bad))
            raise ValueError(
                f"{name} must hold non-decreasing quantile functions (one per row), row {row} decreases "
                f"by {-float(np.diff(a[row]).min()):.3g} (beyond rounding of its scale "
                f"{float(np.abs(a[row]).max()):.3g})"
            )
        lo, hi = self._bounds()
        # the support is judged with the same rounding (an absolute 1e-10 accepted 1.05e-12 in [0, 1e-12]
        # and refused 1e12 plus one ulp in [0, 1e12])
        if np.any(a < lo - 1e-10 * scale) or np.any(a > hi + 1e-10 * scale):
            raise ValueError(
                f"{name} must lie in the support [{lo}, {hi}], got values in [{a.min()}, {a.max()}]"
            )

    def _dist2(self, a, b):
        return np.mean((np.asarray(a) - np.asarray(b)) ** 2, axis=-1)

    def _means(self, y, w):
        lo, hi = self._bounds()
        avg = w @ y
        out = np.empty_like(avg)
        for k, row in enumerate(avg):
            out[k] = row if np.all(np.diff(row) >= 0) else isotonic_regression(row)
        return np.clip(out, lo, hi)

    def torch_head(self, y):
        import torch

        lo, hi = self._bounds()
        m = y.shape[-1]

        def to_object(z):
            q = torch.cumsum(torch.cat([z[:, :1], torch.nn.functional.softplus(z[:, 1:])], 1), 1)
            return q.clamp(lo, hi) if np.isfinite(lo) or np.isfinite(hi) else q

        return m, to_object, torch.as_tensor(y), lambda o, t: ((o - t) ** 2).mean(-1)


def quantiles(samples, levels) -> np.ndarray:
    """Empirical quantile functions of samples ``(n, n_draws)`` (or one sample ``(n_draws,)``) at ``levels``:
    objects for :class:`Wasserstein`."""
    s = as_array(samples, "samples")
    lv = as_array(levels, "levels", ("m",), interval="[0, 1]")
    if s.ndim == 1:
        s = s[None]
    if s.ndim != 2 or s.shape[1] < 1:
        raise ValueError(
            f"samples must have shape (n, n_draws) or (n_draws,) with n_draws >= 1, got {s.shape}"
        )
    return np.quantile(s, lv, axis=1).T


class SPD(Space):
    """Symmetric positive-definite matrices ``(n, d, d)``.

    ``metric``: ``"frobenius"`` (the mean is the weighted average with eigenvalues raised to ``floor`` times
    its largest eigenvalue, its projection onto ``{X : X >= floor lambda_max I}``; the floor is relative so
    that data in any unit, e.g. diffusion tensors in m^2/s with eigenvalues ~1e-9, keep their mean and the
    mean of ``c Y`` is ``c`` times the mean of ``Y``; an average with no eigenvalue above ``floor`` times
    the inputs' largest is raised to ``floor^2`` times it), ``"log_euclidean"`` (``||logm A - logm B||_F``;
    the mean ``expm(sum w_i logm Y_i)`` is exact for signed weights) or ``"affine_invariant"``
    (``||logm(A^-1/2 B A^-1/2)||_F``; Karcher fixed-point iterations from the log-Euclidean mean, the step
    halved while the objective rises, at most ``max_iter``; a warning when they stop short of ``tol``).
    """

    name = "SPD"
    ndim = 2
    METRICS = ("frobenius", "log_euclidean", "affine_invariant")

    def __init__(
        self, metric: str = "log_euclidean", floor: float = 1e-8, max_iter: int = 100, tol: float = 1e-10
    ):
        self.metric = metric
        self.floor = floor
        self.max_iter = max_iter
        self.tol = tol

    def _check_objects(self, a, name):
        check_choice(self.metric, "metric", self.METRICS)
        if a.shape[1] != a.shape[2]:
            raise ValueError(f"{name} must hold square matrices (n, d, d), got {a.shape}")
        if not np.allclose(a, np.swapaxes(a, 1, 2), rtol=1e-8, atol=1e-10 * max(1.0, np.abs(a).max())):
            raise ValueError(f"{name} must hold symmetric matrices")
        lam = np.linalg.eigvalsh(_sym(a))
        bad = lam[:, 0] <= _CONDITION * lam[:, -1]  # numerically singular: its logarithm is not reliable
        if np.any(bad):
            row = int(np.argmax(bad))
            raise ValueError(
                f"{name} must hold positive-definite matrices (smallest eigenvalue above {_CONDITION:g} x the "
                f"largest), matrix {row} has eigenvalues in [{lam[row, 0]:.3g}, {lam[row, -1]:.3g}]"
            )

    def _dist2(self, a, b):
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if self.metric == "frobenius":
            return np.sum((a - b) ** 2, axis=(-1, -2))
        if self.metric == "log_euclidean":
            return np.sum((_eig_apply(a, np.log) - _eig_apply(b, np.log)) ** 2, axis=(-1, -2))
        a, b = np.broadcast_arrays(a, b)
        ih = _eig_apply(a, lambda v: v**-0.5)
        lam = np.linalg.eigvalsh(_sym(ih @ b @ ih))
        return np.sum(np.log(lam) ** 2, axis=-1)

    def _means(self, y, w):
        check_choice(self.metric, "metric", self.METRICS)
        floor = check_real(self.floor, "floor", "(0, inf)")
        if self.metric == "frobenius":
            # the floor is relative to the average's largest eigenvalue (an absolute 1e-8 raised diffusion
            # tensors' eigenvalues ~1e-9 to 1e-8, and left 1e-14 of a scale-1e6 mean: refused as singular);
            # floor x the inputs' largest bounds it below where the average has no positive eigenvalue
            vals, vecs = np.linalg.eigh(_sym(np.einsum("kn,nij->kij", w, y)))
            top = np.maximum(vals[:, -1], floor * np.linalg.eigvalsh(y)[:, -1].max())
            vals = np.maximum(vals, floor * top[:, None])
            return (vecs * vals[:, None, :]) @ np.swapaxes(vecs, -1, -2)
        logs = _eig_apply(y, np.log)
        le = _eig_apply(np.einsum("kn,nij->kij", w, logs), np.exp)
        if self.metric == "log_euclidean":
            return le
        return np.stack([self._karcher(y, wk, x0) for wk, x0 in zip(w, le, strict=True)])

    def _karcher(self, y, w, x):
        max_iter = check_int(self.max_iter, "max_iter", 1)
        tol = check_real(self.tol, "tol", "(0, inf)")
        f = float(w @ self._dist2(y, x[None]))
        if not np.isfinite(f):
            return x  # the log-Euclidean start overflowed: reported by the caller
        step = 1.0
        for _ in range(max_iter):
            h, ih = _eig_apply(x, np.sqrt), _eig_apply(x, lambda v: v**-0.5)
            g = np.einsum("n,nij->ij", w, _eig_apply(ih @ y @ ih, np.log))
            if np.linalg.norm(g) < tol:
                return x
            while step > 1e-8:
                cand = _sym(h @ _eig_apply(step * g, np.exp) @ h)
                try:
                    fc = float(w @ self._dist2(y, cand[None]))
                except np.linalg.LinAlgError:
                    fc = np.nan
                if fc <= f + _ROUNDING * max(1.0, abs(f)):
                    break
                step /= 2
            else:
                break
            x, f, step = cand, fc, min(1.0, 2 * step)
        warnings.warn(
            f"affine-invariant Fréchet mean: Karcher iterations stopped before the gradient norm fell below "
            f"tol={tol:g} (max_iter={max_iter}); with negative weights the mean may not exist",
            RuntimeWarning,
            stacklevel=4,
        )
        return x

    def torch_head(self, y):
        import torch

        d = y.shape[-1]
        iu = np.triu_indices(d)
        rows, cols = torch.as_tensor(iu[0]), torch.as_tensor(iu[1])

        def symmetric(z):
            s = z.new_zeros(z.shape[0], d, d)
            s[:, rows, cols] = z
            return s + s.transpose(1, 2) - torch.diag_embed(torch.diagonal(s, dim1=1, dim2=2))

        def expm_sym(z):
            lam, vec = torch.linalg.eigh(symmetric(z))
            return (vec * torch.exp(lam)[:, None, :]) @ vec.transpose(1, 2)

        def frobenius(o, t):
            return ((o - t) ** 2).sum((-1, -2))

        if self.metric == "frobenius":
            return len(iu[0]), expm_sym, torch.as_tensor(y), frobenius
        if self.metric == "log_euclidean":  # the network predicts the logarithm; compare logarithms
            return len(iu[0]), symmetric, torch.as_tensor(_eig_apply(y, np.log)), frobenius

        def affine_invariant(o, t):  # t: Y^-1/2
            return (torch.log(torch.linalg.eigvalsh(t @ o @ t).clamp_min(1e-300)) ** 2).sum(-1)

        return len(iu[0]), expm_sym, torch.as_tensor(_eig_apply(y, lambda v: v**-0.5)), affine_invariant


class Laplacian(Space):
    """Graph Laplacians ``(n, d, d)`` of weighted undirected graphs (symmetric, rows summing to 0,
    off-diagonal entries in ``[-max_weight, 0]``) with the Frobenius metric (Zhou & Müller 2022). The mean
    projects the weighted average onto that set: a box-constrained quadratic program over the off-diagonal
    entries, solved with L-BFGS-B from the clipped average, on the average divided by a power of two near
    its largest edge weight (so that ``tol``, L-BFGS-B's ``ftol``, is relative at every scale: the mean of
    ``c Y`` is ``c`` times the mean of ``Y``)."""

    name = "graph Laplacian"
    ndim = 2

    def __init__(self, max_weight: float = np.inf, tol: float = 1e-12):
        self.max_weight = max_weight
        self.tol = tol

    def _check_objects(self, a, name):
        bound = check_real(self.max_weight, "max_weight", "(0, inf]")
        if a.shape[1] != a.shape[2]:
            raise ValueError(f"{name} must hold square matrices (n, d, d), got {a.shape}")
        # rounding slack relative to each matrix's largest entry (its largest degree): an absolute 1e-8 accepted
        # edge weights ~1e-9 with positive off-diagonal entries, asymmetry or row sums of their own size;
        # Laplacians built in float64 (D - W, B diag(w) B^T, rotated and back) err by at most 1e-15 of it
        slack = _LAPLACIAN_SLACK * np.abs(a).max(axis=(1, 2))[:, None]  # (n, 1)
        if np.any(np.abs(a - np.swapaxes(a, 1, 2)).max(axis=2) > slack):
            raise ValueError(f"{name} must hold symmetric matrices")
        if np.any(np.abs(a.sum(2)) > slack * a.shape[1]):
            raise ValueError(f"{name} must hold Laplacians whose rows sum to 0")
        off = a[:, ~np.eye(a.shape[1], dtype=bool)]  # (n, d (d - 1))
        if np.any(off > slack) or np.any(off < -bound - slack):
            raise ValueError(f"{name} must hold Laplacians with off-diagonal entries in [-{bound}, 0]")

    def _dist2(self, a, b):
        return np.sum((np.asarray(a) - np.asarray(b)) ** 2, axis=(-1, -2))

    @staticmethod
    def from_offdiagonal(a: np.ndarray, d: int) -> np.ndarray:
        """Laplacians ``(k, d, d)`` from their upper off-diagonal entries ``(k, d (d - 1) / 2)``."""
        iu = np.triu_indices(d, 1)
        out = np.zeros((a.shape[0], d, d))
        out[:, iu[0], iu[1]] = a
        out += np.swapaxes(out, 1, 2)
        out[:, np.arange(d), np.arange(d)] = -out.sum(2)
        return out

    def _means(self, y, w):
        bound = check_real(self.max_weight, "max_weight", "(0, inf]")
        tol = check_real(self.tol, "tol", "(0, inf)")
        d = y.shape[1]
        iu = np.triu_indices(d, 1)
        avg = np.einsum("kn,nij->kij", w, y)
        if d == 1:
            # one-node graphs: check accepts [[0]] only (its row is its diagonal), the space is {[[0]]} and
            # every mean is [[0]] (L-BFGS-B over no edge weights raised scipy's bare unpacking ValueError)
            return np.zeros_like(avg)
        out = np.empty_like(avg)
        for k, avg_k in enumerate(avg):
            # solved on the average divided by a power of two near its largest edge weight (exact in floating
            # point) and multiplied back: L-BFGS-B's ftol is relative to max(|f|, 1) and its gtol absolute,
            # so on edge weights ~1e-6 it stopped 1.2e-2 (relative) short of the projection, ~1e-4 2.6e-4
            top = float(np.abs(avg_k[iu]).max(initial=0.0))
            scale = np.ldexp(1.0, int(np.round(np.log2(top)))) if top > 0 else 1.0
            m, box = avg_k / scale, bound / scale
            target = m[iu]
            x0 = np.clip(target, -box, 0.0)

            def fg(a, target=target, m=m):
                lap = self.from_offdiagonal(a[None], d)[0]
                r = lap - m
                # d/da_ij of ||L - M||^2: the two off-diagonal copies and the two diagonal entries
                grad = 4 * r[iu] - 2 * (np.diag(r)[iu[0]] + np.diag(r)[iu[1]])
                return float(np.sum(r**2)), grad

            bounds = [(-box if np.isfinite(box) else None, 0.0)] * len(target)
            res = minimize(
                fg,
                x0,
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"ftol": tol, "gtol": 1e-12, "maxiter": 10_000},
            )
            out[k] = self.from_offdiagonal(scale * np.clip(res.x, -box, 0.0)[None], d)[0]
        return out

    def torch_head(self, y):
        import torch

        d = y.shape[-1]
        iu = np.triu_indices(d, 1)
        rows, cols = torch.as_tensor(iu[0]), torch.as_tensor(iu[1])
        bound = check_real(self.max_weight, "max_weight", "(0, inf]")

        def to_object(z):
            weight = torch.nn.functional.softplus(z)
            if np.isfinite(bound):
                weight = weight.clamp_max(bound)
            a = z.new_zeros(z.shape[0], d, d)
            a[:, rows, cols] = -weight
            a = a + a.transpose(1, 2)
            return a - torch.diag_embed(a.sum(2))

        return len(iu[0]), to_object, torch.as_tensor(y), lambda o, t: ((o - t) ** 2).sum((-1, -2))


class Sphere(Space):
    """Unit vectors ``(n, d)`` with the geodesic (great-circle) metric. The mean takes Riemannian gradient
    steps ``omega <- exp_omega(step * sum_i w_i log_omega(Y_i))`` from the normalized weighted average,
    the step halved while the objective rises; a warning when ``max_iter`` ends before ``tol``. With
    negative weights or spread-out points the minimizer need not be unique: the solver returns a local
    minimum near the start."""

    name = "sphere"

    def __init__(self, max_iter: int = 200, tol: float = 1e-10):
        self.max_iter = max_iter
        self.tol = tol

    def _check_objects(self, a, name):
        if a.shape[1] < 2:
            raise ValueError(f"{name} must hold vectors of at least 2 coordinates, got {a.shape[1]}")
        norms = np.linalg.norm(a, axis=1)
        if np.any(np.abs(norms - 1) > 1e-6):
            raise ValueError(
                f"{name} must hold unit vectors, got norms in [{norms.min():.6g}, {norms.max():.6g}]"
            )

    @staticmethod
    def _tangent(a, b):
        """The part of ``b`` orthogonal to ``a`` and the angle between their directions (rows broadcast).

        The orthogonal part is taken from ``b - a`` (``(b - a) - ((b - a) . a / a . a) a``), so nearby
        points lose no digits to cancellation, and the angle is ``atan2(|a| |b_perp|, a . b)``: accurate to
        rounding at every angle, where ``arccos(a . b)`` loses every digit below about 1e-8, and exact for
        vectors whose norms are slightly off 1."""
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        d = b - a
        aa = np.maximum(np.sum(a * a, axis=-1, keepdims=True), 1e-300)
        perp = d - (np.sum(d * a, axis=-1, keepdims=True) / aa) * a
        theta = np.arctan2(np.sqrt(aa[..., 0]) * np.linalg.norm(perp, axis=-1), np.sum(a * b, axis=-1))
        return perp, theta

    @staticmethod
    def _angle(a, b):
        return Sphere._tangent(a, b)[1]

    def _dist2(self, a, b):
        return self._angle(a, b) ** 2

    @staticmethod
    def _log(x, y):
        """Riemannian log at ``x`` of the points ``y (n, d)``.

        For a point antipodal to ``x`` (no tangent direction to it, at angle pi) every direction is a
        shortest path, and moving ``x`` any way brings it nearer: its log is taken as ``theta u`` along one
        fixed unit tangent ``u`` (the coordinate axis most orthogonal to ``x``, projected), not 0, which
        would make ``x`` look stationary where it maximizes the distance."""
        v, theta = Sphere._tangent(x, y)
        nv = np.linalg.norm(v, axis=1)
        scale = np.where(nv > 1e-15, theta / np.maximum(nv, 1e-300), 1.0)
        out = v * scale[:, None]
        antipodal = (nv <= 1e-15) & (theta > np.pi / 2)
        if antipodal.any():
            xv = np.asarray(x, dtype=float).reshape(-1)
            u = np.zeros_like(xv)
            u[int(np.argmin(np.abs(xv)))] = 1.0
            u -= (u @ xv) / (xv @ xv) * xv
            out[antipodal] = theta[antipodal, None] * (u / np.linalg.norm(u))
        return out

    @staticmethod
    def _exp(x, v):
        nv = np.linalg.norm(v)
        if nv < 1e-300:
            return x
        out = np.cos(nv) * x + np.sin(nv) * v / nv
        return out / np.linalg.norm(out)

    def _start(self, y, w):
        s = w @ y
        if np.linalg.norm(s) < 1e-12:
            s = y[int(np.argmax(w))]
        return s / np.linalg.norm(s)

    def _project(self, x):
        return x

    def _means(self, y, w):
        max_iter = check_int(self.max_iter, "max_iter", 1)
        tol = check_real(self.tol, "tol", "(0, inf)")
        out = np.empty((len(w), y.shape[1]))
        for k, wk in enumerate(w):
            x = self._project(self._start(y, wk))
            f = float(wk @ self._angle(y, x) ** 2)
            step = 1.0
            for _ in range(max_iter):
                g = wk @ self._log(x, y)
                if np.linalg.norm(g) < tol:
                    break
                while step > 1e-10:
                    cand = self._project(self._exp(x, step * g))
                    fc = float(wk @ self._angle(y, cand) ** 2)
                    if fc <= f + _ROUNDING * max(1.0, abs(f)):
                        break
                    step /= 2
                else:
                    break
                moved = np.linalg.norm(cand - x)
                x, f, step = cand, fc, min(1.0, 2 * step)
                if moved < tol:
                    break
            else:
                warnings.warn(
                    f"{self.name} Fréchet mean: gradient steps stopped at max_iter={max_iter} before tol={tol:g}",
                    RuntimeWarning,
                    stacklevel=4,
                )
            out[k] = x
        return out

    def torch_head(self, y):
        import torch

        def to_object(z):
            return z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)

        return y.shape[-1], to_object, torch.as_tensor(y), _torch_angle2


def _torch_angle2(a, b):
    """Squared angles between the rows of ``a`` and ``b`` in torch, as :meth:`Sphere._tangent` computes
    them: ``atan2(|a| |b_perp|, a . b)`` is accurate at every angle and has a finite gradient everywhere
    (a clamped ``arccos`` floors the loss at ``arccos(1 - 1e-7)**2`` and has no gradient below it)."""
    import torch

    d = b - a
    aa = (a * a).sum(-1, keepdim=True).clamp_min(1e-300)
    perp = d - ((d * a).sum(-1, keepdim=True) / aa) * a
    return torch.atan2(aa[..., 0].sqrt() * perp.norm(dim=-1), (a * b).sum(-1)) ** 2


class Compositional(Sphere):
    """Compositions ``(n, d)`` (non-negative parts summing to 1) with the geodesic metric of their
    square roots on the unit sphere: ``d(a, b) = arccos(sum_j sqrt(a_j b_j))`` (twice the Bhattacharyya
    angle's half; the Hellinger geometry). The mean is the sphere mean restricted to the positive orthant
    (absolute values after each step, which never lengthens a distance to a composition), squared back."""

    name = "compositional"

    def _check_objects(self, a, name):
        if a.shape[1] < 2:
            raise ValueError(f"{name} must hold compositions of at least 2 parts, got {a.shape[1]}")
        if np.any(a < 0):
            raise ValueError(f"{name} must hold compositions with non-negative parts")
        sums = a.sum(1)
        if np.any(np.abs(sums - 1) > 1e-6):
            raise ValueError(
                f"{name} must hold compositions whose parts sum to 1, got sums in [{sums.min():.6g}, {sums.max():.6g}]"
            )

    def _dist2(self, a, b):
        return super()._dist2(np.sqrt(np.maximum(a, 0)), np.sqrt(np.maximum(b, 0)))

    def _project(self, x):
        x = np.abs(x)
        return x / np.linalg.norm(x)

    def _means(self, y, w):
        return super()._means(np.sqrt(y), w) ** 2  # the sphere mean of the square roots, squared back

    def torch_head(self, y):
        import torch

        def to_root(z):  # a point of the positive orthant of the sphere: the composition's square root
            return z.abs() / z.norm(dim=1, keepdim=True).clamp_min(1e-12)

        return y.shape[-1], to_root, torch.as_tensor(np.sqrt(y)), _torch_angle2


SPACES: dict[str, type[Space]] = {
    "euclidean": Euclidean,
    "wasserstein": Wasserstein,
    "spd": SPD,
    "laplacian": Laplacian,
    "sphere": Sphere,
    "compositional": Compositional,
}


def as_space(space, name: str = "space") -> Space:
    """A :class:`Space` instance, or one built from its name in :data:`SPACES` with default settings."""
    if isinstance(space, Space):
        return space
    if isinstance(space, str) and space.lower() in SPACES:
        return SPACES[space.lower()]()
    raise ValueError(f"{name} must be a Space instance or one of {tuple(SPACES)}, got {space!r}")
