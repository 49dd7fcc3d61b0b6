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
    block_mask_from_index,
    block_sparse_attention,
    block_sparse_attention_flex,
    block_sparse_attention_reference,
    dense_block_index,
    echo_combine,
    echo_combine_reference,
    fwht,
    fwht_reference,
    gaussian_rasterize_reference,
    hadamard_matrix,
    rasterize_gaussians,
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


# --- block-sparse attention ----------------------------------------------------------------------------
_GEN = torch.Generator().manual_seed(5)
QKV = {name: torch.randn(1, 2, 40, 8, generator=_GEN) for name in ("q", "k", "v")}  # 3 blocks of 16 (ragged)
BLOCK_INDEX = torch.tensor([[0, -1], [2, 1], [-1, -1]])  # (NQB, MAXK), the last query block sees nothing
ATTENTION = {**QKV, "block_index": BLOCK_INDEX, "block_size": 16, "scale": 0.5}
# an accepted block_size gives 3 query blocks too (14..19): the index then names other keys
ATTENTION_RELATED = {"block_size": ["block_index"], "q": ["k", "v"], "k": ["q", "v"], "v": ["q", "k"]}


def explicit_block_table(block_index, n_blocks: int) -> torch.Tensor:
    """(..., NQB, NKB) bool, one listed entry at a time."""
    table = torch.zeros(*block_index.shape[:-1], n_blocks, dtype=torch.bool)
    for *row, j in (block_index >= 0).nonzero().tolist():
        table[(*row, int(block_index[(*row, j)]))] = True
    return table


def is_block_sparse_attention(case) -> bool:
    """The output is the masked softmax attention over the listed blocks, in float64 to the precision of
    q's dtype; NaN or inf (warned, the fuzz helper checks that) only when a score can overflow it."""
    kwargs, result = case
    out = result[0] if kwargs.get("return_lse") else result
    q, k, v, index, size = kwargs["q"], kwargs["k"], kwargs["v"], kwargs["block_index"], kwargs["block_size"]
    scale = 1 / math.sqrt(q.shape[-1]) if kwargs["scale"] is None else kwargs["scale"]
    if not (isinstance(out, torch.Tensor) and out.shape == q.shape and out.dtype == q.dtype):
        return False
    if not bool(torch.isfinite(out).all()):
        bound = (q.double().abs() @ k.double().abs().transpose(-1, -2)).max() * max(1.0, abs(scale))
        return bool(bound > torch.finfo(q.dtype).max)
    n = q.shape[2]
    blocks = -(-n // size)
    table = explicit_block_table(index, blocks).expand(*q.shape[:2], blocks, blocks)
    keep = table.repeat_interleave(size, -2).repeat_interleave(size, -1)[..., :n, :n]
    s = (q.double() @ k.double().transpose(-1, -2) * scale).masked_fill(~keep, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)  # a row that sees nothing: zeros
    expected = p @ v.double()
    tol = 1e-2 if q.dtype in (torch.float16, torch.bfloat16) else 1e-5
    if kwargs.get("return_lse"):  # -inf exactly on the rows that see no key
        lse, expected_lse = result[1], torch.logsumexp(s, -1)
        finite = expected_lse.isfinite()
        if not torch.equal(lse.isfinite(), finite):
            return False
        if not torch.allclose(lse[finite].double(), expected_lse[finite], rtol=tol, atol=tol):
            return False
    return torch.allclose(out.double(), expected, rtol=tol, atol=tol * (1 + float(expected.abs().max())))


@FUZZ.covers(block_sparse_attention, block_sparse_attention_reference)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_block_sparse_attention(data):
    fn = data.draw(st.sampled_from([block_sparse_attention, block_sparse_attention_reference]), label="fn")
    lse = data.draw(st.booleans(), label="return_lse")
    fuzz_call(
        data,
        with_inputs(fn),
        {**ATTENTION, "return_lse": lse},
        check=is_block_sparse_attention,
        related=ATTENTION_RELATED,
        allow_non_finite=lse,  # the lse of a row that sees no key is -inf (checked above)
    )


@FUZZ.covers(block_sparse_attention_flex)
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_block_sparse_attention_flex(data):
    fuzz_call(
        data,
        with_inputs(block_sparse_attention_flex),
        ATTENTION,
        check=is_block_sparse_attention,
        related=ATTENTION_RELATED,
    )


@FUZZ.covers(block_mask_from_index)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_block_mask_from_index(data):
    def check(case) -> bool:
        kwargs, mask = case
        blocks = -(-kwargs["n"] // kwargs["block_size"])
        table = explicit_block_table(kwargs["block_index"], blocks)
        return torch.equal(mask.to_dense().bool(), table.expand(mask.to_dense().shape))

    fuzz_call(
        data,
        with_inputs(block_mask_from_index),
        {"block_index": BLOCK_INDEX, "n": 40, "block_size": 16},
        check=check,
        related={"n": ["block_index"], "block_size": ["block_index"]},
    )


@FUZZ.covers(dense_block_index)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_dense_block_index(data):
    def check(case) -> bool:
        kwargs, index = case
        blocks = -(-kwargs["n"] // kwargs["block_size"])
        return index.shape == (blocks, blocks) and bool((index == torch.arange(blocks)).all())

    fuzz_call(data, with_inputs(dense_block_index), {"n": 40, "block_size": 16}, check=check)


# --- echo combination ----------------------------------------------------------------------------------
ECHO = {  # B=2, H=2, R=2, F=4, S=3, D=5, Q=3: distinct sizes, so a transposed argument is refused
    "u": torch.randn(2, 2, 2, 4, 3, 5, generator=_GEN),
    "vbar": torch.randn(2, 2, 4, 5, generator=_GEN),
    "a": torch.randn(2, 3, 4, generator=_GEN),
    "b": torch.randn(2, 3, 4, generator=_GEN),
    "anchor": torch.tensor([[0, 1, 1], [1, 0, 0]]),
    "key": (torch.arange(4) - torch.tensor([0, 1, -1])[:, None]).clamp(0, 3).expand(2, 3, 4).clone(),
}


def is_echo_combination(case) -> bool:
    """The sum of the definition, term by term in float64; NaN or inf (warned) only when a term can
    overflow u's dtype."""
    kwargs, out = case
    u, vbar, a, b, anchor, key = (kwargs[name] for name in ECHO)
    batch, heads, _, frames, rows, d = u.shape
    if not (isinstance(out, torch.Tensor) and out.shape == (batch, heads, a.shape[1], rows, d)):
        return False
    if out.dtype != u.dtype:
        return False
    terms = (
        a.double().abs().sum() * u.double().abs().max() + b.double().abs().sum() * vbar.double().abs().max()
    )
    if not bool(torch.isfinite(out).all()):
        return bool(terms > torch.finfo(u.dtype).max)
    expected = torch.zeros(out.shape, dtype=torch.float64)
    for h in range(heads):
        for q in range(a.shape[1]):
            for j in range(frames):
                expected[:, h, q] += a[h, q, j].double() * u[:, h, anchor[h, q], key[h, q, j]].double()
                expected[:, h, q] += b[h, q, j].double() * vbar[:, h, j, None].double()
    tol = 1e-2 if u.dtype in (torch.float16, torch.bfloat16) else 1e-5
    return torch.allclose(out.double(), expected, rtol=tol, atol=tol * (1 + float(terms)))


@FUZZ.covers(echo_combine, echo_combine_reference)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_echo_combine(data):
    fn = data.draw(st.sampled_from([echo_combine, echo_combine_reference]), label="fn")
    result = fuzz_call(
        data,
        with_inputs(fn),
        ECHO,
        check=is_echo_combination,
        # u sets B, H, R, F, D for the others and a sets Q: a changed u or a is refused naming either
        related={"u": ["vbar", "a", "anchor"], "a": ["b", "anchor", "key"]},
    )
    assert isinstance(result, tuple | ValueError | TypeError)


# --- Gaussian rasterization ----------------------------------------------------------------------------
_GGEN = torch.Generator().manual_seed(8)
RASTER = {  # N = 5 Gaussians, C = 3 channels, a 6 x 4 image: distinct sizes, so a transposed argument is refused
    "means2d": torch.rand(5, 2, generator=_GGEN) * torch.tensor([6.0, 4.0]),
    "conics": torch.tensor(
        [[0.5, 0.1, 0.4], [1.0, -0.3, 0.8], [0.2, 0.0, 0.3], [2.0, 0.5, 1.0], [0.6, 0.2, 0.9]]
    ),
    "colors": torch.rand(5, 3, generator=_GGEN),
    "opacities": torch.tensor([0.9, 0.5, 0.99, 0.3, 0.002]),
    "width": 6,
    "height": 4,
    "background": torch.tensor([0.1, 0.5, 0.9]),
    "tile_size": 8,
}


def is_rasterization(case) -> bool:
    """An ``(image, alpha)`` of the right shapes and dtype, ``alpha`` in ``[0, 1)``, equal to the rules
    applied one Gaussian at a time in float64 at a few pixels (all of them in small images); NaN or inf
    (warned) only when the colors or background are near the top of their dtype's range."""
    kwargs, result = case
    m, q, col, op = (kwargs[name] for name in ("means2d", "conics", "colors", "opacities"))
    width, height, bg = kwargs["width"], kwargs["height"], kwargs["background"]
    c = col.shape[1]
    if not (isinstance(result, tuple) and len(result) == 2):
        return False
    image, alpha = result
    if image.shape != (height, width, c) or alpha.shape != (height, width) or image.dtype != m.dtype:
        return False
    if not bool(torch.isfinite(image).all()):
        top = max(
            float(col.abs().max()) if col.numel() else 0.0, float(bg.abs().max()) if bg is not None else 0.0
        )
        return top > torch.finfo(m.dtype).max / 4
    if not bool(((alpha >= 0) & (alpha < 1)).all()):
        return False
    bgd = [0.0] * c if bg is None else bg.double().tolist()
    pixels = [(i, j) for i in range(height) for j in range(width)]
    for i, j in pixels if len(pixels) <= 64 else pixels[:: len(pixels) // 32]:
        t, color = 1.0, [0.0] * c
        for g in range(len(m)):
            dx, dy = j + 0.5 - float(m[g, 0]), i + 0.5 - float(m[g, 1])
            a, b, cc = q[g].double().tolist()
            power = -0.5 * (a * dx * dx + cc * dy * dy) - b * dx * dy
            alpha_g = min(0.99, float(op[g]) * math.exp(power)) if power <= 0 else 0.0
            if alpha_g < 1 / 255:
                continue
            if t * (1 - alpha_g) <= 1e-4:
                break
            color = [color[k] + float(col[g, k]) * alpha_g * t for k in range(c)]
            t *= 1 - alpha_g
        expected = torch.tensor([color[k] + t * bgd[k] for k in range(c)], dtype=torch.float64)
        scale = 1 + float(expected.abs().max())
        if not torch.allclose(image[i, j].double(), expected, rtol=1e-4, atol=1e-4 * scale):
            return False
        if abs(float(alpha[i, j]) - (1 - t)) > 1e-4:
            return False
    return True


@FUZZ.covers(rasterize_gaussians, gaussian_rasterize_reference)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_rasterize_gaussians(data):
    fn = data.draw(st.sampled_from([rasterize_gaussians, gaussian_rasterize_reference]), label="fn")
    result = fuzz_call(
        data,
        with_inputs(fn),
        RASTER,
        check=is_rasterization,
        # means2d sets N and the dtype for the others, colors sets C for background
        related={
            "means2d": ["conics", "colors", "opacities", "background"],
            "colors": ["background"],
        },
    )
    assert isinstance(result, tuple | ValueError | TypeError)


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_kernels)
