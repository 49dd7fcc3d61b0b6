"""Running a 2-D cellular automaton: on a torus, and on a finite window whose ``k``-step image is one cell.

States are integer or bool tensors of 0/1 (any leading batch dimensions, the last two are rows and
columns). One step is a table lookup: the 9 cells of each neighbourhood form the index into the rule's
512-entry table (numbering of :mod:`icml_theory.ca.rules`).

The ``k``-step map ``F^k`` is local too: the state of a cell after ``k`` steps is a function of the
``(2k + 1) x (2k + 1)`` window around it at the start. :func:`local_table` writes that function as a truth
table (``2^((2k+1)^2)`` entries: 512 for ``k = 1``, 33,554,432 for ``k = 2``), indexed row-major like the
rule table; :func:`local_map` evaluates it on sampled windows for any ``k`` (``k = 3`` has 49 inputs).
In the ±1 convention of :mod:`icml_theory.boolean` a live cell (bit 1) is ``-1``.
"""

from __future__ import annotations

import torch

from icml_theory.ca.rules import CELLS, Rule, as_cells
from icml_theory.validation import check_bool, check_int

MAX_TABLE_INPUTS = 25  # k <= 2: 2^25 entries (32 MiB as uint8)
_CHUNK = 1 << 22


def _check_state(state, name: str = "state") -> torch.Tensor:
    state = as_cells(state, name)
    if state.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (rows, columns), got shape {tuple(state.shape)}"
        )
    if state.is_floating_point() or state.is_complex() or not bool(((state == 0) | (state == 1)).all()):
        raise ValueError(f"{name} must hold cell states 0 or 1 (an integer or bool tensor)")
    return state.to(torch.uint8)


def _check_rule(rule) -> Rule:
    if not isinstance(rule, Rule):
        raise TypeError(f"rule must be an icml_theory.ca.Rule, got {type(rule).__name__}")
    return rule


def step(state, rule: Rule) -> torch.Tensor:
    """One synchronous update on the torus (rows and columns wrap around). Returns uint8 of ``state``'s shape."""
    s, rule = _check_state(state), _check_rule(rule)
    index = torch.zeros(s.shape, dtype=torch.long, device=s.device)
    for j in range(CELLS):
        dy, dx = j // 3 - 1, j % 3 - 1
        index |= torch.roll(s, shifts=(-dy, -dx), dims=(-2, -1)).long() << j  # cell (r + dy, c + dx)
    return rule.table.to(s.device)[index]


def simulate(state, rule: Rule, steps: int, *, history: bool = False) -> torch.Tensor:
    """``steps`` updates on the torus; the final state, or with ``history=True`` all ``steps + 1`` states
    stacked on a new first dimension."""
    s, rule = _check_state(state), _check_rule(rule)
    steps = check_int(steps, "steps", 0)
    history = check_bool(history, "history")
    states = [s]
    for _ in range(steps):
        states.append(step(states[-1], rule))
    return torch.stack(states) if history else states[-1]


def window_step(windows, rule: Rule) -> torch.Tensor:
    """One update of finite windows without wrapping: ``(..., h, w) -> (..., h - 2, w - 2)``, each output
    cell the rule applied to its full 3 x 3 neighbourhood inside the window."""
    s, rule = _check_state(windows, "windows"), _check_rule(rule)
    h, w = s.shape[-2:]
    if h < 3 or w < 3:
        raise ValueError(f"windows must be at least 3 x 3, got {h} x {w}")
    index = torch.zeros((*s.shape[:-2], h - 2, w - 2), dtype=torch.long, device=s.device)
    for j in range(CELLS):
        dy, dx = j // 3, j % 3
        index |= s[..., dy : dy + h - 2, dx : dx + w - 2].long() << j
    return rule.table.to(s.device)[index]


def window_image(windows, rule: Rule, k: int) -> torch.Tensor:
    """The centre cell after ``k`` steps of each ``(2k + 1) x (2k + 1)`` window: ``(..., 2k+1, 2k+1) -> (...)``."""
    k = check_int(k, "k", 1)
    s = _check_state(windows, "windows")
    if s.shape[-2:] != (2 * k + 1, 2 * k + 1):
        raise ValueError(f"windows must be {2 * k + 1} x {2 * k + 1} for k = {k}, got {tuple(s.shape[-2:])}")
    for _ in range(k):
        s = window_step(s, rule)
    return s[..., 0, 0]


def local_table(rule: Rule, k: int) -> torch.Tensor:
    """Truth table of the ``k``-step local map: uint8 ``(2^((2k+1)^2),)``, entry ``j`` the centre after ``k``
    steps of the window whose row-major cell ``i`` is bit ``i`` of ``j``.

    Exact for ``k <= 2`` (at most 25 inputs; for ``k = 2`` one step is tabulated on every band of 3 window rows,
    then composed: 0.4 s on one core); for larger ``k`` use :func:`local_map` with the Monte-Carlo
    estimators of :mod:`icml_theory.boolean.sampling`.
    """
    _check_rule(rule)
    k = check_int(k, "k", 1)
    side = 2 * k + 1
    inputs = side * side
    if inputs > MAX_TABLE_INPUTS:
        raise ValueError(
            f"k must be 1 or 2 for an exact truth table (2^{inputs} entries at k = {k}); "
            "use local_map(rule, k) with icml_theory.boolean's Monte-Carlo estimators"
        )
    if k == 1:
        return rule.table.clone()  # the 3 x 3 window is the neighbourhood, numbered alike
    # k = 2: a band of 3 window rows (15 bits) determines 3 of the 9 intermediate cells; tabulate that
    # once (2^15 bands), then each 25-bit window needs 3 band lookups and one rule lookup.
    device = rule.table.device  # computed where the rule's table lives
    bands = torch.arange(1 << 15, device=device)
    band_cells = ((bands[:, None] >> torch.arange(15, device=device)) & 1).to(torch.uint8).reshape(-1, 3, 5)
    band_out = window_step(band_cells, rule)[:, 0, :].long()  # (2^15, 3): intermediate cells of row 0
    # the band's 3-bit code, by the band's window rows (5 bits each) as (row 2, row 1, row 0)
    code = (band_out << torch.arange(3, device=device)).sum(1).reshape(32, 32, 32)
    # window index j = r0 | r1 << 5 | ... | r4 << 20 (r_i: window row i), so the table is the 5-d array
    # out[r4, r3, r2, r1, r0] = rule[code[r2, r1, r0] | code[r3, r2, r1] << 3 | code[r4, r3, r2] << 6]:
    # the intermediate code by broadcasting, no per-window index arithmetic (8x faster than decoding j)
    low = code[None, :, :, :] | (code[:, :, :, None] << 3)  # (r3, r2, r1, r0): intermediate rows 0 and 1
    top = code << 6  # (r4, r3, r2): intermediate row 2
    out = torch.empty(1 << inputs, dtype=torch.uint8, device=device)
    step = _CHUNK >> 20  # values of r4 per chunk (2^20 windows each)
    for r4 in range(0, 32, step):
        middle = low[None] | top[r4 : r4 + step, :, :, None, None]  # (step, r3, r2, r1, r0)
        out[r4 << 20 : (r4 + step) << 20] = rule.table[middle].reshape(-1)
    return out


def local_map(rule: Rule, k: int):
    """The ``k``-step local map as a function of ±1 points ``(m, (2k+1)^2) -> (m,)`` (live = -1 in and out),
    for the estimators of :mod:`icml_theory.boolean.sampling`; any ``k >= 1``."""
    _check_rule(rule)
    k = check_int(k, "k", 1)
    side = 2 * k + 1

    def f(x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != side * side:
            raise ValueError(f"x must be (m, {side * side}) ±1 points, got shape {tuple(x.shape)}")
        cells = (x < 0).to(torch.uint8).reshape(-1, side, side)
        return 1.0 - 2.0 * window_image(cells, rule, k).to(torch.float64)

    return f


def as_pm1(table) -> torch.Tensor:
    """A 0/1 table as the ±1 function of :mod:`icml_theory.boolean` (0 -> +1, 1 -> -1), float64."""
    t = as_cells(table, "table")
    if t.is_complex() or not bool(((t == 0) | (t == 1)).all()):
        raise ValueError("table must hold states 0 or 1")
    return 1.0 - 2.0 * t.to(torch.float64)
