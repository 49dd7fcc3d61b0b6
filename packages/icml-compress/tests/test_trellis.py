"""The bitshift trellis: transitions, bitstreams, packing, Viterbi against brute force, bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_compress.trellis import BitshiftTrellis, quantize_tiles, viterbi
from icml_kernels.trellis import TrellisFormat

TINY = [(8, 1, 1), (8, 2, 1), (8, 1, 2), (8, 3, 2), (9, 2, 2), (10, 4, 1)]  # (L, K, V), all with K*V < L


def brute_force(x: torch.Tensor, values: torch.Tensor, trellis: BitshiftTrellis):
    """Every path of a tiny trellis (all free-start bitstreams) and its cost for one sequence ``x (T,)``."""
    n_bits = trellis.L + (trellis.steps - 1) * trellis.kv
    codes = torch.arange(1 << n_bits)
    bits = ((codes.unsqueeze(-1) >> torch.arange(n_bits - 1, -1, -1)) & 1).to(torch.uint8)
    paths = trellis.states_from_bits(bits, tail_biting=False)  # (P, steps)
    xs = x.reshape(trellis.steps, trellis.V)
    cost = (values[paths] - xs).pow(2).sum((-1, -2))  # (P,)
    return paths, cost


def path_cost(states, x, values, trellis):
    return (values[states] - x.reshape(*x.shape[:-1], trellis.steps, trellis.V)).pow(2).sum((-1, -2))


@settings(max_examples=25, deadline=None)
@given(
    shape=st.sampled_from(TINY),
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    constrained=st.booleans(),
)
def test_viterbi_equals_brute_force(shape, steps, seed, constrained):
    L, K, V = shape
    trellis = BitshiftTrellis(L, K, V, steps * V)
    if L + (steps - 1) * K * V > 14:
        steps = 1 + (14 - L) // (K * V)
        trellis = BitshiftTrellis(L, K, V, steps * V)
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(1 << L, V, generator=gen, dtype=torch.float64)
    x = 1.5 * torch.randn(2, trellis.T, generator=gen, dtype=torch.float64)
    start = end = None
    if constrained:
        start = torch.randint(0, 1 << trellis.overlap_bits, (2,), generator=gen)
        end = torch.randint(0, 1 << trellis.overlap_bits, (2,), generator=gen)
    results = [brute_force(x[b], values, trellis) for b in range(2)]
    if constrained:
        low = (1 << trellis.overlap_bits) - 1
        feasible = [
            bool((((p[:, 0] >> trellis.kv) == start[b]) & ((p[:, -1] & low) == end[b])).any())
            for b, (p, _) in enumerate(results)
        ]
        if not all(feasible):
            with pytest.raises(ValueError, match="no trellis path"):
                viterbi(x, values, trellis, start_overlap=start, end_overlap=end)
            return
    got = viterbi(x, values, trellis, start_overlap=start, end_overlap=end, chunk=1)
    assert bool(trellis.is_path(got).all())
    for b in range(2):
        paths, cost = results[b]
        if constrained:
            ok = ((paths[:, 0] >> trellis.kv) == start[b]) & ((paths[:, -1] & low) == end[b])
            cost = torch.where(ok, cost, torch.inf)
            assert (got[b, 0] >> trellis.kv) == start[b] and (got[b, -1] & low) == end[b]
        best = cost.min()
        assert path_cost(got[b], x[b], values, trellis).item() == pytest.approx(
            best.item(), rel=1e-12, abs=1e-12
        )
        if (cost == best).sum() == 1:
            assert torch.equal(got[b], paths[cost.argmin()])


def test_the_trellis_extends_the_kernels_format():
    t = BitshiftTrellis(10, 2, 1, 64)
    assert isinstance(t, TrellisFormat) and t.words_per_tile == 4
    assert BitshiftTrellis.pack is TrellisFormat.pack and BitshiftTrellis.unpack is TrellisFormat.unpack
    assert repr(t) == "BitshiftTrellis(L=10, K=2, V=1, T=64)" and t != TrellisFormat(10, 2, 1, 64)


def test_successors_and_predecessors_are_inverse():
    t = BitshiftTrellis(10, 2, 1)
    s = torch.arange(1 << 10)
    succ = t.successors(s)  # (1024, 4)
    assert succ.shape == (1024, 4) and torch.equal(succ.sort(-1).values, succ)
    for j in range(4):
        assert bool((t.predecessors(succ[:, j]) == s.unsqueeze(-1)).any(-1).all())
    # every state has exactly 2^KV predecessors and successors, all distinct
    assert t.predecessors(s).unique().numel() == 1024 and succ.unique().numel() == 1024


@settings(max_examples=30, deadline=None)
@given(
    shape=st.sampled_from([(8, 1, 1), (10, 2, 1), (12, 2, 2), (16, 2, 1), (16, 4, 2), (13, 3, 1)]),
    tiles=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_pack_unpack_and_tail_biting_round_trip(shape, tiles, seed):
    L, K, V = shape
    T = {1: 64, 2: 32, 3: 32, 4: 16}[K] * V
    t = BitshiftTrellis(L, K, V, T)
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(0, 2, (tiles, t.bits_per_tile), generator=gen, dtype=torch.uint8)
    states = t.states_from_bits(bits, tail_biting=True)  # every cyclic stream is a tail-biting path
    assert bits.shape[-1] == K * T
    assert bool(t.is_tail_biting(states).all())
    assert torch.equal(t.tail_biting_bits(states), bits)
    packed = t.pack(states)
    assert packed.dtype == torch.int32 and packed.shape == (tiles, K * T // 32)
    assert torch.equal(t.unpack(packed), states)
    free = t.free_start_bits(states)  # the same path as a free-start stream: L - KV bits longer
    assert free.shape[-1] == L + (t.steps - 1) * t.kv == K * T + L - K * V
    assert torch.equal(t.states_from_bits(free, tail_biting=False), states)
    values = torch.randn(1 << L, V, generator=gen)
    assert torch.equal(values[t.unpack(packed)], values[t.states_from_bits(free, tail_biting=False)])


def test_pack_layout_is_msb_first():
    t = BitshiftTrellis(8, 1, 1, 32)
    bits = torch.zeros(1, 32, dtype=torch.uint8)
    bits[0, 0] = 1  # the first stream bit is the top bit of word 0
    assert t.pack(t.states_from_bits(bits, tail_biting=True)).item() == -(1 << 31)
    bits = torch.zeros(1, 32, dtype=torch.uint8)
    bits[0, 31] = 1
    states = t.states_from_bits(bits, tail_biting=True)
    assert t.pack(states).item() == 1
    assert states[0, 31].item() == 1  # the last step's new bit; s_0 wraps: its top bits are the stream's end
    assert states[0, 0].item() == 0b10


def test_quantize_tiles_tail_biting_close_to_free_optimum():
    t = BitshiftTrellis(8, 2, 1, 256)
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(256, 1, generator=gen)
    x = torch.randn(16, 256, generator=gen)
    free = quantize_tiles(x, values, t, tail_biting=False)
    tb = quantize_tiles(x, values, t)
    assert bool(t.is_tail_biting(tb).all()) and not bool(t.is_tail_biting(free).all())
    c_free, c_tb = path_cost(free, x, values, t), path_cost(tb, x, values, t)
    assert bool((c_free <= c_tb + 1e-4).all())  # the unconstrained optimum is a lower bound
    assert c_tb.sum() <= 1.05 * c_free.sum()  # tail-biting costs a few percent at most
    assert torch.equal(t.unpack(t.pack(tb)), tb)


def test_chunking_does_not_change_the_result():
    t = BitshiftTrellis(9, 2, 1, 64)
    gen = torch.Generator().manual_seed(1)
    values, x = torch.randn(512, generator=gen), torch.randn(7, 64, generator=gen)
    assert torch.equal(viterbi(x, values, t, chunk=2), viterbi(x, values, t))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"L": 7}, "L must be in 8..16"),
        ({"L": 17}, "L must be in 8..16"),
        ({"L": 10, "K": 0}, "K must be in 1..4"),
        ({"L": 10, "K": 5}, "K must be in 1..4"),
        ({"L": 10, "V": 3}, "V must be in 1..2"),
        ({"L": 10, "V": 0}, "V must be in 1..2"),
        ({"L": 10, "T": 0}, "T must be in"),
        ({"L": 10, "T": 1 << 17}, "T must be in"),
        ({"L": 10, "V": 2, "T": 33}, "multiple of V"),
        ({"L": 8, "K": 4, "V": 2}, "K\\*V must be smaller than L"),
    ],
)
def test_bad_trellis_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BitshiftTrellis(**kwargs)


def test_bad_parameter_types():
    with pytest.raises(TypeError, match="L must be an int"):
        BitshiftTrellis(10.0)
    with pytest.raises(TypeError, match="K must be an int"):
        BitshiftTrellis(10, True)


def test_bad_inputs_raise():
    t = BitshiftTrellis(8, 2, 1, 32)
    values = torch.randn(256)
    x = torch.randn(2, 32)
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[1, 3] = bad
        with pytest.raises(ValueError, match="finite"):
            quantize_tiles(y, values, t)
    with pytest.raises(ValueError, match="finite"):
        viterbi(x, torch.full((256,), float("nan")), t)
    with pytest.raises(ValueError, match="shape"):
        quantize_tiles(torch.randn(2, 31), values, t)
    with pytest.raises(ValueError, match="values must have shape"):
        viterbi(x, torch.randn(128), t)
    with pytest.raises(TypeError, match="floating"):
        viterbi(x.long(), values, t)
    states = quantize_tiles(x, values, t)
    packed = t.pack(states)
    with pytest.raises(ValueError, match="2 words per tile"):
        t.unpack(packed[:, :1])
    with pytest.raises(ValueError, match="2 words per tile"):
        t.unpack(torch.cat((packed, packed), dim=-1))
    with pytest.raises(TypeError, match="int32"):
        t.unpack(packed.long())
    with pytest.raises(ValueError, match="trellis paths"):
        t.pack(torch.randint(0, 256, (2, 32)))
    free_bits = torch.zeros(1, t.L + (t.steps - 1) * t.kv, dtype=torch.uint8)
    free_bits[0, 0] = 1  # s_0 starts with a 1, the stream ends with zeros: not tail-biting
    not_tail_biting = t.states_from_bits(free_bits, tail_biting=False)
    assert bool(t.is_path(not_tail_biting).all()) and not bool(t.is_tail_biting(not_tail_biting).all())
    with pytest.raises(ValueError, match="tail-biting paths"):
        t.pack(not_tail_biting)
    with pytest.raises(ValueError, match="multiple of 32"):
        BitshiftTrellis(8, 1, 1, 40).pack(torch.zeros(1, 40, dtype=torch.int64))
    with pytest.raises(ValueError, match="start_overlap"):
        viterbi(x, values, t, start_overlap=torch.tensor([0, 64]))
    with pytest.raises(ValueError, match="tail-biting needs"):
        quantize_tiles(torch.randn(1, 2), values, BitshiftTrellis(8, 2, 1, 2))
    with pytest.raises(ValueError, match="free-start stream"):
        t.states_from_bits(torch.zeros(1, 5, dtype=torch.uint8), tail_biting=False)


def test_brute_force_helper_enumerates_every_path_once():
    t = BitshiftTrellis(8, 1, 1, 3)
    paths, _ = brute_force(torch.zeros(3), torch.zeros(256, 1), t)
    assert paths.shape == (1 << 10, 3) and paths.unique(dim=0).shape[0] == 1 << 10
    assert bool(t.is_path(paths).all())
    assert {tuple(p) for p in itertools.islice(paths.tolist(), 2)} == {(0, 0, 0), (0, 0, 1)}
