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
