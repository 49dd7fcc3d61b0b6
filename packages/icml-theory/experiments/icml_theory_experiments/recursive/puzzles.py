"""Puzzles of the ``trm-vs-dis`` reproduction, made here from a seed: 6x6 Sudoku (2x3 boxes) with exactly one
solution, and small mazes whose marked path is the unique shortest path.

Sudoku tokens: 0 blank, 1-6 digits; a grid is 36 tokens, row-major. The solver is an exhaustive backtracking
search (most-constrained cell first) that counts solutions up to a limit, so uniqueness is proved, not assumed.
A puzzle is made by solving an empty grid in a random digit order, then blanking cells in a random order as
long as the solution stays unique, until the drawn number of blanks is reached.

Maze tokens: 0 open, 1 wall, 2 start, 3 goal in the input; the label adds 4 on the cells of the shortest path
between start and goal (start and goal keep their tokens). Mazes are random walls (density ``walls``) kept
only when the goal is reachable, the shortest path (BFS) is unique and at least ``min_length`` steps long.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch

from icml_theory.validation import check_int, check_real, check_seed

SIZE = 6
CELLS = SIZE * SIZE
BOX_ROWS, BOX_COLS = 2, 3
DIGITS = tuple(range(1, SIZE + 1))
FULL = (1 << (SIZE + 1)) - 2  # bits 1..6
SUDOKU_VOCAB = SIZE + 1
_UNITS = [[r * SIZE + c for c in range(SIZE)] for r in range(SIZE)] + [
    [r * SIZE + c for r in range(SIZE)] for c in range(SIZE)
]
_UNITS += [
    [(br + r) * SIZE + bc + c for r in range(BOX_ROWS) for c in range(BOX_COLS)]
    for br in range(0, SIZE, BOX_ROWS)
    for bc in range(0, SIZE, BOX_COLS)
]
PEERS = [sorted({p for unit in _UNITS if i in unit for p in unit} - {i}) for i in range(CELLS)]

MAZE_OPEN, MAZE_WALL, MAZE_START, MAZE_GOAL, MAZE_PATH = range(5)
MAZE_VOCAB = 5


def check_sudoku(grid, name: str = "grid", complete: bool = False) -> list[int]:
    """A 6x6 Sudoku as a flat list of 36 ints in 0-6 (0 blank; none with ``complete``), no digit repeated in
    a row, column or 2x3 box. Accepts a flat sequence, a 6x6 nested sequence, an array or a tensor."""
    try:
        values = np.asarray(grid.tolist() if isinstance(grid, torch.Tensor) else grid)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 6x6 grid of integers, got {type(grid).__name__}") from None
    if values.size != CELLS or values.ndim not in (1, 2) or (values.ndim == 2 and values.shape != (6, 6)):
        raise ValueError(f"{name} must be a 6x6 grid (36 cells), got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(f"{name} must hold integers 0-6, got dtype {values.dtype}")
    flat = [int(v) for v in values.ravel()]
    low = 1 if complete else 0
    bad = [v for v in flat if not low <= v <= SIZE]
    if bad:
        raise ValueError(
            f"{name} must hold symbols {low}-6 ({'' if complete else '0 blank, '}1-6 digits), got {bad[0]}"
        )
    for unit in _UNITS:
        digits = [flat[i] for i in unit if flat[i]]
        if len(digits) != len(set(digits)):
            raise ValueError(f"{name} repeats a digit in a row, column or box: {[flat[i] for i in unit]}")
    return flat


def _candidates(grid: list[int], i: int) -> int:
    used = 0
    for p in PEERS[i]:
        used |= 1 << grid[p]
    return FULL & ~used


def _search(grid: list[int], limit: int, order: Sequence[int] | None, found: list[list[int]]) -> None:
    best, best_mask, best_count = -1, 0, SIZE + 1
    for i in range(CELLS):
        if grid[i] == 0:
            mask = _candidates(grid, i)
            count = mask.bit_count()
            if count < best_count:
                best, best_mask, best_count = i, mask, count
                if count <= 1:
                    break
    if best < 0:
        found.append(list(grid))
        return
    for d in order or DIGITS:
        if best_mask >> d & 1:
            grid[best] = d
            _search(grid, limit, order, found)
            grid[best] = 0
            if len(found) >= limit:
                return


def solve_sudoku(grid, limit: int = 2) -> list[list[int]]:
    """Up to ``limit`` solutions of ``grid`` by exhaustive search (fewer means there are no more)."""
    cells = check_sudoku(grid)
    found: list[list[int]] = []
    _search(cells, check_int(limit, "limit", 1), None, found)
    return found


def make_sudoku(rng: random.Random, blanks: int) -> tuple[list[int], list[int]]:
    """One puzzle with a unique solution and at most ``blanks`` blank cells (exactly that many unless the puzzle
    became minimal first): ``(puzzle, solution)``."""
    order = list(DIGITS)
    rng.shuffle(order)
    found: list[list[int]] = []
    _search([0] * CELLS, 1, order, found)
    solution = found[0]
    puzzle = list(solution)
    removed = 0
    cells = list(range(CELLS))
    rng.shuffle(cells)
    for i in cells:
        if removed == blanks:
            break
        puzzle[i] = 0
        check: list[list[int]] = []
        _search(list(puzzle), 2, None, check)
        if len(check) == 1:
            removed += 1
        else:
            puzzle[i] = solution[i]
    return puzzle, solution


def naked_single_rounds(grid) -> int | None:
    """Rounds of naked-single propagation (fill every blank with one candidate left, all at once) that solve
    ``grid``, or None when propagation gets stuck: a difficulty rating (sequential steps a solver needs)."""
    cells = check_sudoku(grid)
    rounds = 0
    while 0 in cells:
        fills = {}
        for i in range(CELLS):
            if cells[i] == 0:
                mask = _candidates(cells, i)
                if mask.bit_count() == 1:
                    fills[i] = mask.bit_length() - 1
        if not fills:
            return None
        for i, d in fills.items():
            cells[i] = d
        rounds += 1
    return rounds


def sudoku_dataset(
    n: int, seed: int, blanks: tuple[int, int] = (22, 28), min_rounds: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` puzzles and solutions, (n, 36) long tensors; blanks drawn uniformly in ``blanks`` (inclusive);
    a grid that turns minimal before the drawn count keeps its blanks if they reach ``blanks[0]``. Puzzles that
    naked singles solve in fewer than ``min_rounds`` rounds are rejected (a hard set, as Sudoku-Extreme is
    selected for difficulty; stuck propagation counts as hard)."""
    n = check_int(n, "n", 1)
    low, high = (check_int(b, "blanks", 0, CELLS) for b in blanks)
    if low > high:
        raise ValueError(f"blanks must be (low, high) with low <= high, got {blanks}")
    min_rounds = check_int(min_rounds, "min_rounds", 0)
    rng = random.Random(check_seed(seed))
    puzzles: list[list[int]] = []
    solutions: list[list[int]] = []
    while len(puzzles) < n:
        puzzle, solution = make_sudoku(rng, rng.randint(low, high))
        rounds = naked_single_rounds(puzzle) if min_rounds else 0
        if puzzle.count(0) >= low and (rounds is None or rounds >= min_rounds):
            puzzles.append(puzzle)
            solutions.append(solution)
    return torch.tensor(puzzles), torch.tensor(solutions)


def sudoku_symmetry(
    puzzles: torch.Tensor, solutions: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random validity-preserving transform per example, applied to puzzle and solution alike: a digit
    relabelling, a permutation of the three bands (row pairs) and of the rows in each band, of the two stacks
    (column triples) and of the columns in each stack. Unique puzzles stay unique."""
    n = len(puzzles)

    def perm(k: int, *shape: int) -> torch.Tensor:
        return torch.rand(n, *shape, k, generator=generator).argsort(-1)

    rows = (perm(3)[:, :, None] * BOX_ROWS + perm(BOX_ROWS, 3)).reshape(n, SIZE)
    cols = (perm(2)[:, :, None] * BOX_COLS + perm(BOX_COLS, 2)).reshape(n, SIZE)
    index = (rows[:, :, None] * SIZE + cols[:, None, :]).reshape(n, CELLS).to(puzzles.device)
    relabel = torch.cat([torch.zeros(n, 1, dtype=torch.long), 1 + perm(SIZE)], 1).to(puzzles.device)
    return (
        relabel.gather(1, puzzles.gather(1, index)),
        relabel.gather(1, solutions.gather(1, index)),
    )


def _bfs(walls: np.ndarray, start: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Distances from ``start`` (-1 unreachable) and the number of shortest paths to each cell."""
    h, w = walls.shape
    dist = np.full((h, w), -1)
    ways = np.zeros((h, w), dtype=np.int64)
    dist[start], ways[start] = 0, 1
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < h and 0 <= nc < w and not walls[nr, nc]:
                if dist[nr, nc] < 0:
                    dist[nr, nc] = dist[r, c] + 1
                    queue.append((nr, nc))
                if dist[nr, nc] == dist[r, c] + 1:
                    ways[nr, nc] += ways[r, c]
    return dist, ways


def shortest_path(grid) -> list[tuple[int, int]] | None:
    """The cells of a shortest start-to-goal path of a maze input grid (2-D, tokens 0-3), start and goal
    included, or None when the goal is unreachable (BFS)."""
    g = np.asarray(grid)
    (r0, c0), (r1, c1) = np.argwhere(g == MAZE_START)[0], np.argwhere(g == MAZE_GOAL)[0]
    start, goal = (int(r0), int(c0)), (int(r1), int(c1))
    dist, _ = _bfs(g == MAZE_WALL, start)
    if dist[goal] < 0:
        return None
    path = [goal]
    while path[-1] != start:
        r, c = path[-1]
        path.append(
            next(
                (nr, nc)
                for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1))
                if 0 <= nr < g.shape[0] and 0 <= nc < g.shape[1] and dist[nr, nc] == dist[r, c] - 1
            )
        )
    return path[::-1]


def maze_dataset(
    n: int, seed: int, size: int = 8, walls: float = 0.3, min_length: int = 6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` mazes of ``size`` x ``size`` cells, (n, size * size) long tensors of inputs and labels."""
    n = check_int(n, "n", 1)
    size = check_int(size, "size", 3)
    walls = check_real(walls, "walls", "[0, 1)")
    min_length = check_int(min_length, "min_length", 1, 2 * size - 2)
    rng = np.random.default_rng(check_seed(seed))
    inputs: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    while len(inputs) < n:
        wall = rng.random((size, size)) < walls
        open_cells = np.argwhere(~wall)
        if len(open_cells) < 2:
            continue
        a, b = rng.choice(len(open_cells), 2, replace=False)
        start, goal = tuple(open_cells[a]), tuple(open_cells[b])
        dist, ways = _bfs(wall, start)
        if dist[goal] < min_length or ways[goal] != 1:
            continue
        grid = wall.astype(np.int64) * MAZE_WALL
        grid[start], grid[goal] = MAZE_START, MAZE_GOAL
        label = grid.copy()
        for cell in (shortest_path(grid) or [])[1:-1]:
            label[cell] = MAZE_PATH
        inputs.append(grid.ravel())
        labels.append(label.ravel())
    return torch.tensor(np.array(inputs)), torch.tensor(np.array(labels))
