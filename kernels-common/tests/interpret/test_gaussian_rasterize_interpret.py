"""Interpreter tier: the Triton Gaussian rasterization kernel, run by Triton's CPU interpreter, against the
torch reference (relative RMS error; outputs are NaN-poisoned). Tiny shapes."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import rasterize_gaussians
from icml_kernels.gaussian_rasterize.reference import rasterize_reference
from icml_kernels.testing import rel_rms_error

pytestmark = pytest.mark.interpret
tgr = pytest.importorskip("icml_kernels.gaussian_rasterize.triton_gaussian_rasterize")


def random_scene(n, width, height, c=3, seed=0, opacity_min=0.05, sigma=(0.4, 3.4)):
    """Gaussians over (and a little beyond) the image, rotated, of standard deviations in ``sigma``."""
    gen = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 2, generator=gen) * torch.tensor([width + 6.0, height + 6.0]) - 3
    std = torch.rand(n, 2, generator=gen) * (sigma[1] - sigma[0]) + sigma[0]
    angle = torch.rand(n, generator=gen) * math.pi
    cos, sin = angle.cos(), angle.sin()
    rot = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    inv = torch.linalg.inv(rot @ torch.diag_embed(std**2) @ rot.transpose(-1, -2))
    conics = torch.stack([inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 1]], -1)
    opacities = torch.rand(n, generator=gen) * (1 - opacity_min) + opacity_min
    colors = torch.rand(n, c, generator=gen)
    background = torch.rand(c, generator=gen)
    return means, conics, colors, opacities, background


def check_kernel(width, height, n, c, tile, **scene_kwargs):
    means, conics, colors, opacities, background = random_scene(n, width, height, c, **scene_kwargs)
    image, alpha = tgr.gaussian_rasterize_triton(
        means, conics, colors, opacities, width, height, background, tile
    )
    assert image.shape == (height, width, c) and alpha.shape == (height, width)
    assert image.dtype == alpha.dtype == torch.float32
    ref_image, ref_alpha = rasterize_reference(means, conics, colors, opacities, width, height, background)
    assert rel_rms_error(image, ref_image) <= 1e-5
    assert rel_rms_error(alpha, ref_alpha) <= 1e-5
    return alpha


@pytest.mark.parametrize(
    "width, height, n, c, tile",
    [
        (20, 13, 37, 3, 8),  # image not a multiple of the tile, N not a multiple of BLOCK_N
        (20, 13, 37, 1, 16),  # one channel, one tile
        (9, 19, 150, 4, 8),  # the widest C the kernel takes, several chunks per tile
        (40, 33, 90, 2, 32),
        (1, 1, 5, 3, 8),
    ],
)
def test_kernel_matches_reference(width, height, n, c, tile):
    check_kernel(width, height, n, c, tile, seed=width + n)


def test_kernel_terminates_pixels_like_the_reference():
    # opaque, wide Gaussians: most pixels finish (next_T <= 1e-4) within the list, the tiles stop early
    alpha = check_kernel(21, 14, 120, 3, 8, seed=1, opacity_min=0.9, sigma=(3.0, 6.0))
    assert float((alpha > 1 - 1e-3).float().mean()) > 0.5


def test_kernel_with_faint_and_far_gaussians():
    # opacities down to 0 (many below 1/255) and Gaussians whose boxes miss the image
    check_kernel(17, 11, 70, 3, 8, seed=2, opacity_min=0.0, sigma=(0.2, 8.0))


def test_kernel_without_gaussians_gives_the_background():
    image, alpha = tgr.gaussian_rasterize_triton(
        torch.zeros(0, 2), torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0), 10, 9, torch.ones(3), 8
    )
    assert torch.equal(image, torch.ones(9, 10, 3)) and torch.equal(alpha, torch.zeros(9, 10))


def test_kernel_half_precision_inputs():
    means, conics, colors, opacities, background = random_scene(40, 12, 10, 3, seed=3)
    args = [t.to(torch.bfloat16) for t in (means, conics, colors, opacities, background)]
    image, alpha = tgr.gaussian_rasterize_triton(*args[:4], 12, 10, args[4], 8)
    assert image.dtype == alpha.dtype == torch.bfloat16
    ref_image, ref_alpha = rasterize_reference(*args[:4], 12, 10, args[4])
    assert rel_rms_error(image, ref_image) < 1e-2 and rel_rms_error(alpha, ref_alpha) < 1e-2


def test_public_op_runs_the_kernel_when_forced(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    calls = []
    real = tgr.gaussian_rasterize_triton
    monkeypatch.setattr(tgr, "gaussian_rasterize_triton", lambda *a: calls.append(1) or real(*a))
    means, conics, colors, opacities, background = random_scene(25, 11, 9, 3, seed=4)
    image, alpha = rasterize_gaussians(means, conics, colors, opacities, 11, 9, background, tile_size=8)
    assert calls == [1]
    ref_image, ref_alpha = rasterize_reference(means, conics, colors, opacities, 11, 9, background)
    assert rel_rms_error(image, ref_image) <= 1e-5 and rel_rms_error(alpha, ref_alpha) <= 1e-5
    # with a gradient wanted, the differentiable reference runs instead of the forward-only kernel
    colors = colors.clone().requires_grad_()
    rasterize_gaussians(means, conics, colors, opacities, 11, 9, background)[0].sum().backward()
    assert calls == [1] and colors.grad is not None
