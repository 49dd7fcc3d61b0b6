"""The three input modalities of a series and the robustness transforms.

- :func:`serialize` — numeric text (``"0.12, -0.53, nan, ..."``), what a language model reads;
- :func:`render_plot` — a line plot as a ``uint8`` grayscale image (drawn with Pillow: white line on black,
  min–max scaled, gaps at missing values), what a vision model reads;
- the raw array itself.

:func:`perturb` applies one transform at a severity in ``[0, 1]`` (0 is the identity, bit for bit):
``noise`` (Gaussian, std ``severity`` × the series' std), ``missing`` (a fraction ``0.8 × severity`` of the
steps set to NaN), ``downsample`` (keep every ``1 + round(7 × severity)``-th step), ``scale`` (multiply by
``1 + 4 × severity`` and add ``5 × severity`` series stds), ``truncate`` (drop the last ``0.5 × severity`` of
the steps). The severity scales are ours; BEDTime's robustness tests use the same five kinds.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from icml_agents.validation import check_choice, check_int, check_real, check_seed

TRANSFORMS = ("noise", "missing", "downsample", "scale", "truncate")
MAX_SIDE = 4096


def _series(x: object, name: str = "x", allow_nan: bool = True) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D array of numbers, got {type(x).__name__}") from None
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a 1-D series of at least 2 steps, got shape {arr.shape}")
    if np.isinf(arr).any() or (not allow_nan and np.isnan(arr).any()):
        raise ValueError(f"{name} must be finite{'' if not allow_nan else ' (NaN marks a missing value)'}")
    if np.isnan(arr).all():
        raise ValueError(f"{name} has no observed value (all NaN)")
    return arr


def serialize(x: object, decimals: int = 2) -> str:
    """The series as comma-separated numbers with ``decimals`` decimals; missing values as ``nan``."""
    arr = _series(x)
    check_int(decimals, "decimals", 0, 12)
    return ", ".join("nan" if math.isnan(v) else f"{v:.{decimals}f}" for v in arr)


def render_plot(x: object, height: int = 32, width: int = 96, line_width: int = 1) -> np.ndarray:
    """A line plot of the series as a ``(height, width)`` ``uint8`` image (white on black)."""
    arr = _series(x)
    check_int(height, "height", 8, MAX_SIDE)
    check_int(width, "width", 8, MAX_SIDE)
    check_int(line_width, "line_width", 1, 16)
    lo, hi = np.nanmin(arr), np.nanmax(arr)
    span = hi - lo if hi > lo else 1.0
    xs = np.linspace(0, width - 1, arr.size)
    ys = (height - 1) - (arr - lo) / span * (height - 1)
    image = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(image)
    segment: list[tuple[float, float]] = []
    for px, py in zip(xs, ys, strict=True):
        if math.isnan(py):
            if len(segment) > 1:
                draw.line(segment, fill=255, width=line_width)
            segment = []
        else:
            segment.append((float(px), float(py)))
    if len(segment) > 1:
        draw.line(segment, fill=255, width=line_width)
    elif len(segment) == 1:
        draw.point(segment, fill=255)
    return np.asarray(image, dtype=np.uint8)


def perturb(x: object, transform: str, severity: float, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``x`` under ``transform`` at ``severity`` in ``[0, 1]`` (module docstring); severity 0 returns a copy."""
    arr = _series(x)
    check_choice(transform, "transform", TRANSFORMS)
    severity = check_real(severity, "severity", "[0, 1]")
    rng = check_seed(seed)
    if severity == 0.0:
        return arr.copy()
    std = float(np.nanstd(arr)) or 1.0
    if transform == "noise":
        return arr + severity * std * rng.standard_normal(arr.size)
    if transform == "missing":
        out = arr.copy()
        hide = rng.permutation(arr.size)[: round(0.8 * severity * arr.size)]
        out[hide] = np.nan
        if np.isnan(out).all():
            out[hide[0]] = arr[hide[0]]
        return out
    if transform == "downsample":
        return arr[:: 1 + round(7 * severity)].copy()
    if transform == "scale":
        return arr * (1 + 4 * severity) + 5 * severity * std
    keep = max(2, round(arr.size * (1 - 0.5 * severity)))
    return arr[:keep].copy()
