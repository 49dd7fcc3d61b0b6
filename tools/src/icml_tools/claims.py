"""Statistics the reproductions' criteria share (GUIDE "Claims")."""

from __future__ import annotations

import numpy as np


def paired_bootstrap_interval(
    diff, resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> list[float]:
    """The percentile bootstrap interval of the mean of paired differences ``diff`` (one per seed, world or
    episode): ``resamples`` resamples with replacement from a generator seeded by ``seed``."""
    d = np.asarray(diff, dtype=float)
    if d.ndim != 1 or d.size == 0 or not np.isfinite(d).all():
        raise ValueError(f"diff must be a non-empty 1-D array of finite numbers, got shape {d.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, (resamples, d.size))].mean(1)
    tail = round((1 - level) * 50, 12)  # 2.5 exactly for level 0.95
    return [float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))]


def nested_bootstrap_interval(
    diff, resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> list[float]:
    """The percentile bootstrap interval of the mean of paired differences laid out ``(seeds, items)``,
    resampling at both levels: ``seeds`` with replacement, then, within each drawn seed, its items with
    replacement (the same items for every method: the differences are paired per item)."""
    d = np.asarray(diff, dtype=float)
    if d.ndim != 2 or d.size == 0 or not np.isfinite(d).all():
        raise ValueError(
            f"diff must be a non-empty 2-D array (seeds, items) of finite numbers, got shape {d.shape}"
        )
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    rng = np.random.default_rng(seed)
    n_s, n_i = d.shape
    means = np.empty(resamples)
    for r in range(resamples):
        seeds = np.asarray(rng.integers(n_s, size=n_s))
        items = np.asarray(rng.integers(n_i, size=(n_s, n_i)))
        means[r] = d[seeds[:, None], items].mean()
    tail = round((1 - level) * 50, 12)
    return [float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))]
