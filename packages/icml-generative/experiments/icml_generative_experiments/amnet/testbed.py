"""Low-light clips cut from scikit-image's bundled photographs, their synthetic events and infrared, and the
training loop of the ``amnet-any-modality`` reproduction.

A clip (``FRAMES`` frames of ``SIZE`` × ``SIZE``) is a window moving smoothly over one photograph (scaled so
its short side is ``SCALE_SIDE`` px): a constant velocity of up to ``CAMERA_SPEED`` px per frame plus a
sinusoidal wobble, and a slow zoom (±``ZOOM`` over the clip); over it, ``1–2`` sprites (soft-edged ellipses,
radius 4–9 px, a random colour modulated by a stripe texture) moving at up to ``SPRITE_SPEED`` px per frame.
Then, from the clean clip:

* the low-light input: :func:`~icml_generative.amnet.low_light` with an exposure drawn from ``EXPOSURE``,
  ``PHOTONS`` photons at full scale, read noise ``READ_NOISE``, 8 bits;
* events: :func:`~icml_generative.amnet.simulate_events` (threshold drawn from ``THRESHOLD``, refractory
  ``REFRACTORY``, 4 sub-steps) as voxel grids of ``BINS`` bins per frame interval;
* infrared: :func:`~icml_generative.amnet.infrared_proxy` with the sprites hot (emissivity 0.7–1) over a
  smooth random background emissivity (0–0.4), weight 0.5, blur σ 1.5, half resolution, noise 0.01.

Training clips come from ``TRAIN_IMAGES``, held-out clips from ``HELDOUT_IMAGES`` (other photographs). Clip
``i`` of a split comes from ``numpy.random.default_rng((split, seed, i))``: the same clip on every machine.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from icml_generative.amnet import (
    AMNet,
    amnet_loss,
    event_voxels,
    frame_windows,
    infrared_proxy,
    low_light,
    simulate_events,
)

FRAMES = 8
SIZE = 48
SCALE_SIDE = 144
CAMERA_SPEED = 2.0
ZOOM = 0.1
SPRITE_SPEED = 2.5
EXPOSURE = (0.02, 0.08)
PHOTONS = 2000.0
READ_NOISE = 0.002
THRESHOLD = (0.15, 0.3)
REFRACTORY = 0.0
BINS = 5
TRAIN_IMAGES = ("astronaut", "rocket", "hubble_deep_field", "immunohistochemistry", "motorcycle", "retina")
HELDOUT_IMAGES = ("chelsea", "coffee")
SPLITS = {"train": 0, "heldout": 1}


@functools.cache
def photograph(name: str) -> np.ndarray:
    """A bundled scikit-image photograph as float32 ``(3, H, W)`` in [0, 1], short side ``SCALE_SIDE``."""
    from skimage import data, transform

    image = data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(data, name)()
    image = image[..., :3].astype(np.float32) / 255.0
    scale = SCALE_SIDE / min(image.shape[:2])
    image = transform.rescale(image, scale, channel_axis=-1, anti_aliasing=True)
    return np.ascontiguousarray(image.transpose(2, 0, 1), dtype=np.float32)


def _camera(image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """``FRAMES`` crops ``(T, 3, SIZE, SIZE)`` along a smooth camera path (bilinear sampling)."""
    _, h, w = image.shape
    t = np.arange(FRAMES)
    speed = rng.uniform(0, CAMERA_SPEED)
    angle = rng.uniform(0, 2 * math.pi)
    wobble = rng.uniform(0, 1.0, 2)
    phase = rng.uniform(0, 2 * math.pi, 2)
    zoom = 1 + rng.uniform(-ZOOM, ZOOM) * t / (FRAMES - 1)
    margin = SIZE * (1 + ZOOM) / 2 + CAMERA_SPEED * FRAMES + 2
    cx0 = rng.uniform(margin, w - margin)
    cy0 = rng.uniform(margin, h - margin)
    cx = cx0 + speed * math.cos(angle) * (t - FRAMES / 2) + wobble[0] * np.sin(0.8 * t + phase[0])
    cy = cy0 + speed * math.sin(angle) * (t - FRAMES / 2) + wobble[1] * np.sin(0.8 * t + phase[1])
    # affine grids in normalized coordinates (align_corners=False)
    theta = np.zeros((FRAMES, 2, 3), dtype=np.float32)
    theta[:, 0, 0] = SIZE * zoom / w
    theta[:, 1, 1] = SIZE * zoom / h
    theta[:, 0, 2] = 2 * cx / w - 1
    theta[:, 1, 2] = 2 * cy / h - 1
    grid = F.affine_grid(torch.from_numpy(theta), [FRAMES, 3, SIZE, SIZE], align_corners=False)
    return F.grid_sample(image.expand(FRAMES, -1, -1, -1), grid, mode="bilinear", align_corners=False)


def _sprites(clip: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Paint 1–2 moving sprites; returns the clip and the sprites' emissivity ``(T, 1, SIZE, SIZE)``."""
    yy, xx = torch.meshgrid(
        torch.arange(SIZE, dtype=torch.float32), torch.arange(SIZE, dtype=torch.float32), indexing="ij"
    )
    hot = torch.zeros(FRAMES, 1, SIZE, SIZE)
    for _ in range(rng.integers(1, 3)):
        ry, rx = rng.uniform(4, 9, 2)
        rot = rng.uniform(0, math.pi)
        y0, x0 = rng.uniform(8, SIZE - 8, 2)
        vy, vx = rng.uniform(-SPRITE_SPEED, SPRITE_SPEED, 2)
        colour = torch.tensor(rng.uniform(0.05, 1.0, 3), dtype=torch.float32).view(3, 1, 1)
        period, stripe_angle = rng.uniform(3, 8), rng.uniform(0, math.pi)
        emissivity = rng.uniform(0.7, 1.0)
        for k in range(FRAMES):
            dy, dx = yy - (y0 + vy * k), xx - (x0 + vx * k)
            u = dx * math.cos(rot) + dy * math.sin(rot)
            v = -dx * math.sin(rot) + dy * math.cos(rot)
            r = torch.sqrt((u / rx) ** 2 + (v / ry) ** 2)
            mask = (1 - r).mul(max(rx, ry)).clamp(0, 1)  # a one-pixel soft edge
            stripes = 0.75 + 0.25 * torch.sin(
                2 * math.pi * (u * math.cos(stripe_angle) + v * math.sin(stripe_angle)) / period
            )
            clip[k] = clip[k] * (1 - mask) + colour * stripes * mask
            hot[k, 0] = torch.maximum(hot[k, 0], emissivity * mask)
    return clip, hot


def _background_emissivity(rng: np.random.Generator) -> torch.Tensor:
    """A smooth random field in [0, 0.4]: bilinear upsampling of a 4 × 4 grid of uniform values."""
    coarse = torch.tensor(rng.uniform(0, 0.4, (1, 1, 4, 4)), dtype=torch.float32)
    return F.interpolate(coarse, size=(SIZE, SIZE), mode="bilinear", align_corners=True)[0]


def make_clip(split: str, seed: int, index: int) -> dict[str, torch.Tensor]:
    """Clip ``index`` of ``split``: ``clean`` and ``low`` ``(T, 3, S, S)``, ``events`` ``(T, BINS, S, S)``,
    ``infrared`` ``(T, 1, S, S)``."""
    rng = np.random.default_rng((SPLITS[split], seed, index))
    names = TRAIN_IMAGES if split == "train" else HELDOUT_IMAGES
    image = torch.from_numpy(photograph(names[int(rng.integers(len(names)))]))
    clean, sprites_hot = _sprites(_camera(image, rng).clamp(0, 1), rng)
    clean = clean.clamp(0, 1)
    emissivity = torch.maximum(sprites_hot, _background_emissivity(rng).expand(FRAMES, 1, SIZE, SIZE))
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    low = low_light(
        clean, exposure=rng.uniform(*EXPOSURE), photons=PHOTONS, read_noise=READ_NOISE, generator=gen
    )
    events = simulate_events(clean, threshold=rng.uniform(*THRESHOLD), refractory=REFRACTORY)
    voxels = event_voxels(events, FRAMES, SIZE, SIZE, bins=BINS)
    infrared = infrared_proxy(clean, emissivity, noise=0.01, generator=gen)
    return {"clean": clean, "low": low, "events": voxels, "infrared": infrared}


def clips(split: str, seed: int, count: int) -> dict[str, torch.Tensor]:
    """``count`` clips of ``split`` stacked: each entry ``(count, T, C, S, S)``."""
    made = [make_clip(split, seed, i) for i in range(count)]
    return {k: torch.stack([c[k] for c in made]) for k in made[0]}


def windows(data: dict[str, torch.Tensor], window: int = 3) -> dict[str, torch.Tensor]:
    """Every frame's window: ``low``/``events``/``infrared`` ``(N·T, window, C, S, S)`` and the clean centre
    frames ``clean`` ``(N·T, 3, S, S)``."""
    out = {k: torch.cat([frame_windows(c, window) for c in data[k]]) for k in ("low", "events", "infrared")}
    out["clean"] = data["clean"].flatten(0, 1)
    return out


def train(
    model: AMNet,
    data: dict[str, torch.Tensor],
    steps: int,
    seed: int,
    *,
    dropout: float,
    batch: int = 16,
    lr: float = 2e-3,
    align_weight: float = 0.1,
) -> dict[str, Any]:
    """Adam with a cosine decay, gradient clipping at 1, ``batch`` random windows per step (fixed seed). Feeds
    every modality the model accepts (each dropped per sample with probability ``dropout``)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    n = data["low"].shape[0]
    start = time.perf_counter()
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(n, (batch,), generator=gen)
        aux = {m: data[m][idx] if m in model.modalities else None for m in ("events", "infrared")}
        out = amnet_loss(
            model,
            data["low"][idx],
            data["clean"][idx],
            aux["events"],
            aux["infrared"],
            dropout=dropout,
            align_weight=align_weight,
            generator=gen,
        )
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(out.loss.item())
    model.eval()
    return {"seconds": time.perf_counter() - start, "final_loss": float(np.mean(losses[-20:]))}
