"""``icml-repro --backend ray``: the reproductions and seeds of a run as Ray tasks, on a local Ray (default)
or any Ray cluster (``--ray-address``).

Each (reproduction, seed) is one task. A task runs :func:`icml_tools.repro.run_one` on a Ray worker, so a
reproduction runs there exactly as the serial runner runs it: in a new interpreter of its own (a Ray worker
holds threads and connections that a fork would copy), stopped after ``--timeout`` seconds, its exception,
crash or timeout recorded as its outcome's error. A task asks Ray for ``cpus`` CPUs and its interpreter starts
with ``OMP_NUM_THREADS=cpus``, so torch uses that many threads by default; the default, the thread count
torch starts with on the machine that runs ``icml-repro``, is what the serial runner's reproductions get,
which makes their numbers the same. A task that Ray itself loses (its worker killed, a node lost) is not
retried: its reproduction and seed get an error naming both, and the other results stay in the report.

Ray is an optional dependency: the ``ray`` extra of ``icml-tools`` (``uv sync`` installs it in this
workspace). A cluster's nodes must run this workspace's environment (the same ``uv sync``), since tasks
import the registered reproductions there.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from importlib.metadata import EntryPoint
from typing import Any

INSTALL_HINT = (
    "install the `ray` extra of icml-tools (`uv sync` installs it in this workspace; elsewhere "
    "`pip install 'icml-tools[ray]'`, or `pip install 'ray>=2.40'`)"
)
CONNECT_TIMEOUT = 5.0  # seconds to reach a cluster's address before Ray is asked to (it retries for minutes)


class RayBackendError(RuntimeError):
    """The Ray backend cannot start: Ray is not installed, or the cluster address is malformed or unreachable.
    The runner prints the message and exits with status 2."""


@dataclass(frozen=True)
class Task:
    """One reproduction with one seed: what a Ray task runs."""

    index: int  # its place in the run (the report keeps this order, whatever order tasks finish in)
    name: str  # entry-point name
    target: str  # "module:function"
    distribution: str
    seed: int


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RayBackendError` naming the extra to install."""
    # Under `uv run`, Ray would start its workers with `uv run` in an uploaded copy of the working directory
    # (a workspace with its .venv: gigabytes); ours run in this environment (locally) or in the cluster's own
    # (the same workspace, synced there). The switch is read when Ray is imported, so it is also set on the
    # module of a Ray imported earlier.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
        from ray._private import ray_constants
    except ImportError as exc:
        raise RayBackendError(f"--backend ray needs Ray, which is not installed: {INSTALL_HINT}") from exc
    if os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "0":
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    return ray


def check_address(address: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse an address that is not ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``, and a ``HOST:PORT`` where
    nothing accepts a connection within ``timeout`` seconds (``ray.init`` would retry it for minutes)."""
    if address is None or address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port_text = hostport.rpartition(":")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RayBackendError(
            f"--ray-address must be 'auto', HOST:PORT or ray://HOST:PORT (a Ray cluster's head), got {address!r}"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout).close()
    except OSError as exc:
        raise RayBackendError(
            f"--ray-address {address}: no Ray cluster answers at {host}:{port_text} within {timeout:g} s "
            f"({exc}); start one there (`ray start --head`) or leave --ray-address out to run on a local Ray"
        ) from None


def _run_task(name: str, target: str, budget: str, seed: int, timeout: float | None) -> dict:
    """On a Ray worker: the task's :class:`~icml_tools.repro.Outcome`, as a dict."""
    from icml_tools.repro import run_one

    outcome = run_one(EntryPoint(name, target, "icml.reproductions"), budget, seed, timeout, fork=False)
    out = asdict(outcome)
    out["env"] = {**out["env"], "host": socket.gethostname()}
    return out


def run_tasks(
    tasks: list[Task],
    budget: str,
    timeout: float | None,
    *,
    address: str | None,
    cpus: int,
    make_outcome: Callable[..., Any],
) -> Iterator[tuple[Task, Any]]:
    """Run ``tasks`` on Ray and yield ``(task, outcome)`` as each finishes; ``make_outcome(**fields)`` builds
    an outcome (:class:`icml_tools.repro.Outcome`). Starts a local Ray when ``address`` is None, else connects
    to that cluster (``auto``: the one started on this machine with ``ray start``), and shuts Ray down at the
    end. Ctrl-C cancels the tasks still queued or running, then is raised here."""
    ray = import_ray()
    check_address(address)
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=True)
        except ConnectionError as exc:
            raise RayBackendError(
                f"--ray-address {address}: cannot connect to a Ray cluster: {exc}"
            ) from None
    remote = ray.remote(_run_task).options(
        num_cpus=cpus,
        max_retries=0,  # a lost task is reported with its reproduction and seed, not run again
        runtime_env={"env_vars": {"OMP_NUM_THREADS": str(cpus), "MKL_NUM_THREADS": str(cpus)}},
    )
    try:
        submitted = time.perf_counter()
        pending = {remote.remote(t.name, t.target, budget, t.seed, timeout): t for t in tasks}
        try:
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ref)
                try:
                    fields = ray.get(ref)
                    fields.update(name=task.name, distribution=task.distribution, seed=task.seed)
                except ray.exceptions.RayError as exc:
                    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    fields = {
                        "name": task.name,
                        "target": task.target,
                        "distribution": task.distribution,
                        "seconds": time.perf_counter() - submitted,
                        "seed": task.seed,
                        "error": f"the Ray task running {task.name} with seed {task.seed} failed "
                        f"({type(exc).__name__}): {message}",
                    }
                yield task, make_outcome(**fields)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)  # KeyboardInterrupt in the task: run_one stops its reproduction's process
            # a few seconds for the tasks to stop their reproductions' processes before Ray shuts down
            ray.wait(list(pending), num_returns=len(pending), timeout=10)
            raise
    finally:
        if started_here:
            ray.shutdown()


def default_cpus() -> int:
    """CPUs (and torch threads) per task by default: the thread count torch starts with here, which is what
    the serial runner's reproductions get (1 when torch is not installed)."""
    try:
        import torch
    except ImportError:
        return 1
    return max(1, torch.get_num_threads())
