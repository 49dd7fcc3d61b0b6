"""Workspace-wide test settings.

Hypothesis runs derandomized by default: the same examples on every machine, so the fuzz tests (one per
public API, issue 22) decide a commit the same way locally and in CI. To search new examples, run
``uv run pytest --hypothesis-profile=explore`` (random draws, more examples) and fix what it finds.
"""

import pytest
from hypothesis import settings

settings.register_profile("default", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=200)
settings.load_profile("default")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Single-threaded torch for a module whose tensors are tiny (thread start-up would dominate)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
