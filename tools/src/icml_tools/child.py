"""One reproduction in a process of its own: how ``icml-repro`` isolates the reproductions it runs.

:class:`Child` starts the reproduction at ``TARGET`` (an entry point's ``module:function``) with a checked
budget and seed. It loads and calls it, checks the result against the protocol and writes ``{"result",
"error", "seconds", "env"}`` to a JSON file (written whole, then renamed into place, so the runner reads a
complete file or none). ``env`` records what the reproduction ran with: every torch thread count it used (the
default it started with and any it set), the torch and numpy versions and the device (of torch and numpy
when it imported them). Thread counts, RNG state, the default dtype, environment variables and caches a
reproduction changes end with its process, so no reproduction sees another's.

On Linux the process is forked from the runner, which imported torch once beforehand and never changes torch
state itself (each reproduction would otherwise pay torch's import, about 5 s on 2 cores); elsewhere it is
a new interpreter, ``python -m icml_tools.child TARGET BUDGET SEED OUT``. Either way its exit code is 0 when
the outcome was written (whatever the verdict or the error) and 130 on Ctrl-C, with no traceback.

On POSIX the child leads a session (and process group) of its own, and so does everything it starts (the
worker processes of a ``ProcessPoolExecutor``, say): :meth:`Child.kill` ends the whole group, so a timed-out
reproduction leaves no worker running. The terminal's Ctrl-C reaches only the runner's process group, so the
runner passes it on with :meth:`Child.interrupt`. Being out of the runner's group, it would also outlive a
runner (or a Ray worker) that is killed; on Linux the kernel kills it then (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
import warnings
from importlib.metadata import EntryPoint
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from icml_tools.protocol import check_run_args, validate_result
from icml_tools.runner import write_text_atomic

FORK = sys.platform.startswith("linux") and hasattr(os, "fork")
GROUPS = os.name == "posix"  # a process group per child, killed whole (killpg)
PARENT_ENV = "ICML_TOOLS_CHILD_PARENT"  # the starting process's id, for a new interpreter's die_with_parent
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """On Linux: have the kernel kill this process when the process ``parent`` that started it ends (a runner or
    Ray worker killed outright, which its own session would otherwise outlive); end at once when it has ended
    already. Nothing elsewhere. (The kernel watches the *thread* that forked: the runners start children
    from a thread that lives as long as the run, the main thread or a Ray task's.)"""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before prctl: nobody would kill this process then
        os._exit(1)


class _TorchThreads:
    """Records the torch thread counts a run uses: the default torch starts with and every count set with
    ``torch.set_num_threads``. torch is patched when it is imported (a finder on ``sys.meta_path``), so a
    reproduction that never imports torch does not pay for it."""

    def __init__(self) -> None:
        self.default: int | None = None
        self.used: set[int] = set()
        self.patched = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            self._patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec

    def _patch(self, torch: Any) -> None:
        if self.patched:
            return
        self.patched = True
        original = torch.set_num_threads

        def set_num_threads(n: int) -> None:
            original(n)
            self.used.add(torch.get_num_threads())

        torch.set_num_threads = set_num_threads
        self.reset()

    def reset(self) -> None:
        """Start a new record: the count torch has now is the run's default."""
        torch = sys.modules.get("torch")
        if torch is not None:
            self.default = torch.get_num_threads()
            self.used = {self.default}

    def watch(self) -> None:
        """Record from now on: patch torch if it is imported, else when it is."""
        if "torch" in sys.modules:
            self._patch(sys.modules["torch"])
        elif self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def env(self) -> dict[str, Any]:
        """What the run ran with: Python, numpy and torch versions (of those it imported), threads, device."""
        env: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count()}
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            env["numpy"] = numpy.__version__
        torch = sys.modules.get("torch")
        if torch is not None and self.default is not None:
            cuda = torch.cuda.is_available()
            env["torch"] = torch.__version__
            env["threads"] = sorted(self.used)
            env["default_threads"] = self.default
            env["device"] = f"CUDA {torch.cuda.get_device_name(0)}" if cuda else f"CPU ({platform.machine()})"
        return env


_THREADS = _TorchThreads()


def run(target: str, budget: str, seed: int, out: Path) -> None:
    """In this process: run the reproduction at ``target`` and write its outcome to ``out``."""
    _THREADS.watch()
    _THREADS.reset()
    result, error = None, None
    start = time.perf_counter()
    try:
        fn = EntryPoint(name="reproduction", value=target, group="icml.reproductions").load()
        result = validate_result(fn(budget=budget, seed=seed))
    except Exception:
        error = traceback.format_exc()
    seconds = time.perf_counter() - start
    payload = {"result": result, "error": error, "seconds": seconds, "env": _THREADS.env()}
    write_text_atomic(out, json.dumps(payload, indent=2, allow_nan=True))


def preload() -> None:
    """Import torch (when installed) in the runner, patched to record threads, so forked children share it.
    The runner never changes torch's state afterwards; the one thread the import starts (numpy's OpenBLAS
    pool) is re-created in a forked child."""
    if FORK and find_spec("torch") is not None:
        _THREADS.watch()
        import torch  # noqa: F401


class Child:
    """A reproduction running in a process of its own (forked on Linux, a new interpreter elsewhere)."""

    def __init__(self, target: str, budget: str, seed: int, out: Path, fork: bool | None = None) -> None:
        check_run_args(budget, seed)
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        if not (FORK if fork is None else fork):
            cmd = [sys.executable, "-m", "icml_tools.child", target, budget, str(seed), str(out)]
            env = {**os.environ, PARENT_ENV: str(os.getpid())}
            self.proc = subprocess.Popen(cmd, start_new_session=GROUPS, env=env)
            self.pid = self.proc.pid
            return
        sys.stdout.flush()
        sys.stderr.flush()
        with warnings.catch_warnings():
            # numpy's OpenBLAS keeps a thread pool from import; it re-creates it in a forked child (atfork), so
            # Python's warning about forking a process with threads does not apply
            warnings.simplefilter("ignore", DeprecationWarning)
            parent = os.getpid()
            pid = os.fork()
        if pid == 0:  # the child: never returns into the runner's code
            code = 0
            try:
                os.setsid()  # a process group of its own, which what it starts joins: killed whole
                die_with_parent(parent)
                run(target, budget, seed, out)
            except KeyboardInterrupt:
                code = 130
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pid = pid

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (``-N`` for signal N), or None when it still runs after ``timeout`` seconds."""
        if self.proc is not None:
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        if self.returncode is not None:  # reaped already
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                return self.returncode
            if time.monotonic() >= deadline:  # type: ignore[operator]
                return None
            time.sleep(0.05)

    def _signal_group(self, signum: int) -> None:
        """Send ``signum`` to the child's process group (the child and what it started), or to the child alone
        when its group does not exist yet (the instant after the fork, before its ``setsid``). Only while the
        child is unreaped, so its id still names it and its group."""
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # it ended already
                pass

    def _running(self) -> bool:
        """Not reaped yet (it may have ended)."""
        return (self.proc.returncode if self.proc is not None else self.returncode) is None

    def interrupt(self) -> None:
        """Pass Ctrl-C on: SIGINT to the child and every process it started, which are not in the terminal's
        foreground process group. (Without process groups, on Windows, they share the console's Ctrl-C.)"""
        if GROUPS and self._running():
            self._signal_group(signal.SIGINT)

    def kill(self) -> None:
        """Kill it and every process it started (its process group), and wait for it to end."""
        if not self._running():
            return
        if GROUPS:
            self._signal_group(signal.SIGKILL)
        elif self.proc is not None:
            self.proc.kill()
        else:
            os.kill(self.pid, signal.SIGKILL)
        self.wait()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m icml_tools.child TARGET BUDGET SEED OUT", file=sys.stderr)
        return 2
    target, budget, seed_text, out = args
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is not None and parent.isdigit():
        die_with_parent(int(parent))
    try:
        seed = int(seed_text)
        check_run_args(budget, seed)
    except (TypeError, ValueError) as exc:
        print(f"icml_tools.child: {exc}", file=sys.stderr)
        return 2
    try:
        run(target, budget, seed, Path(out))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
