"""GPU tier: the compiled Triton block-sparse attention kernel (and the flex_attention path) on CUDA
against the torch reference (skipped without CUDA)."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import block_sparse_attention, block_sparse_attention_flex, dense_block_index
from icml_kernels.block_sparse_attention.reference import attention_reference
from icml_kernels.testing import rel_rms_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}


@pytest.fixture(autouse=True)
def kernel_only(monkeypatch):
    """The kernel or an error: a silent fallback to the reference would pass these tests untested."""
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")


def random_block_index(b, h, n_blocks, density, seed):
    """(B, H, NQB, MAXK): each query block keeps its diagonal block and each other key block with
    probability ``density``, in random order, padded with -1; a few rows are emptied."""
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand(b, h, n_blocks, n_blocks, generator=gen) < density
    keep |= torch.eye(n_blocks, dtype=torch.bool)
    keep[..., 1, :] = False  # query block 1 sees nothing: zero rows
    order = torch.rand(b, h, n_blocks, n_blocks, generator=gen).argsort(-1)  # random order per row
    kept = keep.gather(-1, order)
    index = torch.where(kept, order, -1).gather(-1, (~kept).to(torch.int8).argsort(dim=-1, stable=True))
    index = index[..., : int(keep.sum(-1).max())]  # listed blocks first: trim the all-padding columns
    shuffle = torch.rand(index.shape, generator=gen).argsort(-1)  # then padding at random places
    return index.gather(-1, shuffle)


def compare(q, k, v, index, block_size, tol):
    scale = 1 / math.sqrt(q.shape[-1])
    out, lse = block_sparse_attention(q, k, v, index, block_size=block_size, return_lse=True)
    expected, expected_lse = attention_reference(q.double(), k.double(), v.double(), index, block_size, scale)
    assert out.dtype == q.dtype and lse.dtype == torch.float32
    assert rel_rms_error(out, expected) < tol
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))
    finite = lse.isfinite()
    assert rel_rms_error(lse[finite], expected_lse[finite]) < tol


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "b, h, n, d, block_size, density",
    [
        (2, 4, 1000, 64, 64, 0.3),
        (1, 2, 2048, 128, 64, 0.2),
        (1, 2, 1500, 64, 128, 0.3),
        (1, 2, 1100, 128, 32, 0.3),
        (1, 3, 777, 32, 32, 0.5),
        (2, 2, 300, 16, 16, 0.4),
    ],
)
def test_cuda_kernel_matches_reference(dtype, b, h, n, d, block_size, density):
    if dtype == torch.float32 and (block_size > 64 or block_size * d > 64 * 64):
        pytest.skip("the float32 kernel takes tiles up to 64 * 64 (the reference runs)")
    gen = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(b, h, n, d, generator=gen).to("cuda", dtype) for _ in range(3))
    index = random_block_index(b, h, math.ceil(n / block_size), density, seed=d).cuda()
    compare(q, k, v, index, block_size, TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_kernel_8k_tokens(dtype):
    b, h, n, d, bs = 1, 4, 8192, 64, 64
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(b, h, n, d, generator=gen).to("cuda", dtype) for _ in range(3))
    index = random_block_index(1, h, n // bs, 0.1, seed=8)[0].cuda()  # (H, NQB, MAXK): broadcast over B
    compare(q, k, v, index, bs, TOL[dtype])
    dense = block_sparse_attention(q, k, v, dense_block_index(n, bs).cuda(), block_size=bs)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert rel_rms_error(dense, sdpa) < TOL[dtype]


@pytest.mark.parametrize("d, block_size", [(16, 16), (16, 128), (256, 16), (256, 64), (128, 128)])
def test_cuda_kernel_extreme_tiles(d, block_size):
    gen = torch.Generator().manual_seed(d + block_size)
    q, k, v = (torch.randn(1, 2, 500, d, generator=gen).to("cuda", torch.float16) for _ in range(3))
    index = random_block_index(1, 2, math.ceil(500 / block_size), 0.5, seed=d).cuda()
    compare(q, k, v, index, block_size, TOL[torch.float16])


def test_cuda_gradients_and_float64_run_the_reference(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "auto")
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 200, 32, generator=gen, dtype=torch.float64).cuda() for _ in range(3))
    index = dense_block_index(200, 64).cuda()
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert rel_rms_error(block_sparse_attention(q, k, v, index), sdpa) < 1e-12
    q32 = q.float().requires_grad_()
    block_sparse_attention(q32, k.float(), v.float(), index).sum().backward()
    assert q32.grad is not None and bool(q32.grad.isfinite().all())


@pytest.mark.parametrize("n", [4096, 1000])
def test_cuda_flex_path_matches_reference(n):
    gen = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 4, n, 64, generator=gen).to("cuda", torch.float16) for _ in range(3))
    index = random_block_index(1, 4, math.ceil(n / 64), 0.25, seed=n).cuda()
    out = block_sparse_attention_flex(q, k, v, index, block_size=64)
    expected, _ = attention_reference(q.double(), k.double(), v.double(), index, 64, 0.125)
    assert rel_rms_error(out, expected) < TOL[torch.float16]
