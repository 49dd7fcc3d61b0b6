"""Procedural equirectangular panoramas for the watermark reproduction (RGB in [0, 1], shape (H, 2H, 3)).

Each panorama is a function on the sphere sampled at the pixel centres (see
:mod:`icml_generative.watermark.sphere`), so a rotated copy is the same scene, not an artefact of the
projection:

* a sky-to-ground gradient along z with a soft horizon and a random tint per half;
* smooth texture: a sum of 24 random plane waves ``cos(k . x + phase)`` restricted to the unit sphere,
  wave numbers ``|k|`` in [1, 8] (features from a hemisphere down to about 20 degrees);
* 6-14 "sprites": spherical caps (angular radius 4-20 degrees) with a soft 1-degree edge, a flat random
  colour and an opacity in [0.5, 1] (the sharp content a planar codec sees).
"""

from __future__ import annotations

import numpy as np

from icml_generative.watermark.sphere import equirect_grid


def unit_vectors(height: int) -> np.ndarray:
    """Pixel-centre directions ``(H, 2H, 3)`` (z up)."""
    theta, phi = equirect_grid(height)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    return np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], axis=-1)


def panorama(height: int = 128, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = unit_vectors(height)  # (H, W, 3)
    z = x[..., 2:3]
    horizon = 1.0 / (1.0 + np.exp(-z / 0.08))  # 1 in the sky, 0 on the ground
    sky, ground = rng.uniform(0.45, 0.9, 3), rng.uniform(0.1, 0.5, 3)
    image = horizon * (sky + 0.1 * z) + (1.0 - horizon) * ground
    k = rng.normal(size=(24, 3))
    k *= rng.uniform(1.0, 8.0, (24, 1)) / np.linalg.norm(k, axis=1, keepdims=True)
    waves = np.cos(x @ k.T + rng.uniform(0, 2 * np.pi, 24))  # (H, W, 24)
    image = image + 0.06 * waves @ rng.normal(size=(24, 3)) / np.sqrt(24)
    for _ in range(rng.integers(6, 15)):
        centre = rng.normal(size=3)
        centre /= np.linalg.norm(centre)
        radius = np.deg2rad(rng.uniform(4.0, 20.0))
        angle = np.arccos(np.clip(x @ centre, -1.0, 1.0))
        inside = 1.0 / (1.0 + np.exp((angle - radius) / np.deg2rad(1.0)))[..., None]
        image = image + rng.uniform(0.5, 1.0) * inside * (rng.uniform(0, 1, 3) - image)
    return np.clip(image, 0.0, 1.0)
