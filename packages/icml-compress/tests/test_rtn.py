"""Round-to-nearest: exact on its own grid, error at most half a step, strict input checks."""

import pytest
import torch

from icml_compress.baselines import rtn_quantize


def test_values_on_the_grid_are_reproduced_exactly():
    # each group holds its min and max, and every value is min + k * step with a power-of-two step
    grid = torch.tensor([-1.0, -0.5, 0.0, 0.5])  # 2 bits: offset -1, scale 0.5
    codes = torch.randint(0, 4, (8, 64), generator=torch.Generator().manual_seed(0))
    codes[:, ::32] = 0
    codes[:, 1::32] = 3  # every group of 32 contains both ends
    w = grid[codes]  # (8, 64)
    q = rtn_quantize(w, bits=2, group_size=32)
    assert torch.equal(q.dequantized, w)
    assert torch.equal(q.codes, codes.to(torch.uint8))
    assert torch.equal(q.scale, torch.full((8, 2), 0.5))
    assert torch.equal(q.offset, torch.full((8, 2), -1.0))


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_error_is_at_most_half_a_step(bits):
    w = torch.randn(16, 256, generator=torch.Generator().manual_seed(bits))
    q = rtn_quantize(w, bits=bits, group_size=64)
    step = q.scale.repeat_interleave(64, dim=-1)  # (16, 256)
    assert torch.all((q.dequantized - w).abs() <= step / 2 + 1e-6)
    assert int(q.codes.max()) <= 2**bits - 1
    offset = q.offset.repeat_interleave(64, dim=-1)
    torch.testing.assert_close(offset + step * q.codes.float(), q.dequantized)
    # min and max of every group sit on the grid
    groups = w.reshape(16, 4, 64)
    torch.testing.assert_close(q.offset, groups.amin(-1))
    torch.testing.assert_close(q.offset + q.scale * (2**bits - 1), groups.amax(-1))


def test_more_bits_less_error():
    w = torch.randn(32, 128, generator=torch.Generator().manual_seed(3))
    errors = [(rtn_quantize(w, b, 128).dequantized - w).norm().item() for b in (2, 3, 4)]
    assert errors[0] > 1.8 * errors[1] > 3.2 * errors[2]  # each bit roughly halves the step


def test_constant_group_and_dtypes():
    w = torch.full((2, 8), 0.25, dtype=torch.float64)
    q = rtn_quantize(w, 2, 4)
    assert torch.equal(q.dequantized, w) and q.dequantized.dtype == torch.float64
    assert torch.equal(q.scale, torch.zeros(2, 2, dtype=torch.float64))
    h = torch.randn(4, 32).to(torch.bfloat16)
    assert rtn_quantize(h, 4, 16).dequantized.dtype == torch.bfloat16


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"bits": 0}, ValueError, "bits"),
        ({"bits": 9}, ValueError, "bits"),
        ({"bits": 2.0}, TypeError, "bits"),
        ({"group_size": 48}, ValueError, "group_size.*divide"),
        ({"group_size": 0}, ValueError, "group_size"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    args = {"weight": torch.randn(4, 64), "bits": 2, "group_size": 32, **kwargs}
    with pytest.raises(error, match=match):
        rtn_quantize(**args)


def test_bad_weight():
    with pytest.raises(TypeError, match=r"weight.*floating"):
        rtn_quantize(torch.ones(4, 64, dtype=torch.int32), 2, 32)
    with pytest.raises(TypeError, match=r"weight.*torch.Tensor"):
        rtn_quantize([[1.0, 2.0]], 2, 2)
    w = torch.randn(4, 64)
    w[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"weight.*finite"):
        rtn_quantize(w, 2, 32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bits", [2, 4])
def test_weights_near_the_largest_float(dtype, bits):
    # a group spanning about ±0.9 x the largest float of the compute dtype (bfloat16 and float32 share
    # float32's ±3.4e38): max - min overflows it. Before the fix the group came out all NaN (scale inf).
    # Reference: float64 on the weights divided by 2^64 (exact: no rounding, no overflow), scaled back.
    big = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).max * 0.9
    w = (torch.rand(8, 64, generator=torch.Generator().manual_seed(bits), dtype=torch.float64) * 2 - 1) * big
    w[:, 0], w[:, 1] = -big, big  # every group spans nearly the whole range
    w = w.to(dtype)
    q = rtn_quantize(w, bits, 32)
    ref = rtn_quantize(w.double() / 2.0**64, bits, 32)
    assert torch.isfinite(q.dequantized).all() and torch.isfinite(q.scale).all()
    assert torch.equal(q.codes, ref.codes)
    torch.testing.assert_close(q.scale.double(), ref.scale * 2.0**64, rtol=1e-6, atol=0)
    # |q - ref| / big measured over 20 seeds: bfloat16 2.0e-3 (its output rounding), float32 1.6e-7,
    # float64 2.5e-16; the bound 4 eps(dtype) is 3-15x above
    eps = torch.finfo(dtype).eps
    assert (q.dequantized.double() - ref.dequantized * 2.0**64).abs().max() <= 4 * eps * big
    step = q.scale.double().repeat_interleave(32, dim=-1)
    assert torch.all((q.dequantized.double() - w.double()).abs() <= step / 2 + 2 * eps * big)


def test_groups_away_from_the_largest_float_keep_their_bits():
    # only the overflowing groups take the halved path: at first the whole tensor did, and its clamp to
    # [min, max] moved ordinary groups (44 entries of rows 1-63 here, up to 4.9e-4), whose plain grid often
    # ends an ulp above max (7,350 of 25,600 3-bit groups); a group must not depend on its neighbours
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 64, generator=g) * 1e3
    w[0, 0], w[0, 1] = -3e38, 3e38
    q = rtn_quantize(w, 3, 32)
    alone = rtn_quantize(w[1:], 3, 32)
    assert torch.equal(q.dequantized[1:], alone.dequantized) and torch.equal(q.codes[1:], alone.codes)
    assert torch.equal(q.scale[1:], alone.scale)
    assert torch.isfinite(q.dequantized).all()


def test_one_bit_step_beyond_the_largest_float_is_refused():
    # with 1 bit the grid step is the whole range max - min, which float32 cannot hold here
    w = torch.tensor([[-3e38, 3e38]])
    with pytest.raises(ValueError, match=r"weight.*range.*bits"):
        rtn_quantize(w, 1, 2)
    assert torch.equal(rtn_quantize(w, 2, 2).dequantized, w)  # 2 bits: the step 2e38 fits
