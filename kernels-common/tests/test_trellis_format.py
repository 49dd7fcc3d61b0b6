"""The packed trellis format: its ranges, the code rules, and ``pack``/``unpack`` as writer and reader of one
bit layout (against the decoders' ``unpack_states`` and bit-by-bit Python)."""

from __future__ import annotations

import pytest
import torch

from icml_kernels.trellis import (
    CODE_V,
    CODES,
    COMPUTED_CODES,
    TABLE_CODES,
    TrellisFormat,
    check_code,
    check_code_params,
    table_shape_of,
    unpack_states,
)
from icml_kernels.trellis.testing import random_packed


def test_codes_are_computed_or_table_based_with_their_v():
    assert set(CODES) == set(COMPUTED_CODES) | set(TABLE_CODES) == set(CODE_V)
    assert not set(COMPUTED_CODES) & set(TABLE_CODES)
    assert all(CODE_V[c] == 1 for c in COMPUTED_CODES) and CODE_V["hyb"] == 2
    assert table_shape_of("hyb", 16, 2) == (512, 2) and table_shape_of("hyb", 9, 2) == (128, 2)
    assert table_shape_of("lut", 10, 2) == (1024, 2) and table_shape_of("mulbal", 10, 1) is None


@pytest.mark.parametrize(
    "L, K, V, T, words", [(8, 1, 1, 32, 1), (12, 2, 1, 256, 16), (16, 2, 2, 256, 16), (16, 4, 1, 8, 1)]
)
def test_pack_and_unpack_are_inverse_and_match_the_decoders_reader(L, K, V, T, words):
    fmt = TrellisFormat(L, K, V, T)
    assert fmt.words_per_tile == words and fmt.packable
    packed = random_packed(3, words, seed=L)  # every cyclic bitstream is a tail-biting tile
    states = fmt.unpack(packed)
    assert states.shape == (3, T // V) and bool(fmt.is_tail_biting(states).all())
    assert torch.equal(states, unpack_states(packed, L, K, V, T))
    assert torch.equal(fmt.pack(states), packed)
    bits = [(int(w) >> (31 - i)) & 1 for w in packed[0].tolist() for i in range(32)]  # MSB first
    assert torch.equal(fmt.tail_biting_bits(states)[0], torch.tensor(bits, dtype=torch.uint8))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"L": 7}, ValueError, r"L must be in 8\.\.16"),
        ({"L": 10, "K": 5}, ValueError, r"K must be in 1\.\.4"),
        ({"L": 10, "V": 3}, ValueError, r"V must be in 1\.\.2"),
        ({"L": 10, "T": 1 << 17}, ValueError, r"T must be in 1\.\.65536"),
        ({"L": 10, "V": 2, "T": 33}, ValueError, "T must be a multiple of V"),
        ({"L": 8, "K": 4, "V": 2}, ValueError, r"K\*V must be smaller than L"),
        ({"L": 10.0}, TypeError, "L must be an int"),
        ({"L": 10, "T": True}, TypeError, "T must be an int"),
    ],
)
def test_bad_format_raises(kwargs, error, match):
    with pytest.raises(error, match=match):
        TrellisFormat(**kwargs)


def test_unpackable_format_and_bad_words_raise():
    fmt = TrellisFormat(10, 2, 1, 40)  # a valid trellis whose tiles are not whole words
    assert not fmt.packable
    with pytest.raises(ValueError, match="K\\*T must be a multiple of 32"):
        _ = fmt.words_per_tile
    fmt = TrellisFormat(10)
    with pytest.raises(TypeError, match="packed must have dtype int32"):
        fmt.unpack(random_packed(2, 16).long())
    with pytest.raises(ValueError, match="16 words per tile"):
        fmt.unpack(random_packed(2, 15))
    with pytest.raises(ValueError, match="trellis paths"):
        fmt.pack(torch.randint(0, 1024, (2, 256)))


@pytest.mark.parametrize(
    "code, V, kwargs, error, match",
    [
        ("2mad", 1, {}, ValueError, "code must be one of"),
        ("1mad", 2, {}, ValueError, "V must be 1"),
        ("hyb", 1, {}, ValueError, "V must be 2"),
        ("mulbal", 1, {}, TypeError, r"mulbal must be a tuple \(a, b, m\)"),
        ("mulbal", 1, {"mulbal": (0, 0, 8)}, ValueError, r"mulbal a must be in 1\.\.4294967295"),
        ("mulbal", 1, {"mulbal": (3, 0, 9)}, ValueError, r"mulbal m must be in 1\.\.8"),
        ("1mad", 1, {"mulbal": (3, 0, 8)}, ValueError, "only apply to code 'mulbal'"),
        ("3inst", 1, {"table_shape": (1024, 1)}, ValueError, "takes no table"),
        ("lut", 2, {}, TypeError, r"reads a table of shape \(1024, 2\); table is None"),
        (
            "hyb",
            2,
            {"table_shape": (64, 2), "table_name": "tbl"},
            ValueError,
            r"tbl must have shape \(256, 2\)",
        ),
    ],
)
def test_code_rules(code, V, kwargs, error, match):
    with pytest.raises(error, match=match):
        TrellisFormat(10, 2, V).check_code(code, **kwargs)


def test_good_codes_pass():
    assert check_code("lut", 2) == "lut"
    assert check_code_params("mulbal", 10, 1, mulbal=[3, 0, 8]) == (3, 0, 8)
    assert TrellisFormat(10, 2, 2).check_code("hyb", table_shape=torch.Size([256, 2])) is None
