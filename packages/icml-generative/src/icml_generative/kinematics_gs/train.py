"""Fitting :class:`~icml_generative.kinematics_gs.model.KinematicsGS` to a (blurry) monocular video.

Loss per step, on one frame drawn at random: ``(1 − λ)·L1 + λ·(1 − SSIM)`` (3DGS's photometric loss, λ =
``ssim_weight``) of the model's render in its blur mode against the observed frame, plus
``anisotropy_weight · mean(relu(max(s)/min(s) − anisotropy_max))`` on the sharp scales of the dynamic
Gaussians (the needles a no-blur model grows to explain blur are dynamic; a flat static backdrop is not
degenerate). Adam with one
learning rate per parameter group. Coarse to fine: the deformation uses its first frequency for the first
``coarse_fraction`` of the steps, then every frequency and the per-Gaussian coefficients. At ``split_at`` (a fraction of
the steps) Gaussians whose deformation variance over the training times is at most ``split_threshold`` become
static. With ``time_curriculum > 0`` the frames are drawn, over that fraction of the steps, from a window of
the earliest times that opens to all of them (motion larger than an object is then tracked frame to frame
instead of being searched for). The learning rates of the means and the deformation decay exponentially to ``position_lr_final`` of
their value over the run. Adaptive densification and pruning (3DGS's) are not part of this loop: the number of Gaussians is
fixed by the initial point cloud.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch

from icml_generative.cache.metrics import ssim_map
from icml_generative.kinematics_gs.model import MAX_TIME, KinematicsGS
from icml_generative.kinematics_gs.render import MAX_SIDE, check_background, check_cameras
from icml_generative.validation import check_instance, check_int, check_number, check_tensor


@dataclass
class TrainConfig:
    """Hyper-parameters of :func:`train_kinematics_gs` (learning rates per parameter group)."""

    steps: int = 1500
    lr_means: float = 2e-3
    lr_scales: float = 1e-2
    lr_quats: float = 1e-2
    lr_opacities: float = 5e-2
    lr_colors: float = 2e-2
    lr_motion: float = 2e-3
    lr_field: float = 3e-3
    ssim_weight: float = 0.2
    anisotropy_weight: float = 0.0
    anisotropy_max: float = 3.0
    position_lr_final: float = 0.01
    coarse_fraction: float = 0.5
    time_curriculum: float = 0.0
    split_at: float | None = None
    split_threshold: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        check_int(self.steps, "steps", 1, 10_000_000)
        for f in dataclasses.fields(self):
            if f.name.startswith("lr_"):
                check_number(getattr(self, f.name), f.name, minimum=0, maximum=10)
        check_number(self.ssim_weight, "ssim_weight", 0, 1)
        check_number(self.anisotropy_weight, "anisotropy_weight", minimum=0)
        check_number(self.anisotropy_max, "anisotropy_max", minimum=1)
        check_number(self.position_lr_final, "position_lr_final", above=0, maximum=1)
        check_number(self.coarse_fraction, "coarse_fraction", 0, 1)
        check_number(self.time_curriculum, "time_curriculum", 0, 1)
        if self.split_at is not None:
            check_number(self.split_at, "split_at", 0, 1)
        check_number(self.split_threshold, "split_threshold", minimum=0)
        check_int(self.seed, "seed", 0, 2**63 - 1)


@dataclass
class TrainLog:
    """Per-step loss, the dynamic mask after the split (None without one) and the wall time."""

    loss: list[float] = dataclasses.field(default_factory=list)
    dynamic: torch.Tensor | None = None
    seconds: float = 0.0


def check_video(
    images: torch.Tensor, viewmats: torch.Tensor, Ks: torch.Tensor, times: torch.Tensor, channels: int
) -> int:
    """Validate a video ``images (F, H, W, C)`` with per-frame cameras and times; returns ``F``."""
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(
            f"images must be a tensor (F, H, W, C) with F >= 1, got {getattr(images, 'shape', images)}"
        )
    f = images.shape[0]
    if images.shape[-1] != channels:
        raise ValueError(f"images must have the model's {channels} channels, got {images.shape[-1]}")
    for name, value, shape in (
        ("images", images, tuple(images.shape)),
        ("viewmats", viewmats, (f, 4, 4)),
        ("Ks", Ks, (f, 3, 3)),
        ("times", times, (f,)),
    ):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            raise ValueError(
                f"{name} must be a tensor {shape} (one per frame), got {getattr(value, 'shape', value)}"
            )
        if value.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite")
    if images.numel() == 0:
        raise ValueError(f"images must not be empty, got shape {tuple(images.shape)}")
    if bool((times.double().abs() > MAX_TIME).any()):
        raise ValueError(f"times must lie within ±{MAX_TIME:g}")
    check_cameras(viewmats, Ks, images)  # positive focal lengths
    return f


def photometric_loss(render: torch.Tensor, target: torch.Tensor, ssim_weight: float) -> torch.Tensor:
    """``(1 − λ)·L1 + λ·(1 − SSIM)`` of images ``(H, W, C)`` in ``[0, 1]`` (SSIM window 7, or the image's
    smaller side when that is smaller)."""
    check_tensor(render, "render", ("H", "W", "C"), floating=True, finite=True)
    check_tensor(target, "target", ("H", "W", "C"), floating=True, finite=True)
    if render.shape != target.shape or render.numel() == 0:
        raise ValueError(
            f"render and target must be non-empty images of the same shape (H, W, C), "
            f"got {tuple(render.shape)} and {tuple(target.shape)}"
        )
    if render.dtype != target.dtype:
        raise TypeError(f"render and target must have the same dtype, got {render.dtype} and {target.dtype}")
    ssim_weight = check_number(ssim_weight, "ssim_weight", 0, 1)
    loss = _photometric_loss(render, target, ssim_weight)
    if not bool(torch.isfinite(loss)):
        raise ValueError(
            f"render and target are too large for {render.dtype}: the loss overflows (expected [0, 1])"
        )
    return loss


def _photometric_loss(render: torch.Tensor, target: torch.Tensor, ssim_weight: float) -> torch.Tensor:
    l1 = (render - target).abs().mean()
    if ssim_weight == 0:
        return l1
    window = min(7, *render.shape[:2])
    s = ssim_map(render.permute(2, 0, 1), target.permute(2, 0, 1), 1.0, window=window).mean()
    return (1 - ssim_weight) * l1 + ssim_weight * (1 - s)


def train_kinematics_gs(
    model: KinematicsGS,
    images: torch.Tensor,
    viewmats: torch.Tensor,
    Ks: torch.Tensor,
    times: torch.Tensor,
    config: TrainConfig | None = None,
    *,
    background: torch.Tensor | None = None,
) -> TrainLog:
    """Fit ``model`` to the frames ``images (F, H, W, C)`` in ``[0, 1]`` seen by ``viewmats (F, 4, 4)``,
    ``Ks (F, 3, 3)`` at ``times (F,)`` (each frame exposed for the model's ``exposure``); see the module.
    Leaves the model in eval mode."""
    check_instance(model, "model", KinematicsGS)
    cfg = TrainConfig() if config is None else check_instance(config, "config", TrainConfig)
    dataclasses.replace(cfg)  # __post_init__'s checks, also for a config edited after construction
    n_frames = check_video(images, viewmats, Ks, times, model.channels)
    if background is not None:
        check_background(background, "background", model.channels, 1)
    height, width = images.shape[1:3]
    height, width = (
        check_int(height, "images' height", 1, MAX_SIDE),
        check_int(width, "images' width", 1, MAX_SIDE),
    )
    dtype = model.means.dtype
    images, viewmats, Ks = images.to(dtype), viewmats.to(dtype), Ks.to(dtype)
    groups = [
        {"params": [model.means], "lr": cfg.lr_means},
        {"params": [model.log_scales], "lr": cfg.lr_scales},
        {"params": [model.quats, model.frame_vectors], "lr": cfg.lr_quats},
        {"params": [model.opacity_logits], "lr": cfg.lr_opacities},
        {"params": [model.color_logits], "lr": cfg.lr_colors},
        {"params": [model.coefficients], "lr": cfg.lr_motion},
    ]
    if model.field is not None:
        groups.append({"params": list(model.field.parameters()), "lr": cfg.lr_field})
    opt = torch.optim.Adam(groups, eps=1e-15)
    # the position-like groups (means, motion, field) decay exponentially to position_lr_final times their
    # rate, as 3DGS's position learning rate does; the others stay constant
    decaying = {0, 5, 6}
    base = [g["lr"] for g in opt.param_groups]
    gen = torch.Generator().manual_seed(cfg.seed)
    # the frame of each step: uniform over the frames whose time lies in the window that the curriculum
    # opens (from the earliest time to all of them over the first time_curriculum of the steps)
    rank = torch.argsort(torch.argsort(times, stable=True), stable=True)  # each frame's place in time order
    draws = torch.rand(cfg.steps, generator=gen, dtype=torch.float64)
    order = []
    for step in range(cfg.steps):
        opened = 1.0 if cfg.time_curriculum == 0 else min(1.0, (step + 1) / (cfg.time_curriculum * cfg.steps))
        window = max(1, math.ceil(opened * n_frames))
        order.append(int(torch.nonzero(rank == int(draws[step] * window))[0]))
    coarse_steps = round(cfg.coarse_fraction * cfg.steps)
    split_step = None if cfg.split_at is None else round(cfg.split_at * cfg.steps)
    log = TrainLog()
    start = time.perf_counter()
    model.stage.fill_(1)
    model.train()
    try:
        for step, f in enumerate(order):
            progress = step / max(cfg.steps - 1, 1)
            for i, group in enumerate(opt.param_groups):
                group["lr"] = base[i] * (cfg.position_lr_final**progress if i in decaying else 1.0)
            if step == coarse_steps:
                model.stage.fill_(2)
            if step == split_step:
                log.dynamic = model.split_static_dynamic(times, cfg.split_threshold)
            try:  # the arguments are checked above: the unchecked render
                render = model._render(
                    viewmats[f], Ks[f], float(times[f]), width, height, background=background
                )
            except ValueError as err:  # the model (or a frame's camera) is out of range
                raise ValueError(
                    f"step {step}: frame {f} (viewmats, Ks, times) cannot be rendered: {err}"
                ) from err
            loss = _photometric_loss(render, images[f], cfg.ssim_weight)
            if cfg.anisotropy_weight > 0:
                excess = (model.anisotropy() - cfg.anisotropy_max).relu() * model.dynamic
                loss = loss + cfg.anisotropy_weight * excess.sum() / model.dynamic.sum().clamp_min(1)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise ValueError(
                    f"step {step}: the loss is {value} on frame {f}: images must lie in [0, 1] and the learning "
                    "rates of config must keep the fit stable"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            log.loss.append(value)
    finally:
        model.eval()
    if coarse_steps >= cfg.steps:
        model.stage.fill_(1)
    log.seconds = time.perf_counter() - start
    return log
