"""Issue 22, "Must hold": a fuzz test per public API of icml_kernels (the bad-input contract of
GUIDE "Bad input", checked with :mod:`icml_tools.fuzz`). CPU paths only: the torch references."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_kernels
from icml_kernels import (
    fwht,
    fwht_reference,
    hadamard_matrix,
    select_impl,
    trellis_decode,
    trellis_gemv,
)
from icml_kernels.trellis import decode_reference, gemv_reference, table_shape_of
from icml_tools.fuzz import Coverage, fuzz_call, rejects

FUZZ = Coverage()
CPU = torch.device("cpu")
X = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))  # rows of n = 8 (a power of two)


@pytest.fixture(autouse=True)
def automatic_dispatch(monkeypatch):
    """The CPU reference, whatever the environment asks for."""
    monkeypatch.delenv("ICML_KERNELS_IMPL", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def with_inputs(fn):
    """``fn`` returning ``(its arguments, its result)``, so a check sees the (possibly mutated) input."""

    def call(**kwargs):
        return kwargs, fn(**kwargs)

    call.__qualname__ = fn.__qualname__
    return call


def is_fwht(case) -> bool:
    """The result is ``scale * x @ H_n`` (to the precision of x's dtype)."""
    kwargs, y = case
    x, scale = kwargs["x"], kwargs.get("scale")
    scale = 1 / math.sqrt(x.shape[-1]) if scale is None else scale
    expected = (x.double() @ hadamard_matrix(x.shape[-1])) * scale
    if not (isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype):
        return False
    if not bool(torch.isfinite(y).all()):  # warned (the fuzz helper checks that): a true overflow,
        # of the result or of a partial butterfly sum (each bounded by the row's sum of |x|)
        top = torch.finfo(x.dtype).max
        return bool(
            (expected.abs() > top).any() or (x.double().abs().sum(-1) * max(abs(scale), 1) > top).any()
        )
    tol = 1e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-5
    top = float(expected.abs().max()) if expected.numel() else 0.0
    return torch.allclose(y.double(), expected, rtol=tol, atol=tol * (1 + top))


# --- FWHT ----------------------------------------------------------------------------------------------
@FUZZ.covers(fwht)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fwht(data):
    scale = 0.25
    fuzz_call(data, with_inputs(fwht), {"x": X, "scale": scale}, check=is_fwht)
    # the default scale is the orthonormal transform: its own inverse
    assert torch.allclose(fwht(fwht(X)), X, atol=1e-6)


@FUZZ.covers(fwht_reference)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fwht_reference(data):
    fuzz_call(data, with_inputs(fwht_reference), {"x": X.double(), "scale": 0.5}, check=is_fwht)


def test_fwht_overflow_warns():
    big = torch.full((1, 4), 6e4, dtype=torch.float16)  # finite, but 4 * 6e4 / 2 is not a float16
    with pytest.warns(RuntimeWarning, match="x"):
        y = fwht(big)
    assert not bool(torch.isfinite(y).all())
    with pytest.warns(RuntimeWarning):
        fwht_reference(X.double(), 1e308)


@FUZZ.covers(hadamard_matrix)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_hadamard_matrix(data):
    def check(h) -> bool:
        n = h.shape[0]
        hd = (h.real if h.is_complex() else h).double()
        return h.shape == (n, n) and torch.equal(hd @ hd.T, n * torch.eye(n, dtype=torch.float64))

    dtypes = st.sampled_from([torch.bool, torch.uint8, torch.complex64, "float64", float, None, 1])
    fuzz_call(
        data, hadamard_matrix, {"n": 8, "dtype": torch.float32}, check=check, strategies={"dtype": dtypes}
    )


# --- dispatch ------------------------------------------------------------------------------------------
@FUZZ.covers(select_impl)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_select_impl(data):
    devices = st.sampled_from([None, "cpu", 0, object(), torch.float32, ("cpu",)])
    fuzz_call(
        data,
        select_impl,
        {"op": "fwht", "device": CPU, "kernel_reason": "no kernel for this dtype"},
        check=lambda impl: impl == "torch",  # a CPU tensor outside the interpreter, or a reason given
        strategies={"device": devices},
    )


# --- trellis decode ------------------------------------------------------------------------------------
L, K, T = 8, 2, 16  # K*T = 32: one word per tile
PACKED = torch.randint(
    -(2**31), 2**31, (3, 2, 1), dtype=torch.int32, generator=torch.Generator().manual_seed(1)
)
TABLES = {
    ("hyb", 2): torch.randn(*table_shape_of("hyb", L, 2), generator=torch.Generator().manual_seed(2)),
    ("lut", 1): torch.randn(*table_shape_of("lut", L, 1), generator=torch.Generator().manual_seed(3)),
}
# (code, V, mulbal, table) of every code
VARIANTS = [
    ("1mad", 1, None, None),
    ("3inst", 1, None, None),
    ("mulbal", 1, (3293274267, 334227121, 8), None),
    ("hyb", 2, None, TABLES["hyb", 2]),
    ("lut", 1, None, TABLES["lut", 1]),
]


def _decode_kwargs(variant, packed):
    code, V, mulbal, table = variant
    return {
        "packed": packed,
        "code": code,
        "L": L,
        "K": K,
        "V": V,
        "T": T,
        "alpha": 0.5,
        "beta": -0.25,
        "mulbal": mulbal,
        "table": table,
    }


def _params(kw):
    params = {"alpha": kw["alpha"], "beta": kw["beta"]}
    if kw["mulbal"] is not None:
        params["mulbal"] = kw["mulbal"]
    if kw["table"] is not None:
        params["table"] = kw["table"]
    return params


@FUZZ.covers(trellis_decode)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_trellis_decode(data):
    kw = _decode_kwargs(data.draw(st.sampled_from(VARIANTS), label="variant"), PACKED[:, 0])
    expected = decode_reference(PACKED[:, 0], kw["code"], L, K, kw["V"], T, **_params(kw))

    def check(w) -> bool:
        return w.dtype == torch.float32 and w.shape == (3, T) and torch.equal(w, expected)

    result = fuzz_call(
        data,
        trellis_decode,
        kw,
        # a mutated call that is accepted decodes other weights (another L, say): float32 tiles of some T
        check=lambda w: isinstance(w, torch.Tensor) and w.dtype == torch.float32 and w.dim() >= 1,
        # the words hold the bit pattern of any state sequence: every int32 value decodes (the same tiles
        # under another L); V, T and K change the words per tile or the code's V
        related={"L": ["table"], "V": ["code", "table"], "code": ["V", "mulbal", "table"], "K": ["T"]},
    )
    assert isinstance(result, torch.Tensor | ValueError | TypeError)
    assert check(trellis_decode(**kw))


def test_trellis_decode_overflow_warns():
    with pytest.warns(RuntimeWarning, match="alpha"):
        w = trellis_decode(PACKED[:, 0], "1mad", L, K, 1, T, alpha=1e300)
    assert not bool(torch.isfinite(w).all())


@FUZZ.covers(trellis_gemv)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_trellis_gemv(data):
    variant = data.draw(st.sampled_from(VARIANTS), label="variant")
    x = torch.randn(2, PACKED.shape[1] * T, generator=torch.Generator().manual_seed(4))
    kw = {"x": x, **_decode_kwargs(variant, PACKED)}
    expected = gemv_reference(x, PACKED, variant[0], L, K, variant[1], T, **_params(kw))
    result = fuzz_call(
        data,
        trellis_gemv,
        kw,
        related={
            "L": ["table"],
            "V": ["code", "table"],
            "code": ["V", "mulbal", "table"],
            "K": ["T", "packed"],
            "T": ["x", "packed"],
            "packed": ["x"],
        },
    )
    if not isinstance(result, Exception):
        assert result.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    y = trellis_gemv(**kw)
    assert y.shape == (2, PACKED.shape[0]) and torch.allclose(y, expected, rtol=1e-5, atol=1e-4)


def test_gemv_refuses_non_finite_x():
    x = torch.randn(2, PACKED.shape[1] * T)
    x[0, 3] = math.nan
    rejects(trellis_gemv, x, PACKED, "1mad", L, K, 1, T, name="x")


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_kernels)
