"""Shared fixtures of icml-theory's tests."""

import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """Single-threaded torch for a module whose tensors are tiny (thread start-up would dominate)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
