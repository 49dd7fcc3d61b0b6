"""Device checks on a faked CUDA device (the root conftest's ``fake_cuda``): what the library builds itself
(Fourier bases, masks, identity matrices, random draws, running sums, a predictor head) must land on the
device of the user's model and tensors. Fake tensors hold no values: only devices and shapes are checked.
``.numpy()`` without ``.cpu()`` is checked with a tensor that refuses ``.numpy()`` as a CUDA tensor does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from icml_generative.echo_attention import (
    EchoCalibrator,
    EchoPolicy,
    VideoLayout,
)
from icml_generative.jepa_guidance import mlp_encoder, train_jepa_encoder
from icml_generative.kinematics_gs import (
    KinematicsGS,
    intrinsics,
    look_at,
    naive_rasterization,
    quat_scale_to_covar,
    rotmat_to_quat,
)
from icml_generative.sampling import sliced_wasserstein
from icml_generative.sampling.metrics import spearman

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def on_cuda(t: torch.Tensor, shape: tuple[int, ...]) -> bool:
    return t.device.type == "cuda" and tuple(t.shape) == shape


class CudaLike(torch.Tensor):
    """A CPU tensor that refuses ``.numpy()`` as a CUDA tensor does; ``.cpu()`` gives a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.numpy:
            raise TypeError("can't convert cuda:0 device type tensor to numpy: use Tensor.cpu()")
        if func is torch.Tensor.cpu:
            with torch._C.DisableTorchFunctionSubclass():
                return args[0].clone()
        return super().__torch_function__(func, types, args, kwargs or {})


def cuda_like(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(CudaLike)


# -- kinematics_gs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hidden", [0, 16])
@pytest.mark.parametrize("stage", [1, 2])
def test_kinematics_gs_deformation_follows_the_model_device(fake_cuda, hidden, stage):
    torch.manual_seed(0)
    model = KinematicsGS(6, hidden=hidden, blur="kinematic", exposure=0.1)
    model.stage.fill_(stage)
    with fake_cuda(scalar=stage):  # int(model.stage) reads the stand-in
        model = model.to("cuda")
        assert on_cuda(model.motion_coefficients(), (6, 4, 3))
        assert on_cuda(model.positions(0.3), (6, 3))
        assert on_cuda(model.velocities(0.3), (6, 3))
        means, sharp, blurred = model.blur_covariances(0.3)
        assert on_cuda(means, (6, 3)) and on_cuda(sharp, (6, 3, 3)) and on_cuda(blurred, (6, 3, 3))


@pytest.mark.parametrize("motion_aligned", [True, False])
def test_kinematics_gs_frames_and_rotations_follow_the_model_device(fake_cuda, motion_aligned):
    torch.manual_seed(0)
    model = KinematicsGS(6, hidden=0, motion_aligned=motion_aligned)
    with fake_cuda():
        model = model.to("cuda")
        velocities = torch.randn(6, 3, device="cuda")
        frames, moving = model.motion_frames(velocities)
        assert on_cuda(frames, (6, 3, 3)) and on_cuda(moving, (6,))
        assert on_cuda(model.rotations(velocities), (6, 3, 3))
        means, sigma, v = model.covariances(0.3)
        assert on_cuda(means, (6, 3)) and on_cuda(sigma, (6, 3, 3)) and on_cuda(v, (6, 3))


def test_kinematics_gs_initialize_with_the_default_scale_on_cuda(fake_cuda):
    model = KinematicsGS(6, hidden=0)
    with fake_cuda():
        model = model.to("cuda")
        model.initialize(torch.randn(6, 3, device="cuda"), colors=torch.rand(6, 3, device="cuda"))
        assert on_cuda(model.means, (6, 3)) and on_cuda(model.log_scales, (6, 3))


def test_rotmat_to_quat_on_cuda(fake_cuda):
    with fake_cuda():
        for dtype in (torch.float32, torch.float64):
            rotations = torch.eye(3, device="cuda", dtype=dtype).expand(5, 3, 3)
            assert on_cuda(rotmat_to_quat(rotations), (5, 4))


def test_naive_rasterization_takes_cuda_tensors():
    gen = torch.Generator().manual_seed(0)
    means = torch.rand(4, 3, generator=gen, dtype=torch.float64) * 0.4 - 0.2
    quats = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    covars = quat_scale_to_covar(quats, torch.full((4, 3), 0.1, dtype=torch.float64))
    opacities = torch.full((4,), 0.7, dtype=torch.float64)
    colors = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    viewmat, K = look_at((0.0, 0.0, -2.5), (0.0, 0.0, 0.0)), intrinsics(7, 5, 50.0)
    background = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    args = (means, covars, opacities, colors, viewmat, K, 7, 5)
    expected = naive_rasterization(*args, background=background)
    moved = [cuda_like(a) if isinstance(a, torch.Tensor) else a for a in args]
    image = naive_rasterization(*moved, background=cuda_like(background))
    assert isinstance(image, np.ndarray) and np.array_equal(image, expected)


# -- echo_attention -----------------------------------------------------------------------------------------
def test_echo_calibrator_update_takes_cuda_inputs(fake_cuda):
    # adding CUDA sums into the CPU running sums raised; the checks after it only confirm nothing else moved
    layout = VideoLayout(frames=4, tokens_per_frame=4)
    cal = EchoCalibrator(layout, 2, 2)
    shapes = [tuple(t.shape) for t in (cal.gram, cal.rhs, cal.yy)]
    with fake_cuda():
        q, k, v = (torch.randn(3, 2, 16, 8, device="cuda") for _ in range(3))
        cal.update(q, k, v)
        cal.update(q, k, v)
    assert [t.device.type for t in (cal.gram, cal.rhs, cal.yy)] == ["cpu"] * 3
    assert [tuple(t.shape) for t in (cal.gram, cal.rhs, cal.yy)] == shapes and cal.count == 6


def no_backward(loss: torch.Tensor, *args, **kwargs) -> None:
    """``Tensor.backward`` stand-in: the autograd engine needs a real CUDA device for fake CUDA tensors (the
    device checks are on the forward pass; the optimizer then finds no gradients and steps nothing)."""


def dense_operator(route, layer, heads, q, k, v):
    """Every route as dense attention: the real sparse and Echo operators read index values, which fake
    tensors do not hold."""
    return F.scaled_dot_product_attention(q, k, v)


def test_mix_weights_on_the_cpu_combine_cuda_outputs(fake_cuda):
    layout = VideoLayout(frames=4, tokens_per_frame=4)
    policy = EchoPolicy(1, 2, 8, layout, block_size=4, anchor_stride=2, neighbor_frames=0)
    policy.operator = dense_operator
    policy.mode = "mix"
    policy.mix_weights = torch.softmax(policy.router_logits.detach(), -1)  # on the policy's device, the CPU
    with fake_cuda():
        q, k, v = (torch.randn(1, 2, 16, 8, device="cuda") for _ in range(3))
        assert on_cuda(policy.attention(0, q, k, v), (1, 2, 16, 8))


# -- jepa_guidance ------------------------------------------------------------------------------------------
def move_by_replacing(module: torch.nn.Module, *args, **kwargs) -> torch.nn.Module:
    """``Module.to`` for a module built inside fake mode: fake tensors cannot be swapped in place (the mode
    holds weak references to them), so the parameters are replaced, as ``.to`` replaces them for real."""
    device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    for m in module.modules():
        for key, p in m._parameters.items():
            if p is not None:
                moved = p.detach().to(device=device or p.device, dtype=dtype or p.dtype)
                m._parameters[key] = torch.nn.Parameter(moved, p.requires_grad)
    return module


@pytest.mark.parametrize("mask_ratio", [0.0, 0.5])
def test_train_jepa_encoder_on_cuda(fake_cuda, monkeypatch, mask_ratio):
    encoder = mlp_encoder(4, 3, (8,))
    with fake_cuda():
        encoder = encoder.to("cuda")
        data = torch.randn(32, 4, device="cuda")
        monkeypatch.setattr(torch.nn.Module, "to", move_by_replacing)  # for the predictor built in the call
        monkeypatch.setattr(torch.Tensor, "backward", no_backward)
        log = train_jepa_encoder(encoder, data, steps=2, batch_size=8, mask_ratio=mask_ratio)
        monkeypatch.undo()
        assert len(log["loss"]) == 2
        assert all(on_cuda(p, tuple(p.shape)) for p in log["predictor"].parameters())
        assert on_cuda(encoder(data), (32, 3))


# -- sampling -----------------------------------------------------------------------------------------------
def test_sliced_wasserstein_on_cuda(fake_cuda):
    with fake_cuda():
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(16, 3, device="cuda", dtype=dtype)
            assert isinstance(sliced_wasserstein(x, x + 1, n_projections=8), float)


def test_spearman_takes_cuda_tensors():
    a, b = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), torch.tensor([2.0, 1.0, 4.0, 3.0, 5.0])
    assert spearman(cuda_like(a), cuda_like(b)) == spearman(a, b) == pytest.approx(0.8)


# -- random draws: on the generator's device -----------------------------------------------------------------
def test_draws_with_a_generator_run_on_its_device():
    from icml_generative.validation import random_device

    assert random_device(None, "cpu") == "cpu" and random_device(None, None) is None
    assert random_device(torch.Generator(), "cuda") == torch.device("cpu")  # then moved to the data's device
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator or None, got str"):
        random_device("x", "cpu")
