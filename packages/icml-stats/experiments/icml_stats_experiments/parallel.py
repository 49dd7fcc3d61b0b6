"""One process pool for the reproductions' independent repetitions."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def map_spawned(fn: Callable[[Any], Any], jobs: Sequence, workers: int) -> list:
    """``[fn(j) for j in jobs]``, in ``workers`` spawned processes when ``workers > 1`` (order kept)."""
    if workers <= 1:
        return [fn(j) for j in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(fn, jobs))
