"""Reference tier: trellis unpacking and decoding against bit-by-bit Python, the fused product against
decode + matmul, the op registration and bad input. Runs everywhere (no icml_compress needed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml_kernels import trellis_decode, trellis_gemv
from icml_kernels.testing import rel_rms_error
from icml_kernels.trellis import code_values, decode_reference, gemv_reference, unpack_states
from icml_kernels.trellis.testing import example_params, random_packed

CASES = [
    ("1mad", 10, 2, 1, 256),
    ("3inst", 12, 2, 1, 64),
    ("mulbal", 16, 2, 1, 256),
    ("mulbal", 8, 1, 1, 32),
    ("mulbal", 13, 3, 1, 32),
    ("hyb", 16, 2, 2, 256),
    ("hyb", 9, 2, 2, 32),
    ("lut", 8, 2, 2, 16),
    ("lut", 11, 4, 1, 8),
]


@pytest.mark.parametrize(
    "L, K, V, T", [(8, 1, 1, 32), (12, 2, 1, 256), (16, 2, 2, 256), (13, 3, 1, 32), (16, 4, 1, 8)]
)
def test_unpack_matches_bitwise_python(L, K, V, T):
    packed = random_packed(3, K * T // 32, seed=L + K)
    states = unpack_states(packed, L, K, V, T)
    kv, nbits = K * V, K * T
    for tile in range(3):
        bits = [(int(w) >> (31 - i)) & 1 for w in packed[tile].tolist() for i in range(32)]
        for t in range(T // V):
            window = [bits[(p + nbits) % nbits] for p in range((t + 1) * kv - L, (t + 1) * kv)]
            assert states[tile, t].item() == int("".join(map(str, window)), 2)
    # consecutive states overlap: the bitshift trellis
    low = (1 << (L - kv)) - 1
    assert torch.equal(states[:, :-1] & low, states[:, 1:] >> kv)
    assert torch.equal(states[:, -1] & low, states[:, 0] >> kv)  # tail-biting


def test_code_raw_values_match_python_integers():
    s = torch.tensor([0, 1, 300, 65535])
    a, b, m = 2654435761, 99, 5
    got = code_values(s, "mulbal", 16, 1, mulbal=(a, b, m))[:, 0]
    for i, state in enumerate(s.tolist()):
        x = (state * a + b) % 2**32
        f = [(x >> (8 * k + 8 - m)) & (2**m - 1) for k in range(4)]
        assert got[i].item() == f[0] - f[1] + f[2] - f[3]
        x3 = (state * 89226354 + 64248484) % 2**32
        r = (x3 & 0x8FFF8FFF) ^ 996162400
        halves = np.array([r >> 16, r & 0xFFFF], dtype=np.uint16).view(np.float16).astype(np.float32)
        assert code_values(s[i], "3inst", 16, 1)[0].item() == halves[0] + halves[1]


@pytest.mark.parametrize("code, L, K, V, T", CASES)
def test_public_decode_and_gemv_on_cpu(code, L, K, V, T):
    params = example_params(code, L, V)
    packed = random_packed(5, 2, K * T // 32, seed=T)
    w = trellis_decode(packed, code, L, K, V, T, **params)
    assert w.shape == (5, 2, T) and w.dtype == torch.float32
    assert torch.equal(w, decode_reference(packed, code, L, K, V, T, **params))
    states = unpack_states(packed, L, K, V, T)
    assert torch.equal(w, code_values(states, code, L, V, **params).reshape(5, 2, T))
    x = torch.randn(3, 2 * T, dtype=torch.float64)
    y = trellis_gemv(x, packed, code, L, K, V, T, **params)
    assert y.shape == (3, 5) and y.dtype == torch.float64
    assert rel_rms_error(y, x @ w.reshape(5, 2 * T).double().T) < 1e-6
    assert rel_rms_error(gemv_reference(x, packed, code, L, K, V, T, **params), y) < 1e-6


def test_registered_ops_and_fake_tensors():
    packed = random_packed(4, 16)
    w = torch.ops.icml_kernels.trellis_decode(packed, "mulbal", 12, 2, 1, 256, 1.0, 0.0, 3, 0, 8, None)
    assert torch.equal(w, decode_reference(packed, "mulbal", 12, 2, 1, 256, mulbal=(3, 0, 8)))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(4, 2, 16, dtype=torch.int32)
        out = torch.ops.icml_kernels.trellis_decode(fake, "1mad", 12, 2, 1, 256, 1.0, 0.0, 1, 0, 8, None)
        assert out.shape == (4, 2, 256)
        y = torch.ops.icml_kernels.trellis_gemv(
            torch.empty(1, 512), fake, "1mad", 12, 2, 1, 256, 1.0, 0.0, 1, 0, 8, None
        )
        assert y.shape == (1, 4)


def test_decode_of_a_transposed_packed_is_contiguous_as_the_fake_says():
    # The reference kept the permuted layout of a transposed packed (strides (64, 192, 1)) while the fake
    # says contiguous (320, 64, 1): torch.compile's inductor failed its output assertion on it.
    packed = random_packed(3, 5, 4).transpose(0, 1)  # (5, 3, 4) tiles of K*T/32 = 4 words
    args = ("1mad", 12, 2, 1, 64, 0.01, 0.0, 1, 0, 8, None)
    w = torch.ops.icml_kernels.trellis_decode(packed, *args)
    assert w.is_contiguous()
    assert torch.equal(w, decode_reference(packed.contiguous(), "1mad", 12, 2, 1, 64, alpha=0.01, beta=0.0))
    torch.library.opcheck(
        torch.ops.icml_kernels.trellis_decode.default, (packed, *args), test_utils=("test_faketensor",)
    )


def test_bad_input_raises():
    packed = random_packed(2, 16)
    mb = {"mulbal": (3, 0, 8)}
    with pytest.raises(ValueError, match="16 words per tile"):
        trellis_decode(packed[:, :15], "mulbal", 12, **mb)
    with pytest.raises(TypeError, match="int32"):
        trellis_decode(packed.long(), "mulbal", 12, **mb)
    with pytest.raises(ValueError, match=r"L must be in 8\.\.16"):
        trellis_decode(packed, "mulbal", 17, **mb)
    with pytest.raises(ValueError, match=r"K must be in 1\.\.4"):
        trellis_decode(packed, "mulbal", 12, K=5, **mb)
    with pytest.raises(ValueError, match=r"V must be in 1\.\.2"):
        trellis_decode(packed, "lut", 12, V=3, table=torch.randn(4096, 3))
    with pytest.raises(ValueError, match="multiple of 32"):
        trellis_decode(packed, "mulbal", 12, T=250, **mb)
    with pytest.raises(ValueError, match="code must be one of"):
        trellis_decode(packed, "2mad", 12)
    with pytest.raises(TypeError, match="mulbal must be a tuple"):
        trellis_decode(packed, "mulbal", 12)
    with pytest.raises(ValueError, match=r"mulbal m must be in 1\.\.8"):
        trellis_decode(packed, "mulbal", 12, mulbal=(3, 0, 9))
    with pytest.raises(ValueError, match="takes no table"):
        trellis_decode(packed, "1mad", 12, table=torch.randn(4096, 1))
    with pytest.raises(ValueError, match="table must have shape"):
        trellis_decode(packed, "hyb", 12, V=2, table=torch.randn(64, 2))
    with pytest.raises(ValueError, match="V must be 1"):
        trellis_decode(packed, "1mad", 12, V=2)
    with pytest.raises(ValueError, match="alpha must be a finite float"):
        trellis_decode(packed, "1mad", 12, alpha=float("nan"))
    with pytest.raises(ValueError, match="table must be finite"):
        trellis_decode(packed, "lut", 12, table=torch.full((4096, 1), float("inf")))
    with pytest.raises(ValueError, match="shape \\(m, n/T, 16\\)"):
        trellis_gemv(torch.randn(256), packed, "1mad", 12)
    with pytest.raises(ValueError, match="n = \\(n/T\\) \\* T = 256"):
        trellis_gemv(torch.randn(255), packed.unsqueeze(1), "1mad", 12)
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        trellis_gemv(torch.ones(256, dtype=torch.int64), packed.unsqueeze(1), "1mad", 12)


def test_forced_triton_on_cpu_raises(monkeypatch):
    from icml_kernels import KernelUnavailableError

    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelUnavailableError, match="trellis_decode"):
        trellis_decode(random_packed(1, 16), "1mad", 12)


@pytest.mark.parametrize("code, L, K, V, T", CASES)
def test_gemv_backpropagates_to_x(code, L, K, V, T):
    # The op had no autograd formula: x.requires_grad ran the forward and backward() raised torch's
    # "no autograd formula was registered" (ProteusLinear takes this path for one row on CUDA).
    params = example_params(code, L, V)
    packed = random_packed(5, 2, K * T // 32, seed=T)
    w = trellis_decode(packed, code, L, K, V, T, **params).reshape(5, 2 * T)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(3, 2 * T, dtype=dtype, requires_grad=True)
        r = torch.randn(3, 5, dtype=dtype)
        (gx,) = torch.autograd.grad((trellis_gemv(x, packed, code, L, K, V, T, **params) * r).sum(), x)
        assert gx.dtype == dtype
        # the gradient is r @ W_hat, accumulated as the forward (float32; float64 for float64): measured rel.
        # error <= 6.2e-8 over the cases in float32, 0 in float64
        assert rel_rms_error(gx, r @ w.to(dtype)) < 1e-6
    table = params.get("table")
    if table is not None:  # the table takes no gradient: a clear error, not a silent None
        t = table.clone().requires_grad_(True)
        y = trellis_gemv(torch.randn(1, 2 * T), packed, code, L, K, V, T, **{**params, "table": t})
        with pytest.raises(ValueError, match="table"):
            y.sum().backward()
    if code == "1mad":  # the registered formula passes torch's own checks (gradient included)
        x = torch.randn(2, 2 * T, requires_grad=True)
        torch.library.opcheck(
            torch.ops.icml_kernels.trellis_gemv.default,
            (x, packed, code, L, K, V, T, 1.0, 0.0, 1, 0, 8, None),
        )


@pytest.mark.parametrize("code, L, K, V, T", CASES)
def test_gemv_of_float64_x_is_computed_in_float64(code, L, K, V, T):
    # A float64 x was rounded to float32 (gemv_reference's x.float()): results 4.5e-8 to 2.4e-7 relative off
    # x @ W_hat.T over these codes, and gradcheck failed; echo_combine, block_sparse_attention and fwht
    # compute float64 input in float64. The float32 weights are exact in float64: measured error 0.
    params = example_params(code, L, V)
    packed = random_packed(5, 2, K * T // 32, seed=T)
    w = trellis_decode(packed, code, L, K, V, T, **params).reshape(5, 2 * T).double()
    x = torch.randn(3, 2 * T, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = trellis_gemv(x, packed, code, L, K, V, T, **params)
    assert y.dtype == torch.float64
    assert rel_rms_error(y, x @ w.T) < 1e-13
    xg = x[:1].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: trellis_gemv(t, packed, code, L, K, V, T, **params), (xg,))
