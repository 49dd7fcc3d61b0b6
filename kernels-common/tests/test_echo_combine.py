"""Reference tier of the echo combination: the torch reference against an explicit loop, both key-frame
variants, precision, autograd (gradcheck), the op registration and bad input. Runs everywhere."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import KernelUnavailableError, echo_combine, echo_combine_reference
from icml_kernels.testing import rel_rms_error


def echo_inputs(B=2, H=3, R=2, F=5, S=7, D=4, Q=4, dtype=torch.float64, seed=0, key="same-frame"):
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(B, H, R, F, S, D, generator=gen, dtype=dtype)
    vbar = torch.randn(B, H, F, D, generator=gen, dtype=dtype)
    a = torch.randn(H, Q, F, generator=gen, dtype=torch.float64)
    b = torch.randn(H, Q, F, generator=gen, dtype=torch.float64)
    anchor = torch.randint(0, R, (H, Q), generator=gen)
    if key == "same-frame":
        keys = torch.arange(F).expand(H, Q, F).clone()
    else:  # same temporal offset: target q sits `shift` frames after its anchor, clamped at the ends
        shift = torch.randint(-2, 3, (H, Q, 1), generator=gen)
        keys = (torch.arange(F) - shift).clamp(0, F - 1)
    return u, vbar, a.to(dtype), b.to(dtype), anchor, keys


def echo_loop(u, vbar, a, b, anchor, key):
    """The definition, one term at a time, in float64."""
    B, H, _, F, S, D = u.shape
    Q = a.shape[1]
    out = torch.zeros(B, H, Q, S, D, dtype=torch.float64)
    for bi in range(B):
        for h in range(H):
            for q in range(Q):
                for j in range(F):
                    out[bi, h, q] += a[h, q, j].double() * u[bi, h, anchor[h, q], key[h, q, j]].double()
                    out[bi, h, q] += b[h, q, j].double() * vbar[bi, h, j].double()
    return out


@pytest.mark.parametrize("variant", ["same-frame", "same-offset"])
@pytest.mark.parametrize(
    "shape", [{}, {"B": 1, "H": 1, "R": 1, "F": 1, "S": 1, "D": 1, "Q": 1}, {"R": 3, "F": 8, "Q": 6}]
)
def test_reference_matches_the_explicit_sum(variant, shape):
    inputs = echo_inputs(**shape, key=variant, seed=len(shape))
    out = echo_combine_reference(*inputs)
    assert out.dtype == torch.float64 and out.shape == echo_loop(*inputs).shape
    assert rel_rms_error(out, echo_loop(*inputs)) < 1e-13
    assert torch.equal(echo_combine(*inputs), out)  # on the CPU the public function is this reference


def test_clamped_offsets_count_a_key_frame_twice():
    u, vbar, a, b, anchor, _ = echo_inputs(H=1, Q=1, F=3)
    key = torch.tensor([[[0, 0, 1]]])  # frame 0 twice
    a = torch.ones_like(a)
    out = echo_combine(u, vbar, a, torch.zeros_like(b), anchor, key)
    r = anchor[0, 0]
    torch.testing.assert_close(out[:, 0, 0], 2 * u[:, 0, r, 0] + u[:, 0, r, 1])


def test_zero_targets_and_float32_accumulation():
    u, vbar, a, b, anchor, key = echo_inputs(Q=0)
    assert echo_combine(u, vbar, a, b, anchor, key).shape == (2, 3, 0, 7, 4)
    inputs = echo_inputs(dtype=torch.float32, seed=3)
    out = echo_combine(*inputs)
    assert out.dtype == torch.float32 and rel_rms_error(out, echo_loop(*inputs)) < 1e-6
    # coefficients in float64 with float32 values: accepted, computed in float32
    u, vbar, a, b, anchor, key = inputs
    assert rel_rms_error(echo_combine(u, vbar, a.double(), b.double(), anchor, key.int()), out) < 1e-7


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_half_precision(dtype, tol):
    u, vbar, a, b, anchor, key = echo_inputs(dtype=torch.float32, seed=4)
    u, vbar = u.to(dtype), vbar.to(dtype)
    out = echo_combine(u, vbar, a, b, anchor, key)
    assert out.dtype == dtype
    assert rel_rms_error(out, echo_loop(u, vbar, a, b, anchor, key)) < tol


def test_gradcheck_of_u_vbar_a_b():
    u, vbar, a, b, anchor, key = echo_inputs(B=1, H=2, R=2, F=3, S=2, D=3, Q=2, key="same-offset")
    leaves = tuple(t.requires_grad_() for t in (u, vbar, a, b))
    assert torch.autograd.gradcheck(lambda *t: echo_combine(*t, anchor, key), leaves)
    assert torch.autograd.gradcheck(lambda *t: echo_combine_reference(*t, anchor, key), leaves)


def test_gradient_of_the_coefficients_only():
    # the echo calibration trains a, b with u and vbar fixed
    u, vbar, a, b, anchor, key = echo_inputs(seed=5)
    a.requires_grad_()
    g = torch.randn(2, 3, 4, 7, 4, dtype=torch.float64)
    (grad,) = torch.autograd.grad((echo_combine(u, vbar, a, b, anchor, key) * g).sum(), (a,))
    expected = torch.zeros_like(a)
    for h in range(3):
        for q in range(4):
            for j in range(5):
                expected[h, q, j] = (g[:, h, q] * u[:, h, anchor[h, q], key[h, q, j]]).sum()
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)


def test_torch_library_registration_and_compile():
    inputs = echo_inputs(dtype=torch.float32, seed=6)
    op = torch.ops.icml_kernels.echo_combine.default
    torch.library.opcheck(op, inputs)
    fn = torch.compile(lambda *t: echo_combine(*t), backend="eager", fullgraph=True)
    torch.testing.assert_close(fn(*inputs), op(*inputs))


def test_dispatch_honours_the_request(monkeypatch):
    inputs = echo_inputs(dtype=torch.float32)
    monkeypatch.setenv("ICML_KERNELS_IMPL", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelUnavailableError, match="echo_combine"):
        echo_combine(*inputs)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(KernelUnavailableError, match="float64"):
        echo_combine(*echo_inputs())


# --- bad input -----------------------------------------------------------------------------------------
U, VBAR, A, B_, ANCHOR, KEY = echo_inputs(dtype=torch.float32, seed=7)


@pytest.mark.parametrize(
    "change, error, name",
    [
        ({"u": U.numpy()}, TypeError, "u must be a torch.Tensor"),
        ({"u": U[0]}, ValueError, "u must have shape"),
        ({"u": U.int()}, TypeError, "u must have a floating dtype"),
        ({"vbar": VBAR.double()}, TypeError, "vbar must have the dtype of u"),
        ({"vbar": VBAR[..., :2]}, ValueError, "vbar must have shape"),
        ({"a": A[:, :, :2]}, ValueError, "a must have shape"),
        ({"a": A[:2]}, ValueError, "a must have shape"),
        ({"a": A > 0}, TypeError, "a must have a floating dtype"),
        ({"b": B_[:, :2]}, ValueError, "b must have shape"),
        ({"b": None}, TypeError, "b must be a torch.Tensor"),
        ({"anchor": ANCHOR.float()}, TypeError, "anchor"),
        ({"anchor": ANCHOR[:, :2]}, ValueError, "anchor must have shape"),
        ({"anchor": ANCHOR + 1}, ValueError, "anchor must hold indices in 0..1"),
        ({"anchor": ANCHOR - 1}, ValueError, "anchor must hold indices"),
        ({"key": KEY[..., :2]}, ValueError, "key must have shape"),
        ({"key": KEY + 1}, ValueError, "key must hold indices in 0..4"),
        ({"key": KEY.double()}, TypeError, "key"),
        ({"u": U.clone().fill_(math.nan)}, ValueError, "u must be finite"),
        ({"vbar": VBAR.clone().fill_(math.inf)}, ValueError, "vbar must be finite"),
        ({"a": A.clone().fill_(math.nan)}, ValueError, "a must be finite"),
        ({"b": B_.clone().fill_(-math.inf)}, ValueError, "b must be finite"),
    ],
)
def test_bad_input_raises_naming_the_argument(change, error, name):
    kwargs = {"u": U, "vbar": VBAR, "a": A, "b": B_, "anchor": ANCHOR, "key": KEY}
    kwargs.update(change)
    for fn in (echo_combine, echo_combine_reference):
        with pytest.raises(error, match=name):
            fn(**kwargs)


def test_registered_op_checks_shapes_not_data():
    with pytest.raises(ValueError, match="key must have shape"):
        torch.ops.icml_kernels.echo_combine(U, VBAR, A, B_, ANCHOR, KEY[..., :2])


def test_overflow_warns():
    with pytest.warns(RuntimeWarning, match="echo_combine"):
        out = echo_combine(U, VBAR, A * 1e38, B_, ANCHOR, KEY)
    assert not bool(out.isfinite().all())
