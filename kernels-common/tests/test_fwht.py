"""Reference tier: the torch FWHT against the explicit Hadamard matrix, its algebra, autograd, the op
registration and bad input. Runs everywhere."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_kernels import fwht, fwht_reference, hadamard_matrix
from icml_kernels.testing import rel_rms_error


@pytest.mark.parametrize("n", [1, 2, 4, 8, 32, 64, 1024, 2048, 8192])  # 1, 2 or 3 blocks of 5 bits, partial
def test_reference_matches_explicit_hadamard_product(n):
    torch.manual_seed(n)
    x = torch.randn(5, n, dtype=torch.float64)
    expected = x @ hadamard_matrix(n) / math.sqrt(n)
    assert rel_rms_error(fwht_reference(x, 1 / math.sqrt(n)), expected) < 1e-13


def test_hadamard_matrix_is_orthogonal_and_symmetric():
    h = hadamard_matrix(32)
    assert torch.equal(h, h.T)
    assert torch.equal(h @ h, 32 * torch.eye(32, dtype=h.dtype))


@pytest.mark.parametrize("n", [2, 16, 512])
def test_fwht_float32_against_float64_matrix_product(n):
    torch.manual_seed(0)
    x = torch.randn(3, 7, n)
    expected = x.double() @ hadamard_matrix(n) / math.sqrt(n)
    y = fwht(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert rel_rms_error(y, expected) < 1e-6


def test_orthonormal_transform_is_an_involution_and_preserves_norm():
    torch.manual_seed(1)
    x = torch.randn(4, 256, dtype=torch.float64)
    y = fwht(x)
    torch.testing.assert_close(fwht(y), x, rtol=0, atol=1e-12)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=0)


def test_explicit_scale_and_unit_impulse():
    x = torch.zeros(8, dtype=torch.float64)
    x[0] = 1.0
    assert torch.equal(fwht(x, scale=1.0), torch.ones(8, dtype=torch.float64))
    assert torch.equal(fwht(x, scale=2), torch.full((8,), 2.0, dtype=torch.float64))


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_half_precision_keeps_dtype_and_is_close(dtype, tol):
    torch.manual_seed(2)
    x = torch.randn(6, 128).to(dtype)
    y = fwht(x)
    assert y.dtype == dtype
    assert rel_rms_error(y, fwht(x.double())) < tol


def test_empty_batch_and_one_dimensional_input():
    assert fwht(torch.randn(0, 16)).shape == (0, 16)
    x = torch.randn(16, dtype=torch.float64)
    torch.testing.assert_close(fwht(x), (x @ hadamard_matrix(16)) / 4)


def test_gradient_is_the_transform_of_the_gradient():
    x = torch.randn(3, 32, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fwht(t, scale=0.3), (x,))
    g = torch.randn(3, 32, dtype=torch.float64)
    (fwht(x) * g).sum().backward()
    torch.testing.assert_close(x.grad, fwht(g))


def test_torch_library_registration():
    op = torch.ops.icml_kernels.fwht.default
    torch.library.opcheck(op, (torch.randn(3, 16), 0.25))
    torch.library.opcheck(op, (torch.randn(2, 8, dtype=torch.float64, requires_grad=True), 1.0))


@pytest.mark.parametrize(
    ("shape", "dims"),
    [((16, 3), (1, 0)), ((8, 3, 2), (1, 2, 0)), ((2, 1, 3), (2, 0, 1))],  # transposed, permuted, n = 1
)
def test_registered_op_returns_contiguous_output_as_its_fake_says(shape, dims):
    # The fake took x's strides while the op returns a contiguous tensor (and, with n = 1, the reference
    # kept a permuted x's layout): torch.compile's inductor then failed its output assertion on a transposed
    # x ("expected size 4==4, stride 8==1"). The fake and the op now both give a contiguous result.
    x = torch.randn(shape, dtype=torch.float64).permute(dims)
    assert not x.is_contiguous()
    y = torch.ops.icml_kernels.fwht(x, 0.5)
    assert y.is_contiguous()
    torch.testing.assert_close(y, 0.5 * x @ hadamard_matrix(x.shape[-1]), rtol=0, atol=1e-12)
    torch.library.opcheck(torch.ops.icml_kernels.fwht.default, (x, 0.5), test_utils=("test_faketensor",))


def test_compiles_through_the_fake_implementation():
    fn = torch.compile(lambda t: fwht(t) * 2, backend="eager", fullgraph=True)
    x = torch.randn(4, 64)
    torch.testing.assert_close(fn(x), fwht(x) * 2)


@settings(max_examples=40, deadline=None)
@given(
    log_n=st.integers(0, 9),
    rows=st.integers(1, 4),
    a=st.floats(-3, 3),
    b=st.floats(-3, 3),
    seed=st.integers(0, 2**16),
)
def test_linearity(log_n, rows, a, b, seed):
    gen = torch.Generator().manual_seed(seed)
    n = 1 << log_n
    x = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    y = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(fwht(a * x + b * y), a * fwht(x) + b * fwht(y), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [3, 6, 12, 1000])
def test_non_power_of_two_length_raises(n):
    with pytest.raises(ValueError, match=r"x\.shape\[-1\] must be a power of two"):
        fwht(torch.randn(2, n))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.complex64])
def test_non_float_dtype_raises(dtype):
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        fwht(torch.zeros(2, 8, dtype=dtype))


def test_other_bad_input_raises():
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        fwht([1.0, 2.0])
    with pytest.raises(ValueError, match="at least one dimension"):
        fwht(torch.tensor(1.0))
    with pytest.raises(ValueError, match="power of two"):
        fwht(torch.zeros(3, 0))
    for scale in (float("nan"), float("inf"), 10**400):  # a number, but not a finite float
        with pytest.raises(ValueError, match="scale must be a finite float"):
            fwht(torch.zeros(8), scale=scale)
    with pytest.raises(TypeError, match="scale must be a finite float"):
        fwht(torch.zeros(8), scale="0.5")
    for n in (8.0, "8", True):  # not an int
        with pytest.raises(TypeError, match="n must be an int, a power of two"):
            hadamard_matrix(n)
    for n in (0, 6, 10**400):
        with pytest.raises(ValueError, match="n must be a power of two"):
            hadamard_matrix(n)
    with pytest.raises(ValueError, match="power of two"):
        torch.ops.icml_kernels.fwht(torch.zeros(5), 1.0)
