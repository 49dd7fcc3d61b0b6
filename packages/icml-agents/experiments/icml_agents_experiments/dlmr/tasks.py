"""The testbed of ``dlmr-chains`` (our design): grid images of digit cells and chain questions over them.

An image is a 3x3 grid of digit cells, tokenized as one patch token per cell, ``p(k, d)`` (cell ``k`` holds
digit ``d``), the way a VQ image tokenizer with 2-D position tags would present it. A chain of ``L`` steps
follows; step ``t`` is ``a r_t f(t, v)``: the instruction ``a`` (given) names the operand, either a cell
``c_k`` ("read a cell", a *visual* step) or the result of an earlier step ``q_k`` ("use a previous result",
a *reasoning* step); the tag ``r_t`` (given) opens the answer, and the model writes the result token
``f(t, v)``: step ``t``'s result is the digit ``v``, the operand's value. A reasoning step thus copies a result
that was itself read from the image or copied earlier, so the chain has to be tracked. Both kinds of operand
are found the same way, by matching the operand against the patch or result tokens earlier in the context,
so a model with full attention can do every step; a model whose attention window has slid past the image or
the cited result cannot.

Memories are inserted at the step boundary, between the instruction ``a`` and the tag ``r_t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CELLS = 9  # a 3x3 grid
MAX_STEPS = 12
PAD, BOS = 0, 1
CELL0 = 2  # instructions c_0 .. c_8
PATCH0 = CELL0 + CELLS  # patch tokens p(k, d) = PATCH0 + 10 k + d
QUERY0 = PATCH0 + 10 * CELLS  # instructions q_1 .. q_12 ("the result of step k")
TAG0 = QUERY0 + MAX_STEPS  # tags r_1 .. r_12
RESULT0 = TAG0 + MAX_STEPS  # result tokens f(t, v) = RESULT0 + 10 (t - 1) + v
VOCAB_SIZE = RESULT0 + 10 * MAX_STEPS
IMAGE_LEN = 1 + CELLS  # BOS and the patch tokens
STEP_LEN = 3


def patch(k: int, d: int) -> int:
    return PATCH0 + 10 * k + d


def instruction(kind: str, k: int) -> int:
    """The instruction token: ``c_k`` for kind "visual", ``q_k`` (1-based step) for "reasoning"."""
    return CELL0 + k if kind == "visual" else QUERY0 + k - 1


def tag(t: int) -> int:
    """The tag ``r_t`` of step ``t`` (1-based)."""
    return TAG0 + t - 1


def result(t: int, v: int) -> int:
    """The result token ``f(t, v)``."""
    return RESULT0 + 10 * (t - 1) + v


def result_digit(token: int) -> int:
    """The digit of a result token (-1 for any other token)."""
    return (token - RESULT0) % 10 if RESULT0 <= token < VOCAB_SIZE else -1


@dataclass(frozen=True)
class Chain:
    """One question: the ``grid`` digits and per step the ``operands`` (instruction ids), their ``types``
    ("visual" or "reasoning") and the gold ``results`` (digits)."""

    grid: tuple[int, ...]
    operands: tuple[int, ...]
    types: tuple[str, ...]
    results: tuple[int, ...]

    @property
    def length(self) -> int:
        return len(self.results)

    def image(self) -> list[int]:
        """``BOS p(0, .) ... p(8, .)``"""
        return [BOS] + [patch(k, d) for k, d in enumerate(self.grid)]

    def step(self, t: int, value: int | None = None) -> list[int]:
        """The tokens of step ``t``: ``a r_t f(t, v)`` with ``v`` the gold result unless ``value`` is given."""
        v = self.results[t - 1] if value is None else value
        return [self.operands[t - 1], tag(t), result(t, v)]

    def ids(self) -> list[int]:
        """The whole gold sequence."""
        ids = self.image()
        for t in range(1, self.length + 1):
            ids += self.step(t)
        return ids

    def facts(self) -> list[tuple[int, int]]:
        """Every (instruction, value token) pair the chain can cite: its cells, then its results."""
        pairs = [(instruction("visual", k), patch(k, d)) for k, d in enumerate(self.grid)]
        return pairs + [(instruction("reasoning", t), result(t, v)) for t, v in enumerate(self.results, 1)]


def make_chain(length: int, rng: np.random.Generator, p_reasoning: float = 0.5, min_back: int = 2) -> Chain:
    """A random chain of ``length`` steps. Step 1 reads a cell; from step ``min_back + 1`` on, a step cites a
    uniformly drawn result at least ``min_back`` steps back with probability ``p_reasoning``, else a cell."""
    if not 1 <= length <= MAX_STEPS:
        raise ValueError(f"length must be in [1, {MAX_STEPS}], got {length}")
    grid = tuple(int(d) for d in rng.integers(10, size=CELLS))
    operands: list[int] = []
    types: list[str] = []
    results: list[int] = []
    for t in range(1, length + 1):
        if t > min_back and rng.random() < p_reasoning:
            k = int(rng.integers(1, t - min_back + 1))
            operands.append(instruction("reasoning", k))
            types.append("reasoning")
            results.append(results[k - 1])
        else:
            k = int(rng.integers(CELLS))
            operands.append(instruction("visual", k))
            types.append("visual")
            results.append(grid[k])
    return Chain(grid, tuple(operands), tuple(types), tuple(results))


def tag_positions(length: int) -> list[int]:
    """Positions of the tags ``r_t`` in :meth:`Chain.ids` (where step ``t``'s result is predicted)."""
    return [IMAGE_LEN + STEP_LEN * (t - 1) + 1 for t in range(1, length + 1)]
