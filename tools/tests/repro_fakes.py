"""Reproductions the runner's tests register (not collected as tests). The runner starts each in a process of
its own by its ``module:function`` target, so they live in a module the child process can import: the tests put
this folder on ``PYTHONPATH``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

GROUP = "icml.reproductions"


@dataclass(frozen=True)
class FakeDist:
    name: str


@dataclass
class FakeEntryPoint:
    """A registered reproduction whose target is a function of this module."""

    name: str
    function: str
    dist: FakeDist = FakeDist("icml-fake-experiments")

    @property
    def value(self) -> str:
        return f"repro_fakes:{self.function}"

    def load(self):
        return EntryPoint(self.name, self.value, GROUP).load()


def registry(functions: dict[str, str]) -> dict[str, FakeEntryPoint]:
    """``{name: function}`` as the registered entry points a runner's ``discover`` returns."""
    return {name: FakeEntryPoint(name, function) for name, function in functions.items()}


def passing(budget, seed):
    return {
        "system": "Pass",
        "claim": "claim A",
        "metric": "error (lower is better)",
        "ours": 0.1,
        "baseline": 0.2 + seed,
        "criterion": "ours < baseline",
        "passed": 0.1 < 0.2 + seed,
        "rows": [{"budget": budget, "seed": seed}],
        "figures": [
            {
                "name": "curve",
                "title": "t",
                "xlabel": "x",
                "ylabel": "y",
                "x": [1, 2, 3],
                "series": {"ours": [3, 2, 1], "baseline": [3, 3, 3]},
            }
        ],
    }


def failing(budget, seed):
    return {**passing(budget, seed), "system": "Fail", "ours": 0.5, "passed": False, "figures": []}


def raising(budget, seed):
    raise RuntimeError("boom in the reproduction")


def bad_protocol(budget, seed):
    return {"claim": "no other keys"}


def recording(budget, seed):
    """Appends its arguments to the file named by ``ICML_TEST_CALLS``, so a test sees calls made in a child."""
    with Path(os.environ["ICML_TEST_CALLS"]).open("a") as handle:
        handle.write(f"{budget} {seed}\n")
    return passing(budget, seed)


def messing(budget, seed):
    """Changes process-wide state: torch threads, default dtype and seed, numpy's global RNG, the environment."""
    import numpy as np
    import torch

    torch.set_num_threads(torch.get_num_threads() + 1)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(123)
    np.random.seed(123)  # noqa: NPY002 (the legacy global RNG is the state under test)
    os.environ["ICML_TEST_LEAK"] = "leaked"
    return passing(budget, seed)


def checking(budget, seed):
    """Asserts from inside a run that it sees a fresh process's defaults, whatever ran before it; its row holds
    the torch thread count it found (the test compares it with a run before the one that changed it)."""
    import numpy as np
    import torch

    assert torch.get_default_dtype() == torch.float32, torch.get_default_dtype()
    assert torch.initial_seed() != 123  # a fresh process's torch seed is drawn at random
    # numpy's global RNG is seeded from the OS in a fresh process: its first draw is not the seed-123 one
    assert np.random.random() != np.random.RandomState(123).random()  # noqa: NPY002
    assert "ICML_TEST_LEAK" not in os.environ
    return {**passing(budget, seed), "rows": [{"threads": torch.get_num_threads()}]}


def crashing(budget, seed):
    os.kill(os.getpid(), signal.SIGKILL)


def sleeping(budget, seed):
    time.sleep(120)
    return passing(budget, seed)


def sleeping_noting_ctrl_c(budget, seed):
    """Sleeps; when Ctrl-C reaches its process, writes ``interrupted`` to the file named by
    ``ICML_TEST_INTERRUPTED`` before ending as Ctrl-C ends it."""
    try:
        time.sleep(120)
    except KeyboardInterrupt:
        Path(os.environ["ICML_TEST_INTERRUPTED"]).write_text("interrupted")
        raise
    return passing(budget, seed)


def starting_a_worker(budget, seed):
    """Starts a worker process, as a ``ProcessPoolExecutor`` does, writes its pid to the file named by
    ``ICML_TEST_WORKER`` and sleeps past any test's ``--timeout``."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    path = Path(os.environ["ICML_TEST_WORKER"])
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(worker.pid))
    os.replace(tmp, path)
    time.sleep(120)
    return passing(budget, seed)


def seeded(budget, seed):
    """A number drawn from torch's RNG seeded with ``seed`` and reduced on torch's threads: the same for a
    seed wherever it runs with the same thread count."""
    import torch

    torch.manual_seed(seed)
    x = torch.randn(1 << 16, dtype=torch.float32)
    ours = float((x * x).sum() / x.numel())
    return {**passing(budget, seed), "system": "Seeded", "ours": ours, "passed": ours < 1.0, "figures": []}


def killing_its_worker(budget, seed):
    """Kills the process that started it (a Ray worker, under ``--backend ray``): Ray loses the task. Never
    run it under the serial runner, whose process it would kill."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
