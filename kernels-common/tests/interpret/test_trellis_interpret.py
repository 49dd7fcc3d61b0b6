"""Interpreter tier: the Triton trellis kernels, run by Triton's CPU interpreter, against the reference.
Decoding is compared bit-exactly (integer state path and the same float32 multiply-add); the fused
product by relative RMS error."""

from __future__ import annotations

import inspect

import pytest
import torch

from icml_kernels import trellis_decode, trellis_gemv
from icml_kernels.testing import rel_rms_error
from icml_kernels.trellis import decode_reference, gemv_reference
from icml_kernels.trellis.testing import example_params, random_packed

pytestmark = pytest.mark.interpret
tt = pytest.importorskip("icml_kernels.trellis.triton_trellis")


CASES = [
    ("1mad", 10, 2, 1, 64),
    ("3inst", 12, 2, 1, 32),
    ("mulbal", 16, 2, 1, 64),
    ("mulbal", 8, 1, 1, 32),
    ("mulbal", 13, 3, 1, 32),
    ("hyb", 16, 2, 2, 32),
    ("lut", 8, 2, 2, 16),
    ("lut", 11, 4, 1, 24),
]


@pytest.mark.parametrize("code, L, K, V, T", CASES)
def test_decode_kernel_is_bit_exact(code, L, K, V, T):
    params = example_params(code, L, V)
    packed = random_packed(5, K * T // 32, seed=L)  # 5 tiles: a partial last block of BLOCK_TILES
    out = tt.decode_triton(packed, code, L, K, V, T, **params)
    assert torch.equal(out, decode_reference(packed, code, L, K, V, T, **params))


@pytest.mark.parametrize("code, L, K, V, T", CASES)
def test_fused_gemv_matches_reference(code, L, K, V, T):
    params = example_params(code, L, V)
    packed = random_packed(19, 3, K * T // 32, seed=T)  # 19 rows: a partial block of BLOCK_ROWS
    x = torch.randn(2, 3 * T)
    y = tt.gemv_triton(x, packed, code, L, K, V, T, **params)
    assert y.shape == (2, 19)
    assert rel_rms_error(y, gemv_reference(x, packed, code, L, K, V, T, **params)) < 1e-5
    y16 = tt.gemv_triton(x.half(), packed, code, L, K, V, T, **params)
    assert y16.dtype == torch.float16
    assert rel_rms_error(y16.float(), gemv_reference(x.half(), packed, code, L, K, V, T, **params)) < 2e-3


def test_computed_code_kernels_take_no_table():
    for kernel in (tt.trellis_decode_kernel, tt.trellis_gemv_kernel):
        names = kernel.arg_names
        assert not any("table" in n or "lut" in n for n in names), names
        pointers = [n for n in names if n.endswith("_ptr")]
        assert set(pointers) <= {"packed_ptr", "out_ptr", "x_ptr", "y_ptr"}
    # the helpers the computed kernels call load nothing but packed words
    assert "tl.load" not in inspect.getsource(tt._computed_raw.fn)
    # the table kernels are the only ones with a table pointer
    assert "table_ptr" in tt.trellis_decode_table_kernel.arg_names


def test_public_ops_run_the_kernels_when_forced(monkeypatch):
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    calls = []
    real_decode, real_gemv = tt.decode_triton, tt.gemv_triton
    monkeypatch.setattr(tt, "decode_triton", lambda *a, **k: calls.append("decode") or real_decode(*a, **k))
    monkeypatch.setattr(tt, "gemv_triton", lambda *a, **k: calls.append("gemv") or real_gemv(*a, **k))
    packed = random_packed(4, 1, 2)
    p = {"mulbal": (3, 7, 8), "alpha": 0.5, "beta": 0.0}
    x = torch.randn(32)
    w = trellis_decode(packed, "mulbal", 10, 2, 1, 32, **p)
    y = trellis_gemv(x, packed, "mulbal", 10, 2, 1, 32, **p)
    assert calls == ["decode", "gemv"]
    assert torch.equal(w, decode_reference(packed, "mulbal", 10, 2, 1, 32, **p))
    assert rel_rms_error(y, w.reshape(4, 32) @ x) < 1e-5


def test_empty_inputs():
    assert tt.decode_triton(random_packed(0, 2), "1mad", 10, 2, 1, 32, alpha=1.0, beta=0.0).shape == (0, 32)
    assert tt.gemv_triton(
        torch.randn(0, 32), random_packed(3, 1, 2), "1mad", 10, 2, 1, 32, alpha=1.0, beta=0.0
    ).shape == (0, 3)
