"""Alpha compositing of projected 2-D Gaussians (the rasterization step of 3-D Gaussian splatting) in pure
torch, the ground truth of the Triton kernel, and the checks of its arguments.

Conventions (those of the 3DGS CUDA rasterizer and gsplat's forward pass):

- Pixel ``(row i, column j)`` has its centre at ``(x, y) = (j + 0.5, i + 0.5)``; x runs to the right, y down.
- Gaussian ``n`` has mean ``means2d[n] = (x, y)`` and conic ``conics[n] = (a, b, c)``, the inverse 2-D
  covariance ``[[a, b], [b, c]]``. With ``d = pixel centre - mean``:
  ``power = -0.5 * (a * dx**2 + c * dy**2) - b * dx * dy`` and ``alpha = min(0.99, opacity * exp(power))``.
- The Gaussians come in compositing order, front to back (the caller sorts them by depth).
- At each pixel a Gaussian is skipped (adds nothing, leaves the transmittance alone) when ``power > 0`` or
  ``alpha < 1/255``. The transmittance ``T`` starts at 1; before adding Gaussian ``n``,
  ``next_T = T * (1 - alpha)``: if ``next_T <= 1e-4`` the pixel is finished and neither ``n`` nor any later
  Gaussian is added, otherwise ``color += colors[n] * alpha * T`` and ``T = next_T``.
- ``image = color + T * background`` and ``alpha = 1 - T``.
"""

from __future__ import annotations

import math

import torch

from icml_kernels.fwht.reference import check_finite_tensor, warn_if_overflowed
from icml_kernels.validation import check_int, check_tensor, lacks_values, values_readable

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # the kernel computes in float32
FLOAT_DTYPES = (*KERNEL_DTYPES, torch.float64)
KERNEL_MAX_C = 4  # the most color channels the kernel takes (one accumulator per channel)
MAX_SIZE = 8192  # the largest width and height
TILE_SIZES = (8, 16, 32)
ALPHA_MAX = 0.99  # alpha is clamped to this (so 1 - alpha >= 0.01: log1p(-alpha) stays finite)
ALPHA_MIN = 1.0 / 255.0  # a Gaussian whose alpha at a pixel is below this is skipped there
T_MIN = 1e-4  # a pixel is finished when adding a Gaussian would bring its transmittance to this or below
LOG_T_MIN = math.log(T_MIN)
CHUNK_ELEMENTS = 1 << 22  # (pixels x Gaussians) entries of each intermediate matrix of the reference
REFERENCE_TILE = 16  # the reference composites tiles of this many pixels square, each over its own Gaussians
CULL_SLACK = 1e-2  # relative widening of the squared radius of the culling boxes, for rounding
CULL_MARGIN = 1.0  # pixels added to the half-widths of the culling boxes, for rounding


def _shape_error(name: str, expected: str, got: torch.Tensor) -> ValueError:
    return ValueError(f"{name} must have shape {expected}, got {tuple(got.shape)}")


def check_rasterize_tensors(means2d, conics, colors, opacities, background) -> tuple[int, int]:
    """``(N, C)`` of valid tensor arguments: types, dtypes, shapes and devices (metadata only).
    ``background`` may be None."""
    check_tensor(means2d, "means2d", FLOAT_DTYPES)
    if means2d.dim() != 2 or means2d.shape[1] != 2:
        raise _shape_error("means2d", "(N, 2)", means2d)
    n = means2d.shape[0]
    named = [("conics", conics), ("colors", colors), ("opacities", opacities)]
    if background is not None:
        named.append(("background", background))
    for name, t in named:
        check_tensor(t, name, FLOAT_DTYPES)
        if t.dtype != means2d.dtype:
            raise TypeError(f"{name} must have the dtype of means2d ({means2d.dtype}), got {t.dtype}")
        if t.device != means2d.device:
            raise ValueError(f"{name} must be on the device of means2d ({means2d.device}), got {t.device}")
    if conics.shape != (n, 3):
        raise _shape_error("conics", f"(N, 3) = {(n, 3)} (N from means2d)", conics)
    if colors.dim() != 2 or colors.shape[0] != n or colors.shape[1] < 1:
        raise _shape_error("colors", f"(N, C) with N = {n} (from means2d) and C >= 1", colors)
    c = colors.shape[1]
    if opacities.shape != (n,):
        raise _shape_error("opacities", f"(N,) = {(n,)} (N from means2d)", opacities)
    if background is not None and background.shape != (c,):
        raise _shape_error("background", f"(C,) = {(c,)} (C from colors)", background)
    return n, c


def check_rasterize(
    means2d, conics, colors, opacities, width, height, background, tile_size
) -> tuple[int, int]:
    """``(N, C)`` of valid arguments (metadata and Python values only: never reads tensor data)."""
    n, c = check_rasterize_tensors(means2d, conics, colors, opacities, background)
    check_int(width, "width", 1, MAX_SIZE)
    check_int(height, "height", 1, MAX_SIZE)
    check_int(tile_size, "tile_size")
    if tile_size not in TILE_SIZES:
        raise ValueError(f"tile_size must be one of {TILE_SIZES}, got {tile_size}")
    return n, c


def check_rasterize_values(means2d, conics, colors, opacities, background) -> None:
    """No NaN or infinite entry; ``opacities`` in ``[0, 1]``; every conic positive definite (``a > 0``,
    ``c > 0``, ``a * c - b**2 > 0``). Reads the data (a host sync on a GPU), so only the public functions
    call it; skipped while ``torch.compile`` traces and for meta or fake tensors
    (:func:`~icml_kernels.validation.values_readable`)."""
    if not values_readable(means2d, conics, colors, opacities, background):
        return
    for name, t in (("means2d", means2d), ("conics", conics), ("colors", colors), ("opacities", opacities)):
        check_finite_tensor(t, name)
    if background is not None:
        check_finite_tensor(background, "background")
    if opacities.numel() and (bool((opacities < 0).any()) or bool((opacities > 1).any())):
        raise ValueError("opacities must lie in [0, 1], got values outside")
    if conics.numel():
        a, b, c = conics.double().unbind(-1)
        # b**2 < a*c as |b| < sqrt(a) * sqrt(c): no overflow even for huge float64 entries
        if not bool(((a > 0) & (c > 0) & (b.abs() < a.sqrt() * c.sqrt())).all()):
            raise ValueError(
                "conics must hold positive definite inverse covariances (a, b, c): a > 0, c > 0 and "
                "a*c - b**2 > 0, got one that is not"
            )


def tile_lists(
    means2d: torch.Tensor, conics: torch.Tensor, opacities: torch.Tensor, width: int, height: int, tile: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, offsets)``: per ``tile x tile`` block of pixels (row-major over the ``ceil(height / tile) x
    ceil(width / tile)`` grid) the indices of the Gaussians that can be added at one of its pixels, in
    increasing (compositing) order, as ``ids[offsets[t] : offsets[t + 1]]`` (int32 ids, at least one
    entry; int64 offsets). Reads the data (one host sync: the number of (tile, Gaussian) pairs).

    A Gaussian is added only where ``opacity * exp(power) >= 1/255``: not at all when ``opacity < 1/255``
    (``exp(power) <= 1``), else inside the ellipse ``Q(d) <= r2 = 2 log(255 opacity)`` of its quadratic
    form ``Q(d) = a dx**2 + 2 b dx dy + c dy**2``, whose bounding box has half-widths ``sqrt(r2 cov_xx)``
    and ``sqrt(r2 cov_yy)`` with ``cov = [[a, b], [b, c]]**-1``. Computed in float64, ``r2`` widened by
    :data:`CULL_SLACK` and the box by :data:`CULL_MARGIN` pixels, so the Gaussians left out of a tile are
    ones the rules skip at every pixel of it also after the rounding of ``power`` (unlike gsplat's 3-sigma
    boxes, which drop the faint tails of opaque Gaussians): culling does not change the result.
    """
    device = means2d.device
    n_x, n_y = -(-width // tile), -(-height // tile)
    mean, conic, opacity = means2d.double(), conics.double(), opacities.double()
    a, b, c = conic.unbind(-1)
    reach = opacity >= ALPHA_MIN * (1 - 1e-5)
    r2 = (2 * torch.log((255 * opacity).clamp(min=1.0)) + 1e-3) * (1 + CULL_SLACK)
    # cov_xx = c / det = 1 / (a - b * b / c), cov_yy = 1 / (c - b * b / a): no overflow of a * c
    half_x = torch.sqrt(r2 / (a - b * (b / c)))
    half_y = torch.sqrt(r2 / (c - b * (b / a)))
    half_x = torch.nan_to_num(half_x, nan=math.inf, posinf=math.inf) + CULL_MARGIN
    half_y = torch.nan_to_num(half_y, nan=math.inf, posinf=math.inf) + CULL_MARGIN
    x_lo, x_hi = ((mean[:, 0] - half_x) / tile).floor(), ((mean[:, 0] + half_x) / tile).floor()
    y_lo, y_hi = ((mean[:, 1] - half_y) / tile).floor(), ((mean[:, 1] + half_y) / tile).floor()
    reach &= (x_hi >= 0) & (x_lo <= n_x - 1) & (y_hi >= 0) & (y_lo <= n_y - 1)
    x_lo, x_hi = x_lo.clamp(0, n_x - 1).long(), x_hi.clamp(0, n_x - 1).long()
    y_lo, y_hi = y_lo.clamp(0, n_y - 1).long(), y_hi.clamp(0, n_y - 1).long()
    span_x = x_hi - x_lo + 1
    counts = torch.where(reach, span_x * (y_hi - y_lo + 1), 0)
    total = int(counts.sum())
    offsets = torch.zeros(n_x * n_y + 1, dtype=torch.int64, device=device)
    if total == 0:
        return torch.zeros(1, dtype=torch.int32, device=device), offsets
    gid = torch.repeat_interleave(torch.arange(len(counts), device=device), counts, output_size=total)
    local = torch.arange(total, device=device) - (torch.cumsum(counts, 0) - counts)[gid]
    tile_of = (y_lo[gid] + local // span_x[gid]) * n_x + x_lo[gid] + local % span_x[gid]
    tile_sorted, order = torch.sort(tile_of, stable=True)  # pairs come in Gaussian order: kept per tile
    offsets[1:] = torch.cumsum(torch.bincount(tile_sorted, minlength=n_x * n_y), 0)
    return gid[order].to(torch.int32), offsets


def _composite(
    xs: torch.Tensor,
    ys: torch.Tensor,
    mean: torch.Tensor,
    conic: torch.Tensor,
    color: torch.Tensor,
    opacity: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(color (h, w, C), log T (h, w))`` of the pixels with centres ``xs`` (w,) x ``ys`` (h,) over the
    given Gaussians, in order. Vectorized over (pixels x Gaussians): ``L = log1p(-alpha)`` (0 where
    skipped) and its running sum ``S`` along the Gaussians give ``next_T = exp(S)``; since ``S`` only
    decreases, a Gaussian is added exactly when it is not skipped and ``S > log(1e-4)`` (once a pixel is
    finished every later ``S`` is too small), with weight ``alpha * T = alpha * exp(S - L)``."""
    n, c = color.shape
    ca, cb, cc = conic.unbind(-1)  # (N,) each
    dx = xs[:, None] - mean[:, 0]  # (w, N)
    dy = ys[:, None] - mean[:, 1]  # (h, N)
    a_dx2, b_dx, c_dy2 = ca * dx * dx, cb * dx, cc * dy * dy
    power = -0.5 * (a_dx2 + c_dy2[:, None]) - b_dx * dy[:, None]  # (h, w, N)
    # power > 0 (or NaN, from an overflow at a far pixel) is skipped: -inf gives alpha = 0 < 1/255
    power = torch.where(power <= 0, power, -math.inf)
    alpha = (opacity * torch.exp(power)).clamp(max=ALPHA_MAX)
    kept = alpha >= ALPHA_MIN
    log1m = torch.where(kept, torch.log1p(-alpha), 0.0)  # log(1 - alpha) <= log(0.01): finite
    s = torch.cumsum(log1m, -1)  # log of next_T
    added = kept & (s > LOG_T_MIN)
    weight = torch.where(added, alpha * torch.exp(s - log1m), 0.0)  # alpha * T before the Gaussian
    out = (weight.reshape(len(ys) * len(xs), n) @ color).view(len(ys), len(xs), c)
    return out, torch.where(added, log1m, 0.0).sum(-1)


def rasterize_reference(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    width: int,
    height: int,
    background: torch.Tensor,
    *,
    cull: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked rasterization: ``(image (height, width, C), alpha (height, width))`` in the inputs' dtype,
    computed in float32 (float64 for float64). Differentiable in every tensor argument: the gradients of
    the skip and termination masks are zero, the others finite as long as the quadratic forms
    ``a * dx**2`` etc. do not overflow.

    With ``cull`` (the default) the image is composited in :data:`REFERENCE_TILE`-pixel square tiles, each
    over the Gaussians :func:`tile_lists` says can reach it (the others are skipped at every pixel of the
    tile, and a skipped Gaussian adds an exact 0 to every sum, so the result is the same as without
    culling up to the summation order of the color product). Within a tile, rows of pixels go in chunks
    of about :data:`CHUNK_ELEMENTS` (pixels x Gaussians) entries, which bounds the memory without autograd.
    Meta and fake inputs are not culled (no values to cull by).
    """
    compute = torch.float64 if means2d.dtype == torch.float64 else torch.float32
    device = means2d.device
    mean, conic, color, opacity, bg = (
        t.to(compute) for t in (means2d, conics, colors, opacities, background)
    )
    xs = torch.arange(width, device=device, dtype=compute) + 0.5
    ys = torch.arange(height, device=device, dtype=compute) + 0.5
    # a meta or fake input has no values to cull by (the result's shape does not depend on culling)
    cull = cull and not lacks_values(means2d, conics, opacities)
    tile = REFERENCE_TILE if cull else max(width, height)
    n_x, n_y = -(-width // tile), -(-height // tile)
    if cull:
        ids, offsets_t = tile_lists(mean, conic, opacity, width, height, tile)
        ids, offsets = ids.long(), offsets_t.tolist()
    else:
        ids, offsets = torch.arange(len(mean), device=device), [0, len(mean)]
    image_rows, log_t_rows = [], []
    for ty in range(n_y):
        image_row, log_t_row = [], []
        for tx in range(n_x):
            chosen = ids[offsets[ty * n_x + tx] : offsets[ty * n_x + tx + 1]]
            args = (mean[chosen], conic[chosen], color[chosen], opacity[chosen])
            x_tile = xs[tx * tile : (tx + 1) * tile]
            y_tile = ys[ty * tile : (ty + 1) * tile]
            rows = max(1, CHUNK_ELEMENTS // max(1, len(x_tile) * len(chosen)))
            parts = [
                _composite(x_tile, y_tile[top : top + rows], *args) for top in range(0, len(y_tile), rows)
            ]
            image_row.append(torch.cat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0])
            log_t_row.append(torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1])
        image_rows.append(torch.cat(image_row, 1) if n_x > 1 else image_row[0])
        log_t_rows.append(torch.cat(log_t_row, 1) if n_x > 1 else log_t_row[0])
    color_sum = torch.cat(image_rows) if n_y > 1 else image_rows[0]
    log_t = torch.cat(log_t_rows) if n_y > 1 else log_t_rows[0]
    image = color_sum + torch.exp(log_t)[..., None] * bg
    alpha = -torch.expm1(log_t)  # 1 - T
    return image.to(means2d.dtype), alpha.to(means2d.dtype)


def gaussian_rasterize_reference(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    width: int,
    height: int,
    background: torch.Tensor | None = None,
    *,
    tile_size: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch reference of :func:`~icml_kernels.rasterize_gaussians`, with the same arguments and checks
    (it reads the data: a host sync on a GPU); always the reference, on any device, any number of color
    channels, differentiable by autograd in ``means2d``, ``conics``, ``colors``, ``opacities`` and
    ``background``. ``tile_size`` is checked but does not change the result."""
    check_rasterize(means2d, conics, colors, opacities, width, height, background, tile_size)
    check_rasterize_values(means2d, conics, colors, opacities, background)
    if background is None:
        background = colors.new_zeros(colors.shape[1])
    image, alpha = rasterize_reference(means2d, conics, colors, opacities, width, height, background)
    return warn_if_overflowed(image, "gaussian_rasterize_reference"), alpha
