"""Interpreter tier: the Triton block-sparse attention kernel, run by Triton's CPU interpreter, against the
torch reference (relative RMS error; outputs are NaN-poisoned). Tiny shapes, no bf16."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import block_sparse_attention, dense_block_index
from icml_kernels.block_sparse_attention.reference import attention_reference
from icml_kernels.testing import random_block_index, rel_rms_error

pytestmark = pytest.mark.interpret
tbs = pytest.importorskip("icml_kernels.block_sparse_attention.triton_block_sparse")


def check(q, k, v, index, block_size, scale, tol):
    out, lse = tbs.block_sparse_attention_triton(q, k, v, index, block_size, scale)
    expected, expected_lse = attention_reference(q, k, v, index, block_size, scale)
    assert out.dtype == q.dtype and lse.dtype == torch.float32
    assert rel_rms_error(out, expected) < tol
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))  # -inf exactly on the empty rows
    finite = lse.isfinite()
    assert rel_rms_error(lse[finite], expected_lse[finite]) < tol


@pytest.mark.parametrize(
    "n, block_size, d, lead",
    [(64, 16, 16, (2, 2)), (50, 16, 32, (2,)), (37, 32, 16, ()), (16, 16, 16, (1, 2)), (9, 16, 16, (2, 2))],
)
def test_kernel_matches_reference_float32(n, block_size, d, lead):
    gen = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(2, 2, n, d, generator=gen) for _ in range(3))
    blocks = math.ceil(n / block_size)
    index = random_block_index(lead, blocks, min(3, blocks), seed=n)
    check(q, k, v, index, block_size, 1 / math.sqrt(d), 1e-5)


def test_kernel_float16_every_block_and_no_block():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 48, 16, generator=gen).half() for _ in range(3))
    check(q, k, v, dense_block_index(48, 16), 16, 0.25, 2e-3)
    nothing = torch.full((3, 1), -1)
    out, lse = tbs.block_sparse_attention_triton(q, k, v, nothing, 16, 0.25)
    assert torch.equal(out, torch.zeros_like(q)) and bool((lse == -math.inf).all())
    out, _ = tbs.block_sparse_attention_triton(q, k, v, nothing[:, :0], 16, 0.25)  # MAXK = 0
    assert torch.equal(out, torch.zeros_like(q))


def test_public_op_runs_the_kernel_when_forced(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    calls = []
    real = tbs.block_sparse_attention_triton
    monkeypatch.setattr(tbs, "block_sparse_attention_triton", lambda *a: calls.append(1) or real(*a))
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 40, 16, generator=gen) for _ in range(3))
    out = block_sparse_attention(q, k, v, dense_block_index(40, 16), block_size=16)
    assert calls == [1]
    assert rel_rms_error(out, torch.nn.functional.scaled_dot_product_attention(q, k, v)) < 1e-5
