"""The public functions on tensors without values: meta tensors (``device="meta"``, accelerate's
``init_empty_weights``) and the fake tensors of ``FakeTensorMode`` and ``torch.export``.

Until 2026-12 every public function read its inputs' data in its checks (``Tensor.item()``), so each one
failed there ("Tensor.item() cannot be called on meta tensors", ``DataDependentOutputException`` under
FakeTensorMode) although the registered ops have fake kernels. Now the checks of data are skipped exactly
for such tensors and the results have the shape, dtype and layout the registered ops' fakes give."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import icml_kernels as K
from icml_kernels.fwht.reference import _hadamard_on

OPS = torch.ops.icml_kernels


@pytest.fixture(autouse=True)
def automatic_dispatch(monkeypatch):
    monkeypatch.delenv("ICML_KERNELS_IMPL", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def _inputs(device: str) -> dict[str, torch.Tensor]:
    """Valid arguments of every public function, made on ``device`` (inside FakeTensorMode: fake)."""

    def f(*shape):
        return torch.empty(*shape, device=device)

    def i(*shape):
        return torch.zeros(*shape, dtype=torch.int64, device=device)

    return {
        "x": f(3, 8),
        "packed": torch.zeros(4, 2, 1, dtype=torch.int32, device=device),  # L=8, K=2, T=16: (m, n/T, 1)
        "lut": f(256, 1),
        "xg": f(5, 32),
        "q": f(1, 2, 40, 16),
        "bi": K.dense_block_index(40, 16).to(device),
        "u": f(1, 2, 3, 4, 5, 6),
        "vbar": f(1, 2, 4, 6),
        "a": f(2, 7, 4),
        "anchor": i(2, 7),
        "key": i(2, 7, 4),
        "m": f(10, 2),
        "con": f(10, 3),
        "col": f(10, 3),
        "op": f(10),
        "bg": f(3),
    }


TRELLIS = ("1mad", 8, 2, 1, 16)
# name: (the public call, the registered op's call giving the expected result, or None: the shape below)
CASES = {
    "fwht": (lambda t: K.fwht(t["x"]), lambda t: OPS.fwht(t["x"], 0.5)),
    "fwht_reference": (lambda t: K.fwht_reference(t["x"], 0.5), lambda t: OPS.fwht(t["x"], 0.5)),
    "trellis_decode": (
        lambda t: K.trellis_decode(t["packed"], *TRELLIS),
        lambda t: OPS.trellis_decode(t["packed"], *TRELLIS, 1.0, 0.0, 1, 0, 8, None),
    ),
    "trellis_decode_lut": (
        lambda t: K.trellis_decode(t["packed"], "lut", 8, 2, 1, 16, table=t["lut"]),
        lambda t: OPS.trellis_decode(t["packed"], "lut", 8, 2, 1, 16, 1.0, 0.0, 1, 0, 8, t["lut"]),
    ),
    "trellis_gemv": (
        lambda t: K.trellis_gemv(t["xg"], t["packed"], *TRELLIS),
        lambda t: OPS.trellis_gemv(t["xg"], t["packed"], *TRELLIS, 1.0, 0.0, 1, 0, 8, None),
    ),
    "block_sparse_attention": (
        lambda t: K.block_sparse_attention(t["q"], t["q"], t["q"], t["bi"], block_size=16, return_lse=True),
        lambda t: OPS.block_sparse_attention(t["q"], t["q"], t["q"], t["bi"], 16, 0.25),
    ),
    "block_sparse_attention_reference": (
        lambda t: K.block_sparse_attention_reference(
            t["q"], t["q"], t["q"], t["bi"], block_size=16, return_lse=True
        ),
        lambda t: OPS.block_sparse_attention(t["q"], t["q"], t["q"], t["bi"], 16, 0.25),
    ),
    "block_sparse_attention_flex": (
        lambda t: K.block_sparse_attention_flex(t["q"], t["q"], t["q"], t["bi"], block_size=16),
        lambda t: OPS.block_sparse_attention(t["q"], t["q"], t["q"], t["bi"], 16, 0.25)[0],
    ),
    "echo_combine": (
        lambda t: K.echo_combine(t["u"], t["vbar"], t["a"], t["a"], t["anchor"], t["key"]),
        lambda t: OPS.echo_combine(t["u"], t["vbar"], t["a"], t["a"], t["anchor"], t["key"]),
    ),
    "echo_combine_reference": (
        lambda t: K.echo_combine_reference(t["u"], t["vbar"], t["a"], t["a"], t["anchor"], t["key"]),
        lambda t: OPS.echo_combine(t["u"], t["vbar"], t["a"], t["a"], t["anchor"], t["key"]),
    ),
    "rasterize_gaussians": (
        lambda t: K.rasterize_gaussians(t["m"], t["con"], t["col"], t["op"], 20, 12, t["bg"]),
        lambda t: OPS.gaussian_rasterize(t["m"], t["con"], t["col"], t["op"], 20, 12, t["bg"], 16),
    ),
    "rasterize_gaussians_no_background": (
        lambda t: K.rasterize_gaussians(t["m"], t["con"], t["col"], t["op"], 20, 12),
        lambda t: OPS.gaussian_rasterize(t["m"], t["con"], t["col"], t["op"], 20, 12, t["bg"], 16),
    ),
    "gaussian_rasterize_reference": (
        lambda t: K.gaussian_rasterize_reference(t["m"], t["con"], t["col"], t["op"], 20, 12, t["bg"]),
        lambda t: OPS.gaussian_rasterize(t["m"], t["con"], t["col"], t["op"], 20, 12, t["bg"], 16),
    ),
}


def _layout(out):
    if isinstance(out, tuple):
        return tuple(_layout(o) for o in out)
    return (tuple(out.shape), out.dtype, out.device.type, out.is_contiguous())


def _call(fn, t):
    with warnings.catch_warnings():  # flex_attention's own warning about eager CPU runs
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return fn(t)


@pytest.mark.parametrize("name", sorted(CASES))
def test_public_functions_take_meta_tensors(name):
    public, op = CASES[name]
    t = _inputs("meta")
    out = _call(public, t)
    assert _layout(out) == _layout(op(t))
    assert all(o.is_meta for o in (out if isinstance(out, tuple) else (out,)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_public_functions_take_fake_tensors(name):
    public, op = CASES[name]
    with FakeTensorMode():
        t = _inputs("cpu")
        out = _call(public, t)
        assert _layout(out) == _layout(op(t))


def test_the_block_mask_of_a_meta_or_fake_index():
    for device in ("meta", "cpu"):
        with FakeTensorMode() if device == "cpu" else contextlib.nullcontext():
            mask = K.block_mask_from_index(K.dense_block_index(40, 16).to(device), 40, 16)
            assert mask.kv_num_blocks.shape == (1, 1, 3)


@pytest.mark.parametrize("name", ["block_sparse_attention", "echo_combine", "rasterize_gaussians"])
def test_the_differentiable_reference_paths_on_meta_tensors(name):
    # requires_grad sends these to their torch references (the kernels are forward only)
    t = {k: v.requires_grad_() if v.is_floating_point() else v for k, v in _inputs("meta").items()}
    public, op = CASES[name]
    out = public(t)
    assert _layout(out) == _layout(op(t))
    first = out[0] if isinstance(out, tuple) else out
    first.sum().backward()
    grad = t[{"block_sparse_attention": "q", "echo_combine": "u", "rasterize_gaussians": "m"}[name]].grad
    assert grad is not None and grad.is_meta


def test_a_non_strict_export_leaves_later_real_calls_alone():
    # A non-strict torch.export runs fwht_reference on fake tensors: until 2026-12 its H_n blocks went into
    # the cache as fake tensors, and every later real fwht / fwht_reference of that row length (n = 64:
    # H_32 and H_2) failed with GuardOnDataDependentSymNode "Could not guard on data-dependent expression"
    class Model(torch.nn.Module):
        def forward(self, x):
            return K.fwht_reference(x, 1.0)

    _hadamard_on.cache_clear()
    program = torch.export.export(Model(), (torch.randn(3, 64),), strict=False)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    expected = x @ K.hadamard_matrix(64, torch.float32)
    # measured max |error| 7.6e-6 (entries up to 28: a few float32 ulps); atol 1e-4 leaves a margin of 13x
    for y in (K.fwht_reference(x, 1.0), K.fwht(x, scale=1.0), program.module()(x)):
        assert type(y) is torch.Tensor and torch.allclose(y, expected, rtol=0, atol=1e-4)


def test_fake_matrices_stay_out_of_the_hadamard_cache():
    # fwht_reference under FakeTensorMode must not cache a fake H_n: a later real call would multiply by it
    # and fail ("Please convert all Tensors to FakeTensors first")
    _hadamard_on.cache_clear()
    with FakeTensorMode():
        K.fwht_reference(torch.empty(3, 64), 1.0)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    y = K.fwht_reference(x, 1.0)
    # the same x as above: max |error| 7.6e-6, atol 1e-4 (13x)
    assert type(y) is torch.Tensor and torch.allclose(
        y, x @ K.hadamard_matrix(64, torch.float32), rtol=0, atol=1e-4
    )


def test_real_tensors_keep_their_data_checks():
    bad = torch.tensor([[1.0, float("nan")]])
    with pytest.raises(ValueError, match="x must be finite"):
        K.fwht(bad)
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match="block_index must hold key block indices"):
        K.block_sparse_attention(q, q, q, torch.tensor([[5]]), block_size=4)
    # a meta tensor beside real ones is refused by the device check, before any data is read
    with pytest.raises(ValueError, match="block_index must be on the device of q"):
        K.block_sparse_attention(q, q, q, torch.tensor([[0]], device="meta"), block_size=4)
