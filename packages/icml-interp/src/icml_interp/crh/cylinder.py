"""The cylinder decomposition of difference vectors (the Cylindrical Representation Hypothesis, Gao et al. 2026).

For difference vectors ``d_i = act(with concept) - act(without)`` of ``n`` samples, CRH's *central axis* is the
unit mean difference ``v = mean(d) / |mean(d)|`` (the difference-of-means steering direction). Each ``d_i``
splits into its component along the axis, ``(d_i . v) v``, and the rest, ``d_i - (d_i . v) v``, which lies in
the *normal plane*; ``cos theta_i = d_i . v / |d_i|`` and ``sin theta_i = |normal part| / |d_i|``. Inside the
normal space the two leading principal directions of the normal parts span the plane in which CRH draws
*sectors*: the angle ``phi_i = atan2`` of the normal part's coordinates, binned.

The *penalty test* steers sample ``i`` with ``s cos theta_i v + (1 - lam) s sin theta_i u_i`` (``u_i`` the
unit normal part): ``lam = 0`` is the sample's own direction at length ``s``, ``lam = 1`` keeps only the axis
part. The *spiral probe* fits a helix to the leading principal components of the centred difference vectors
(CRH's ``causal_intervention``) and maps points of the helix back to activation space.

Our choices (the paper's text was not available; the official code was read as notes): the normal-plane
basis is the top-2 right singular vectors of the (uncentred) normal parts, the sector angle's zero is the
first of them; sector bins are equal-width on ``(-pi, pi]``; the helix is ``(t, r cos 2 pi n t, r sin 2 pi n
t)`` over ``t`` in ``[0, 1]`` in the sample order given, its ``(n, r)`` chosen from a grid by least squares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from icml_interp.validation import check_finite, check_int, check_number, check_tensor


def _right_singular_vectors(x: torch.Tensor, name: str) -> torch.Tensor:
    """The rows of ``V^T`` of ``x``'s SVD; a matrix LAPACK cannot decompose (huge or degenerate entries) is
    bad input named ``name``."""
    try:
        return torch.linalg.svd(x, full_matrices=False)[2]
    except torch.linalg.LinAlgError as err:
        raise ValueError(f"{name} could not be decomposed (SVD failed: {err}); rescale them") from None


def _diffs(diffs, name: str = "diffs") -> torch.Tensor:
    x = check_tensor(diffs, name, "(n_samples, d_model)", ndim=2)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    check_finite(x, name)
    return x.double()


@dataclass(frozen=True)
class Cylinder:
    """The decomposition of ``n`` difference vectors about a unit ``axis`` (float64 tensors)."""

    diffs: torch.Tensor  # (n, d)
    axis: torch.Tensor  # (d,), unit
    parallel: torch.Tensor  # (n,): d_i . axis
    normal: torch.Tensor  # (n, d): d_i - parallel_i * axis

    @property
    def norms(self) -> torch.Tensor:
        """``|d_i|``, ``(n,)``."""
        return self.diffs.norm(dim=1)

    @property
    def cos(self) -> torch.Tensor:
        """``cos theta_i = d_i . axis / |d_i|`` (0 for a zero difference vector)."""
        return self.parallel / self.norms.clamp_min(1e-300)

    @property
    def sin(self) -> torch.Tensor:
        """``sin theta_i = |normal part| / |d_i|`` (non-negative)."""
        return self.normal.norm(dim=1) / self.norms.clamp_min(1e-300)

    def normal_basis(self, k: int = 2) -> torch.Tensor:
        """The ``k`` leading principal directions of the normal parts, ``(k, d)`` orthonormal rows, each
        orthogonal to the axis; signs fixed so that each row's largest-magnitude entry is positive."""
        check_int(k, "k", minimum=1, maximum=min(self.normal.shape))
        basis = _right_singular_vectors(self.normal, "diffs")[:k]
        signs = torch.sign(basis.gather(1, basis.abs().argmax(1, keepdim=True)))
        return basis * signs

    def sector_angles(
        self, basis: torch.Tensor | None = None, diffs: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The angle ``phi_i`` in ``(-pi, pi]`` of each normal part in the plane of ``basis`` (``(2, d)``,
        default :meth:`normal_basis`). With ``diffs``, the angles of those (held-out) difference vectors'
        normal parts about this cylinder's axis instead."""
        basis = (
            self.normal_basis(2) if basis is None else check_tensor(basis, "basis", "(2, d_model)", ndim=2)
        )
        if basis.shape != (2, self.axis.numel()) or not basis.is_floating_point():
            raise ValueError(
                f"basis must be a floating-point tensor shaped (2, {self.axis.numel()}), got "
                f"{basis.dtype} {tuple(basis.shape)}"
            )
        check_finite(basis, "basis")
        if diffs is not None:
            held_out = _diffs(diffs, "diffs")
            if held_out.shape[1] != self.axis.numel():
                raise ValueError(
                    f"diffs must be shaped (n, {self.axis.numel()}), got {tuple(held_out.shape)}"
                )
        normal = self.normal if diffs is None else decompose(held_out, self.axis).normal
        coords = normal @ basis.double().T
        return torch.atan2(coords[:, 1], coords[:, 0])

    def penalty_vectors(self, scale: float, lam: float) -> torch.Tensor:
        """Per-sample steering vectors ``s cos theta_i axis + (1 - lam) s sin theta_i u_i``, ``(n, d)``:
        ``u_i`` is sample ``i``'s unit normal part (zero where the normal part vanishes)."""
        s = check_number(scale, "scale")
        lam = check_number(lam, "lam", minimum=0.0, maximum=1.0)
        lengths = self.normal.norm(dim=1, keepdim=True)
        unit = torch.where(
            lengths > 0, self.normal / lengths.clamp_min(1e-300), torch.zeros_like(self.normal)
        )
        return s * self.cos[:, None] * self.axis + (1 - lam) * s * self.sin[:, None] * unit


def decompose(diffs: torch.Tensor, axis: torch.Tensor | None = None) -> Cylinder:
    """The :class:`Cylinder` of difference vectors ``diffs`` ``(n, d)`` about ``axis`` (any non-zero ``(d,)``
    vector, normalised; default: the mean difference, CRH's central axis)."""
    x = _diffs(diffs)
    if axis is None:
        if len(x) < 2:
            raise ValueError("diffs must hold at least 2 difference vectors to estimate the axis")
        v = x.mean(0)
    else:
        v = check_tensor(axis, "axis", "(d_model,)", ndim=1)
        if v.numel() != x.shape[1] or not v.is_floating_point():
            raise ValueError(
                f"axis must be a floating-point tensor shaped ({x.shape[1]},) (the width of diffs), "
                f"got {v.dtype} {tuple(v.shape)}"
            )
        check_finite(v, "axis")
        v = v.double()
    if not bool(v.abs().max() > 0):
        raise ValueError("the axis is zero (the difference vectors average to zero); pass axis= explicitly")
    v = v / v.abs().max()  # rescale first: a tiny (subnormal) vector normalises to unit length exactly
    v = v / v.norm()
    parallel = x @ v
    if not (bool(torch.isfinite(parallel).all()) and bool(torch.isfinite(x.norm(dim=1)).all())):
        raise ValueError("diffs are too large for float64 norms; rescale them")
    return Cylinder(diffs=x, axis=v, parallel=parallel, normal=x - parallel[:, None] * v)


def sector_bins(angles: torch.Tensor, n_sectors: int = 8) -> torch.Tensor:
    """The sector of each angle in ``(-pi, pi]``: ``n_sectors`` equal bins, ids ``0 .. n_sectors - 1``."""
    a = check_tensor(angles, "angles", "(n,)", ndim=1)
    check_int(n_sectors, "n_sectors", minimum=1)
    if not a.is_floating_point():
        raise TypeError(f"angles must be a floating-point tensor, got {a.dtype}")
    check_finite(a, "angles")
    if bool(((a < -math.pi - 1e-9) | (a > math.pi + 1e-9)).any()):
        raise ValueError("angles must lie in [-pi, pi] (radians, as atan2 returns)")
    frac = (a.double() + math.pi) / (2 * math.pi)
    return (frac * n_sectors).floor().long().clamp(0, n_sectors - 1)


@dataclass(frozen=True)
class SpiralProbe:
    """A helix ``y(t) = (t, r cos 2 pi n t, r sin 2 pi n t)`` fitted to the top-``k`` principal components of
    centred difference vectors: ``Z ~ (Y - mean(Y)) P^T`` with ``Z = (D - mean) W^T``; :meth:`point` maps
    ``y(t)`` back to activation space, ``W^T P (y - mean(Y)) + mean``."""

    mean: torch.Tensor  # (d,)
    components: torch.Tensor  # W, (k, d) orthonormal rows
    projection: torch.Tensor  # P, (k, 3)
    helix_mean: torch.Tensor  # (3,): the mean of the fitted helix points
    n_rot: float
    radius: float
    r2: float  # share of the top-k variance the helix explains

    def helix(self, t: torch.Tensor) -> torch.Tensor:
        """Helix coordinates ``(len(t), 3)``, on ``t``'s device (a number or a list: the probe's)."""
        device = t.device if isinstance(t, torch.Tensor) else self.mean.device
        t = torch.as_tensor(t, dtype=torch.float64, device=device).reshape(-1)
        w = 2 * math.pi * self.n_rot * t
        return torch.stack([t, self.radius * torch.cos(w), self.radius * torch.sin(w)], 1)

    def point(self, t) -> torch.Tensor:
        """The activation-space vectors at helix parameters ``t`` (a number or a 1-d tensor), ``(len(t), d)``."""
        y = self.helix(t).to(self.helix_mean.device)
        return (y - self.helix_mean) @ self.projection.T @ self.components + self.mean


def fit_spiral_probe(
    diffs: torch.Tensor,
    k: int = 5,
    *,
    n_rots=(0.5, 0.75, 1.0, 1.25, 1.5),
    radii=(0.5, 1.0, 1.5, 2.0),
) -> SpiralProbe:
    """Fit :class:`SpiralProbe` to ``diffs`` ``(n, d)`` in their given order (``t_i = i / (n - 1)``): PCA to
    ``k`` components, then for each ``(n_rot, radius)`` in the grid the least-squares ``P``; the pair with the
    smallest residual wins."""
    x = _diffs(diffs)
    if len(x) < 3:
        raise ValueError(f"diffs must hold at least 3 difference vectors for a helix, got {len(x)}")
    check_int(k, "k", minimum=1, maximum=min(len(x) - 1, x.shape[1]))
    for name, values in (("n_rots", n_rots), ("radii", radii)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"{name} must be a list of positive numbers, got {values!r}")
    grid = [(check_number(n, "n_rots", open_min=True, minimum=0.0), check_number(r, "radii", open_min=True,
             minimum=0.0)) for n in n_rots for r in radii]  # fmt: skip
    if not grid:
        raise ValueError("n_rots and radii must be non-empty")
    mean = x.mean(0)
    w = _right_singular_vectors(x - mean, "diffs")[:k]
    # the helix fit ((n, 3) against (n, k)) runs on the CPU whatever diffs' device: CUDA's only lstsq driver
    # (gels) assumes a full-rank matrix, and helices can be rank-deficient (always with 3 centred points)
    z = ((x - mean) @ w.T).cpu()  # (n, k)
    t = torch.linspace(0, 1, len(x), dtype=torch.float64)
    best: tuple | None = None
    zero = torch.zeros(3, dtype=torch.float64)
    for n_rot, radius in grid:
        y = SpiralProbe(mean, w, torch.zeros(k, 3, dtype=torch.float64), zero, n_rot, radius, 0.0).helix(t)
        y_mean = y.mean(0)
        p = torch.linalg.lstsq(y - y_mean, z).solution.T  # (k, 3): Z ~ (Y - mean) P^T
        resid = float(((z - (y - y_mean) @ p.T) ** 2).sum())
        if best is None or resid < best[0]:
            best = (resid, p, y_mean, n_rot, radius)
    assert best is not None  # the grid is not empty
    resid, p, y_mean, n_rot, radius = best
    total = float((z**2).sum())
    r2 = 1 - resid / total if total > 0 else 0.0
    return SpiralProbe(mean, w, p.to(mean.device), y_mean.to(mean.device), n_rot, radius, r2)
