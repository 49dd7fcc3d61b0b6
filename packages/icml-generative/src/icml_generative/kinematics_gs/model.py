"""Dynamic Gaussians with a kinematic blur model: canonical Gaussians, a coarse-to-fine deformation field, the
motion-blur covariance ``Σ + (T²/12)·v vᵀ``, motion-aligned rotation frames and the static/dynamic split.

Our reconstruction of Kinematics-GS from its abstract (the paper's text was not available; docs page
``kinematics-gs.md`` says which parts are ours):

- **Deformation.** ``μ_i(t) = μ_i + m_i·Σ_k (a_ik·sin(2πkt) + b_ik·(cos(2πkt) − 1))``: a Fourier basis of
  ``frequencies`` terms (zero at ``t = 0``, so ``μ_i`` is the position at time 0) whose coefficients are a
  motion field, a small MLP on a positional encoding of the canonical position (nearby Gaussians move alike,
  so a small Gaussian is carried by the motion its neighbours see) plus, in the fine stage, per-Gaussian
  coefficients that start at zero; ``m_i`` is 0 for Gaussians the static/dynamic split made static. Coarse to
  fine: ``stage=1`` uses the field's first frequency only, ``stage=2`` every frequency and the per-Gaussian
  terms. With ``hidden=0`` there is no field: the per-Gaussian coefficients are used in both stages.
- **Blur as motion-aligned deformation.** A frame exposed over ``[t − T/2, t + T/2]`` sees each Gaussian
  swept along its velocity ``v = dμ/dt`` (central difference of the deformation). For linear motion the
  time-averaged density is a Gaussian mixture whose covariance is exactly ``Σ_blur = Σ + (T²/12)·v vᵀ`` (the
  variance of a uniform displacement); ``blur="kinematic"`` renders each Gaussian with ``Σ_blur`` and its
  opacity scaled by ``sqrt(det Σ'/det Σ'_blur)`` (``Σ'`` the image-space covariances), which keeps its
  footprint's integral, as a moving Gaussian's time average does. ``blur="subframe"`` renders ``subframes``
  sharp frames across the exposure and averages them (the higher-cost alternative); ``blur="none"`` renders
  the sharp frame.
- **Kinematic prior.** With ``motion_aligned=True`` a dynamic Gaussian's rotation frame is built from its
  motion: first axis the axis of motion ``±v/‖v‖`` (the same for ``v`` and ``−v``, so a Gaussian moving back
  and forth keeps its frame), second axis a learned vector made orthogonal to it (Gram–Schmidt), third their
  cross product; its quaternion and scales are learned in that frame (``R = F(v)·R(q)``), so its shape
  follows its direction of motion. Static Gaussians (and those that barely move) use ``R(q)`` alone. :meth:`KinematicsGS.anisotropy` (largest / smallest sharp scale) is the
  quantity the anisotropy regularizer of :func:`~icml_generative.kinematics_gs.train.train_kinematics_gs`
  bounds.
- **Static/dynamic split.** :meth:`KinematicsGS.split_static_dynamic` sets ``m_i`` from the temporal
  variance of ``μ_i(t)`` over sampled times (:meth:`KinematicsGS.deformation_variance`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from icml_generative._io import load_module, save_module
from icml_generative.kinematics_gs._geometry import (
    covariance_from_rotation_unchecked,
    project_gaussians_unchecked,
    quat_to_rotmat_unchecked,
)
from icml_generative.kinematics_gs.render import (
    MAX_SIDE,
    check_background,
    check_camera,
    rasterization,
)
from icml_generative.validation import as_real_tensor, check_choice, check_int, check_number, check_tensor

BLUR_MODES = ("none", "kinematic", "subframe")
MAX_GAUSSIANS = 1_000_000
# |t| and the exposure at most this (the basis sin(2πkt) stays finite, and meaningful, in float32)
MAX_TIME = 1e6
MOVING_SPEED = 1e-4  # |v| below this (world units per unit time): the quaternion frame, not the motion frame
_DT = 1e-3  # the central difference's half step for velocities
_AXIS_REFERENCE = (0.36, 0.48, 0.8)  # orients the motion axis (any fixed unit vector)
_ENCODING = (0.5, 1.0, 2.0)  # the motion field's positional-encoding frequencies (times π, per world unit)


def _check_time(t: Any) -> float:
    return check_number(t, "t", -MAX_TIME, MAX_TIME)


def _check_times(times: Any) -> torch.Tensor:
    """At least 2 finite times within ``±MAX_TIME`` (a tensor, an array or a sequence), as float64 ``(m,)``."""
    times = as_real_tensor(times, "times").flatten()
    if times.numel() < 2:
        raise ValueError("times must hold at least 2 times")
    if not bool((torch.isfinite(times) & (times.abs() <= MAX_TIME)).all()):
        raise ValueError(f"times must be finite and within ±{MAX_TIME:g}")
    return times


class KinematicsGS(nn.Module):
    """``n`` dynamic 3-D Gaussians with RGB (or ``channels``) colors and a blur model (see the module).

    Args:
        n: number of Gaussians.
        frequencies: Fourier terms of the per-Gaussian deformation basis.
        hidden: width of the motion field's MLP (0: no field).
        blur: ``"none"``, ``"kinematic"`` (``Σ_blur``) or ``"subframe"`` (average of ``subframes`` renders).
        exposure: the exposure time ``T`` (in the time unit of ``t``), ``>= 0``.
        subframes: renders averaged per frame with ``blur="subframe"``.
        motion_aligned: build dynamic Gaussians' rotation frames from their velocity.
        channels: color channels.
    """

    dynamic: torch.Tensor
    stage: torch.Tensor

    def __init__(
        self,
        n: int,
        *,
        frequencies: int = 2,
        hidden: int = 32,
        blur: str = "kinematic",
        exposure: float = 0.0,
        subframes: int = 8,
        motion_aligned: bool = True,
        channels: int = 3,
    ):
        super().__init__()
        self.n = check_int(n, "n", 1, MAX_GAUSSIANS)
        self.frequencies = check_int(frequencies, "frequencies", 1, 16)
        self.hidden = check_int(hidden, "hidden", 0, 1024)
        self.blur = check_choice(blur, "blur", BLUR_MODES)
        self.exposure = check_number(exposure, "exposure", minimum=0, maximum=MAX_TIME)
        self.subframes = check_int(subframes, "subframes", 1, 256)
        if not isinstance(motion_aligned, bool):
            raise TypeError(f"motion_aligned must be a bool, got {motion_aligned!r}")
        self.motion_aligned = motion_aligned
        self.channels = check_int(channels, "channels", 1, 64)
        self.means = nn.Parameter(torch.zeros(n, 3))
        self.log_scales = nn.Parameter(torch.full((n, 3), math.log(0.05)))
        self.quats = nn.Parameter(torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(n, 1))
        self.frame_vectors = nn.Parameter(torch.tensor([0.0, 0.0, 1.0]).repeat(n, 1))
        self.opacity_logits = nn.Parameter(torch.zeros(n))
        self.color_logits = nn.Parameter(torch.zeros(n, channels))
        self.coefficients = nn.Parameter(torch.zeros(n, 2 * self.frequencies, 3))
        self.field: nn.Module | None = None
        if self.hidden:
            last = nn.Linear(self.hidden, 2 * self.frequencies * 3)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
            self.field = nn.Sequential(
                nn.Linear(3 + 6 * len(_ENCODING), self.hidden), nn.SiLU(), nn.Linear(self.hidden, self.hidden),
                nn.SiLU(), last,
            )  # fmt: skip
        self.register_buffer("dynamic", torch.ones(n))
        self.register_buffer("stage", torch.tensor(1))

    def config(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "frequencies": self.frequencies,
            "hidden": self.hidden,
            "blur": self.blur,
            "exposure": self.exposure,
            "subframes": self.subframes,
            "motion_aligned": self.motion_aligned,
            "channels": self.channels,
        }

    # ------------------------------------------------------------------------------------ initialisation
    @torch.no_grad()
    def initialize(
        self,
        points: torch.Tensor,
        colors: torch.Tensor | None = None,
        scale: float | None = None,
        motion: torch.Tensor | None = None,
    ) -> None:
        """Start from a point cloud (an SfM reconstruction's role): ``points (n, 3)`` become the canonical
        means, ``colors (n, channels)`` in ``(0, 1)`` the colors (grey if None), isotropic scales of ``scale``
        (default: the mean distance to the 3 nearest points), opacity 0.5; ``motion (n, 2·frequencies, 3)``
        the per-Gaussian deformation coefficients (point tracks' role; default: no motion)."""
        if not isinstance(points, torch.Tensor) or points.shape != (self.n, 3):
            raise ValueError(f"points must be a tensor ({self.n}, 3), got {getattr(points, 'shape', points)}")
        if points.is_complex():
            raise TypeError(f"points must hold real numbers, got dtype {points.dtype}")
        if not bool(torch.isfinite(points).all()):
            raise ValueError("points must be finite")
        if colors is not None:
            if not isinstance(colors, torch.Tensor) or colors.shape != (self.n, self.channels):
                raise ValueError(f"colors must be a tensor ({self.n}, {self.channels})")
            check_tensor(colors, "colors", floating=True, finite=True)
        if motion is not None:
            if not isinstance(motion, torch.Tensor) or motion.shape != self.coefficients.shape:
                raise ValueError(f"motion must be a tensor {tuple(self.coefficients.shape)}")
            if motion.is_complex():
                raise TypeError(f"motion must hold real numbers, got dtype {motion.dtype}")
            if not bool(torch.isfinite(motion).all()):
                raise ValueError("motion must be finite")
        if scale is None:
            k = min(3, self.n - 1)
            # cdist has float32 and float64 kernels only: other dtypes (exact in float64) are measured there
            pts = points if points.dtype in (torch.float32, torch.float64) else points.double()
            dist = torch.cdist(pts, pts) + torch.eye(self.n, device=pts.device) * 1e9
            scale = float(dist.topk(k, largest=False).values.mean()) if k else 0.1
            if not self._representable(scale):
                raise ValueError(
                    f"points give no usable default scale (mean distance to the nearest points {scale}): "
                    "pass distinct points of moderate size, or scale"
                )
        scale = check_number(scale, "scale", above=0)
        if not self._representable(scale):
            raise ValueError(
                f"scale must have a square that is positive and finite in {self.means.dtype}, got {scale}"
            )
        self.means.copy_(points)
        if colors is not None:
            self.color_logits.copy_(torch.logit(colors.clamp(0.02, 0.98)))
        else:
            self.color_logits.zero_()
        self.log_scales.fill_(math.log(scale))
        self.opacity_logits.zero_()
        self.coefficients.zero_()
        if motion is not None:
            self.coefficients.copy_(motion)
        self.dynamic.fill_(1.0)

    def _representable(self, scale: float) -> bool:
        """Whether ``exp(2·log(scale))`` (the variance of a Gaussian of that scale) is positive and finite in
        the model's dtype."""
        if not (math.isfinite(scale) and scale > 0):
            return False
        variance = torch.tensor(2 * math.log(scale), dtype=self.log_scales.dtype).exp()
        return bool(torch.isfinite(variance) & (variance > 0))

    # -------------------------------------------------------------------------------------- deformation
    def _basis(self, t: float | torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(t, dtype=self.means.dtype, device=self.means.device)
        k = torch.arange(1, self.frequencies + 1, dtype=self.means.dtype, device=self.means.device)
        angle = 2 * math.pi * k * t
        return torch.cat([torch.sin(angle), torch.cos(angle) - 1])  # (2F,), zero at t = 0

    def motion_coefficients(self) -> torch.Tensor:
        """The deformation's Fourier coefficients ``(n, 2·frequencies, 3)`` (sine terms first) in the current
        stage."""
        coefficients: torch.Tensor | None = (
            self.coefficients if (self.field is None or int(self.stage) >= 2) else None
        )
        if self.field is not None:
            angles = self.means[:, :, None] * self.means.new_tensor(_ENCODING) * math.pi  # (n, 3, E)
            features = torch.cat([self.means, angles.sin().flatten(1), angles.cos().flatten(1)], 1)
            field = self.field(features).view(self.n, 2 * self.frequencies, 3)
            coefficients = field if coefficients is None else field + coefficients
        assert coefficients is not None
        if int(self.stage) < 2:  # coarse: the first frequency only
            keep = coefficients.new_zeros(2 * self.frequencies, 1)
            keep[0] = keep[self.frequencies] = 1.0
            coefficients = coefficients * keep
        return coefficients

    # The public methods check their arguments and call the unchecked ``_positions``, ``_velocities``,
    # ``_motion_frames``, ``_rotations`` and ``_covariances``, which render (every training step) uses.
    def positions(self, t: float) -> torch.Tensor:
        """Means ``(n, 3)`` at time ``t``."""
        return self._positions(_check_time(t))

    def _positions(self, t: float) -> torch.Tensor:
        offset = torch.einsum("k,nkd->nd", self._basis(t), self.motion_coefficients())
        return self.means + self.dynamic[:, None] * offset

    def velocities(self, t: float) -> torch.Tensor:
        """``dμ/dt (n, 3)`` at time ``t`` (central difference)."""
        return self._velocities(_check_time(t))

    def _velocities(self, t: float) -> torch.Tensor:
        return (self._positions(t + _DT) - self._positions(t - _DT)) / (2 * _DT)

    def deformation_variance(self, times: torch.Tensor) -> torch.Tensor:
        """``Var_t[μ_i(t)]`` summed over x, y, z ``(n,)``, over the times ``(m,)`` (the split's statistic)."""
        times = _check_times(times)
        with torch.no_grad():
            track = torch.stack([self._positions(float(t)) for t in times])
        return track.var(0, unbiased=False).sum(-1)

    @torch.no_grad()
    def split_static_dynamic(self, times: torch.Tensor, threshold: float) -> torch.Tensor:
        """Mark Gaussians whose deformation variance over ``times`` is at most ``threshold`` (world units²)
        static (their deformation is switched off and their motion coefficients zeroed; they stay in place
        at their time-averaged position); returns the dynamic mask ``(n,)`` bool."""
        threshold = check_number(threshold, "threshold", minimum=0)
        variance = self.deformation_variance(times)
        dynamic = variance > threshold
        if bool((~dynamic).any()):
            track = torch.stack([self._positions(float(t)) for t in torch.as_tensor(times).flatten()])
            self.means[~dynamic] = track.mean(0)[~dynamic]
            self.coefficients[~dynamic] = 0.0
        self.dynamic.copy_(dynamic.to(self.dynamic))
        return dynamic

    # ------------------------------------------------------------------------------------------- shapes
    def scales(self) -> torch.Tensor:
        return self.log_scales.exp()

    def opacities(self) -> torch.Tensor:
        return torch.sigmoid(self.opacity_logits)

    def colors(self) -> torch.Tensor:
        return torch.sigmoid(self.color_logits)

    def anisotropy(self) -> torch.Tensor:
        """Largest over smallest sharp scale per Gaussian ``(n,)``."""
        s = self.scales()
        return s.amax(-1) / s.amin(-1)

    def motion_frames(self, velocities: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(frames (n, 3, 3), moving (n,) bool)``: each Gaussian's motion frame (columns: ``±v/‖v‖``, the
        learned frame vector made orthogonal to it, their cross product) and whether it is a dynamic Gaussian
        that moves (the identity elsewhere)."""
        return self._motion_frames(self._check_velocities(velocities))

    def _check_velocities(self, velocities: Any) -> torch.Tensor:
        check_tensor(velocities, "velocities", (self.n, 3), floating=True, finite=True)
        if velocities.dtype != self.means.dtype:
            raise TypeError(
                f"velocities must have the model's dtype {self.means.dtype}, got {velocities.dtype}"
            )
        if not bool(torch.isfinite(velocities.norm(dim=-1)).all()):
            raise ValueError(f"velocities are too large: their lengths overflow {velocities.dtype}")
        return velocities

    def _motion_frames(self, velocities: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        speed = velocities.norm(dim=-1, keepdim=True)
        moving = (speed[:, 0] > MOVING_SPEED) & (self.dynamic > 0)
        e1 = velocities / speed.clamp_min(MOVING_SPEED)
        # the axis of motion, not its direction: a Gaussian moving back and forth keeps its frame (v and -v give
        # the same first axis, the one on the side of a fixed reference vector)
        e1 = torch.where((e1 @ e1.new_tensor(_AXIS_REFERENCE))[:, None] < 0, -e1, e1)
        w: torch.Tensor = self.frame_vectors
        w = w - (w * e1).sum(-1, keepdim=True) * e1
        # a learned vector parallel to the motion: any vector orthogonal to it instead
        fallback = torch.linalg.cross(e1, e1.new_tensor([0.0, 0.0, 1.0]).expand_as(e1))
        other = torch.linalg.cross(e1, e1.new_tensor([0.0, 1.0, 0.0]).expand_as(e1))
        fallback = torch.where(fallback.norm(dim=-1, keepdim=True) > 1e-3, fallback, other)
        w = torch.where(w.norm(dim=-1, keepdim=True) > 1e-6, w, fallback)
        e2 = w / w.norm(dim=-1, keepdim=True)
        frame = torch.stack([e1, e2, torch.linalg.cross(e1, e2)], -1)  # columns
        eye = torch.eye(3, dtype=frame.dtype, device=frame.device).expand_as(frame)
        return torch.where(moving[:, None, None], frame, eye), moving

    def rotations(self, velocities: torch.Tensor) -> torch.Tensor:
        """Rotation matrices ``(n, 3, 3)``: with ``motion_aligned``, the quaternion's rotation expressed in
        the motion frame (``F(v) R(q)``) for moving dynamic Gaussians, so their shape turns with their
        direction of motion; the quaternion's rotation ``R(q)`` otherwise."""
        return self._rotations(self._check_velocities(velocities))

    def _rotations(self, velocities: torch.Tensor) -> torch.Tensor:
        R = quat_to_rotmat_unchecked(self.quats)
        if not self.motion_aligned:
            return R
        frames, moving = self._motion_frames(velocities)
        return R if not bool(moving.any()) else frames @ R

    def covariances(self, t: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(means (n, 3), sharp covariances (n, 3, 3), velocities (n, 3))`` at time ``t``."""
        return self._covariances(_check_time(t))

    def _covariances(self, t: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        means = self._positions(t)
        v = self._velocities(t)
        return means, covariance_from_rotation_unchecked(self._rotations(v), self.scales()), v

    def blur_covariances(
        self, t: float, exposure: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(means, Σ, Σ_blur = Σ + (T²/12)·v vᵀ)`` at time ``t`` for the exposure ``T`` (default: the model's)."""
        t = _check_time(t)
        if exposure is not None:
            exposure = check_number(exposure, "exposure", minimum=0, maximum=MAX_TIME)
        return self._blur_covariances(t, exposure)

    def _blur_covariances(
        self, t: float, exposure: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        T = self.exposure if exposure is None else exposure
        means, sigma, v = self._covariances(t)
        return means, sigma, sigma + (T * T / 12) * v[:, :, None] * v[:, None, :]

    # ------------------------------------------------------------------------------------------ render
    def render(
        self,
        viewmat: torch.Tensor,
        K: torch.Tensor,
        t: float,
        width: int,
        height: int,
        *,
        sharp: bool = False,
        background: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The frame ``(height, width, channels)`` seen by one camera (``viewmat (4, 4)``, ``K (3, 3)``) at
        time ``t``: blurred by the model's blur mode over its exposure, or the sharp frame with ``sharp=True``."""
        if not isinstance(sharp, bool):
            raise TypeError(f"sharp must be a bool, got {sharp!r}")
        t = _check_time(t)
        check_camera(viewmat, K)
        width = check_int(width, "width", 1, MAX_SIDE)
        height = check_int(height, "height", 1, MAX_SIDE)
        if background is not None:
            check_background(background, "background", self.channels, 1)
        return self._render(viewmat, K, t, width, height, sharp, background)

    def _render(
        self,
        viewmat: torch.Tensor,
        K: torch.Tensor,
        t: float,
        width: int,
        height: int,
        sharp: bool = False,
        background: torch.Tensor | None = None,
    ) -> torch.Tensor:
        mode = "none" if sharp or self.exposure == 0 else self.blur
        colors, opacities = self.colors(), self.opacities()
        vm, k = viewmat[None], K[None]

        def draw(means: torch.Tensor, covars: torch.Tensor, opac: torch.Tensor) -> torch.Tensor:
            try:
                image, _, _ = rasterization(
                    means,
                    None,
                    None,
                    opac,
                    colors,
                    vm,
                    k,
                    width,
                    height,
                    covars=covars,
                    backgrounds=background,
                )
            except (ValueError, TypeError) as err:  # the arguments are valid: the Gaussians seen are not
                raise ValueError(
                    f"the model's Gaussians at time t seen by viewmat and K cannot be rendered: {err}"
                ) from err
            return image[0]

        if mode == "none":
            means, sigma, _ = self._covariances(t)
            return draw(means, sigma, opacities)
        if mode == "kinematic":
            means, sigma, blurred = self._blur_covariances(t)
            _, sharp2d, _ = project_gaussians_unchecked(
                means, sigma, vm[0].to(means), k[0].to(means), width, height
            )
            _, blur2d, _ = project_gaussians_unchecked(
                means, blurred, vm[0].to(means), k[0].to(means), width, height
            )
            ratio = torch.linalg.det(sharp2d) / torch.linalg.det(blur2d)
            return draw(means, blurred, opacities * ratio.clamp(0, 1).sqrt())
        offsets = (torch.arange(self.subframes, dtype=torch.float64) + 0.5) / self.subframes - 0.5
        frames = []
        for dt in offsets.tolist():
            means, sigma, _ = self._covariances(t + dt * self.exposure)
            frames.append(draw(means, sigma, opacities))
        return torch.stack(frames).mean(0)

    # --------------------------------------------------------------------------------------- save/load
    def save(self, path: str | os.PathLike) -> Path:
        """Write the model into the folder ``path`` atomically (``config.json`` + ``model.safetensors``);
        returns the folder."""
        return save_module(path, self, self.config())

    @classmethod
    def load(cls, path: str | os.PathLike) -> KinematicsGS:
        """The model :meth:`save` wrote into ``path``, in eval mode."""
        return load_module(path, cls)
