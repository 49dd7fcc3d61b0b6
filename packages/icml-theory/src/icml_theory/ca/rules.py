"""Rules of binary 2-D cellular automata on the Moore (3 x 3) neighbourhood.

Every rule is stored as its rule table: 512 next states (0 or 1), one per 3 x 3 neighbourhood. The
neighbourhood is numbered row-major, ``j = 3 (dy + 1) + (dx + 1)`` for the cell at row offset ``dy`` and
column offset ``dx`` (rows grow downwards), so the centre is cell 4; bit ``j`` of the table index is the
state of cell ``j``. The same row-major numbering, on a ``(2k + 1) x (2k + 1)`` window, indexes the
``k``-step truth tables of :mod:`icml_theory.ca.dynamics`.

Families:

- outer-totalistic ("Life-like", ``B3/S23``): the next state depends on the centre and on the number of
  live cells among the 8 neighbours (:meth:`Rule.life_like`);
- totalistic: on the number of live cells among all 9 (:meth:`Rule.totalistic`);
- any table of 512 states (:meth:`Rule.from_table`, :meth:`Rule.random`, :meth:`Rule.from_function`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from icml_theory.validation import check_bool, check_int, check_real, check_seed

CELLS = 9  # the Moore neighbourhood, centre included
CENTER = 4
_INDEX = torch.arange(1 << CELLS)
_BITS = ((_INDEX[:, None] >> torch.arange(CELLS)) & 1).to(torch.uint8)  # (512, 9) cell states per index
_RULESTRING = re.compile(r"^B(?P<b>[0-8]*)/S(?P<s>[0-8]*)$")

# the 8 symmetries of the square, as permutations of the 9 cells (row-major 3 x 3)
_GRID = torch.arange(CELLS).reshape(3, 3)
_SYMMETRIES = [torch.rot90(g, r).reshape(-1) for g in (_GRID, _GRID.flip(1)) for r in range(4)]


def _counts(values: Iterable[int], name: str, top: int) -> frozenset[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a collection of neighbour counts in [0, {top}], got {values!r}")
    return frozenset(check_int(v, f"{name} entries", 0, top) for v in values)


@dataclass(frozen=True, eq=False)
class Rule:
    """A Moore-neighbourhood rule: ``table`` (uint8 ``(512,)`` of 0/1) and a ``name`` for reports."""

    table: torch.Tensor
    name: str = field(default="custom")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, got {type(self.name).__name__} {self.name!r}")
        t = as_cells(self.table, "table")
        if t.shape != (1 << CELLS,):
            raise ValueError(
                f"table must hold one next state per 3x3 neighbourhood, shape (512,), got {tuple(t.shape)}"
            )
        if t.is_floating_point() or t.is_complex() or not bool(((t == 0) | (t == 1)).all()):
            raise ValueError("table must hold next states 0 or 1 (integers or bools)")
        object.__setattr__(self, "table", t.to(torch.uint8).clone())

    @classmethod
    def life_like(
        cls, birth: Iterable[int] | str, survive: Iterable[int] = (), name: str | None = None
    ) -> Rule:
        """Outer-totalistic rule: a dead cell is born with ``birth`` live neighbours, a live one survives
        with ``survive``. ``birth`` may be a rulestring ``"B3/S23"`` (then ``survive`` is ignored)."""
        if isinstance(birth, str):
            match = _RULESTRING.match(birth.strip().upper())
            if match is None:
                raise ValueError(f"birth must be a rulestring like 'B3/S23' (digits 0-8), got {birth!r}")
            b, s = (frozenset(int(c) for c in match[g]) for g in ("b", "s"))
        else:
            b, s = _counts(birth, "birth", 8), _counts(survive, "survive", 8)
        label = name or f"B{''.join(map(str, sorted(b)))}/S{''.join(map(str, sorted(s)))}"
        neighbours = _BITS.sum(1) - _BITS[:, CENTER]  # (512,)
        alive = _BITS[:, CENTER] == 1
        nb = torch.tensor([c in b for c in range(9)])[neighbours.long()]
        ns = torch.tensor([c in s for c in range(9)])[neighbours.long()]
        return cls(torch.where(alive, ns, nb), label)

    @classmethod
    def totalistic(cls, alive_counts: Iterable[int], name: str | None = None) -> Rule:
        """Totalistic rule: the next state is 1 iff the number of live cells among all 9 is in ``alive_counts``."""
        counts = _counts(alive_counts, "alive_counts", 9)
        label = name or f"T{''.join(map(str, sorted(counts)))}"
        return cls(torch.tensor([c in counts for c in range(10)])[_BITS.sum(1).long()], label)

    @classmethod
    def from_function(cls, fn: Callable[[torch.Tensor], torch.Tensor], name: str = "custom") -> Rule:
        """Rule from ``fn(cells)``, ``cells`` a uint8 ``(512, 3, 3)`` tensor of every neighbourhood,
        returning 512 next states."""
        if not callable(fn):
            raise TypeError(f"fn must be a callable of (512, 3, 3) neighbourhoods, got {type(fn).__name__}")
        out = as_cells(fn(_BITS.reshape(-1, 3, 3)), "fn(cells)")
        if out.numel() != 1 << CELLS or out.is_floating_point() or out.is_complex():
            raise ValueError(
                f"fn must return 512 next states 0 or 1 (integers or bools), got {out.dtype} of shape "
                f"{tuple(out.shape)}"
            )
        return cls(out.reshape(-1), name)

    @classmethod
    def from_table(cls, table, name: str = "custom") -> Rule:
        """Rule from any 512 next states indexed as in this module's docstring."""
        return cls(as_cells(table, "table"), name)

    @classmethod
    def random(
        cls, seed: int, density: float = 0.5, *, symmetric: bool = False, name: str | None = None
    ) -> Rule:
        """A random table: each entry 1 with probability ``density``; with ``symmetric=True`` one draw per
        orbit of the square's 8 symmetries, so the rule is isotropic."""
        seed = check_seed(seed)
        density = check_real(density, "density", "[0, 1]")
        symmetric = check_bool(symmetric, "symmetric")
        gen = torch.Generator().manual_seed(seed)
        draws = (torch.rand(1 << CELLS, generator=gen) < density).to(torch.uint8)
        if symmetric:
            draws = draws[_orbit_representatives()]
        return cls(draws, name or f"random{'-sym' if symmetric else ''}-{seed}")

    @property
    def is_isotropic(self) -> bool:
        """True when the rule commutes with the rotations and reflections of the grid."""
        return all(bool(torch.equal(self.table, self.table[_permute_index(p)])) for p in _SYMMETRIES)

    @property
    def density(self) -> float:
        """Fraction of neighbourhoods mapped to 1 (the output bias of one step on uniform input)."""
        return float(self.table.float().mean())

    def __repr__(self) -> str:
        return f"Rule({self.name!r})"


def as_cells(values, name: str) -> torch.Tensor:
    """``values`` as a tensor; anything torch cannot read is a ``TypeError`` naming ``name``."""
    if isinstance(values, torch.Tensor):
        return values
    try:
        return torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{name} must be a tensor, array or sequence of 0/1 states, got {type(values).__name__}"
        ) from None


def _permute_index(perm: torch.Tensor) -> torch.Tensor:
    """For each index, the index of the neighbourhood with cells moved by ``perm`` (cell j -> perm[j])."""
    return (_BITS[:, perm].long() << torch.arange(CELLS)).sum(1)


def _orbit_representatives() -> torch.Tensor:
    """For each of the 512 neighbourhoods, the smallest index of its orbit under the 8 symmetries."""
    return torch.stack([_permute_index(p) for p in _SYMMETRIES]).min(0).values


GAME_OF_LIFE = "B3/S23"
