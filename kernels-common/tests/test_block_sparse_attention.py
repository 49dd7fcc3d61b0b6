"""Reference tier of block-sparse attention: the torch reference against an explicit dense masked softmax,
dense attention (SDPA), merging by log-sum-exp, autograd, the op registration, the flex_attention path and
bad input. Runs everywhere (on CUDA the public function runs the kernel, which these tests also cover)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from icml_kernels import (
    KernelUnavailableError,
    block_mask_from_index,
    block_sparse_attention,
    block_sparse_attention_flex,
    block_sparse_attention_reference,
    dense_block_index,
)
from icml_kernels.testing import random_block_index, rel_rms_error


def qkv(b, h, n, d, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(3))


def dense_masked_attention(q, k, v, block_index, block_size, scale):
    """The definition, spelled out: an (N, N) mask per (b, h) from the listed blocks, softmax over the
    kept keys (float64), zero rows (and lse -inf) where none is kept."""
    b, h, n, _ = q.shape
    index = block_index.expand(b, h, *block_index.shape[-2:])
    mask = torch.zeros(b, h, n, n, dtype=torch.bool)
    for bi in range(b):
        for hi in range(h):
            for qb, row in enumerate(index[bi, hi].tolist()):
                for kb in row:
                    if kb >= 0:
                        mask[
                            bi,
                            hi,
                            qb * block_size : (qb + 1) * block_size,
                            kb * block_size : (kb + 1) * block_size,
                        ] = True
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.where(mask, torch.exp(s - lse.nan_to_num(neginf=0.0)[..., None]), 0.0)
    return p @ v.double(), lse


@pytest.mark.parametrize(
    "n, block_size, max_k",
    [(64, 16, 2), (100, 16, 3), (37, 8, 5), (5, 16, 1), (96, 32, 3), (50, 7, 4)],
)
def test_reference_matches_dense_masked_softmax(n, block_size, max_k):
    q, k, v = qkv(2, 3, n, 8, seed=n)
    blocks = math.ceil(n / block_size)
    index = random_block_index((2, 3), blocks, min(max_k, blocks), seed=block_size)
    out, lse = block_sparse_attention_reference(q, k, v, index, block_size=block_size, return_lse=True)
    expected, expected_lse = dense_masked_attention(q, k, v, index, block_size, 8**-0.5)
    assert out.dtype == torch.float64 and lse.dtype == torch.float64
    assert rel_rms_error(out, expected) < 1e-13
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))
    torch.testing.assert_close(lse[lse.isfinite()], expected_lse[lse.isfinite()], rtol=1e-13, atol=1e-13)
    # on the CPU the public function is this reference
    assert torch.equal(block_sparse_attention(q, k, v, index, block_size=block_size), out)


@pytest.mark.parametrize("n, block_size", [(128, 32), (100, 16), (7, 64)])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-13), (torch.float32, 1e-6)])
def test_every_block_listed_is_sdpa(n, block_size, dtype, tol):
    q, k, v = qkv(2, 2, n, 16, dtype=dtype, seed=n)
    out = block_sparse_attention(q, k, v, dense_block_index(n, block_size), block_size=block_size, scale=0.3)
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.3)
    assert rel_rms_error(out, expected) < tol


def test_a_query_block_with_no_key_block_gives_zeros():
    q, k, v = qkv(1, 2, 48, 8)
    index = torch.tensor([[0, 2], [-1, -1], [-1, 1]])  # (NQB, MAXK): the middle block lists nothing
    out, lse = block_sparse_attention(q, k, v, index, block_size=16, return_lse=True)
    assert torch.equal(out[:, :, 16:32], torch.zeros(1, 2, 16, 8, dtype=torch.float64))
    assert bool((lse[:, :, 16:32] == -math.inf).all()) and bool(lse[:, :, :16].isfinite().all())
    nothing = torch.full((3, 2), -1)
    assert torch.equal(block_sparse_attention(q, k, v, nothing, block_size=16), torch.zeros_like(q))
    assert torch.equal(block_sparse_attention(q, k, v, nothing[:, :0], block_size=16), torch.zeros_like(q))


def test_padding_anywhere_and_order_do_not_matter():
    q, k, v = qkv(1, 1, 64, 8)
    a = torch.tensor([[0, 1, -1, -1], [2, -1, 3, -1], [-1, -1, -1, 0], [3, 2, 1, 0]])
    b = torch.tensor([[1, 0], [3, 2], [0, -1], [0, 1]])
    c = torch.tensor([[0, 1], [2, 3], [0, -1], [0, 1]])
    out_a = block_sparse_attention(q, k, v, a, block_size=16)
    assert torch.allclose(out_a[:, :, :48], block_sparse_attention(q, k, v, b, block_size=16)[:, :, :48])
    assert torch.allclose(out_a[:, :, :48], block_sparse_attention(q, k, v, c, block_size=16)[:, :, :48])
    assert torch.allclose(
        out_a[:, :, 48:], torch.nn.functional.scaled_dot_product_attention(q, k, v)[:, :, 48:]
    )


def test_block_index_broadcasts_over_batch_and_heads():
    q, k, v = qkv(2, 3, 40, 8)
    per_head = random_block_index((3,), 3, 2, seed=1)  # (H, NQB, MAXK)
    full = per_head.expand(2, 3, 3, 2)
    expected = block_sparse_attention(q, k, v, full, block_size=16)
    assert torch.equal(block_sparse_attention(q, k, v, per_head, block_size=16), expected)
    assert torch.equal(block_sparse_attention(q, k, v, per_head[None], block_size=16), expected)  # B = 1
    shared = per_head[0]  # (NQB, MAXK)
    assert torch.equal(
        block_sparse_attention(q, k, v, shared, block_size=16),
        block_sparse_attention(q, k, v, shared.expand(2, 3, 3, 2), block_size=16),
    )


def test_log_sum_exp_merges_partial_attentions():
    # attention over blocks A u B from the two halves and their lse: the use return_lse is for
    q, k, v = qkv(1, 2, 64, 8, dtype=torch.float32)
    a, b = torch.tensor([[0, 2]] * 4), torch.tensor([[1, 3]] * 4)
    out_a, lse_a = block_sparse_attention(q, k, v, a, block_size=16, return_lse=True)
    out_b, lse_b = block_sparse_attention(q, k, v, b, block_size=16, return_lse=True)
    assert lse_a.dtype == torch.float32 and lse_a.shape == (1, 2, 64)
    lse = torch.logaddexp(lse_a, lse_b)
    merged = out_a * (lse_a - lse).exp()[..., None] + out_b * (lse_b - lse).exp()[..., None]
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert rel_rms_error(merged, dense) < 1e-6
    expected_lse = torch.logsumexp((q @ k.transpose(-1, -2)).double() / math.sqrt(8), -1)
    assert rel_rms_error(lse, expected_lse) < 1e-6


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_half_precision_is_computed_in_float32(dtype, tol):
    q, k, v = qkv(1, 2, 70, 16, dtype=torch.float32)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    index = random_block_index((2,), 5, 3, seed=2)
    out, lse = block_sparse_attention(q, k, v, index, block_size=16, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    expected, _ = dense_masked_attention(q, k, v, index, 16, 0.25)
    assert rel_rms_error(out, expected) < tol


def test_gradients_flow_through_the_reference():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 20, 4))
    index = torch.tensor([[0, -1], [1, 0]])
    assert torch.autograd.gradcheck(lambda *t: block_sparse_attention(*t, index, block_size=16), (q, k, v))
    # with every block listed, SDPA's gradients
    dense = dense_block_index(20, 8)
    g = torch.randn(1, 2, 20, 4, dtype=torch.float64)
    grads = torch.autograd.grad((block_sparse_attention(q, k, v, dense, block_size=8) * g).sum(), (q, k, v))
    expected = torch.autograd.grad(
        (torch.nn.functional.scaled_dot_product_attention(q, k, v) * g).sum(), (q, k, v)
    )
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_torch_library_registration_and_compile():
    q, k, v = qkv(1, 2, 40, 8, dtype=torch.float32)
    index = random_block_index((2,), 3, 2, seed=3).int()
    op = torch.ops.icml_kernels.block_sparse_attention.default
    torch.library.opcheck(op, (q, k, v, index, 16, 0.5))
    out, lse = op(q, k, v, index, 16, 0.5)
    assert out.shape == q.shape and lse.shape == (1, 2, 40)
    fn = torch.compile(
        lambda *t: block_sparse_attention(*t, index, block_size=16, scale=0.5),
        backend="eager",
        fullgraph=True,
    )
    torch.testing.assert_close(fn(q, k, v), out)


def test_dense_block_index():
    assert torch.equal(dense_block_index(100, 32), torch.arange(4).expand(4, 4))
    assert dense_block_index(1, 64).shape == (1, 1) and dense_block_index(1, 64).dtype == torch.int64


def test_dispatch_honours_the_request(monkeypatch):
    q, k, v = qkv(1, 1, 32, 16, dtype=torch.float32)
    index = dense_block_index(32, 16)
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelUnavailableError, match="block_sparse_attention"):
        block_sparse_attention(q, k, v, index, block_size=16)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(KernelUnavailableError, match="block_size"):
        block_sparse_attention(q, k, v, dense_block_index(32, 8), block_size=8)
    with pytest.raises(KernelUnavailableError, match="head dimension"):
        block_sparse_attention(*(t[..., :12] for t in (q, k, v)), index, block_size=16)
    with pytest.raises(KernelUnavailableError, match="float64"):
        block_sparse_attention(*(t.double() for t in (q, k, v)), index, block_size=16)
    big = torch.zeros(1, 1, 128, 128)
    with pytest.raises(KernelUnavailableError, match=r"block_size \* D <= 4096"):  # float32: 64 x 64 at most
        block_sparse_attention(big, big, big, dense_block_index(128, 64), block_size=64)
    with pytest.raises(KernelUnavailableError, match=r"block_size <= 64 in float32"):
        block_sparse_attention(
            *(t[..., :16] for t in (big, big, big)), dense_block_index(128, 128), block_size=128
        )
    with pytest.raises(KernelUnavailableError, match=r"block_size \* D <= 16384"):  # 16 bits: 128 x 128
        block_sparse_attention(
            *(torch.zeros(1, 1, 128, 256).half(),) * 3, dense_block_index(128, 128), block_size=128
        )
    monkeypatch.setenv("ICML_KERNELS_IMPL", "torch")
    assert (
        rel_rms_error(
            block_sparse_attention(q, k, v, index, block_size=16),
            torch.nn.functional.scaled_dot_product_attention(q, k, v),
        )
        < 1e-6
    )


# --- bad input -----------------------------------------------------------------------------------------
Q, K, V = qkv(1, 2, 40, 8, dtype=torch.float32)
INDEX = torch.tensor([[0, 1], [1, -1], [2, 0]])


@pytest.mark.parametrize(
    "change, error, name",
    [
        ({"q": Q.numpy()}, TypeError, "q"),
        ({"k": K.double()}, TypeError, "dtype"),
        ({"v": V.int()}, TypeError, "v"),
        ({"q": Q[0]}, ValueError, "q must be 4-D"),
        ({"k": K[:, :1]}, ValueError, "one shape"),
        ({"q": Q[:, :, :0], "k": K[:, :, :0], "v": V[:, :, :0]}, ValueError, "N >= 1"),
        ({"q": Q.clone().fill_(math.nan)}, ValueError, "q must be finite"),
        ({"v": V.clone().index_fill_(2, torch.tensor([3]), math.inf)}, ValueError, "v must be finite"),
        ({"block_index": INDEX.float()}, TypeError, "block_index"),
        ({"block_index": INDEX.to(torch.uint8)}, TypeError, "block_index"),
        ({"block_index": INDEX[:2]}, ValueError, "NQB = ceil"),
        ({"block_index": INDEX[0]}, ValueError, "block_index must have shape"),
        ({"block_index": INDEX.expand(3, 2, 3, 2)}, ValueError, "broadcast"),
        ({"block_index": INDEX.expand(1, 1, 1, 3, 2)}, ValueError, "block_index must have shape"),
        ({"block_index": torch.tensor([[0, 3], [1, -1], [2, 0]])}, ValueError, "0..2 or -1"),
        ({"block_index": torch.tensor([[0, -2], [1, -1], [2, 0]])}, ValueError, "0..2 or -1"),
        ({"block_index": torch.tensor([[0, 1], [1, 1], [2, 0]])}, ValueError, "twice"),
        ({"block_index": [[0, 1], [1, -1], [2, 0]]}, TypeError, "block_index"),
        ({"block_size": 0}, ValueError, "block_size"),
        ({"block_size": 16.0}, TypeError, "block_size"),
        # beyond the registered op's int64: torch's RuntimeError ("Expected a value of type 'int'") until 2026-12
        (
            {"block_size": 1 << 63, "block_index": torch.tensor([[0]])},
            ValueError,
            "block_size must be in 1..",
        ),
        ({"block_size": 8}, ValueError, "block_index"),  # 5 query blocks, 3 index rows
        ({"scale": math.nan}, ValueError, "scale"),
        ({"scale": "0.5"}, TypeError, "scale"),
        ({"return_lse": 1}, TypeError, "return_lse"),
    ],
)
def test_bad_input_raises_naming_the_argument(change, error, name):
    kwargs = {
        "q": Q,
        "k": K,
        "v": V,
        "block_index": INDEX,
        "block_size": 16,
        "scale": None,
        "return_lse": False,
    }
    kwargs.update(change)
    for fn in (block_sparse_attention, block_sparse_attention_reference):
        with pytest.raises(error, match=name):
            fn(**kwargs)


def test_registered_op_checks_shapes_not_data():
    with pytest.raises(ValueError, match="NQB"):
        torch.ops.icml_kernels.block_sparse_attention(Q, K, V, INDEX[:2], 16, 1.0)
    out, _ = torch.ops.icml_kernels.block_sparse_attention(
        Q, K, V, torch.tensor([[0, 1], [1, 1], [2, 0]]), 16, 1.0
    )
    assert out.shape == Q.shape  # a duplicate is not looked for (it would need a host sync)


def test_overflow_warns():
    big = Q * 1e30
    with pytest.warns(RuntimeWarning, match="block_sparse_attention"):
        out = block_sparse_attention(big, K * 1e30, V, INDEX, block_size=16)
    assert not bool(out.isfinite().all())


def _scores_all_minus_inf():
    """float32 q, k, v (1, 1, 4, 8) whose every score q k^T / sqrt(8) is about -1e41: below -3.4e38, so
    -inf in float32 although q, k are finite; attention over the four keys is the value of key 0 (the
    largest score), which float64 computes."""
    q = torch.full((1, 1, 4, 8), 1e20)
    k = -torch.full((1, 1, 4, 8), 1e20) * torch.arange(1, 5, dtype=torch.float32).view(1, 1, 4, 1)
    v = qkv(1, 1, 4, 8, dtype=torch.float32)[2]
    return q, k, v


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize(
    "attention", [block_sparse_attention, block_sparse_attention_reference, block_sparse_attention_flex]
)
def test_rows_whose_scores_all_overflow_to_minus_inf_warn(attention):
    # until 2026-12 such rows came out as zeros (lse -inf, like a row that lists no key) without a warning:
    # 2.57 off the float64 attention (measured max abs error, this case), where SDPA in float64 gives v[key 0]
    q, k, v = _scores_all_minus_inf()
    index = dense_block_index(4, 2)
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert torch.allclose(expected, v[:, :, :1].double().expand(1, 1, 4, 8))
    with pytest.warns(RuntimeWarning, match=r"every score of 4 query row\(s\) that list key blocks is -inf"):
        out = attention(q, k, v, index, block_size=2)
    # still zeros (the Triton kernel, on CUDA: NaN), which the warning says
    assert not torch.allclose(out.double(), expected, atol=1.0)
    # a row that lists no key block is zeros and lse -inf by definition: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        attention(*qkv(1, 1, 4, 8, dtype=torch.float32), torch.tensor([[0, -1], [-1, -1]]), block_size=2)


# --- flex_attention -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flex_on_cpu():
    try:
        block_sparse_attention_flex(Q, K, V, INDEX, block_size=16)
    except Exception as exc:  # an older torch, or a build without the eager flex path on the CPU
        pytest.skip(f"flex_attention does not run on the CPU here: {type(exc).__name__}: {exc}")


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize(
    "n, block_size, lead", [(64, 16, (2, 3)), (100, 16, (3,)), (37, 8, ()), (50, 32, (1, 3))]
)
def test_flex_matches_the_reference(flex_on_cpu, n, block_size, lead):
    q, k, v = qkv(2, 3, n, 8, dtype=torch.float32, seed=n)
    blocks = math.ceil(n / block_size)
    index = random_block_index(lead, blocks, min(3, blocks), seed=n)
    out = block_sparse_attention_flex(q, k, v, index, block_size=block_size, scale=0.4)
    expected = block_sparse_attention_reference(q, k, v, index, block_size=block_size, scale=0.4)
    assert rel_rms_error(out, expected) < 1e-6


@pytest.mark.parametrize("n, block_size", [(64, 16), (100, 16), (37, 8)])
def test_block_mask_agrees_with_create_block_mask(n, block_size):
    from torch.nn.attention.flex_attention import create_block_mask

    blocks = math.ceil(n / block_size)
    index = random_block_index((2, 3), blocks, min(3, blocks), seed=n)
    mask = block_mask_from_index(index, n, block_size)
    table = torch.zeros(2, 3, blocks, blocks, dtype=torch.bool)
    for b, h, i, j in (index >= 0).nonzero().tolist():
        table[b, h, i, index[b, h, i, j]] = True

    def mask_mod(b, h, q_idx, kv_idx):
        return table[b, h, q_idx // block_size, kv_idx // block_size]

    expected = create_block_mask(mask_mod, 2, 3, n, n, device="cpu", BLOCK_SIZE=block_size)
    assert torch.equal(mask.to_dense(), expected.to_dense())
    assert mask.shape == expected.shape
    # element level: the mask_mod the BlockMask carries is the definition
    q_idx, kv_idx = torch.arange(n)[:, None], torch.arange(n)[None, :]
    assert torch.equal(
        mask.mask_mod(1, 2, q_idx, kv_idx), table[1, 2][q_idx // block_size, kv_idx // block_size]
    )


def test_block_mask_bad_input():
    with pytest.raises(ValueError, match="n must be"):
        block_mask_from_index(INDEX, 0, 16)
    with pytest.raises(ValueError, match="NQB"):
        block_mask_from_index(INDEX, 64, 16)
    with pytest.raises(ValueError, match="twice"):
        block_mask_from_index(torch.tensor([[0, 0], [1, -1], [2, 0]]), 40, 16)
    with pytest.raises(TypeError, match="block_size"):
        block_mask_from_index(INDEX, 40, None)
