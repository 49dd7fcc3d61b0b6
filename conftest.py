"""Workspace-wide test settings.

Hypothesis runs derandomized by default: the same examples on every machine, so the fuzz tests (one per
public API, issue 22) decide a commit the same way locally and in CI. To search new examples, run
``uv run pytest --hypothesis-profile=explore`` (random draws, more examples) and fix what it finds.
"""

import os
import sys

import pytest
from hypothesis import settings

# pytest-xdist (`-n`, see pyproject's addopts): the workers share the cores, so each gets its share of threads
# (OpenMP threads beyond the cores spin against each other: two workers of two threads each on 2 cores
# took twice the CPU time of one process). Set before torch is imported; subprocesses inherit it.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, str(_threads))
    # numpy's OpenBLAS may have started its threads before this file is read (a plugin imported numpy)
    from threadpoolctl import threadpool_limits

    threadpool_limits(int(os.environ["OMP_NUM_THREADS"]))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

settings.register_profile("default", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=200)
settings.load_profile("default")


@pytest.fixture(autouse=True)
def _torch_threads_stay():
    """Whatever a test sets with ``torch.set_num_threads`` (a reproduction's ``run`` pins 2) ends with it: under
    xdist a leaked 2 made every later test of that worker compete for the other worker's core (OpenMP threads
    waiting on each other: a 4.6 s test took 54 s)."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        if before is None:  # the test imported torch: the worker's share (or torch's default)
            before = int(os.environ.get("OMP_NUM_THREADS", "0")) or torch.get_num_threads()
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Single-threaded torch for a module whose tensors are tiny (thread start-up would dominate)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fake_cuda():
    """A context manager that runs code on a faked CUDA device, for device checks on machines without one.

    Inside ``with fake_cuda():`` torch's ``FakeTensorMode`` fakes ``device="cuda"`` tensors and modules moved
    there, and an op mixing them with CPU tensors raises ``FakeTensorDeviceMismatchError`` as a GPU would.
    Fake tensors hold no values, so value reads return stand-ins: ``bool(t)`` gives ``truth`` (default True)
    and ``t.item()``/``float(t)``/``int(t)`` give ``scalar`` (default 1.0). Shapes, dtypes and devices are
    real; numbers are not, so assert only on those. Not caught here: a CPU ``torch.Generator`` drawing CUDA
    tensors, and ``.numpy()`` of a CUDA tensor (fake tensors refuse ``.numpy()`` on every device)."""
    import contextlib

    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    @contextlib.contextmanager
    def mode(truth: bool = True, scalar: float = 1.0):
        originals = {n: getattr(torch.Tensor, n) for n in ("__bool__", "item", "__float__", "__int__")}
        stand_ins = {
            "__bool__": lambda t: truth,
            "item": lambda t: scalar if t.is_floating_point() else int(scalar),
            "__float__": lambda t: float(scalar),
            "__int__": lambda t: int(scalar),
        }

        def patched(name):
            def read(self, *args, **kwargs):
                if isinstance(self, FakeTensor):
                    return stand_ins[name](self)
                return originals[name](self, *args, **kwargs)

            return read

        for name in originals:
            setattr(torch.Tensor, name, patched(name))
        try:
            with FakeTensorMode(allow_non_fake_inputs=True) as fake:
                yield fake
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)

    return mode
