"""Synthetic blurry monocular videos with a known sharp truth (the testbed of ``kinematics-gs-blur``; ours).

A scene is a set of 3-D Gaussians: a static textured backdrop (a grid of flat Gaussians on the plane
``z = 1.5``), a few static blobs in front of it, and ``movers`` objects (clusters of Gaussians) that move
rigidly along ``c(t) = c₀ + A·d·sin(2π(t + φ))`` in a plane facing the camera. A pinhole camera looks at the
scene from ``z ≈ −3`` and drifts slowly sideways (monocular video). Frames are taken at ``t_f = f / F``; the
sharp frame renders the scene at ``t_f``; the blurry frame is the average of ``subframes`` sharp renders over
the exposure ``[t_f − T/2, t_f + T/2]`` (the camera held at its ``t_f`` pose: its drift over one exposure is
under a pixel). Every third frame from the second on is held out (not used for training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from icml_generative.kinematics_gs.render import intrinsics, look_at, quat_scale_to_covar, rasterization


@dataclass
class Scene:
    """The truth: canonical Gaussians, their motion and the cameras."""

    means: torch.Tensor  # (n, 3) at t = 0
    quats: torch.Tensor  # (n, 4)
    scales: torch.Tensor  # (n, 3)
    opacities: torch.Tensor  # (n,)
    colors: torch.Tensor  # (n, 3)
    mover: torch.Tensor  # (n,) long: the moving object a Gaussian belongs to, -1 for static
    amplitude: torch.Tensor  # (movers, 3): A·d per object
    phase: torch.Tensor  # (movers,)
    width: int
    height: int
    fov: float

    def positions(self, t: float) -> torch.Tensor:
        """Means ``(n, 3)`` at time ``t``."""
        shift = (
            self.amplitude
            * (torch.sin(2 * math.pi * (t + self.phase)) - torch.sin(2 * math.pi * self.phase))[:, None]
        )
        out = self.means.clone()
        moving = self.mover >= 0
        out[moving] += shift[self.mover[moving]]
        return out

    def motion_coefficients(self, frequencies: int) -> torch.Tensor:
        """The true motion as :class:`~icml_generative.kinematics_gs.KinematicsGS` coefficients ``(n,
        2·frequencies, 3)``: ``A d (sin 2π(t + φ) − sin 2πφ) = A d (cos 2πφ · sin 2πt + sin 2πφ · (cos 2πt − 1))``."""
        out = torch.zeros(len(self.means), 2 * frequencies, 3)
        moving = self.mover >= 0
        obj = self.mover[moving]
        out[moving, 0] = self.amplitude[obj] * torch.cos(2 * math.pi * self.phase[obj])[:, None]
        out[moving, frequencies] = self.amplitude[obj] * torch.sin(2 * math.pi * self.phase[obj])[:, None]
        return out

    def camera(self, t: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(viewmat (4, 4), K (3, 3))`` at time ``t`` (float32)."""
        eye = (-0.3 + 0.6 * t, 0.1 - 0.2 * t, -3.0)
        return look_at(eye, (0.0, 0.0, 0.5)).float(), intrinsics(self.width, self.height, self.fov).float()

    def render(self, t: float, camera_time: float | None = None) -> torch.Tensor:
        """The sharp frame ``(H, W, 3)`` at time ``t`` (camera at ``camera_time``, default ``t``)."""
        viewmat, K = self.camera(t if camera_time is None else camera_time)
        covars = quat_scale_to_covar(self.quats, self.scales)
        image, _, _ = rasterization(
            self.positions(t), None, None, self.opacities, self.colors, viewmat[None], K[None], self.width,
            self.height, covars=covars,
        )  # fmt: skip
        return image[0]


def make_scene(seed: int, *, movers: int = 2, size: int = 48, fov: float = 45.0) -> Scene:
    """A random scene (see the module); ``size``: image width and height in pixels."""
    rng = np.random.default_rng(seed)
    parts: list[dict[str, np.ndarray]] = []

    def add(means, scales, colors, mover):
        k = len(means)
        q = rng.normal(size=(k, 4))
        parts.append(
            {
                "means": np.asarray(means, float),
                "quats": q / np.linalg.norm(q, axis=1, keepdims=True),
                "scales": np.asarray(scales, float),
                "opacities": np.full(k, 0.95),
                "colors": np.asarray(colors, float),
                "mover": np.full(k, mover),
            }
        )

    # backdrop: an 8 x 8 grid of flat Gaussians with a smooth random texture
    g = np.linspace(-2.1, 2.1, 8)
    xx, yy = np.meshgrid(g, g)
    grid = np.stack([xx.ravel(), yy.ravel(), np.full(64, 1.5)], 1)
    base = rng.uniform(0.2, 0.8, size=3)
    tex = np.clip(
        base + 0.25 * np.sin(grid[:, :1] * rng.uniform(1, 2, 3) + grid[:, 1:2] * rng.uniform(1, 2, 3)),
        0.05,
        0.95,
    )
    add(grid, np.tile([0.36, 0.36, 0.05], (64, 1)), tex, -1)
    parts[-1]["quats"] = np.tile([1.0, 0.0, 0.0, 0.0], (64, 1))
    # two static blobs in front of the backdrop
    for _ in range(2):
        centre = np.array([rng.uniform(-1.2, 1.2), rng.uniform(-1.2, 1.2), 0.8])
        add(
            centre + rng.normal(0, 0.12, (4, 3)),
            rng.uniform(0.08, 0.16, (4, 3)),
            np.tile(rng.uniform(0.1, 0.9, 3), (4, 1)),
            -1,
        )
    # moving objects
    amplitude, phase = [], []
    for m in range(movers):
        side = -0.4 + 0.8 * m / max(movers - 1, 1)  # movers spread across the view, apart from each other
        centre = np.array(
            [side + rng.uniform(-0.05, 0.05), rng.uniform(-0.1, 0.1), -1.0 + rng.uniform(-0.1, 0.1)]
        )
        # a textured object: a bright body (6 broad Gaussians) with 40 small dark or contrasting spots in front
        body = rng.uniform(0.55, 0.95, 3)
        add(
            centre + rng.normal(0, 0.1, (6, 3)) * [1, 1, 0.2],
            rng.uniform(0.1, 0.15, (6, 3)) * [1, 1, 0.3],
            np.tile(body, (6, 1)),
            m,
        )
        spots = np.clip(
            np.where(rng.random((40, 1)) < 0.5, 1 - body, 0.2 * body) + rng.normal(0, 0.05, (40, 3)), 0, 1
        )
        add(
            centre + rng.normal(0, 0.13, (40, 3)) * [1, 1, 0.1] - [0, 0, 0.07],
            rng.uniform(0.017, 0.03, (40, 3)),
            spots,
            m,
        )
        angle = math.pi / 2 + rng.uniform(-math.pi / 8, math.pi / 8)  # mostly up and down: it stays in view
        amplitude.append(rng.uniform(0.35, 0.45) * np.array([math.cos(angle), math.sin(angle), 0.0]))
        phase.append(rng.uniform(0, 1))
    cat = {k: torch.tensor(np.concatenate([p[k] for p in parts]), dtype=torch.float32) for k in parts[0]}
    return Scene(
        means=cat["means"], quats=cat["quats"], scales=cat["scales"], opacities=cat["opacities"],
        colors=cat["colors"], mover=cat["mover"].long(), amplitude=torch.tensor(np.array(amplitude), dtype=torch.float32),
        phase=torch.tensor(phase, dtype=torch.float32), width=size, height=size, fov=fov,
    )  # fmt: skip


@dataclass
class Video:
    """Frames of a scene: sharp truth, blurry observations, cameras, times, and which are held out."""

    sharp: torch.Tensor  # (F, H, W, 3)
    blurry: torch.Tensor  # (F, H, W, 3)
    viewmats: torch.Tensor  # (F, 4, 4)
    Ks: torch.Tensor  # (F, 3, 3)
    times: torch.Tensor  # (F,)
    held_out: torch.Tensor  # (F,) bool
    exposure: float


def make_video(
    scene: Scene, *, frames: int = 10, exposure: float | None = None, subframes: int = 16
) -> Video:
    """``frames`` frames at ``t_f = f / frames``; exposure ``T`` (default one frame interval, ``1/frames``)."""
    T = 1.0 / frames if exposure is None else float(exposure)
    times = torch.arange(frames, dtype=torch.float32) / frames
    sharp, blurry, views, Ks = [], [], [], []
    with torch.no_grad():
        for t in times.tolist():
            sharp.append(scene.render(t))
            offsets = (np.arange(subframes) + 0.5) / subframes - 0.5
            blurry.append(torch.stack([scene.render(t + T * o, camera_time=t) for o in offsets]).mean(0))
            v, k = scene.camera(t)
            views.append(v)
            Ks.append(k)
    held = torch.tensor([f % 3 == 1 for f in range(frames)])
    return Video(
        sharp=torch.stack(sharp), blurry=torch.stack(blurry), viewmats=torch.stack(views), Ks=torch.stack(Ks),
        times=times, held_out=held, exposure=T,
    )  # fmt: skip
