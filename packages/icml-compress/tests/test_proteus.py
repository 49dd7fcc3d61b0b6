"""Proteus codes, the Gaussian benchmark and the vetted pool."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from icml_compress.proteus import (
    CODE_NAMES,
    LLOYD_MAX_MSE,
    MULBAL_POOL,
    MulBal,
    distortion_rate_bound,
    gaussian_mse,
    gaussian_tile_mse,
    make_code,
    overlap_stats,
    reference_stats,
    vet,
)
from icml_compress.proteus.vetting import select_pool
from icml_compress.trellis import BitshiftTrellis, quantize_tiles
from icml_kernels.trellis import CODES

VETTING_TABLE = Path(__file__).resolve().parents[1] / "docs" / "mulbal_vetting.csv"


@pytest.mark.parametrize(
    "name, V", [("lut", 1), ("lut", 2), ("1mad", 1), ("3inst", 1), ("hyb", 2), ("mulbal", 1)]
)
@pytest.mark.parametrize("L", [8, 12])
def test_codes_are_normalized(name, V, L):
    values = make_code(name, L, V).values().double()
    assert values.shape == (1 << L, V)
    assert abs(values.mean().item()) < 1e-6
    assert values.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)


def test_1mad_and_3inst_match_their_definitions():
    # python integers and numpy's float16, independent of the torch implementation
    states = [0, 1, 2, 777, 4095]
    code = make_code("1mad", 12)
    for s in states:
        x = (s * 34038481 + 76625530) % 2**32
        raw = sum((x >> (8 * i)) & 255 for i in range(4)) - 510
        assert code.decode(torch.tensor(s)).item() == pytest.approx(raw * code.alpha + code.beta, rel=1e-6)
    code = make_code("3inst", 12)
    for s in states:
        x = (s * 89226354 + 64248484) % 2**32
        r = (x & 0x8FFF8FFF) ^ 996162400
        halves = np.array([r >> 16, r & 0xFFFF], dtype=np.uint16).view(np.float16).astype(np.float64)
        assert code.decode(torch.tensor(s)).item() == pytest.approx(
            halves.sum() * code.alpha + code.beta, rel=1e-6
        )


def test_mulbal_is_a_balanced_byte_field_sum():
    mb = MulBal(2654435761, 12345, 6)
    code = make_code("mulbal", 10, mulbal=mb)
    for s in (0, 5, 1023):
        x = (s * mb.a + mb.b) % 2**32
        f = [(x >> (8 * i + 2)) & 63 for i in range(4)]
        assert code.decode(torch.tensor(s)).item() == pytest.approx(
            (f[0] - f[1] + f[2] - f[3]) * code.alpha + code.beta, rel=1e-6
        )
    assert code.table is None  # lookup-free: nothing but (a, b, m) and the affine pair


def test_code_names_are_the_kernels():
    assert CODE_NAMES is CODES and CODE_NAMES == ("1mad", "3inst", "mulbal", "hyb", "lut")


def test_gaussian_tile_mse_is_per_tile():
    """Per-tile MSE: each tile alone gives its own value (tiles are independent in the Viterbi), and the
    mean is ``gaussian_mse``."""
    tiles = gaussian_tile_mse("mulbal-1", 8, n_tiles=6, seed=4)
    assert tiles.shape == (6,)
    assert gaussian_mse("mulbal-1", 8, n_tiles=6, seed=4) == pytest.approx(tiles.mean().item(), rel=1e-6)
    trellis = BitshiftTrellis(8, 2, 1, 256)
    code = make_code("mulbal", 8, mulbal=MULBAL_POOL[1])
    x = torch.randn(6, 256, generator=torch.Generator().manual_seed(4))
    for i in (0, 5):
        states = trellis.unpack(trellis.pack(quantize_tiles(x[i : i + 1], code.values(), trellis)))
        own = (code.decode(states).reshape(1, 256) - x[i : i + 1]).pow(2).mean().item()
        assert tiles[i].item() == pytest.approx(own, rel=1e-6)


def test_bad_codes_raise():
    with pytest.raises(ValueError, match="code must be one of"):
        make_code("2mad", 10)
    with pytest.raises(ValueError, match="V must be 1"):
        make_code("1mad", 10, 2)
    with pytest.raises(ValueError, match="V must be 2"):
        make_code("hyb", 10, 1)
    with pytest.raises(ValueError, match=r"L must be in 8\.\.16"):
        make_code("lut", 17)
    with pytest.raises(ValueError, match="a must be odd"):
        MulBal(2, 0, 8)
    with pytest.raises(ValueError, match=r"m must be in 1\.\.8"):
        MulBal(3, 0, 9)
    with pytest.raises(ValueError, match="only apply"):
        make_code("1mad", 10, mulbal=MulBal(3, 0, 8))
    with pytest.raises(ValueError, match="pool has members"):
        gaussian_mse("mulbal-99", 8)
    with pytest.raises(ValueError, match="code must be one of"):
        gaussian_mse("table", 8)
    with pytest.raises(ValueError, match="n_tiles"):
        gaussian_mse("lut", 8, n_tiles=0)
    with pytest.raises(ValueError, match=r"K must be in 1\.\.4"):
        gaussian_mse("lut", 8, K=5)
    with pytest.raises(TypeError, match="tail_biting"):
        gaussian_mse("lut", 8, tail_biting=1)


def test_gaussian_mse_is_deterministic_and_between_the_references():
    a = gaussian_mse("mulbal", 8, n_tiles=8)
    assert a == gaussian_mse("mulbal", 8, n_tiles=8)
    assert distortion_rate_bound(2) == 0.0625 < a < LLOYD_MAX_MSE[2]
    free = gaussian_mse("mulbal", 8, n_tiles=8, tail_biting=False)
    assert free <= a  # the unconstrained optimum bounds the tail-biting path from below
    assert gaussian_mse("hyb", 10, V=2, n_tiles=8) < LLOYD_MAX_MSE[2]  # V = 2 needs a larger L than V = 1
    assert gaussian_mse("lut", 8, K=1, n_tiles=4) < LLOYD_MAX_MSE[1]


def test_computed_codes_beat_lloyd_max_by_30_percent_at_L10():
    for code in ("1mad", "3inst", "mulbal"):
        assert gaussian_mse(code, 10, n_tiles=32) < 0.7 * LLOYD_MAX_MSE[2]


def test_overlap_stats_separate_a_random_table_from_a_bad_generator():
    ref = reference_stats(10, tables=2)
    assert abs(ref["corr_lag1"]) < 0.05 and abs(ref["excess_kurtosis"]) < 0.3
    # a weak multiplier leaves successors nearly equal: tiny spread, large set distortion, fails vetting
    bad = vet(MulBal(3, 0, 8), {10: ref})
    assert not bad["passed"] and bad["score"] > 1.2
    stats = overlap_stats(make_code("lut", 10, seed=5).values()[:, 0], 10)
    assert stats["set_distortion"] == pytest.approx(ref["set_distortion"], rel=0.1)


def test_committed_pool_is_the_top_of_the_committed_vetting_table():
    with VETTING_TABLE.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 100
    scores = [float(r["score"]) for r in rows]
    assert scores == sorted(scores)
    results = [{**r, "passed": r["passed"] == "True"} for r in rows]
    assert 4 <= len(MULBAL_POOL) <= 8 and tuple(select_pool(results)) == MULBAL_POOL
    assert len({m.a for m in MULBAL_POOL}) == len(MULBAL_POOL)


@pytest.mark.slow
def test_pool_members_pass_vetting_when_recomputed():
    refs = {L: reference_stats(L) for L in (8, 12, 16)}
    for member in MULBAL_POOL:
        assert vet(member, refs)["passed"]
