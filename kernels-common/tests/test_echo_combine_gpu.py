"""GPU tier: the compiled Triton echo combination kernel on CUDA against the torch reference (skipped
without CUDA)."""

from __future__ import annotations

import pytest
import torch

from icml_kernels import echo_combine
from icml_kernels.echo_combine.reference import combine_reference
from icml_kernels.testing import rel_rms_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6}


@pytest.fixture(autouse=True)
def kernel_only(monkeypatch):
    """The kernel or an error: a silent fallback to the reference would pass these tests untested."""
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")


def echo_inputs(B, H, R, F, S, D, Q, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(B, H, R, F, S, D, generator=gen)
    vbar = torch.randn(B, H, F, D, generator=gen)
    a, b = torch.randn(2, H, Q, F, generator=gen) / F
    anchor = torch.randint(0, R, (H, Q), generator=gen)
    key = (torch.arange(F) - torch.randint(-3, 4, (H, Q, 1), generator=gen)).clamp(0, F - 1)
    return tuple(t.cuda() for t in (u.to(dtype), vbar.to(dtype), a, b, anchor, key))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "shape",
    [(1, 8, 4, 16, 1024, 64, 12), (2, 3, 2, 5, 77, 40, 3), (1, 2, 1, 1, 1, 1, 1), (1, 2, 2, 8, 256, 128, 6)],
)
def test_cuda_kernel_matches_reference(dtype, shape):
    inputs = echo_inputs(*shape, dtype=dtype, seed=sum(shape))
    out = echo_combine(*inputs)
    assert out.dtype == dtype and out.is_cuda
    expected = combine_reference(inputs[0].double(), inputs[1].double(), *inputs[2:])
    assert rel_rms_error(out, expected) < TOL[dtype]


def test_cuda_gradient_runs_the_reference(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "auto")
    u, vbar, a, b, anchor, key = echo_inputs(1, 2, 2, 4, 64, 16, 3, dtype=torch.float32)
    a.requires_grad_()
    out = echo_combine(u, vbar, a, b, anchor, key)
    out.square().sum().backward()
    assert a.grad is not None and a.grad.shape == a.shape
    assert rel_rms_error(out, combine_reference(u, vbar, a.detach(), b, anchor, key)) < 1e-6
