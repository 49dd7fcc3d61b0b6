"""Reference tier of the Gaussian rasterization: the torch reference against an explicit per-pixel loop of
the compositing rules, the closed form of one Gaussian, background and alpha, culling, autograd
(gradcheck), the op registration and bad input. Runs everywhere."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import KernelUnavailableError, gaussian_rasterize_reference, rasterize_gaussians
from icml_kernels.gaussian_rasterize.reference import rasterize_reference, tile_lists
from icml_kernels.testing import rel_rms_error


def composite_loop(means2d, conics, colors, opacities, width, height, background=None):
    """The rules, one pixel and one Gaussian at a time, in Python floats. Returns ``(image, alpha,
    stats)``; ``stats`` counts terminations and alpha skips and holds the closest approach of a decision
    to its threshold (relative), so a test can make sure no decision is a coin toss of rounding."""
    n, c = colors.shape
    bg = [0.0] * c if background is None else background.tolist()
    image = torch.zeros(height, width, c, dtype=torch.float64)
    alpha_img = torch.zeros(height, width, dtype=torch.float64)
    stats = {"terminated": 0, "alpha_skipped": 0, "added": 0, "margin": math.inf}
    for i in range(height):
        for j in range(width):
            px, py = j + 0.5, i + 0.5
            t, color = 1.0, [0.0] * c
            for g in range(n):
                mx, my = means2d[g].tolist()
                a, b, cc = conics[g].tolist()
                dx, dy = px - mx, py - my
                power = -0.5 * (a * dx * dx + cc * dy * dy) - b * dx * dy
                if power > 0:
                    continue
                alpha = min(0.99, float(opacities[g]) * math.exp(power))
                if alpha > 0:
                    stats["margin"] = min(stats["margin"], abs(alpha * 255 - 1))
                if alpha < 1 / 255:
                    stats["alpha_skipped"] += 1
                    continue
                next_t = t * (1 - alpha)
                stats["margin"] = min(stats["margin"], abs(next_t / 1e-4 - 1))
                if next_t <= 1e-4:
                    stats["terminated"] += 1
                    break
                stats["added"] += 1
                for k in range(c):
                    color[k] += float(colors[g, k]) * alpha * t
                t = next_t
            image[i, j] = torch.tensor([color[k] + t * bg[k] for k in range(c)], dtype=torch.float64)
            alpha_img[i, j] = 1 - t
    return image, alpha_img, stats


def conic_of(sx: float, sy: float, angle: float) -> list[float]:
    """``(a, b, c)`` of the inverse covariance of standard deviations ``sx``, ``sy`` rotated by ``angle``."""
    cos, sin = math.cos(angle), math.sin(angle)
    rot = torch.tensor([[cos, -sin], [sin, cos]], dtype=torch.float64)
    inv = torch.linalg.inv(rot @ torch.diag(torch.tensor([sx * sx, sy * sy], dtype=torch.float64)) @ rot.T)
    return [float(inv[0, 0]), float(inv[0, 1]), float(inv[1, 1])]


def small_scene(dtype=torch.float64):
    """7 x 5 pixels, 6 Gaussians, overlapping and rotated (b of both signs): three opaque ones stacked at
    the centre and a fourth near it (pixels there finish at the third or the sixth), a narrow one whose
    tails are skipped by alpha < 1/255, one too faint to ever count (opacity < 1/255)."""
    means = [[3.5, 2.5], [3.2, 2.2], [3.5, 2.5], [1.2, 3.7], [2.0, 1.0], [4.0, 2.0]]
    conics = [
        conic_of(4.0, 3.5, 0.3),
        conic_of(3.8, 4.2, -0.4),
        conic_of(2.5, 2.2, 0.0),  # opacity 1 at a pixel centre: alpha clamped to 0.99
        conic_of(0.6, 0.4, 0.7),
        conic_of(3.0, 3.0, 0.0),
        conic_of(2.5, 1.5, 2.2),
    ]
    opacities = [0.99, 0.98, 1.0, 0.8, 0.003, 0.95]
    colors = torch.tensor(
        [[1.0, 0.2, 0.1], [0.1, 0.9, 0.3], [0.2, 0.3, 1.0], [0.7, 0.7, 0.0], [0.5, 0.5, 0.5], [0.0, 0.4, 0.8]]
    )
    return (
        torch.tensor(means, dtype=dtype),
        torch.tensor(conics, dtype=dtype),
        colors.to(dtype),
        torch.tensor(opacities, dtype=dtype),
    )


def random_scene(n, width, height, c=3, dtype=torch.float32, seed=0, opacity_min=0.05):
    gen = torch.Generator().manual_seed(seed)
    means = (
        torch.rand(n, 2, generator=gen, dtype=torch.float64) * torch.tensor([width + 6.0, height + 6.0]) - 3
    )
    sigma = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 3 + 0.4
    angle = torch.rand(n, generator=gen, dtype=torch.float64) * math.pi
    conics = torch.tensor(
        [conic_of(float(s[0]), float(s[1]), float(t)) for s, t in zip(sigma, angle, strict=True)]
    )
    conics = conics.reshape(n, 3)
    opacities = torch.rand(n, generator=gen, dtype=torch.float64) * (1 - opacity_min) + opacity_min
    colors = torch.rand(n, c, generator=gen, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (means, conics, colors, opacities))


def test_reference_follows_the_rules_pixel_by_pixel():
    scene = small_scene()
    background = torch.tensor([0.2, 0.4, 0.6], dtype=torch.float64)
    image, alpha, stats = composite_loop(*scene, 7, 5, background)
    # the scene exercises every rule, and no decision sits within rounding of its threshold
    assert stats["terminated"] >= 3 and stats["alpha_skipped"] >= 5 and stats["added"] >= 50
    assert stats["margin"] > 1e-6
    for fn in (gaussian_rasterize_reference, rasterize_gaussians):
        out, out_alpha = fn(*scene, 7, 5, background)
        assert out.shape == (5, 7, 3) and out_alpha.shape == (5, 7) and out.dtype == torch.float64
        torch.testing.assert_close(out, image, rtol=0, atol=1e-6)
        torch.testing.assert_close(out_alpha, alpha, rtol=0, atol=1e-6)
    # culling off: the same result
    uncut = rasterize_reference(*scene, 7, 5, background, cull=False)
    torch.testing.assert_close(uncut[0], image, rtol=0, atol=1e-6)


def test_termination_drops_the_finishing_gaussian_and_all_later_ones():
    # at the pixel centre alpha = opacity. Five of 0.8: T = 0.2, ..., 0.2**5 = 3.2e-4, all added; the
    # sixth would bring T to 6.4e-5 <= 1e-4: the pixel is finished, and the seventh (alpha 0.1, which
    # alone would leave T = 2.9e-4 > 1e-4) is not added either. A faint one (alpha < 1/255) in between
    # changes nothing.
    opacities = torch.tensor([0.8, 0.8, 0.003, 0.8, 0.8, 0.8, 0.8, 0.1], dtype=torch.float64)
    means = torch.full((8, 2), 0.5, dtype=torch.float64)
    conics = torch.tensor([[1.0, 0.3, 2.0]] * 8, dtype=torch.float64)
    colors = 2.0 ** torch.arange(8, dtype=torch.float64)[:, None]
    for fn in (rasterize_gaussians, gaussian_rasterize_reference):
        image, alpha = fn(means, conics, colors, opacities, 1, 1, torch.tensor([1000.0], dtype=torch.float64))
        expected = sum(c * 0.8 * 0.2**i for i, c in enumerate([1, 2, 8, 16, 32]))
        torch.testing.assert_close(alpha, torch.tensor([[1 - 0.2**5]], dtype=torch.float64))
        torch.testing.assert_close(image, torch.tensor([[[expected + 0.2**5 * 1000]]], dtype=torch.float64))
        _, _, stats = composite_loop(means, conics, colors, opacities, 1, 1)
        assert stats == {**stats, "terminated": 1, "alpha_skipped": 1, "added": 5}
    # opacity 1 is clamped to alpha 0.99
    image, alpha = rasterize_gaussians(means[:1], conics[:1], colors[:1], torch.ones(1).double(), 1, 1)
    torch.testing.assert_close(alpha, torch.tensor([[0.99]], dtype=torch.float64))


def test_one_gaussian_is_its_closed_form():
    mean = torch.tensor([[4.3, 2.8]], dtype=torch.float64)
    conic = torch.tensor([conic_of(1.7, 1.1, 0.6)], dtype=torch.float64)
    color = torch.tensor([[0.3, -1.5]], dtype=torch.float64)  # any real features
    opacity = torch.tensor([0.8], dtype=torch.float64)
    image, alpha = rasterize_gaussians(mean, conic, color, opacity, 9, 6)
    ys, xs = torch.meshgrid(
        torch.arange(6, dtype=torch.float64) + 0.5, torch.arange(9, dtype=torch.float64) + 0.5, indexing="ij"
    )
    dx, dy = xs - 4.3, ys - 2.8
    a, b, c = conic[0].tolist()
    expected_alpha = 0.8 * torch.exp(-0.5 * (a * dx**2 + c * dy**2) - b * dx * dy)
    expected_alpha = torch.where(expected_alpha >= 1 / 255, expected_alpha, 0.0)
    assert bool((expected_alpha == 0).any())  # some pixels are beyond the 1/255 cut
    torch.testing.assert_close(alpha, expected_alpha, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(image, expected_alpha[..., None] * color[0], rtol=1e-12, atol=1e-14)


def test_background_shows_through_the_transmittance():
    scene = random_scene(30, 12, 9, c=4, dtype=torch.float64, seed=1)
    background = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64)
    black, alpha = rasterize_gaussians(*scene, 12, 9)
    image, alpha_bg = rasterize_gaussians(*scene, 12, 9, background)
    assert torch.equal(alpha, alpha_bg) and bool((alpha >= 0).all()) and bool((alpha < 1).all())
    torch.testing.assert_close(image, black + (1 - alpha)[..., None] * background, rtol=1e-12, atol=1e-12)


def test_no_gaussians_gives_the_background():
    empty = (torch.zeros(0, 2), torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0))
    background = torch.tensor([0.1, 0.2, 0.3])
    for fn in (rasterize_gaussians, gaussian_rasterize_reference):
        image, alpha = fn(*empty, 5, 4, background)
        assert torch.equal(image, background.expand(4, 5, 3)) and torch.equal(alpha, torch.zeros(4, 5))
        image, alpha = fn(*empty, 5, 4)
        assert torch.equal(image, torch.zeros(4, 5, 3))


@pytest.mark.parametrize("seed", [0, 1])
def test_culling_keeps_the_result(seed):
    # many Gaussians, some far outside, some opaque enough to finish pixels, several tiles of 16
    scene = random_scene(300, 45, 37, dtype=torch.float64, seed=seed, opacity_min=0.002)
    background = torch.tensor([0.3, 0.2, 0.1], dtype=torch.float64)
    culled = rasterize_reference(*scene, 45, 37, background)
    uncut = rasterize_reference(*scene, 45, 37, background, cull=False)
    torch.testing.assert_close(culled, uncut, rtol=0, atol=1e-13)
    ids, offsets = tile_lists(scene[0], scene[1], scene[3], 45, 37, 16)
    assert offsets.shape == (3 * 3 + 1,) and int(offsets[-1]) < 300 * 9  # it does cull
    for t in range(9):  # each list in compositing order
        part = ids[int(offsets[t]) : int(offsets[t + 1])]
        assert bool((part[1:] > part[:-1]).all())


def test_float32_and_half_precision():
    scene = random_scene(80, 20, 14, dtype=torch.float64, seed=2)
    truth = rasterize_reference(*scene, 20, 14, torch.zeros(3, dtype=torch.float64))
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        image, alpha = rasterize_gaussians(*(t.to(dtype) for t in scene), 20, 14)
        assert image.dtype == alpha.dtype == dtype
        assert rel_rms_error(image, truth[0]) < tol and rel_rms_error(alpha, truth[1]) < tol


def test_gradcheck():
    # no Gaussian near a threshold: opacities below 0.99, alpha above 1/255 everywhere, T stays > 0.1
    means = torch.tensor([[1.2, 0.9], [2.6, 1.8], [1.9, 2.4]], dtype=torch.float64)
    conics = torch.tensor([conic_of(2.5, 2.0, 0.4), conic_of(3.0, 2.2, -0.7), conic_of(2.2, 2.8, 1.1)])
    conics = conics.double()
    colors = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]], dtype=torch.float64)
    opacities = torch.tensor([0.5, 0.6, 0.4], dtype=torch.float64)
    background = torch.tensor([0.3, -0.2], dtype=torch.float64)
    _, _, stats = composite_loop(means, conics, colors, opacities, 4, 3, background)
    assert stats["alpha_skipped"] == 0 and stats["terminated"] == 0 and stats["margin"] > 0.1
    leaves = tuple(t.clone().requires_grad_() for t in (means, conics, colors, opacities, background))

    def render(m, q, c, o, bg):
        return rasterize_gaussians(m, q, c, o, 4, 3, bg)

    assert torch.autograd.gradcheck(render, leaves)
    assert torch.autograd.gradcheck(lambda *t: gaussian_rasterize_reference(*t[:4], 4, 3, t[4]), leaves)


def test_gradients_are_finite_at_a_working_size():
    scene = random_scene(500, 64, 64, seed=3, opacity_min=0.01)
    leaves = [t.clone().requires_grad_() for t in scene]
    image, alpha = rasterize_gaussians(*leaves, 64, 64)
    (image.square().sum() + alpha.sum()).backward()
    for leaf in leaves:
        assert leaf.grad is not None and bool(leaf.grad.isfinite().all()) and bool(leaf.grad.abs().sum() > 0)
    # far-away and huge inputs: a finite image, finite gradients of the colors and opacities
    means = torch.tensor([[1e30, -1e30], [3.0, 2.0]], requires_grad=True)
    conics = torch.tensor([[1.0, 0.2, 1.0], [0.5, 0.0, 0.5]], requires_grad=True)
    colors = torch.ones(2, 3, requires_grad=True)
    opacities = torch.tensor([0.9, 0.9], requires_grad=True)
    image, alpha = rasterize_gaussians(means, conics, colors, opacities, 6, 4)
    image.sum().backward()
    assert bool(image.isfinite().all()) and bool(colors.grad.isfinite().all())
    assert bool(opacities.grad.isfinite().all())


def test_torch_library_registration_and_compile():
    scene = random_scene(20, 10, 7, seed=4)
    args = (*scene, 10, 7, torch.tensor([0.1, 0.2, 0.3]), 8)
    op = torch.ops.icml_kernels.gaussian_rasterize.default
    torch.library.opcheck(op, args)
    fn = torch.compile(
        lambda *t: rasterize_gaussians(*t, 10, 7, args[6], tile_size=8), backend="eager", fullgraph=True
    )
    for got, expected in zip(fn(*scene), op(*args), strict=True):
        torch.testing.assert_close(got, expected)


def test_dispatch_honours_the_request(monkeypatch):
    scene = random_scene(5, 6, 4, seed=5)
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelUnavailableError, match="gaussian_rasterize"):
        rasterize_gaussians(*scene, 6, 4)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(KernelUnavailableError, match="float64"):
        rasterize_gaussians(*(t.double() for t in scene), 6, 4)
    with pytest.raises(KernelUnavailableError, match="color channels"):
        rasterize_gaussians(*scene[:2], torch.rand(5, 6), scene[3], 6, 4)
    monkeypatch.setenv("ICML_KERNELS_IMPL", "torch")
    assert rasterize_gaussians(*scene[:2], torch.rand(5, 6), scene[3], 6, 4)[0].shape == (4, 6, 6)


# --- bad input -----------------------------------------------------------------------------------------
M, Q, COL, OP = random_scene(5, 6, 4, seed=6)
BG = torch.tensor([0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    "change, error, name",
    [
        ({"means2d": M.numpy()}, TypeError, "means2d must be a torch.Tensor"),
        ({"means2d": M.int()}, TypeError, "means2d must have a floating dtype"),
        ({"means2d": M[:, :1]}, ValueError, "means2d must have shape"),
        ({"means2d": M[None]}, ValueError, "means2d must have shape"),
        ({"conics": Q.double()}, TypeError, "conics must have the dtype of means2d"),
        ({"conics": Q[:4]}, ValueError, "conics must have shape"),
        ({"conics": Q[:, :2]}, ValueError, "conics must have shape"),
        ({"colors": COL[:, :0]}, ValueError, "colors must have shape"),
        ({"colors": COL[0]}, ValueError, "colors must have shape"),
        ({"colors": COL[:3]}, ValueError, "colors must have shape"),
        ({"colors": COL.half()}, TypeError, "colors must have the dtype"),
        ({"opacities": OP[:, None]}, ValueError, "opacities must have shape"),
        ({"opacities": OP + 1}, ValueError, "opacities must lie in"),
        ({"opacities": -OP}, ValueError, "opacities must lie in"),
        ({"background": BG[:2]}, ValueError, "background must have shape"),
        ({"background": BG.double()}, TypeError, "background must have the dtype"),
        ({"background": [0.0, 0.0, 0.0]}, TypeError, "background must be a torch.Tensor"),
        ({"width": 0}, ValueError, "width must be in 1..8192"),
        ({"width": 8193}, ValueError, "width must be in"),
        ({"width": 6.0}, TypeError, "width must be an int"),
        ({"height": -1}, ValueError, "height must be in"),
        ({"height": True}, TypeError, "height must be an int"),
        ({"tile_size": 12}, ValueError, "tile_size must be one of"),
        ({"tile_size": "16"}, TypeError, "tile_size must be an int"),
        ({"means2d": M.clone().fill_(math.nan)}, ValueError, "means2d must be finite"),
        ({"conics": Q.clone().fill_(math.inf)}, ValueError, "conics must be finite"),
        ({"colors": COL.clone().fill_(math.nan)}, ValueError, "colors must be finite"),
        ({"opacities": OP.clone().fill_(math.nan)}, ValueError, "opacities must be finite"),
        ({"background": BG.clone().fill_(-math.inf)}, ValueError, "background must be finite"),
        ({"conics": -Q}, ValueError, "conics must hold positive definite"),
        ({"conics": Q * torch.tensor([1.0, 0.0, 0.0])}, ValueError, "conics must hold positive definite"),
        ({"conics": torch.tensor([[1.0, 2.0, 1.0]] * 5)}, ValueError, "conics must hold positive definite"),
        ({"conics": torch.tensor([[1.0, 1.0, 1.0]] * 5)}, ValueError, "conics must hold positive definite"),
    ],
)
def test_bad_input_raises_naming_the_argument(change, error, name):
    kwargs = {"means2d": M, "conics": Q, "colors": COL, "opacities": OP, "width": 6, "height": 4}
    kwargs |= {"background": BG, "tile_size": 16}
    kwargs.update(change)
    for fn in (rasterize_gaussians, gaussian_rasterize_reference):
        with pytest.raises(error, match=name):
            fn(**kwargs)


def test_devices_must_agree():
    meta = torch.zeros(5, 3, device="meta")
    with pytest.raises(ValueError, match="colors must be on the device of means2d"):
        rasterize_gaussians(M, Q, meta, OP, 6, 4)


def test_registered_op_checks_shapes_not_data():
    with pytest.raises(ValueError, match="opacities must have shape"):
        torch.ops.icml_kernels.gaussian_rasterize(M, Q, COL, OP[:4], 6, 4, BG, 16)
    with pytest.raises(ValueError, match="tile_size must be one of"):
        torch.ops.icml_kernels.gaussian_rasterize(M, Q, COL, OP, 6, 4, BG, 4)


def test_overflow_warns(monkeypatch):
    # the image is a convex combination of the colors and the background (weights alpha * T and the final
    # T sum to 1), so finite inputs overflow only by rounding at the top of the range: here simulated
    from icml_kernels.gaussian_rasterize import op

    real = op.rasterize_reference
    big = torch.tensor([math.inf, 0.0, 0.0])
    monkeypatch.setattr(op, "rasterize_reference", lambda *a: (real(*a)[0] + big, real(*a)[1]))
    with pytest.warns(RuntimeWarning, match="rasterize_gaussians"):
        image, _ = rasterize_gaussians(M, Q, COL, OP, 6, 4, BG)
    assert not bool(image.isfinite().all())
