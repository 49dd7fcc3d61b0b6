"""Synthetic modalities from clean frames: low-light degradation, DVS events and a thermal-infrared proxy.

AMNet pretrains on RGB-only data with *synthetic* auxiliary modalities; these simulators make them. All work
on clips ``(T, C, H, W)`` (``C`` = 3 for RGB, 1 for a grey clip) of floats in ``[0, 1]``; event times are in
frame intervals (frame ``k`` is at time ``k``).

- :func:`low_light`: ``y = Poisson(photons · exposure · x^gamma) / photons + N(0, read_noise²)``, then
  quantization to ``bits`` and clipping to ``[0, 1]``. Before quantization and clipping its mean is
  ``exposure · x^gamma`` and its variance ``exposure · x^gamma / photons + read_noise²`` (shot + read noise);
  uniform quantization adds about ``q² / 12`` with ``q = 1 / (2^bits − 1)``.
- :func:`simulate_events`: a v2e-style DVS model. Each pixel compares its log intensity ``L = log(Y + eps)``
  (``Y`` the Rec. 601 luminance) with a reference level; the intensity between frames is interpolated
  linearly at ``upsample`` sub-steps, and each crossing of ``reference ± threshold`` gives an event of
  polarity ±1 at the linearly interpolated crossing time, and moves the reference by ``± threshold``. A
  crossing within ``refractory`` of the pixel's previous *emitted* event is dropped (the reference still
  moves: the change is lost, as for a pixel in reset). On a monotone ramp a pixel with ``refractory = 0``
  emits ``⌊ΔL / threshold⌋`` events.
- :func:`event_voxels`: events to the usual voxel grid (Zhu et al. 2019): per frame interval ``(k − 1, k]``,
  ``bins`` temporal bins, each event's polarity split linearly between its two nearest bins.
- :func:`infrared_proxy`: a thermal look: ``(1 − weight) · luminance + weight · emissivity``, Gaussian blur,
  ``downsample``-fold lower resolution then bilinear upsampling, optional sensor noise.

The forms follow the simulators the research notes describe (v2e for events); the infrared proxy is our
design, not a physical model.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from icml_generative.validation import check_int, check_number, check_tensor, random_device

LUMA = (0.299, 0.587, 0.114)  # Rec. 601
MAX_UPSAMPLE = 256
MAX_BINS = 256
MAX_BITS = 16
# the loop runs once per crossing: a threshold below this makes millions of rounds (DVS thresholds are ~0.1-0.5)
MIN_THRESHOLD = 0.01


class Events(NamedTuple):
    """DVS events sorted by time: ``t`` (float64, frame intervals), pixel ``x`` (column) and ``y`` (row),
    ``polarity`` (+1 brighter, −1 darker); all 1-D of one length."""

    t: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    polarity: torch.Tensor


def _check_clip(frames: Any, name: str = "frames", channels: tuple[int, ...] = (1, 3)) -> torch.Tensor:
    check_tensor(frames, name, floating=True, finite=True)
    if frames.ndim != 4 or frames.shape[1] not in channels or frames.numel() == 0:
        raise ValueError(
            f"{name} must be a non-empty clip shaped (T, C, H, W) with C in {channels}, got {tuple(frames.shape)}"
        )
    return frames


def luminance(frames: torch.Tensor) -> torch.Tensor:
    """Rec. 601 luminance ``(T, 1, H, W)`` of a clip ``(T, 3, H, W)`` (a grey clip ``(T, 1, H, W)`` is returned
    as it is)."""
    _check_clip(frames)
    if frames.shape[1] == 1:
        return frames
    w = torch.tensor(LUMA, dtype=frames.dtype, device=frames.device).view(1, 3, 1, 1)
    return (frames * w).sum(1, keepdim=True)


def low_light(
    frames: torch.Tensor,
    *,
    exposure: float = 0.1,
    gamma: float = 2.2,
    photons: float = 1000.0,
    read_noise: float = 0.002,
    bits: int | None = 8,
    clip: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A low-light capture of ``frames`` (a clip or any tensor of values in ``[0, 1]``).

    ``exposure`` scales the linearized signal ``x^gamma`` (the gamma undoes the display encoding);
    ``photons`` is the photon count at full scale (shot noise), ``read_noise`` the read-noise std in full-scale
    units; ``bits`` quantizes (None: no quantization); ``clip`` clips to ``[0, 1]``. The result has the dtype
    of ``frames``; the mean and variance before quantization are in the module docstring.
    """
    check_tensor(frames, "frames", floating=True, finite=True)
    if frames.numel() and (frames.min() < 0 or frames.max() > 1):
        raise ValueError("frames must hold values in [0, 1]")
    exposure = check_number(exposure, "exposure", above=0, maximum=1)
    gamma = check_number(gamma, "gamma", above=0, maximum=10)
    photons = check_number(photons, "photons", above=0, maximum=1e9)
    read_noise = check_number(read_noise, "read_noise", minimum=0, maximum=1)
    if bits is not None:
        bits = check_int(bits, "bits", 1, MAX_BITS)
    if not isinstance(clip, bool):
        raise TypeError(f"clip must be a bool, got {type(clip).__name__}")
    signal = exposure * frames.double() ** gamma
    draw = random_device(generator, signal.device)
    y = torch.poisson((signal * photons).to(draw), generator=generator).to(signal.device) / photons
    if read_noise:
        y = y + read_noise * torch.randn(y.shape, generator=generator, dtype=y.dtype, device=draw).to(
            y.device
        )
    if bits is not None:
        levels = 2**bits - 1
        y = torch.round(y * levels) / levels
    if clip:
        y = y.clamp(0, 1)
    return y.to(frames.dtype)


def simulate_events(
    frames: torch.Tensor,
    *,
    threshold: float = 0.2,
    refractory: float = 0.0,
    upsample: int = 4,
    eps: float = 1e-3,
) -> Events:
    """DVS events of a clean clip ``(T, C, H, W)`` (``C`` = 1 or 3) between its first and last frame.

    ``threshold`` is the contrast threshold ``C`` in log intensity (at least ``MIN_THRESHOLD`` = 0.01), ``refractory`` the dead time after an
    emitted event (frame intervals), ``upsample`` the sub-steps per frame interval, ``eps`` the offset in
    ``log(Y + eps)``. The model is in the module docstring.
    """
    _check_clip(frames)
    threshold = check_number(threshold, "threshold", MIN_THRESHOLD, 10)
    refractory = check_number(refractory, "refractory", minimum=0, maximum=1e6)
    upsample = check_int(upsample, "upsample", 1, MAX_UPSAMPLE)
    eps = check_number(eps, "eps", above=0, maximum=1)
    if frames.min() < 0:
        raise ValueError("frames must hold intensities >= 0")
    y = luminance(frames)[:, 0].double()  # (T, H, W)
    base = torch.log(y[0] + eps)
    count = torch.zeros(y.shape[1:], dtype=torch.long, device=y.device)  # reference = base + count * C
    last = torch.full(y.shape[1:], -math.inf, dtype=torch.float64, device=y.device)
    out: list[tuple[torch.Tensor, ...]] = []
    prev = base
    for k in range(1, y.shape[0]):
        for s in range(1, upsample + 1):
            t0, t1 = k - 1 + (s - 1) / upsample, k - 1 + s / upsample
            cur = torch.log(y[k - 1] * (1 - s / upsample) + y[k] * (s / upsample) + eps)
            while True:
                ref = base + count.double() * threshold
                up, down = cur >= ref + threshold, cur <= ref - threshold
                fire = up | down
                if not fire.any():
                    break
                sign = up.long() - down.long()
                level = ref + sign.double() * threshold
                # the crossing lies between prev and cur (|prev - ref| < C after the previous sub-step)
                frac = ((level - prev) / torch.where(fire, cur - prev, 1.0)).clamp(0, 1)
                tc = t0 + frac * (t1 - t0)
                emit = fire & (tc - last >= refractory)
                rows, cols = emit.nonzero(as_tuple=True)
                out.append((tc[rows, cols], cols, rows, sign[rows, cols]))
                last = torch.where(emit, tc, last)
                count = count + sign
            prev = cur
    if not out:
        empty = torch.zeros(0, dtype=torch.long, device=y.device)
        return Events(torch.zeros(0, dtype=torch.float64, device=y.device), empty, empty, empty.clone())
    t, x, yy, p = (torch.cat(parts) for parts in zip(*out, strict=True))
    order = torch.argsort(t, stable=True)
    return Events(t[order], x[order], yy[order], p[order])


def event_voxels(events: Events, num_frames: int, height: int, width: int, *, bins: int = 5) -> torch.Tensor:
    """The voxel grid ``(num_frames, bins, height, width)`` (float32) of ``events``: slice ``k`` holds the events
    of ``(k − 1, k]`` (slice 0 is zero), each event's polarity split linearly between the two bins nearest to
    its time scaled to ``[0, bins − 1]``."""
    if not isinstance(events, tuple) or len(events) != 4:
        raise TypeError(f"events must be an Events tuple (t, x, y, polarity), got {type(events).__name__}")
    num_frames = check_int(num_frames, "num_frames", 1, 1_000_000)
    height = check_int(height, "height", 1, 65536)
    width = check_int(width, "width", 1, 65536)
    bins = check_int(bins, "bins", 1, MAX_BINS)
    t, x, y, p = (check_tensor(v, f"events.{n}") for v, n in zip(events, Events._fields, strict=True))
    if not (t.ndim == x.ndim == y.ndim == p.ndim == 1 and len(t) == len(x) == len(y) == len(p)):
        raise ValueError("events must hold 1-D t, x, y and polarity of one length")
    if t.is_complex() or t.dtype == torch.bool or (len(t) and not torch.isfinite(t.double()).all()):
        raise ValueError(f"events.t must hold finite real times, got dtype {t.dtype}")
    for v, n in ((x, "x"), (y, "y"), (p, "polarity")):
        if v.is_complex() or v.is_floating_point() or v.dtype == torch.bool:
            raise TypeError(f"events.{n} must be an integer tensor, got dtype {v.dtype}")
    if len(t) and (x.min() < 0 or x.max() >= width or y.min() < 0 or y.max() >= height):
        raise ValueError(f"events hold pixels outside the {height} x {width} frame (height, width)")
    grid = torch.zeros(num_frames * bins * height * width, dtype=torch.float64, device=t.device)
    t = t.double()
    frame = torch.ceil(t).long()  # an event at time t in (k - 1, k] belongs to frame k
    keep = (frame >= 1) & (frame < num_frames)
    t, x, y, p, frame = t[keep], x[keep].long(), y[keep].long(), p[keep].double(), frame[keep]
    pos = (t - (frame - 1)) * (bins - 1)  # in [0, bins - 1]
    lo = pos.floor().long().clamp(0, bins - 1)
    hi = (lo + 1).clamp(max=bins - 1)
    w_hi = pos - lo
    for b, w in ((lo, 1 - w_hi), (hi, w_hi)):
        index = ((frame * bins + b) * height + y) * width + x
        grid.index_add_(0, index, p * w)
    return grid.view(num_frames, bins, height, width).float()


def infrared_proxy(
    frames: torch.Tensor,
    emissivity: torch.Tensor | None = None,
    *,
    weight: float = 0.5,
    sigma: float = 1.5,
    downsample: int = 2,
    noise: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A thermal-infrared proxy ``(T, 1, H, W)`` of a clean clip ``(T, C, H, W)``: ``(1 − weight) · luminance +
    weight · emissivity`` (``emissivity`` ``(T, 1, H, W)`` in ``[0, 1]``, None for zeros), blurred by a Gaussian
    of std ``sigma`` pixels, averaged over ``downsample`` × ``downsample`` blocks and upsampled bilinearly,
    plus Gaussian noise of std ``noise``; clipped to ``[0, 1]``."""
    _check_clip(frames)
    weight = check_number(weight, "weight", 0, 1)
    sigma = check_number(sigma, "sigma", 0, 100)
    downsample = check_int(downsample, "downsample", 1, 64)
    noise = check_number(noise, "noise", 0, 1)
    lum = luminance(frames)
    if emissivity is not None:
        check_tensor(emissivity, "emissivity", floating=True, finite=True)
        if emissivity.shape != lum.shape:
            raise ValueError(
                f"emissivity must be shaped like the frames' luminance {tuple(lum.shape)}, "
                f"got {tuple(emissivity.shape)}"
            )
        lum = (1 - weight) * lum + weight * emissivity.to(lum.dtype)
    else:
        lum = (1 - weight) * lum
    h, w = lum.shape[-2:]
    if sigma > 0:
        radius = max(1, math.ceil(3 * sigma))
        coords = torch.arange(-radius, radius + 1, dtype=torch.float64, device=lum.device)
        g = torch.exp(-0.5 * (coords / sigma) ** 2)  # in float64: a tiny sigma is not 0 there
        g = (g / g.sum()).to(lum.dtype)
        pad = (radius, radius, radius, radius)
        lum = F.conv2d(F.pad(lum, pad, mode="replicate"), (g[:, None] * g[None, :])[None, None])
    if downsample > 1 and min(h, w) >= downsample:
        small = F.avg_pool2d(lum, downsample, ceil_mode=True)
        lum = F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False)
    if noise:
        draw = random_device(generator, lum.device)
        lum = lum + noise * torch.randn(lum.shape, generator=generator, dtype=lum.dtype, device=draw).to(
            lum.device
        )
    return lum.clamp(0, 1)


__all__ = ["Events", "event_voxels", "infrared_proxy", "low_light", "luminance", "simulate_events"]
