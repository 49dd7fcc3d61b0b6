"""Interpreter tier: the Triton echo combination kernel, run by Triton's CPU interpreter, against the torch
reference (relative RMS error; outputs are NaN-poisoned). Tiny shapes, no bf16."""

from __future__ import annotations

import pytest
import torch

from icml_kernels import echo_combine
from icml_kernels.echo_combine.reference import combine_reference
from icml_kernels.testing import rel_rms_error

pytestmark = pytest.mark.interpret
tec = pytest.importorskip("icml_kernels.echo_combine.triton_echo_combine")


def echo_inputs(B, H, R, F, S, D, Q, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(B, H, R, F, S, D, generator=gen).to(dtype)
    vbar = torch.randn(B, H, F, D, generator=gen).to(dtype)
    a, b = torch.randn(2, H, Q, F, generator=gen)
    anchor = torch.randint(0, R, (H, Q), generator=gen)
    shift = torch.randint(-2, 3, (H, Q, 1), generator=gen)
    key = (torch.arange(F) - shift).clamp(0, F - 1)  # the same-temporal-offset variant
    return u, vbar, a, b, anchor, key


@pytest.mark.parametrize(
    "shape", [(2, 3, 2, 5, 7, 4, 3), (1, 2, 3, 4, 33, 16, 2), (1, 1, 1, 1, 1, 1, 1), (1, 2, 2, 3, 300, 24, 2)]
)
def test_kernel_matches_reference(shape):
    inputs = echo_inputs(*shape, seed=sum(shape))
    out = tec.echo_combine_triton(*inputs)
    assert out.dtype == torch.float32
    assert rel_rms_error(out, combine_reference(*inputs)) < 1e-6


def test_kernel_float16_and_zero_targets():
    inputs = echo_inputs(1, 2, 2, 4, 20, 8, 3, dtype=torch.float16, seed=1)
    out = tec.echo_combine_triton(*inputs)
    assert out.dtype == torch.float16
    assert rel_rms_error(out, combine_reference(*inputs)) < 2e-3
    empty = echo_inputs(1, 2, 2, 4, 20, 8, 0)
    assert tec.echo_combine_triton(*empty).shape == (1, 2, 0, 20, 8)


def test_public_op_runs_the_kernel_when_forced(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    calls = []
    real = tec.echo_combine_triton
    monkeypatch.setattr(tec, "echo_combine_triton", lambda *a: calls.append(1) or real(*a))
    inputs = echo_inputs(1, 2, 2, 3, 5, 4, 2, seed=2)
    out = echo_combine(*inputs)
    assert calls == [1]
    assert rel_rms_error(out, combine_reference(*inputs)) < 1e-6
    # with a gradient wanted, the differentiable reference runs instead of the forward-only kernel
    u = inputs[0].clone().requires_grad_()
    echo_combine(u, *inputs[1:]).sum().backward()
    assert calls == [1] and u.grad is not None
