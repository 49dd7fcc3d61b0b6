"""2-D cellular automata: rules, Life's known patterns, the torus, the k-step truth table against simulation,
and the Fourier spectrum of the 25-input 2-step map against brute-force evaluation."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_theory.boolean import (
    fourier_coefficients,
    influences,
    spectral_weights,
    subset_sizes,
    total_influence,
)
from icml_theory.ca import (
    GAME_OF_LIFE,
    Rule,
    as_pm1,
    local_map,
    local_table,
    simulate,
    step,
    window_image,
    window_step,
)

LIFE = Rule.life_like(GAME_OF_LIFE)
PARITY = Rule.totalistic({1, 3, 5, 7, 9})  # T13579: the XOR of the 9 cells, a linear rule over GF(2)


# Single-threaded torch: on 2 busy cores intra-op threading slowed the small lookups here by up to 10-40x; the
# 2^25-entry tables are built in chunks that do not gain much from a second thread.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def bits_of(index: int, count: int) -> list[int]:
    return [(index >> i) & 1 for i in range(count)]


def grid(rows: list[str]) -> torch.Tensor:
    """A pattern from strings, '#' live and '.' dead, as uint8."""
    return torch.tensor([[1 if ch == "#" else 0 for ch in row] for row in rows], dtype=torch.uint8)


def place(pattern: torch.Tensor, shape: tuple[int, int], at: tuple[int, int]) -> torch.Tensor:
    out = torch.zeros(shape, dtype=torch.uint8)
    h, w = pattern.shape
    out[at[0] : at[0] + h, at[1] : at[1] + w] = pattern
    return out


def torus_windows(state: torch.Tensor, k: int) -> torch.Tensor:
    """The ``(2k+1) x (2k+1)`` window around every cell, top-left at ``(r - k, c - k)``, with wrap-around:
    ``(..., H, W) -> (..., H, W, 2k+1, 2k+1)`` by explicit index arithmetic (not by rolls)."""
    h, w = state.shape[-2:]
    offsets = torch.arange(-k, k + 1)
    rows = (torch.arange(h)[:, None] + offsets[None, :]) % h  # (H, side)
    cols = (torch.arange(w)[:, None] + offsets[None, :]) % w  # (W, side)
    return state[..., rows[:, None, :, None], cols[None, :, None, :]]


def window_index(windows: torch.Tensor) -> torch.Tensor:
    """Row-major window cells as the bits of one index: ``(..., s, s) -> (...)`` int64."""
    flat = windows.flatten(-2).long()
    return (flat << torch.arange(flat.shape[-1])).sum(-1)


@functools.cache
def cached_table(name: str, k: int) -> torch.Tensor:
    return local_table(RULES[name], k)


RULES = {"life": LIFE, "parity": PARITY, "random3": Rule.random(3)}


# --------------------------------------------------------------------------- rules


def test_life_rulestring_equals_the_sets():
    by_sets = Rule.life_like({3}, {2, 3})
    assert torch.equal(LIFE.table, by_sets.table)
    assert LIFE.name == by_sets.name == "B3/S23"
    assert torch.equal(Rule.life_like(" b3/s23 ").table, LIFE.table)  # case and spaces tolerated
    # from the definition, neighbourhood by neighbourhood
    for j in range(512):
        cells = bits_of(j, 9)
        alive, neighbours = cells[4], sum(cells) - cells[4]
        expected = int(neighbours == 3 or (alive and neighbours == 2))
        assert LIFE.table[j].item() == expected
    assert LIFE.table.dtype == torch.uint8 and LIFE.table.shape == (512,)
    highlife = Rule.life_like("B36/S23")
    assert int((highlife.table != LIFE.table).sum()) == 28  # dead centre, 6 live of the 8 neighbours: C(8, 6)
    assert Rule.life_like("B/S").density == 0.0
    assert Rule.life_like("B/S012345678").table.tolist() == [bits_of(j, 9)[4] for j in range(512)]  # identity


@pytest.mark.parametrize("bad", ["B3/S9", "B9/S23", "3/23", "B3S23", "S23/B3", "B3/S23/", "", "Bx/S2"])
def test_rulestring_parser_refuses_bad_strings(bad):
    with pytest.raises(ValueError, match="birth must be a rulestring"):
        Rule.life_like(bad)


def test_life_like_and_totalistic_refuse_bad_counts():
    with pytest.raises(ValueError, match="birth entries must be an integer in"):
        Rule.life_like({9}, {2})
    with pytest.raises(ValueError, match="survive entries must be an integer in"):
        Rule.life_like({3}, {-1})
    with pytest.raises(TypeError, match="birth must be a collection"):
        Rule.life_like(3)
    with pytest.raises(ValueError, match="alive_counts entries must be an integer in"):
        Rule.totalistic({10})


def test_totalistic():
    assert PARITY.name == "T13579"
    for j in range(512):
        assert PARITY.table[j].item() == sum(bits_of(j, 9)) % 2
    majority = Rule.totalistic(range(5, 10))
    assert majority.table.tolist() == [int(sum(bits_of(j, 9)) >= 5) for j in range(512)]
    assert majority.density == 0.5


def north_copy(cells: torch.Tensor) -> torch.Tensor:
    return cells[:, 0, 1]  # row offset -1, column offset 0


def test_is_isotropic():
    assert LIFE.is_isotropic
    assert PARITY.is_isotropic
    assert Rule.totalistic({2, 7}).is_isotropic
    north = Rule.from_function(north_copy)
    assert not north.is_isotropic
    assert north.table.tolist() == [bits_of(j, 9)[1] for j in range(512)]
    for seed in range(5):
        sym = Rule.random(seed, symmetric=True)
        assert sym.is_isotropic and 0.2 < sym.density < 0.8
        assert not Rule.random(seed).is_isotropic
    # one step of an isotropic rule commutes with rotating and mirroring the grid
    state = torch.randint(0, 2, (11, 11), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    sym = Rule.random(7, symmetric=True)
    for turn in (lambda s: torch.rot90(s, 1, (-2, -1)), lambda s: s.flip(-1), lambda s: s.transpose(-2, -1)):
        assert torch.equal(step(turn(state), sym), turn(step(state, sym)))
    assert not torch.equal(step(torch.rot90(state, 1), north), torch.rot90(step(state, north), 1))


def test_random_rules():
    a, b = Rule.random(3), Rule.random(3)
    assert torch.equal(a.table, b.table) and a.name == "random-3"
    assert not torch.equal(a.table, Rule.random(4).table)
    assert Rule.random(0, density=0.0).density == 0.0
    assert Rule.random(0, density=1.0).density == 1.0
    assert 0.4 < a.density < 0.6
    assert Rule.random(1, symmetric=True).name == "random-sym-1"


@pytest.mark.parametrize(
    "table, match",
    [
        (
            torch.zeros(511, dtype=torch.uint8),
            r"table must hold one next state per 3x3 neighbourhood, shape \(512,\)",
        ),
        (torch.zeros(2, 256, dtype=torch.uint8), r"table must hold one next state per 3x3 neighbourhood"),
        (torch.full((512,), 2), "table must hold next states 0 or 1"),
        (torch.full((512,), -1), "table must hold next states 0 or 1"),
        (torch.zeros(512, dtype=torch.float32), "table must hold next states 0 or 1"),
    ],
)
def test_rule_refuses_bad_tables(table, match):
    with pytest.raises(ValueError, match=match):
        Rule.from_table(table)
    with pytest.raises(ValueError, match=match):
        Rule(table)


def test_rule_copies_its_table():
    source = torch.zeros(512, dtype=torch.uint8)
    rule = Rule.from_table(source)
    source[0] = 1
    assert rule.table[0].item() == 0
    assert Rule.from_table([True, False] * 256).table.tolist() == [1, 0] * 256


# --------------------------------------------------------------------------- Life's known patterns

# the standard glider: it travels one cell down and one right (south-east, rows grow downwards) every
# 4 generations, a speed of c/4 diagonally.
GLIDER = grid([".#.", "..#", "###"])


def test_glider_moves_one_cell_diagonally_every_4_steps():
    start = place(GLIDER, (10, 10), (2, 3))
    states = simulate(start, LIFE, 4, history=True)
    assert states.shape == (5, 10, 10)
    assert torch.equal(states[0], start)
    assert torch.equal(states[4], place(GLIDER, (10, 10), (3, 4)))
    for t in (1, 2, 3):  # the intermediate phases are other shapes, each of 5 cells
        assert not torch.equal(states[t], start) and not torch.equal(states[t], states[4])
        assert int(states[t].sum()) == 5
    # 40 steps on the 10 x 10 torus: 10 cells each way, all the way round
    assert torch.equal(simulate(start, LIFE, 40), start)
    assert torch.equal(simulate(start, LIFE, 20), torch.roll(start, (5, 5), (0, 1)))


def test_blinker_has_period_2_and_block_is_still():
    blinker = place(grid(["###"]), (7, 7), (3, 2))
    once = step(blinker, LIFE)
    assert torch.equal(once, place(grid(["#", "#", "#"]), (7, 7), (2, 3)))
    assert torch.equal(step(once, LIFE), blinker)
    block = place(grid(["##", "##"]), (6, 6), (2, 2))
    assert torch.equal(step(block, LIFE), block)
    assert torch.equal(simulate(block, LIFE, 5), block)
    assert torch.equal(simulate(block, LIFE, 0), block)
    assert torch.equal(step(torch.zeros(5, 5, dtype=torch.uint8), LIFE), torch.zeros(5, 5, dtype=torch.uint8))


def test_torus_wraps_around():
    # on a big plane the glider's 8-step path stays inside rows/cols 10..19; fold that square onto a
    # 10 x 10 torus so the glider straddles the corner, and the torus must give the same picture
    big = place(GLIDER, (30, 30), (12, 12))
    plane = simulate(big, LIFE, 8)
    assert int(plane[:10].sum() + plane[20:].sum() + plane[:, :10].sum() + plane[:, 20:].sum()) == 0
    shift = 7  # plane cell 10 + a -> torus cell (a + 7) % 10: the glider starts on torus rows 9, 0, 1
    torus = torch.roll(big[10:20, 10:20], (shift, shift), (0, 1))
    assert int(torus[0].sum()) and int(torus[9].sum()) and int(torus[:, 0].sum()) and int(torus[:, 9].sum())
    assert torch.equal(simulate(torus, LIFE, 8), torch.roll(plane[10:20, 10:20], (shift, shift), (0, 1)))
    # and stepping commutes with every translation of the torus, for any rule
    state = torch.randint(0, 2, (9, 13), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    for rule in (LIFE, Rule.random(5)):
        for shifts in ((1, 0), (0, 12), (4, 7)):
            assert torch.equal(
                step(torch.roll(state, shifts, (0, 1)), rule), torch.roll(step(state, rule), shifts, (0, 1))
            )


def test_step_accepts_batches_and_bools():
    states = torch.randint(0, 2, (3, 2, 8, 9), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    rule = Rule.random(2)
    out = step(states, rule)
    assert out.shape == states.shape and out.dtype == torch.uint8
    for a in range(3):
        for b in range(2):
            assert torch.equal(out[a, b], step(states[a, b], rule))
    assert torch.equal(step(states.bool(), rule), out)
    assert torch.equal(step(states.long(), rule), out)
    assert torch.equal(step(states[0, 0].tolist(), rule), out[0, 0])  # nested lists
    # one step by hand for the north-copy rule: the whole grid shifts down by one row
    north = Rule.from_function(north_copy)
    assert torch.equal(step(states, north), torch.roll(states, 1, -2))


def test_window_step_matches_step_away_from_the_edges():
    state = torch.randint(0, 2, (10, 12), generator=torch.Generator().manual_seed(3), dtype=torch.uint8)
    rule = Rule.random(6)
    assert torch.equal(window_step(state, rule), step(state, rule)[1:-1, 1:-1])
    assert window_step(torch.zeros(4, 3, 3, dtype=torch.uint8), rule).shape == (4, 1, 1)


# --------------------------------------------------------------------------- the k-step truth table


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("name", ["life", "parity", "random3"])
def test_local_table_equals_simulation(name, k):
    rule, table = RULES[name], cached_table(name, k)
    side = 2 * k + 1
    assert table.shape == (1 << side * side,) and table.dtype == torch.uint8
    if k == 1:
        assert torch.equal(table, rule.table)
    states = torch.randint(
        0, 2, (4, 12, 12), generator=torch.Generator().manual_seed(10 + k), dtype=torch.uint8
    )
    after = simulate(states, rule, k)  # (4, 12, 12)
    windows = torus_windows(states, k)  # (4, 12, 12, side, side)
    assert windows.shape == (4, 12, 12, side, side)
    assert (
        windows[1, 0, 11, k, k] == states[1, 0, 11]
        and windows[1, 0, 11, 0, 2 * k] == states[1, -k, (11 + k) % 12]
    )
    assert torch.equal(table[window_index(windows)], after)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("name", ["life", "parity", "random3"])
def test_local_table_equals_window_image_and_local_map(name, k):
    rule, table = RULES[name], cached_table(name, k)
    side = 2 * k + 1
    gen = torch.Generator().manual_seed(20 + k)
    windows = torch.randint(0, 2, (3000, side, side), generator=gen, dtype=torch.uint8)
    index = window_index(windows)
    image = window_image(windows, rule, k)
    assert image.shape == (3000,)
    assert torch.equal(table[index], image)
    # local_map: ±1 points, live = -1 in and out, the same row-major order
    x = 1.0 - 2.0 * windows.reshape(3000, side * side).to(torch.float64)
    y = local_map(rule, k)(x)
    assert y.dtype == torch.float64 and y.shape == (3000,)
    assert torch.equal(y, as_pm1(table[index]))
    assert torch.equal(as_pm1(torch.tensor([0, 1, 1])), torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64))


def test_local_map_beyond_tables():
    # k = 3 (49 inputs) has no table; check one window by simulating a torus large enough not to wrap
    f = local_map(LIFE, 3)
    gen = torch.Generator().manual_seed(4)
    windows = torch.randint(0, 2, (20, 7, 7), generator=gen, dtype=torch.uint8)
    y = f(1.0 - 2.0 * windows.reshape(20, 49).double())
    for i in range(20):
        board = place(windows[i], (21, 21), (7, 7))  # centre at (10, 10): its 3-step light cone is the window
        assert y[i].item() == 1.0 - 2.0 * simulate(board, LIFE, 3)[10, 10].item()


def test_parity_rule_two_steps_is_parity_of_nine_cells():
    # T13579 is linear over GF(2): one step XORs the 3 x 3 neighbourhood, so two steps XOR the cells at
    # offsets {-2, 0, 2}^2 (1 + 2 z + 3 z^2 + 2 z^3 + z^4 = 1 + z^2 + z^4 mod 2, in each direction)
    table = cached_table("parity", 2)
    nine = [5 * r + c for r in (0, 2, 4) for c in (0, 2, 4)]
    index = torch.randint(0, 1 << 25, (100_000,), generator=torch.Generator().manual_seed(5))
    parity = torch.zeros_like(index)
    for i in nine:
        parity ^= (index >> i) & 1
    assert torch.equal(
        table[index].long(), parity
    )  # on samples; the spectrum (slow test) settles every input


# --------------------------------------------------------------------------- the 2-step spectra (2^25 inputs)
# About 5 s each on 2 cores, plus a one-time ~5 s import of torch._dynamo by a session's first FWHT call:
# with them this file took over 40 s, so they are marked slow (run with `uv run pytest -m slow`).


@pytest.mark.slow
def test_parity_rule_two_step_spectrum_is_one_character():
    # all the weight at degree 9, on the nine cells at offsets {-2, 0, 2}^2: a single character, so the
    # table is that parity on every one of the 2^25 windows
    table = cached_table("parity", 2)
    nine = [5 * r + c for r in (0, 2, 4) for c in (0, 2, 4)]
    mask = sum(1 << i for i in nine)
    c = fourier_coefficients(as_pm1(table), dtype=torch.float32)
    assert c[mask].item() == 1.0 and int((c != 0).sum()) == 1  # f = chi of the nine cells, exactly
    weights = spectral_weights(c)
    assert weights[9].item() == 1.0 and float(weights.sum()) == 1.0
    assert total_influence(c).item() == 9.0
    inf = influences(c)
    assert inf.tolist() == [1.0 if i in nine else 0.0 for i in range(25)]


def characters(points: torch.Tensor, bits: int) -> torch.Tensor:
    """``chi[S, p] = (-1)^popcount(S & points[p])`` for every ``S < 2^bits``: ``(2^bits, len(points))``."""
    v = torch.arange(1 << bits)[:, None] & points[None, :]
    for shift in (16, 8, 4, 2, 1):  # fold the parity into bit 0
        v = v ^ (v >> shift)
    return 1.0 - 2.0 * (v & 1).to(torch.float64)


LOW = 12  # a 25-bit index j = high * 2^12 + low, and chi_S(j) = chi_{S_high}(j_high) chi_{S_low}(j_low)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["life", "random3"])
def test_two_step_spectrum_against_brute_force(name):
    table = cached_table(name, 2)
    f = as_pm1(table)  # (2^25,) ±1
    c = fourier_coefficients(f, dtype=torch.float32).to(torch.float64)  # exact for ±1 (see its docstring)
    gen = torch.Generator().manual_seed(30)
    # 1. the expansion sum_S c[S] chi_S(x) at sampled windows x returns the table. Summing over all 2^25 S
    # as one bilinear form: sum_{S_hi, S_lo} C[S_hi, S_lo] chi_{S_hi}(x_hi) chi_{S_lo}(x_lo) with C the
    # spectrum as a (2^13, 2^12) matrix. Every c[S] is a multiple of 2^-25 and every partial sum has
    # magnitude at most sum |c| <= 2^12.5, so float64 gets the sums exactly.
    xs = torch.cat([torch.tensor([0, (1 << 25) - 1]), torch.randint(0, 1 << 25, (4,), generator=gen)])
    chi_lo = characters(xs & ((1 << LOW) - 1), LOW)  # (2^12, 6)
    chi_hi = characters(xs >> LOW, 25 - LOW)  # (2^13, 6)
    spectrum = c.reshape(1 << (25 - LOW), 1 << LOW)
    expansion = ((spectrum @ chi_lo) * chi_hi).sum(0)  # (6,)
    assert torch.equal(expansion, f[xs])
    # 2. c[S] is the average of f chi_S over all 2^25 windows, for sampled S (and the largest ones)
    subsets = torch.cat(
        [torch.tensor([0]), torch.randint(0, 1 << 25, (16,), generator=gen), c.abs().topk(3).indices]
    )
    chi_lo = characters(subsets & ((1 << LOW) - 1), LOW)  # (2^12, 20)
    chi_hi = characters(subsets >> LOW, 25 - LOW)  # (2^13, 20)
    values = f.reshape(1 << (25 - LOW), 1 << LOW)
    direct = ((values @ chi_lo) * chi_hi).sum(0) / (1 << 25)  # integer sums, exact
    assert torch.equal(direct, c[subsets])
    assert int((c[subsets] != 0).sum()) >= 3  # not a vacuous comparison of zeros
    # 3. Parseval and the levels
    weights = spectral_weights(c)
    assert weights.shape == (26,)
    assert float(weights.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float(total_influence(c)) == pytest.approx(float(influences(c).sum()), rel=1e-12)
    assert float(c[0]) == 1.0 - 2.0 * float(table.double().mean())  # f^(empty) = E[f]: the live density
    assert float(weights[0]) == float(c[0]) ** 2
    # the levels add up the squares by |S|
    sizes = subset_sizes(25)
    for level in (1, 2, 25):
        assert float(weights[level]) == pytest.approx(
            float((c[sizes == level] ** 2).sum()), rel=1e-12, abs=1e-300
        )


# --------------------------------------------------------------------------- bad input


def test_bad_k():
    for k in (0, -1):
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            local_table(LIFE, k)
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            local_map(LIFE, k)
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            window_image(torch.zeros(3, 3, dtype=torch.uint8), LIFE, k)
    with pytest.raises(TypeError, match="k must be an integer"):
        local_table(LIFE, 1.0)
    with pytest.raises(ValueError, match=r"k must be 1 or 2 .*use local_map"):
        local_table(LIFE, 3)


@pytest.mark.parametrize(
    "state, match",
    [
        (torch.tensor([[0, 2], [1, 0]]), "state must hold cell states 0 or 1"),
        (torch.tensor([[0, -1], [1, 0]]), "state must hold cell states 0 or 1"),
        (torch.zeros(4, 4, dtype=torch.float32), "state must hold cell states 0 or 1"),
        (torch.zeros(4, dtype=torch.uint8), "state must have at least 2 dimensions"),
        (torch.tensor(1), "state must have at least 2 dimensions"),
    ],
)
def test_bad_states(state, match):
    with pytest.raises(ValueError, match=match):
        step(state, LIFE)
    with pytest.raises(ValueError, match=match):
        simulate(state, LIFE, 2)


def test_bad_windows_rules_and_steps():
    with pytest.raises(ValueError, match=r"windows must be 5 x 5 for k = 2, got \(3, 3\)"):
        window_image(torch.zeros(3, 3, dtype=torch.uint8), LIFE, 2)
    with pytest.raises(ValueError, match=r"windows must be 3 x 3 for k = 1"):
        window_image(torch.zeros(2, 3, 4, dtype=torch.uint8), LIFE, 1)
    with pytest.raises(ValueError, match="windows must hold cell states 0 or 1"):
        window_image(torch.full((3, 3), 3), LIFE, 1)
    with pytest.raises(ValueError, match="windows must be at least 3 x 3"):
        window_step(torch.zeros(2, 5, dtype=torch.uint8), LIFE)
    with pytest.raises(ValueError, match=r"x must be \(m, 9\)"):
        local_map(LIFE, 1)(torch.ones(4, 25))
    with pytest.raises(ValueError, match="steps must be an integer >= 0"):
        simulate(torch.zeros(3, 3, dtype=torch.uint8), LIFE, -1)
    state = torch.zeros(3, 3, dtype=torch.uint8)
    for call in (
        lambda r: step(state, r),
        lambda r: simulate(state, r, 1),
        lambda r: window_step(state, r),
        lambda r: window_image(state, r, 1),
        lambda r: local_table(r, 1),
        lambda r: local_map(r, 1),
    ):
        for not_a_rule in ("B3/S23", LIFE.table, None):
            with pytest.raises(TypeError, match=r"rule must be an icml_theory\.ca\.Rule"):
                call(not_a_rule)


@settings(max_examples=40, deadline=None)
@given(
    table=st.lists(st.integers(0, 1), min_size=512, max_size=512),
    rows=st.integers(3, 9),
    cols=st.integers(3, 9),
    shift=st.tuples(st.integers(-4, 4), st.integers(-4, 4)),
    seed=st.integers(0, 2**16),
)
def test_any_rule_is_a_translation_equivariant_table_lookup(table, rows, cols, shift, seed):
    """Fuzz: for any 512-entry rule and grid, a step commutes with translations of the torus and each cell
    is the rule's entry at its 3 x 3 neighbourhood's index (row-major, wrapped)."""
    rule = Rule.from_table(table)
    state = (torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed)) < 0.5).to(torch.uint8)
    out = step(state, rule)
    moved = torch.roll(state, shifts=shift, dims=(0, 1))
    assert torch.equal(step(moved, rule), torch.roll(out, shifts=shift, dims=(0, 1)))
    r, c = seed % rows, (seed // rows) % cols
    index = sum(int(state[(r + j // 3 - 1) % rows, (c + j % 3 - 1) % cols]) << j for j in range(9))
    assert int(out[r, c]) == table[index]
    assert torch.equal(local_table(rule, 1), rule.table)
