"""GPU tier: the compiled Triton Gaussian rasterization kernel on CUDA against the torch reference (skipped
without CUDA)."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import rasterize_gaussians
from icml_kernels.gaussian_rasterize.reference import rasterize_reference
from icml_kernels.testing import rel_rms_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
# float32 against the float64 reference: a Gaussian whose alpha at a pixel lies within rounding of 1/255
# may count in one and not the other (about 1/255 * T at that pixel, ~2e-5 of the relative RMS of a
# 256 x 256 image each); 1e-4 allows a few such pixels and nothing more
TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.fixture(autouse=True)
def kernel_only(monkeypatch):
    """The kernel or an error: a silent fallback to the reference would pass these tests untested."""
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")


def random_scene(n, width, height, c=3, seed=0, opacity_min=0.05, sigma=(0.5, 6.0)):
    gen = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 2, generator=gen) * torch.tensor([width + 20.0, height + 20.0]) - 10
    std = torch.rand(n, 2, generator=gen) * (sigma[1] - sigma[0]) + sigma[0]
    angle = torch.rand(n, generator=gen) * math.pi
    cos, sin = angle.cos(), angle.sin()
    rot = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    inv = torch.linalg.inv(rot @ torch.diag_embed(std**2) @ rot.transpose(-1, -2))
    conics = torch.stack([inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 1]], -1)
    opacities = torch.rand(n, generator=gen) * (1 - opacity_min) + opacity_min
    colors = torch.rand(n, c, generator=gen)
    background = torch.rand(c, generator=gen)
    return tuple(t.cuda() for t in (means, conics, colors, opacities, background))


@pytest.mark.parametrize("tile", [8, 16, 32])
@pytest.mark.parametrize(
    "width, height, n, c", [(256, 256, 2000, 3), (300, 200, 5000, 4), (77, 45, 333, 1), (1, 1, 1, 2)]
)
def test_cuda_kernel_matches_reference(width, height, n, c, tile):
    means, conics, colors, opacities, background = random_scene(n, width, height, c, seed=n + tile)
    image, alpha = rasterize_gaussians(
        means, conics, colors, opacities, width, height, background, tile_size=tile
    )
    assert image.is_cuda and image.shape == (height, width, c) and alpha.shape == (height, width)
    truth = rasterize_reference(
        *(t.double() for t in (means, conics, colors, opacities)), width, height, background.double()
    )
    assert rel_rms_error(image, truth[0]) <= TOL[torch.float32]
    assert rel_rms_error(alpha, truth[1]) <= TOL[torch.float32]


def test_cuda_kernel_terminates_and_culls_like_the_reference():
    # opaque wide Gaussians (most pixels finish), faint ones below 1/255, far ones outside the image
    means, conics, colors, opacities, background = random_scene(
        4000, 256, 256, seed=1, opacity_min=0.0, sigma=(0.3, 20.0)
    )
    opacities[:1000] = 0.95 + 0.05 * opacities[:1000]
    image, alpha = rasterize_gaussians(means, conics, colors, opacities, 256, 256, background)
    truth = rasterize_reference(
        *(t.double() for t in (means, conics, colors, opacities)), 256, 256, background.double()
    )
    assert float((truth[1] > 1 - 1e-3).float().mean()) > 0.5
    assert rel_rms_error(image, truth[0]) <= TOL[torch.float32]
    assert rel_rms_error(alpha, truth[1]) <= TOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_kernel_half_precision(dtype):
    scene = [t.to(dtype) for t in random_scene(1000, 128, 96, seed=2)]
    image, alpha = rasterize_gaussians(*scene[:4], 128, 96, scene[4])
    assert image.dtype == alpha.dtype == dtype
    truth = rasterize_reference(*(t.double() for t in scene[:4]), 128, 96, scene[4].double())
    assert rel_rms_error(image, truth[0]) <= TOL[dtype] and rel_rms_error(alpha, truth[1]) <= TOL[dtype]


def test_cuda_gradient_runs_the_reference(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "auto")
    means, conics, colors, opacities, background = random_scene(300, 64, 64, seed=3)
    means.requires_grad_()
    image, alpha = rasterize_gaussians(means, conics, colors, opacities, 64, 64, background)
    (image.square().sum() + alpha.sum()).backward()
    assert means.grad is not None and bool(means.grad.isfinite().all())
    kernel = rasterize_gaussians(means.detach(), conics, colors, opacities, 64, 64, background)
    assert rel_rms_error(kernel[0], image) <= TOL[torch.float32]
