"""Interpreter tier: the Triton FWHT kernel, run by Triton's CPU interpreter, against the reference.
Tiny shapes, no bf16 (the interpreter has none)."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import fwht, fwht_reference
from icml_kernels.testing import rel_rms_error

pytestmark = pytest.mark.interpret
triton_fwht = pytest.importorskip("icml_kernels.fwht.triton_fwht")


@pytest.mark.parametrize("rows", [1, 3, 17])
@pytest.mark.parametrize("n", [1, 2, 8, 64, 256])
def test_kernel_matches_reference_float32(rows, n):
    torch.manual_seed(rows * 1000 + n)
    x = torch.randn(rows, n)
    scale = 1 / math.sqrt(n)
    y = triton_fwht.fwht_triton(x, scale)
    assert rel_rms_error(y, fwht_reference(x, scale)) < 1e-6


def test_kernel_float16_and_batch_dims():
    torch.manual_seed(3)
    x = torch.randn(2, 3, 32).half()
    y = triton_fwht.fwht_triton(x, 0.5)
    assert y.dtype == torch.float16 and y.shape == x.shape
    assert rel_rms_error(y, fwht_reference(x, 0.5)) < 1e-3


@pytest.mark.parametrize("n", [64, 512])
def test_two_pass_path_for_long_rows(monkeypatch, n):
    # A small MAX_ROW sends these rows through H_A ⊗ H_B (n=512 also recurses: A = 32 > 16).
    monkeypatch.setattr(triton_fwht, "MAX_ROW", 16)
    torch.manual_seed(n)
    x = torch.randn(3, n)
    y = triton_fwht.fwht_triton(x, 1 / math.sqrt(n))
    assert rel_rms_error(y, fwht_reference(x, 1 / math.sqrt(n))) < 1e-6


def test_public_op_runs_the_kernel_when_forced(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    calls = []
    real = triton_fwht.fwht_triton
    monkeypatch.setattr(triton_fwht, "fwht_triton", lambda x, s: calls.append(x.shape) or real(x, s))
    x = torch.randn(4, 16, requires_grad=True)
    y = fwht(x)
    g = torch.randn(4, 16)
    (y * g).sum().backward()
    assert len(calls) == 2  # forward and backward both ran the kernel
    assert rel_rms_error(y, fwht_reference(x.detach(), 0.25)) < 1e-6
    assert rel_rms_error(x.grad, fwht_reference(g, 0.25)) < 1e-6


def test_empty_batch():
    assert triton_fwht.fwht_triton(torch.randn(0, 8), 1.0).shape == (0, 8)
