"""The trm-vs-dis puzzles (unique Sudoku solutions by exhaustive search, symmetries, BFS-shortest maze paths,
bad grids), the benchmark's counter gate, and the reproduction end to end (slow)."""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np
import pytest
import torch

from icml_theory_experiments.recursive import bench, puzzles, repro
from icml_theory_experiments.recursive.puzzles import (
    check_sudoku,
    maze_dataset,
    naked_single_rounds,
    shortest_path,
    solve_sudoku,
    sudoku_dataset,
    sudoku_symmetry,
)
from icml_tools.protocol import validate_result

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates


def _valid_solution(grid: list[int]) -> bool:
    g = np.array(grid).reshape(6, 6)
    boxes = [g[r : r + 2, c : c + 3].ravel() for r in (0, 2, 4) for c in (0, 3)]
    return all(sorted(u) == [1, 2, 3, 4, 5, 6] for u in [*g, *g.T, *boxes])


def test_every_generated_sudoku_has_exactly_one_solution():
    x, y = sudoku_dataset(60, 7, (22, 28), min_rounds=6)
    for puzzle, solution in zip(x.tolist(), y.tolist(), strict=True):
        found = solve_sudoku(puzzle, limit=3)
        assert found == [solution] and _valid_solution(solution)
        assert all(p in (0, s) for p, s in zip(puzzle, solution, strict=True))
        assert 22 <= puzzle.count(0) <= 28
        rounds = naked_single_rounds(puzzle)
        assert rounds is None or rounds >= 6
    easy, _ = sudoku_dataset(30, 8, (10, 12))
    assert all(10 <= row.count(0) <= 12 and len(solve_sudoku(row)) == 1 for row in easy.tolist())
    again = sudoku_dataset(60, 7, (22, 28), min_rounds=6)
    assert torch.equal(again[0], x) and torch.equal(again[1], y)


def test_solver_counts_solutions_like_brute_force():
    solution = solve_sudoku([0] * 36, limit=1)[0]
    assert len(solve_sudoku([0] * 36, limit=5)) == 5  # the empty grid has many
    assert solve_sudoku(solution) == [solution] and naked_single_rounds(solution) == 0
    rng = np.random.default_rng(0)
    for _ in range(4):
        blanks = rng.choice(12, 5, replace=False)  # cells of the first two rows: ambiguity is likely
        grid = list(solution)
        for i in blanks:
            grid[i] = 0
        brute = []
        for fill in itertools.product(range(1, 7), repeat=5):
            candidate = list(grid)
            for i, d in zip(blanks, fill, strict=True):
                candidate[i] = d
            if _valid_solution(candidate):
                brute.append(candidate)
        assert sorted(solve_sudoku(grid, limit=100)) == sorted(brute)


def test_symmetries_keep_puzzles_valid_and_unique():
    x, y = sudoku_dataset(20, 9, (22, 28))
    gen = torch.Generator().manual_seed(0)
    ax, ay = sudoku_symmetry(x, y, gen)
    assert not torch.equal(ax, x)
    for puzzle, solution, orig in zip(ax.tolist(), ay.tolist(), x.tolist(), strict=True):
        assert solve_sudoku(puzzle, limit=2) == [solution]
        assert puzzle.count(0) == orig.count(0)


def _bfs_distance(walls: np.ndarray, start, goal) -> int:
    dist = {start: 0}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for cell in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if cell not in dist and 0 <= cell[0] < walls.shape[0] and 0 <= cell[1] < walls.shape[1]:
                if not walls[cell]:
                    dist[cell] = dist[(r, c)] + 1
                    queue.append(cell)
    return dist.get(goal, -1)


def test_maze_labels_are_the_unique_shortest_paths():
    x, y = maze_dataset(40, 5, size=6, min_length=4)
    for grid, label in zip(x.numpy(), y.numpy(), strict=True):
        g, lab = grid.reshape(6, 6), label.reshape(6, 6)
        start = tuple(np.argwhere(g == puzzles.MAZE_START)[0])
        goal = tuple(np.argwhere(g == puzzles.MAZE_GOAL)[0])
        d = _bfs_distance(g == puzzles.MAZE_WALL, start, goal)
        assert d >= 4
        path = [tuple(c) for c in np.argwhere(lab == puzzles.MAZE_PATH)]
        assert len(path) == d - 1  # the cells strictly between start and goal
        assert all(g[c] == puzzles.MAZE_OPEN for c in path)
        # the marked cells, start and goal form a connected chain of length d
        cells = {start, goal, *path}
        assert (
            _bfs_distance(~np.isin(np.arange(36).reshape(6, 6), [r * 6 + c for r, c in cells]), start, goal)
            == d
        )
        # unique: blocking any one path cell makes the shortest route longer (or impossible)
        for cell in path:
            blocked = g == puzzles.MAZE_WALL
            blocked[cell] = True
            assert _bfs_distance(blocked, start, goal) != d
        assert shortest_path(g) is not None and len(shortest_path(g)) == d + 1


@pytest.mark.parametrize(
    ("grid", "error", "match"),
    [
        ([0] * 35, ValueError, "6x6 grid"),
        ([[0] * 5] * 7, ValueError, "6x6 grid"),
        ([7] + [0] * 35, ValueError, "symbols 0-6"),
        ([-1] + [0] * 35, ValueError, "symbols 0-6"),
        ([1, 1] + [0] * 34, ValueError, "repeats a digit"),
        ([0.5] * 36, TypeError, "integers"),
        ("abc", ValueError, "6x6 grid"),
    ],
)
def test_bad_grids_name_the_argument(grid, error, match):
    with pytest.raises(error, match=f"grid.*{match}|{match}"):
        check_sudoku(grid)


def test_bad_dataset_arguments():
    with pytest.raises(ValueError, match="blanks"):
        sudoku_dataset(2, 0, (10, 5))
    with pytest.raises(ValueError, match="blanks"):
        sudoku_dataset(2, 0, (10, 40))
    with pytest.raises(ValueError, match="n must be"):
        sudoku_dataset(0, 0)
    with pytest.raises(ValueError, match="walls"):
        maze_dataset(2, 0, walls=1.0)
    with pytest.raises(ValueError, match="min_length"):
        maze_dataset(2, 0, size=4, min_length=9)


def test_paired_bootstrap_interval_covers_the_mean():
    diff = np.array([0.0, 100.0, -100.0, 0.0] * 50)
    low, high = repro.paired_bootstrap(diff, 0, 2000)
    assert low < 0 < high and high - low < 40
    assert repro.paired_bootstrap(np.zeros(10), 0, 100) == (0.0, 0.0)


def test_benchmark_checks_the_counter_before_timing(monkeypatch):
    # one timed call after the warm-up instead of the quick budget's 2: the counter gate and the rows' layout
    # are what is checked here, and neither depends on how many timings the medians are of
    monkeypatch.setitem(bench.BUDGET, "quick", {**bench.BUDGET["quick"], "repeats": 1})
    rows = bench.run("quick")
    assert {(r["phase"], r["method"]) for r in rows} == {
        (p, m) for p in ("train", "inference") for m in ("TRM", "DIS")
    }
    assert all(r["correct"] and r["examples_per_s"] > 0 for r in rows)
    counted = {r["method"]: r["evaluations per example (counted)"] for r in rows}
    assert counted == {"TRM": 336, "DIS": 18}


@pytest.mark.slow
def test_quick_reproduction_runs_and_decides_by_its_criterion():
    result = repro.run("quick", 0)
    validate_result(result)
    assert result["evaluations TRM / DIS (inference)"] == pytest.approx(336 / 18)
    head = result["headroom"]
    assert head["holds"] == (
        head["TRM exact accuracy (points)"] >= repro.TRM_MIN
        and head["compute gap (points)"] >= repro.COMPUTE_GAP
    )
    low = result["paired difference DIS - TRM (points)"]["95% interval"][0]
    checks = result["checks"]
    assert checks[f"paired 95% interval of DIS - TRM above {repro.MARGIN:g} points"] == (low > repro.MARGIN)
    assert result["passed"] == (head["holds"] and all(checks.values()))
    assert {r["method"] for r in result["rows"]} == {"TRM", "DIS"}
    assert result["figures"][0]["name"] == "accuracy-vs-evaluations"
