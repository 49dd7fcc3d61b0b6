"""icml_generative.kinematics_gs: the renderer against finite differences, a closed form and an independent
per-pixel reference; the blur covariance against sub-frame-averaged samples; the motion frame; the split;
save / load; training on a tiny video; bad input."""

import math

import numpy as np
import pytest
import torch

from icml_generative.kinematics_gs import (
    KinematicsGS,
    TrainConfig,
    intrinsics,
    look_at,
    naive_rasterization,
    quat_scale_to_covar,
    quat_to_rotmat,
    rasterization,
    rotmat_to_quat,
    train_kinematics_gs,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # one torch thread for this module (root conftest)


def random_scene(n: int, seed: int = 0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 3, generator=gen, dtype=dtype) * torch.tensor([1.6, 1.6, 1.0], dtype=dtype)
    means = means - torch.tensor([0.8, 0.8, -0.5], dtype=dtype)
    q = torch.randn(n, 4, generator=gen, dtype=dtype)
    return {
        "means": means,
        "quats": q / q.norm(dim=-1, keepdim=True),
        "scales": torch.rand(n, 3, generator=gen, dtype=dtype) * 0.15 + 0.05,
        "opacities": torch.rand(n, generator=gen, dtype=dtype) * 0.8 + 0.1,
        "colors": torch.rand(n, 3, generator=gen, dtype=dtype),
    }


def camera(width: int, height: int, dtype=torch.float64):
    return look_at((0.2, -0.1, -2.5), (0.0, 0.0, 0.5)).to(dtype), intrinsics(width, height, 50.0).to(dtype)


# ------------------------------------------------------------------------------------------- renderer
def test_a_single_gaussian_renders_to_its_closed_form_projection():
    # camera at the origin looking down +z: J = [[f/z, 0, -f x/z^2], [0, f/z, -f y/z^2]]
    x, y, z, sigma, f, opacity = 0.1, -0.05, 2.0, 0.08, 30.0, 0.7
    K = torch.tensor([[f, 0, 8.0], [0, f, 6.0], [0, 0, 1]], dtype=torch.float64)
    mean = torch.tensor([[x, y, z]], dtype=torch.float64)
    color = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64)
    background = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64)
    image, alpha, _ = rasterization(
        mean, torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64), torch.full((1, 3), sigma, dtype=torch.float64),
        torch.tensor([opacity], dtype=torch.float64), color, torch.eye(4, dtype=torch.float64)[None], K[None],
        16, 12, backgrounds=background,
    )  # fmt: skip
    J = np.array([[f / z, 0, -f * x / z**2], [0, f / z, -f * y / z**2]])
    cov = J @ (sigma**2 * np.eye(3)) @ J.T + 0.3 * np.eye(2)
    inv = np.linalg.inv(cov)
    centre = np.array([f * x / z + 8.0, f * y / z + 6.0])
    expected = np.zeros((12, 16, 3))
    expected_alpha = np.zeros((12, 16))
    for i in range(12):
        for j in range(16):
            d = np.array([j + 0.5, i + 0.5]) - centre
            a = min(0.99, opacity * math.exp(-0.5 * d @ inv @ d))
            a = a if a >= 1 / 255 else 0.0
            expected[i, j] = a * color[0].numpy() + (1 - a) * background.numpy()
            expected_alpha[i, j] = a
    np.testing.assert_allclose(image[0].numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(alpha[0, ..., 0].numpy(), expected_alpha, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_renderer_equals_a_naive_per_pixel_reference(seed):
    s = random_scene(14, seed)
    viewmat, K = camera(11, 9)
    background = torch.tensor([0.3, 0.2, 0.1], dtype=torch.float64)
    image, _, _ = rasterization(
        s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], viewmat[None], K[None], 11, 9,
        backgrounds=background,
    )  # fmt: skip
    covars = quat_scale_to_covar(s["quats"], s["scales"])
    naive = naive_rasterization(
        s["means"], covars, s["opacities"], s["colors"], viewmat, K, 11, 9, background=background
    )
    assert np.abs(naive - background.numpy()).max() > 0.1  # the Gaussians are in view
    np.testing.assert_allclose(image[0].numpy(), naive, atol=1e-10)


def test_gaussians_behind_the_near_plane_are_dropped():
    s = random_scene(6, 3)
    viewmat, K = camera(10, 10)
    behind = {k: v.clone() for k, v in s.items()}
    behind["means"][0] = torch.tensor([0.2, -0.1, -3.0], dtype=torch.float64)  # behind the camera at z = -2.5
    kept = {k: v[1:] for k, v in s.items()}
    a = rasterization(*behind.values(), viewmat[None], K[None], 10, 10)[0]
    b = rasterization(*kept.values(), viewmat[None], K[None], 10, 10)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_renderer_gradients_match_finite_differences():
    s = random_scene(4, 5)
    s["opacities"] = torch.tensor([0.5, 0.4, 0.6, 0.3], dtype=torch.float64)  # below the 0.99 clamp
    viewmat, K = camera(7, 6)
    names = ("means", "scales", "opacities", "colors")

    def render(means, scales, opacities, colors):
        return rasterization(means, s["quats"], scales, opacities, colors, viewmat[None], K[None], 7, 6)[0]

    inputs = tuple(s[n].clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(render, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_quaternion_round_trip_and_rotations():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(500, 4, generator=gen, dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True)
    q = torch.where(q[:, :1] < 0, -q, q)
    R = quat_to_rotmat(q)
    torch.testing.assert_close(R @ R.transpose(1, 2), torch.eye(3, dtype=torch.float64).expand(500, 3, 3))
    torch.testing.assert_close(torch.linalg.det(R), torch.ones(500, dtype=torch.float64))
    torch.testing.assert_close(rotmat_to_quat(R), q)


# ----------------------------------------------------------------------------------------------- model
def moving_model(velocity, *, exposure=0.05, aligned=False, dtype=torch.float64) -> KinematicsGS:
    """One Gaussian at the origin moving as ``a·sin(2πt)`` (velocity ``2πa`` at t = 0), double precision."""
    model = KinematicsGS(
        1, frequencies=1, hidden=0, blur="kinematic", exposure=exposure, motion_aligned=aligned
    )
    model = model.to(dtype)
    motion = torch.zeros(1, 2, 3, dtype=dtype)
    motion[0, 0] = torch.as_tensor(velocity, dtype=dtype) / (2 * math.pi)
    model.initialize(torch.zeros(1, 3, dtype=dtype), scale=0.1, motion=motion)
    with torch.no_grad():
        model.log_scales.copy_(torch.log(torch.tensor([[0.1, 0.05, 0.02]], dtype=dtype)))
        model.quats.copy_(torch.tensor([[0.9, 0.1, -0.3, 0.2]], dtype=dtype))
    return model


def test_the_blur_covariance_equals_sub_frame_averaged_samples_for_linear_motion():
    # near t = 0 the motion is linear to 3e-3 over the exposure; sample the Gaussian at uniform sub-frame times
    T = 0.05
    model = moving_model([6.0, 3.0, -1.5], exposure=T)
    _, sigma, blurred = (c[0].detach() for c in model.blur_covariances(0.0))
    gen = torch.Generator().manual_seed(0)
    m = 400_000
    s = (torch.rand(m, generator=gen, dtype=torch.float64) - 0.5) * T
    centres = torch.stack([model.positions(float(u))[0] for u in s[:2000]])  # the true sub-frame positions
    centres = centres[torch.randint(0, 2000, (m,), generator=gen)]
    L = torch.linalg.cholesky(sigma.detach())
    samples = centres.detach() + torch.randn(m, 3, generator=gen, dtype=torch.float64) @ L.T
    empirical = torch.cov(samples.T)
    relative = float((empirical - blurred).norm() / blurred.norm())
    assert relative < 1e-2, relative
    assert float((blurred - sigma).norm() / sigma.norm()) > 0.5  # the blur term is not negligible


def test_velocities_are_the_derivative_of_the_deformation():
    model = moving_model([1.0, -2.0, 0.5])
    torch.testing.assert_close(
        model.velocities(0.0)[0].detach(),
        torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64),
        rtol=1e-5,
        atol=1e-6,
    )
    torch.testing.assert_close(
        model.velocities(0.25)[0].detach(), torch.zeros(3, dtype=torch.float64), atol=1e-5, rtol=0
    )


def test_the_motion_frame_follows_the_axis_of_motion_not_its_direction():
    model = moving_model([1.0, 2.0, 0.0], aligned=True)
    frames, moving = model.motion_frames(model.velocities(0.1))
    back, _ = model.motion_frames(-model.velocities(0.1))
    assert bool(moving.all())
    axis = torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64) / math.sqrt(5)
    assert abs(float(frames[0, :, 0].detach() @ axis)) == pytest.approx(1.0)
    torch.testing.assert_close(frames, back)  # v and -v: the same frame
    torch.testing.assert_close(frames[0].T @ frames[0], torch.eye(3, dtype=torch.float64))
    # the covariance turns with the motion: the same shape in the frame of a perpendicular motion
    sigma = model.covariances(0.1)[1][0]
    turned = moving_model([-2.0, 1.0, 0.0], aligned=True)
    sigma_turned = turned.covariances(0.1)[1][0]
    torch.testing.assert_close(torch.linalg.eigvalsh(sigma), torch.linalg.eigvalsh(sigma_turned))
    assert float((sigma - sigma_turned).abs().max()) > 1e-4


def test_the_split_marks_the_mover_and_freezes_the_others():
    model = KinematicsGS(6, frequencies=2, hidden=0).double()
    motion = torch.zeros(6, 4, 3, dtype=torch.float64)
    motion[2, 0] = torch.tensor([0.3, 0.0, 0.0])  # the mover: variance 0.045
    motion[4, 1] = torch.tensor([0.0, 0.01, 0.0])  # a wobble: variance 5e-5
    model.initialize(torch.randn(6, 3, dtype=torch.float64), motion=motion)
    times = torch.linspace(0, 1, 11)[:-1]
    variance = model.deformation_variance(times)
    assert float(variance[2]) == pytest.approx(0.045, rel=1e-6) and float(variance[4]) < 1e-4
    before = model.positions(0.3).detach()
    dynamic = model.split_static_dynamic(times, 1e-3)
    assert dynamic.tolist() == [False, False, True, False, False, False]
    torch.testing.assert_close(model.positions(0.3)[2], before[2])  # the mover is unchanged
    torch.testing.assert_close(model.positions(0.3)[4], model.positions(0.7)[4])  # the others are static


def test_save_load_gives_identical_renders(tmp_path):
    torch.manual_seed(0)
    model = KinematicsGS(5, blur="kinematic", exposure=0.1, hidden=8)
    model.initialize(torch.randn(5, 3) * 0.3 + torch.tensor([0, 0, 1.0]), motion=torch.randn(5, 4, 3) * 0.1)
    with torch.no_grad():
        for p in model.field.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.stage.fill_(2)
    viewmat, K = camera(12, 10, torch.float32)
    model.save(tmp_path / "gs")
    loaded = KinematicsGS.load(tmp_path / "gs")
    for t in (0.0, 0.4):
        torch.testing.assert_close(
            loaded.render(viewmat, K, t, 12, 10), model.render(viewmat, K, t, 12, 10), rtol=0, atol=0
        )
    assert loaded.config() == model.config()
    with pytest.raises(ValueError, match="path"):
        KinematicsGS.load(tmp_path / "nothing")


def test_blur_modes_agree_on_a_static_scene_and_differ_on_a_moving_one():
    viewmat, K = camera(12, 10, torch.float32)
    renders = {}
    for mode in ("none", "kinematic", "subframe"):
        torch.manual_seed(0)
        model = KinematicsGS(4, blur=mode, exposure=0.1, hidden=0, subframes=6)
        model.initialize(torch.randn(4, 3) * 0.3 + torch.tensor([0, 0, 1.0]), scale=0.08)
        static = model.render(viewmat, K, 0.2, 12, 10)
        with torch.no_grad():
            model.coefficients[:, 0] = torch.tensor([1.0, 0.0, 0.0])
        renders[mode] = (
            static,
            model.render(viewmat, K, 0.0, 12, 10),
            model.render(viewmat, K, 0.0, 12, 10, sharp=True),
        )
    for mode in ("kinematic", "subframe"):
        torch.testing.assert_close(renders[mode][0], renders["none"][0], rtol=0, atol=1e-6)
        torch.testing.assert_close(renders[mode][2], renders["none"][1])  # sharp=True renders the sharp frame
        assert float((renders[mode][1] - renders["none"][1]).abs().max()) > 1e-2  # blurred
    # the Σ_blur render approximates the sub-frame average better than the sharp frame does
    err_kin = float((renders["kinematic"][1] - renders["subframe"][1]).abs().mean())
    err_none = float((renders["none"][1] - renders["subframe"][1]).abs().mean())
    assert err_kin < 0.5 * err_none


def test_training_fits_a_tiny_blurry_video():
    torch.manual_seed(0)
    truth = KinematicsGS(6, blur="subframe", exposure=0.1, hidden=0, subframes=8)
    truth.initialize(torch.randn(6, 3) * 0.3 + torch.tensor([0, 0, 1.0]), colors=torch.rand(6, 3), scale=0.1)
    with torch.no_grad():
        truth.coefficients[:3, 0] = torch.tensor([0.3, 0.1, 0.0])
        truth.opacity_logits.fill_(2.0)
    viewmat, K = camera(12, 10, torch.float32)
    times = torch.arange(6) / 6
    with torch.no_grad():
        video = torch.stack([truth.render(viewmat, K, float(t), 12, 10) for t in times])
    model = KinematicsGS(6, blur="kinematic", exposure=0.1, hidden=0)
    model.initialize(
        truth.means.detach() + 0.02 * torch.randn(6, 3),
        colors=torch.full((6, 3), 0.5),
        scale=0.1,
        motion=truth.coefficients.detach(),
    )
    log = train_kinematics_gs(
        model,
        video,
        viewmat.expand(6, 4, 4),
        K.expand(6, 3, 3),
        times,
        TrainConfig(steps=150, split_at=0.5, split_threshold=0.01),
    )
    assert len(log.loss) == 150 and log.dynamic is not None
    assert np.mean(log.loss[-10:]) < 0.5 * np.mean(log.loss[:10])
    assert log.dynamic.tolist() == [True] * 3 + [False] * 3
    assert not model.training


# ------------------------------------------------------------------------------------------- bad input
def test_bad_gaussians_are_clear_errors():
    s = random_scene(3)
    viewmat, K = camera(8, 8)
    cams = (viewmat[None], K[None], 8, 8)
    zero_q = s["quats"].clone()
    zero_q[1] = 0
    with pytest.raises(ValueError, match="quats"):
        rasterization(s["means"], zero_q, s["scales"], s["opacities"], s["colors"], *cams)
    with pytest.raises(ValueError, match="scales"):
        rasterization(s["means"], s["quats"], -s["scales"], s["opacities"], s["colors"], *cams)
    with pytest.raises(ValueError, match="opacities"):
        rasterization(s["means"], s["quats"], s["scales"], s["opacities"][:2], s["colors"], *cams)
    with pytest.raises(ValueError, match="colors"):
        rasterization(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"][:, None], *cams)
    with pytest.raises(ValueError, match="Ks"):
        rasterization(
            s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], viewmat[None], K, 8, 8
        )
    with pytest.raises(ValueError, match="width"):
        rasterization(
            s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], viewmat[None], K[None], 0, 8
        )
    with pytest.raises(ValueError, match="blur"):
        KinematicsGS(3, blur="motion")
    with pytest.raises(ValueError, match="exposure"):
        KinematicsGS(3, exposure=-0.1)
