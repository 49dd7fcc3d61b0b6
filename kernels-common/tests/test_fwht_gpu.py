"""GPU tier: the compiled Triton FWHT on CUDA against the reference (skipped without CUDA)."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import fwht, fwht_reference, hadamard_matrix
from icml_kernels.testing import rel_rms_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("rows", [1, 7, 4096])
@pytest.mark.parametrize("n", [1, 2, 16, 128, 1024, 8192, 1 << 14, 1 << 15, 1 << 16])
def test_cuda_kernel_float32(rows, n, monkeypatch):
    if rows * n > 1 << 26:
        pytest.skip("too large for a unit test")
    monkeypatch.delenv("ICML_KERNELS_IMPL", raising=False)
    torch.manual_seed(n + rows)
    x = torch.randn(rows, n, device="cuda")
    y = fwht(x)
    expected = fwht_reference(x.double().cpu(), 1 / math.sqrt(n))
    assert rel_rms_error(y.cpu(), expected) < 1e-6


def test_cuda_float64_runs_the_reference_on_the_gpu():
    x = torch.randn(9, 1 << 12, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    y = fwht(x.cuda())
    assert y.device.type == "cuda" and y.dtype == torch.float64
    torch.testing.assert_close(y.cpu(), fwht(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_cuda_kernel_half(dtype, tol):
    x = torch.randn(33, 512, device="cuda").to(dtype)
    y = fwht(x)
    assert y.dtype == dtype
    assert rel_rms_error(y.float().cpu(), fwht_reference(x.double().cpu(), 512**-0.5)) < tol


def test_cuda_matches_explicit_matrix_and_gradient():
    x = torch.randn(5, 256, device="cuda", requires_grad=True)
    y = fwht(x)
    h = hadamard_matrix(256).cuda() / 16
    assert rel_rms_error(y.double(), x.double() @ h) < 1e-6
    g = torch.randn_like(y)
    (y * g).sum().backward()
    assert rel_rms_error(x.grad.double(), g.double() @ h) < 1e-6
