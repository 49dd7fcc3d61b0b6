"""The reproductions and benchmarks run many tiny torch ops in Python loops: like the library's tests, these
run single-threaded (restored afterwards)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
