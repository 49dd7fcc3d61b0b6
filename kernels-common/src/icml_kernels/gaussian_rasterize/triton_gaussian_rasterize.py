"""Triton kernel of the Gaussian rasterization (forward).

The wrapper first lists, per ``tile_size x tile_size`` tile of pixels, the Gaussians that can reach it, in
their compositing order (:func:`~icml_kernels.gaussian_rasterize.reference.tile_lists`: a box around the
ellipse where ``opacity * exp(power) >= 1/255``, widened for rounding). The Gaussians it leaves out of a
tile are ones the rules skip at every pixel of the tile, so this culling does not change the result
(unlike gsplat's 3-sigma boxes, which drop the faint tails of opaque Gaussians).

One program per tile: it walks its list in chunks of ``BLOCK_N`` Gaussians. Per chunk it computes alpha
for (tile pixels x chunk), ``L = log(1 - alpha)`` (0 where skipped), the running log-transmittance
``S = S_carried + cumsum(L)`` (``tl.cumsum``), adds each Gaussian with ``S > log(1e-4)`` with weight
``alpha * exp(S - L)``, and stops early once every pixel of the tile is finished. Everything in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from icml_kernels.gaussian_rasterize.reference import ALPHA_MAX, ALPHA_MIN, LOG_T_MIN, tile_lists

# (pixels x Gaussians) entries of a program's matrices per chunk and thread: 16 compile without spills on
# sm_80 and sm_90 (about 100 registers); 32 need about 200, 64 spill
ENTRIES_PER_THREAD = 16

_ALPHA_MAX = tl.constexpr(ALPHA_MAX)
_ALPHA_MIN = tl.constexpr(ALPHA_MIN)
_LOG_T_MIN = tl.constexpr(LOG_T_MIN)


@triton.jit
def gaussian_rasterize_kernel(
    means_ptr,  # (N, 2) float32
    conics_ptr,  # (N, 3) float32
    colors_ptr,  # (N, C) float32
    opacities_ptr,  # (N,) float32
    background_ptr,  # (C,) float32
    ids_ptr,  # (pairs,) int32: Gaussian indices, grouped by tile, in compositing order within a tile
    offsets_ptr,  # (tiles + 1,) int64: the list of tile t is ids[offsets[t] : offsets[t + 1]]
    image_ptr,  # (height, width, C) float32
    alpha_ptr,  # (height, width) float32
    width,
    height,
    n_tiles_x,
    C: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tile = tl.program_id(0)
    p = tl.arange(0, TILE * TILE)
    row = (tile // n_tiles_x) * TILE + p // TILE
    col = (tile % n_tiles_x) * TILE + p % TILE
    inside = (row < height) & (col < width)
    px = col.to(tl.float32) + 0.5
    py = row.to(tl.float32) + 0.5

    log_t_all = tl.zeros([TILE * TILE], dtype=tl.float32)  # sum of L over every Gaussian not skipped
    log_t = tl.zeros([TILE * TILE], dtype=tl.float32)  # sum of L over the Gaussians added
    acc0 = tl.zeros([TILE * TILE], dtype=tl.float32)
    acc1 = tl.zeros([TILE * TILE], dtype=tl.float32)
    acc2 = tl.zeros([TILE * TILE], dtype=tl.float32)
    acc3 = tl.zeros([TILE * TILE], dtype=tl.float32)
    i = tl.load(offsets_ptr + tile)
    end = tl.load(offsets_ptr + tile + 1)
    live = i < end
    while live:
        k = i + tl.arange(0, BLOCK_N)
        valid = k < end
        g = tl.load(ids_ptr + k, mask=valid, other=0).to(tl.int64)
        mx = tl.load(means_ptr + 2 * g, mask=valid, other=0.0)
        my = tl.load(means_ptr + 2 * g + 1, mask=valid, other=0.0)
        ca = tl.load(conics_ptr + 3 * g, mask=valid, other=1.0)
        cb = tl.load(conics_ptr + 3 * g + 1, mask=valid, other=0.0)
        cc = tl.load(conics_ptr + 3 * g + 2, mask=valid, other=1.0)
        opacity = tl.load(opacities_ptr + g, mask=valid, other=0.0)

        dx = px[:, None] - mx[None, :]  # (P, BLOCK_N)
        dy = py[:, None] - my[None, :]
        power = -0.5 * (ca[None, :] * dx * dx + cc[None, :] * dy * dy) - cb[None, :] * dx * dy
        power = tl.where(power <= 0.0, power, float("-inf"))  # power > 0 (or NaN): skipped
        alpha = tl.minimum(opacity[None, :] * tl.exp(power), _ALPHA_MAX)
        kept = (alpha >= _ALPHA_MIN) & valid[None, :]
        log1m = tl.where(kept, tl.log(1.0 - alpha), 0.0)
        s = log_t_all[:, None] + tl.cumsum(log1m, axis=1)  # log of next_T
        added = kept & (s > _LOG_T_MIN)
        weight = tl.where(added, alpha * tl.exp(s - log1m), 0.0)  # alpha * T before the Gaussian

        acc0 += tl.sum(weight * tl.load(colors_ptr + C * g, mask=valid, other=0.0)[None, :], axis=1)
        if C > 1:
            acc1 += tl.sum(weight * tl.load(colors_ptr + C * g + 1, mask=valid, other=0.0)[None, :], axis=1)
        if C > 2:
            acc2 += tl.sum(weight * tl.load(colors_ptr + C * g + 2, mask=valid, other=0.0)[None, :], axis=1)
        if C > 3:
            acc3 += tl.sum(weight * tl.load(colors_ptr + C * g + 3, mask=valid, other=0.0)[None, :], axis=1)
        log_t += tl.sum(tl.where(added, log1m, 0.0), axis=1)
        log_t_all += tl.sum(log1m, axis=1)
        i += BLOCK_N
        # go on while Gaussians are left and a pixel of the image in this tile is not finished
        unfinished = tl.max(tl.where(inside, log_t_all, float("-inf")), axis=0) > _LOG_T_MIN
        live = (i < end) & unfinished

    t = tl.exp(log_t)
    pixel = row * width + col
    tl.store(alpha_ptr + pixel, 1.0 - t, mask=inside)
    tl.store(image_ptr + C * pixel, acc0 + t * tl.load(background_ptr), mask=inside)
    if C > 1:
        tl.store(image_ptr + C * pixel + 1, acc1 + t * tl.load(background_ptr + 1), mask=inside)
    if C > 2:
        tl.store(image_ptr + C * pixel + 2, acc2 + t * tl.load(background_ptr + 2), mask=inside)
    if C > 3:
        tl.store(image_ptr + C * pixel + 3, acc3 + t * tl.load(background_ptr + 3), mask=inside)


def gaussian_rasterize_triton(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    width: int,
    height: int,
    background: torch.Tensor,
    tile_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~icml_kernels.gaussian_rasterize.reference.rasterize_reference` for float16, bfloat16 or
    float32 inputs and ``1 <= C <= 4`` channels (computed in float32, returned in the inputs' dtype)."""
    n_colors = colors.shape[1]
    f32 = [t.to(torch.float32).contiguous() for t in (means2d, conics, colors, opacities, background)]
    ids, offsets = tile_lists(f32[0], f32[1], f32[3], width, height, tile_size)
    image = means2d.new_empty(height, width, n_colors, dtype=torch.float32)
    alpha = means2d.new_empty(height, width, dtype=torch.float32)
    n_x = triton.cdiv(width, tile_size)
    pixels = tile_size * tile_size
    num_warps = min(16, max(4, pixels // 32))  # tiles of 8, 16, 32: 4, 8, 16 warps
    block_n = ENTRIES_PER_THREAD * 32 * num_warps // pixels  # 32, 16, 8 Gaussians per chunk
    gaussian_rasterize_kernel[(n_x * triton.cdiv(height, tile_size),)](
        *f32,
        ids,
        offsets,
        image,
        alpha,
        width,
        height,
        n_x,
        C=n_colors,
        TILE=tile_size,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return image.to(means2d.dtype), alpha.to(means2d.dtype)
