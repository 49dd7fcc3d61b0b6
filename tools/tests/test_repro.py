from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icml_tools import child, repro

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # the fake reproductions' module, importable here and in the runner's children
    sys.path.insert(0, str(HERE))
from repro_fakes import FakeDist, FakeEntryPoint  # noqa: E402


@pytest.fixture
def registry(monkeypatch):
    """The runner sees only the fakes added to this dict; their module is importable here and in children."""
    eps: dict[str, FakeEntryPoint] = {}
    monkeypatch.setattr(repro, "discover", lambda group=repro.GROUP: dict(eps))
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    )
    return eps


def results(folder: Path) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads((folder / "results.json").read_text())["results"]}


def interrupt_at(monkeypatch, name: str):
    """Ctrl-C, in this process, the moment the runner would start ``name``: ``run_one`` raises
    ``KeyboardInterrupt`` there. Returns the function that puts the real ``run_one`` back."""
    real = repro.run_one

    def run_one(ep, *args, **kwargs):
        if ep.name == name:
            raise KeyboardInterrupt
        return real(ep, *args, **kwargs)

    monkeypatch.setattr(repro, "run_one", run_one)
    return lambda: monkeypatch.setattr(repro, "run_one", real)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped by its new parent, does not)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            return stat.read_text().rpartition(")")[2].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_runs_all_reports_table_and_files(registry, tmp_path, capsys):
    registry.update(a=FakeEntryPoint("a", "passing"), b=FakeEntryPoint("b", "failing"))
    assert repro.main(["--out", str(tmp_path), "--seed", "3", "--full"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" in out and "claim A" in out
    (folder,) = tmp_path.iterdir()
    payload = json.loads((folder / "results.json").read_text())
    assert payload["meta"]["budget"] == "full" and payload["meta"]["seed"] == 3
    assert [r["verdict"] for r in payload["results"]] == ["PASS", "FAIL"]
    assert payload["results"][0]["result"]["rows"] == [{"budget": "full", "seed": 3}]
    png = folder / "a__curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (folder / "report.md").read_text()
    assert "![t](a__curve.png)" in report and "| system | claim |" in report


def test_a_raising_reproduction_gives_nonzero_exit_but_others_still_run(registry, tmp_path, capsys):
    registry.update(
        a=FakeEntryPoint("a", "passing"),
        boom=FakeEntryPoint("boom", "raising"),
        bad=FakeEntryPoint("bad", "bad_protocol"),
    )
    assert repro.main(["--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "boom in the reproduction" in captured.err and "missing the required key" in captured.err
    (folder,) = tmp_path.iterdir()
    verdicts = {r["name"]: r["verdict"] for r in json.loads((folder / "results.json").read_text())["results"]}
    assert verdicts == {"a": "PASS", "boom": "ERROR", "bad": "ERROR"}


def test_only_list_and_unknown(registry, tmp_path, capsys):
    registry.update(a=FakeEntryPoint("a", "passing"), b=FakeEntryPoint("b", "failing"))
    assert repro.main(["--list"]) == 0
    assert "repro_fakes:passing" in capsys.readouterr().out
    assert repro.main(["--only", "b", "--out", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    assert [r["name"] for r in json.loads((folder / "results.json").read_text())["results"]] == ["b"]
    assert repro.main(["--only", "zzz", "--out", str(tmp_path)]) == 2
    with pytest.raises(SystemExit):
        repro.main(["--quick", "--full"])


def test_registered_reproductions_are_discovered():
    # the six packages' experiments members each register at least one; their names are unique
    names = repro.discover()
    assert len(names) >= 6
    dists = {ep.dist.name for ep in names.values()}
    packages = ("icml-compress", "icml-generative", "icml-interp", "icml-stats", "icml-agents", "icml-theory")
    assert dists == {f"{p}-experiments" for p in packages}
    assert all(ep.value.split(".")[0].endswith("_experiments") for ep in names.values())


def test_the_runner_checks_budget_and_seed_before_the_call(registry, tmp_path, capsys, monkeypatch):
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("ICML_TEST_CALLS", str(log))

    def calls():
        return log.read_text().splitlines() if log.exists() else []

    registry.update(a=FakeEntryPoint("a", "recording"))
    for argv in (["--seed", "-1"], ["--seed", "x"]):
        with pytest.raises(SystemExit) as exc:
            repro.main([*argv, "--out", str(tmp_path)])
        assert exc.value.code == 2
    assert "seed must be >= 0" in capsys.readouterr().err
    assert calls() == []
    with pytest.raises(ValueError, match="budget must be one of"):
        repro.run_reproduction("a", "medium", 0)
    with pytest.raises(TypeError, match="seed must be an int"):
        repro.run_reproduction("a", "quick", 1.5)
    with pytest.raises(ValueError, match="no reproduction is registered as 'zzz'"):
        repro.run_reproduction("zzz")
    assert calls() == []
    assert repro.run_reproduction("a", "full", 2)["rows"] == [{"budget": "full", "seed": 2}]
    assert calls() == ["full 2"]
    assert repro.main(["--only", "a", "--seed", "5", "--out", str(tmp_path / "r")]) == 0  # in its own process
    assert calls() == ["full 2", "quick 5"]


def test_run_reproduction_checks_the_result(registry):
    registry.update(bad=FakeEntryPoint("bad", "bad_protocol"))
    with pytest.raises(repro.ProtocolError, match="missing the required key"):
        repro.run_reproduction("bad")


def test_no_reproduction_sees_what_another_changed(registry, tmp_path, capsys):
    pytest.importorskip("torch")
    registry.update(
        first=FakeEntryPoint("first", "checking"),
        messing=FakeEntryPoint("messing", "messing"),
        after=FakeEntryPoint("after", "checking"),
    )
    assert repro.main(["--only", "first,messing,after", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    (folder,) = tmp_path.iterdir()
    got = results(folder)
    # "checking" asserts the default dtype, an unseeded torch and numpy, no leaked variable from inside; it
    # passes before and after the reproduction that changed them all
    assert {n: r["verdict"] for n, r in got.items()} == {"first": "PASS", "messing": "PASS", "after": "PASS"}
    default = got["first"]["env"]["default_threads"]
    assert got["first"]["env"]["threads"] == got["after"]["env"]["threads"] == [default]
    assert got["after"]["result"]["rows"] == got["first"]["result"]["rows"] == [{"threads": default}]
    # each result records what it ran with; the thread count the messing one set is recorded, and flagged
    assert got["messing"]["env"]["threads"] == [default, default + 1]
    assert {"torch", "numpy", "device", "python"} <= set(got["messing"]["env"])
    assert "messing ran on torch threads" in capsys.readouterr().err
    assert "**not documented**" in (folder / "report.md").read_text()
    assert "ICML_TEST_LEAK" not in os.environ  # nor does the runner's own process see it


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "new-interpreter"])
def test_a_crash_or_a_timeout_is_that_reproductions_error_and_the_next_still_runs(
    registry, tmp_path, capsys, monkeypatch, fork
):
    if fork and not child.FORK:
        pytest.skip("this platform starts each reproduction in a new interpreter")
    monkeypatch.setattr(child, "FORK", fork)
    registry.update(
        crash=FakeEntryPoint("crash", "crashing"),
        slow=FakeEntryPoint("slow", "sleeping"),
        a=FakeEntryPoint("a", "passing"),
    )
    assert repro.main(["--only", "crash,slow,a", "--timeout", "3", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    (folder,) = tmp_path.iterdir()
    got = results(folder)
    assert {n: r["verdict"] for n, r in got.items()} == {"crash": "ERROR", "slow": "TIMEOUT", "a": "PASS"}
    assert "signal SIGKILL" in got["crash"]["error"] and "signal SIGKILL" in err
    assert got["slow"]["timed_out"] and "--timeout 3 s" in got["slow"]["error"]
    assert 3 <= got["slow"]["seconds"] < 60
    for bad in (["--timeout", "0"], ["--timeout", "soon"], ["--timeout", "inf"], ["--timeout", "nan"]):
        with pytest.raises(SystemExit) as exc:
            repro.main(bad)
        assert exc.value.code == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "new-interpreter"])
def test_a_timeout_also_ends_the_processes_the_reproduction_started(registry, tmp_path, monkeypatch, fork):
    if fork and not child.FORK:
        pytest.skip("this platform starts each reproduction in a new interpreter")
    if not child.GROUPS:
        pytest.skip("no process groups on this platform")
    monkeypatch.setattr(child, "FORK", fork)
    pid_file = tmp_path / "worker.pid"
    monkeypatch.setenv("ICML_TEST_WORKER", str(pid_file))
    registry.update(w=FakeEntryPoint("w", "starting_a_worker"))
    worker = None
    try:
        assert repro.main(["--timeout", "2", "--out", str(tmp_path / "r")]) == 1
        assert pid_file.is_file(), "the reproduction did not start its worker within its 2 s"
        worker = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(worker), "the timed-out reproduction's worker still runs"
    finally:
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)


KILLED_DRIVER = """
import sys, time
from pathlib import Path
from icml_tools.child import Child

child = Child("repro_fakes:sleeping", "quick", 0, Path(sys.argv[1]), fork=sys.argv[2] == "fork")
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "new-interpreter"])
def test_a_reproduction_ends_when_its_runner_is_killed(tmp_path, fork):
    # in a session of its own, a reproduction would outlive a runner or Ray worker killed outright
    if not sys.platform.startswith("linux"):
        pytest.skip("the kernel's parent-death signal is Linux's")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
    }
    cmd = [sys.executable, "-c", KILLED_DRIVER, str(tmp_path / "out.json"), "fork" if fork else "spawn"]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(driver.stdout.readline())
        time.sleep(0.5)  # past the child's start (its prctl)
        assert alive(pid)
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "the reproduction outlived its killed runner"
    finally:
        driver.kill()
        driver.wait()
        driver.stdout.close()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_only_accepts_package_names(registry, tmp_path, capsys):
    registry.update(
        a=FakeEntryPoint("a", "passing"),
        b=FakeEntryPoint("b", "failing"),
        c=FakeEntryPoint("c", "passing", FakeDist("icml-other-experiments")),
    )
    assert repro.main(["--only", "icml-fake", "--out", str(tmp_path / "1")]) == 0
    assert repro.main(["--only", "c,icml-fake", "--out", str(tmp_path / "2")]) == 0
    ((one,), (two,)) = ((tmp_path / "1").iterdir(), (tmp_path / "2").iterdir())
    assert list(results(one)) == ["a", "b"] and list(results(two)) == ["c", "a", "b"]
    assert repro.main(["--only", "icml-nope", "--out", str(tmp_path / "3")]) == 2
    assert "packages: icml-fake, icml-other" in capsys.readouterr().err


def test_resume_runs_only_the_missing_and_gives_the_same_table(registry, tmp_path, capsys, monkeypatch):
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("ICML_TEST_CALLS", str(log))
    registry.update(a=FakeEntryPoint("a", "recording"), b=FakeEntryPoint("b", "failing"))
    assert repro.main(["--out", str(tmp_path / "whole")]) == 0
    (whole,) = (tmp_path / "whole").iterdir()
    # a run stopped by Ctrl-C after "a", then resumed: "a" is not run again
    restore = interrupt_at(monkeypatch, "b")
    assert repro.main(["--out", str(tmp_path / "part")]) == 130
    restore()
    (part,) = (tmp_path / "part").iterdir()
    assert f"continue with: uv run icml-repro --resume {part} --quick --seed 0\n" in capsys.readouterr().err
    assert repro.main(["--resume", str(part)]) == 0
    assert "holds 1 finished; running the 1 missing" in capsys.readouterr().err
    assert log.read_text().splitlines() == [
        "quick 0",
        "quick 0",
    ]  # "whole" and "part" ran it, --resume did not

    def table(folder):  # the summary table without its time column
        return [row[:6] + row[7:] for row in repro.summary_rows(repro.read_report(folder)[1])]

    assert table(part) == table(whole) and len(table(part)) == 2
    for bad in (["--resume", str(part), "--full"], ["--resume", str(tmp_path / "none")]):
        assert repro.main(bad) == 2
    assert "ran budget 'quick' seed 0; pass the same" in capsys.readouterr().err


def test_resume_keeps_the_runs_only_and_timeout(registry, tmp_path, capsys, monkeypatch):
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("ICML_TEST_CALLS", str(log))
    registry.update(
        a=FakeEntryPoint("a", "recording"),
        b=FakeEntryPoint("b", "recording"),
        c=FakeEntryPoint("c", "recording"),
    )
    restore = interrupt_at(monkeypatch, "b")
    argv = ["--only", "a, b", "--timeout", "7.5", "--full", "--seed", "2"]
    assert repro.main([*argv, "--out", str(tmp_path / "r")]) == 130
    restore()
    (part,) = (tmp_path / "r").iterdir()
    hint = f"uv run icml-repro --resume {part} --full --seed 2 --only a,b --timeout 7.5"
    assert f"continue with: {hint}\n" in capsys.readouterr().err
    meta, _ = repro.read_report(part)
    assert (meta["only"], meta["timeout"]) == (["a", "b"], 7.5)
    # without --only and --timeout: the stopped run's; "c" was not selected and is not run
    assert repro.main(["--resume", str(part), "--full", "--seed", "2"]) == 0
    assert log.read_text().splitlines() == ["full 2", "full 2"]  # a, then b on resuming
    assert list(results(part)) == ["a", "b"]
    meta, _ = repro.read_report(part)
    assert (meta["only"], meta["timeout"]) == (["a", "b"], 7.5)
    assert "replaces" not in capsys.readouterr().err
    # the stored timeout is the one the resumed run's reproductions ran under
    seen = []
    real = repro.run_one
    monkeypatch.setattr(repro, "run_one", lambda ep, b, s, t=None: seen.append(t) or real(ep, b, s, t))
    assert repro.main(["--resume", str(part), "--full", "--seed", "2", "--only", "c", "--timeout", "9"]) == 0
    # given and different, the command line's replace the report's, which records them
    assert seen == [9.0] and list(results(part)) == ["a", "b", "c"]
    err = capsys.readouterr().err
    assert "--only c replaces the resumed run's --only a,b" in err
    assert "--timeout 9.0 replaces the resumed run's --timeout 7.5" in err
    meta, _ = repro.read_report(part)
    assert (meta["only"], meta["timeout"]) == (["c"], 9.0)


def test_ctrl_c_in_the_first_seconds_exits_130_with_a_report_resume_reads(
    registry, tmp_path, capsys, monkeypatch
):
    registry.update(a=FakeEntryPoint("a", "passing"))

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(repro, "preload", interrupted)  # Ctrl-C while torch is imported, before any run
    assert repro.main(["--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    (folder,) = tmp_path.iterdir()
    assert (
        "Traceback" not in err and f"0 of 1 finished this run, 0 in the report {folder / 'report.md'}" in err
    )
    assert repro.read_report(folder)[1] == []
    monkeypatch.setattr(repro, "preload", lambda: None)
    assert repro.main(["--resume", str(folder)]) == 0
    assert {n: r["verdict"] for n, r in results(folder).items()} == {"a": "PASS"}
    # earlier still, before the report folder exists: exit 130, nothing written
    monkeypatch.setattr(repro, "discover", lambda group=repro.GROUP: interrupted())
    assert repro.main(["--out", str(tmp_path / "early")]) == 130
    assert "stopped by Ctrl-C" in capsys.readouterr().err and not (tmp_path / "early").exists()


def test_an_empty_only_is_refused(registry, tmp_path, capsys):
    registry.update(a=FakeEntryPoint("a", "passing"))
    for empty in ([""], [","], [" , "]):
        with pytest.raises(SystemExit) as exc:
            repro.main(["--only", *empty, "--out", str(tmp_path)])
        assert exc.value.code == 2
        assert "--only needs at least one name" in capsys.readouterr().err
    assert not tmp_path.exists() or not list(tmp_path.iterdir())  # nothing ran


def test_the_eta_comes_from_the_last_report(registry, tmp_path, capsys):
    registry.update(a=FakeEntryPoint("a", "passing"))
    assert repro.main(["--out", str(tmp_path)]) == 0
    assert "left by the last report" not in capsys.readouterr().err  # no earlier report: no ETA
    assert repro.main(["--out", str(tmp_path)]) == 0
    assert "[1/1] a, about 0 min left by the last report" in capsys.readouterr().err


DRIVER = """
import sys
import repro_fakes
from icml_tools import repro

repro.discover = lambda group=repro.GROUP: repro_fakes.registry(
    {"first": "passing", "slow": "sleeping_noting_ctrl_c"}
)
sys.exit(repro.main(sys.argv[1:]))
"""


def test_ctrl_c_keeps_what_finished_and_exits_130(tmp_path):
    noted = tmp_path / "interrupted.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
        "ICML_TEST_INTERRUPTED": str(noted),
    }
    out_dir = tmp_path / "reports"
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, "--out", str(out_dir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # and with Ctrl-C's default action, as there: a shell starts background jobs (`pytest &`) with SIGINT
        # ignored, which the child would inherit and never stop
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not list(out_dir.glob("*/results.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    (folder,) = out_dir.iterdir()
    time.sleep(0.5)  # "slow" has started
    # what Ctrl-C at a terminal does: the runner's process group gets it; the reproduction runs in a group of
    # its own (so that a timeout kills what it started), and the runner passes it on
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert noted.read_text() == "interrupted"  # Ctrl-C reached the reproduction (not killed 5 s later)
    assert f"stopped by Ctrl-C; 1 of 2 finished this run, 1 in the report {folder / 'report.md'}" in err
    assert f"continue with: uv run icml-repro --resume {folder} --quick --seed 0\n" in err
    assert "PASS    first" in out  # printed the moment it finished
    assert {n: r["verdict"] for n, r in results(folder).items()} == {"first": "PASS"}
    assert "## Pass" in (folder / "report.md").read_text()
    assert not list(folder.glob(".*.tmp"))


def test_status_lines_go_to_standard_error_at_once(capsys):
    from icml_tools.progress import status

    status("quantizing 4 blocks")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.fullmatch(r"  · \d\d:\d\d:\d\d quantizing 4 blocks\n", captured.err)


# ---- seed sweeps and the Ray backend


def outcomes_by_key(folder: Path) -> dict[tuple[str, int], tuple]:
    """``{(name, seed): (verdict, ours, baseline, rows)}`` of a report: what two runs must agree on."""
    out = {}
    for r in json.loads((folder / "results.json").read_text())["results"]:
        res = r["result"] or {}
        out[r["name"], r["seed"]] = (r["verdict"], res.get("ours"), res.get("baseline"), res.get("rows"))
    return out


def test_a_seed_sweep_on_ray_writes_the_serial_runners_verdicts_and_numbers(
    registry, tmp_path, capsys, monkeypatch
):
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    # the serial runner in a new interpreter per reproduction, as on Ray: forked from this test process,
    # which earlier tests may have left with OpenMP's threads, "seeded" could hang in its first parallel op
    monkeypatch.setattr(child, "FORK", False)
    registry.update(
        a=FakeEntryPoint("a", "passing"),
        s=FakeEntryPoint("s", "seeded"),
        f=FakeEntryPoint("f", "failing"),
        r=FakeEntryPoint("r", "raising"),
    )
    assert repro.main(["--seeds", "0-2", "--out", str(tmp_path / "serial")]) == 1  # "r" raised
    (serial,) = (tmp_path / "serial").iterdir()
    # the serial runs' torch threads (a fresh interpreter's default); the Ray default would be this test
    # process's current count, which earlier tests may have changed (icml-repro's process never changes it)
    threads = str(results(serial)["s"]["env"]["default_threads"])
    ray_argv = ["--seeds", "0,1,2", "--backend", "ray", "--cpus-per-task", threads]
    assert repro.main([*ray_argv, "--out", str(tmp_path / "ray")]) == 1
    (ray,) = (tmp_path / "ray").iterdir()
    got, expected = outcomes_by_key(ray), outcomes_by_key(serial)
    assert list(got) == list(expected) == [(n, s) for n in "asfr" for s in (0, 1, 2)]  # the run's order
    assert got == expected
    assert len({got["s", seed][1] for seed in (0, 1, 2)}) == 3  # the seeds reached the runs
    assert [got["a", seed][2] for seed in (0, 1, 2)] == [0.2, 1.2, 2.2]
    assert {got["r", seed][0] for seed in (0, 1, 2)} == {"ERROR"}
    meta = json.loads((ray / "results.json").read_text())["meta"]
    assert (meta["seeds"], meta["backend"], meta["seed"]) == ([0, 1, 2], "ray", 0)
    report = (ray / "report.md").read_text()
    assert "seeds 0, 1, 2, backend ray" in report and "| system | seed | claim |" in report
    assert "## Seeded, seed 2" in report and "a__seed1__curve.png" in report
    assert (ray / "a__seed1__curve.png").is_file()
    # the tasks ran with the serial runner's torch threads, on a Ray worker's host
    runs = json.loads((ray / "results.json").read_text())["results"]
    serial_runs = json.loads((serial / "results.json").read_text())["results"]
    assert {tuple(r["env"]["threads"]) for r in runs if r["name"] == "s"} == {
        tuple(r["env"]["threads"]) for r in serial_runs if r["name"] == "s"
    }
    assert all("host" in r["env"] for r in runs if r["name"] == "s")
    out = capsys.readouterr()
    assert "r (seed 1) raised" in out.err and "PASS    a seed 2" in out.out


def test_a_lost_ray_task_names_its_reproduction_and_seed_and_the_others_stay(registry, tmp_path, capsys):
    pytest.importorskip("ray")
    registry.update(a=FakeEntryPoint("a", "passing"), k=FakeEntryPoint("k", "killing_its_worker"))
    assert (
        repro.main(["--backend", "ray", "--seeds", "0-1", "--cpus-per-task", "1", "--out", str(tmp_path)])
        == 1
    )
    (folder,) = tmp_path.iterdir()
    got = {(r["name"], r["seed"]): r for r in json.loads((folder / "results.json").read_text())["results"]}
    assert [got["a", s]["verdict"] for s in (0, 1)] == ["PASS", "PASS"]
    for seed in (0, 1):
        assert got["k", seed]["verdict"] == "ERROR"
        assert f"the Ray task running k with seed {seed} failed" in got["k", seed]["error"]
    assert "the Ray task running k with seed" in capsys.readouterr().err


def test_the_ray_backend_refuses_what_it_cannot_use(registry, tmp_path, capsys, monkeypatch):
    import socket

    registry.update(a=FakeEntryPoint("a", "passing"))
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        assert repro.main(["--backend", "ray", "--ray-address", address, "--out", str(tmp_path)]) == 2
        assert f"no Ray cluster answers at 127.0.0.1:{port}" in capsys.readouterr().err
    assert time.monotonic() - start < 30  # refused at once, not after Ray's minutes of retries
    assert repro.main(["--backend", "ray", "--ray-address", "head-node", "--out", str(tmp_path)]) == 2
    assert "--ray-address must be 'auto', HOST:PORT or ray://HOST:PORT" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert repro.main(["--backend", "ray", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--backend ray needs Ray, which is not installed" in err and "icml-tools[ray]" in err
    assert not list(tmp_path.iterdir())  # refused before any work: no report folder
    bad = (
        ["--ray-address", "auto"],  # without --backend ray
        ["--cpus-per-task", "2"],
        ["--backend", "ray", "--cpus-per-task", "0"],
        ["--backend", "dask"],
        ["--seeds", "3-1"],
        ["--seeds", "a"],
        ["--seeds", "0,-1"],
        ["--seeds", "0-5000"],
        ["--seeds", "0-1000000000000"],  # refused at once, not after building the range
        ["--seed", "1", "--seeds", "0-1"],
    )
    for argv in bad:
        with pytest.raises(SystemExit) as exc:
            repro.main(argv)
        assert exc.value.code == 2, argv
    err = capsys.readouterr().err
    assert "--ray-address and --cpus-per-task go with --backend ray" in err
    assert "must be seeds >= 0 as A-B (A <= B) or A,B,C, got '3-1'" in err
    assert "at most 1000 seeds" in err and "not allowed with argument" in err


def test_a_seed_sweep_resumes_by_reproduction_and_seed(registry, tmp_path, capsys, monkeypatch):
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("ICML_TEST_CALLS", str(log))
    registry.update(a=FakeEntryPoint("a", "recording"), b=FakeEntryPoint("b", "failing"))
    restore = interrupt_at(monkeypatch, "b")  # Ctrl-C after a's two seeds
    assert repro.main(["--seeds", "0-1", "--out", str(tmp_path / "part")]) == 130
    restore()
    (part,) = (tmp_path / "part").iterdir()
    assert (
        f"continue with: uv run icml-repro --resume {part} --quick --seeds 0,1\n" in capsys.readouterr().err
    )
    assert repro.main(["--resume", str(part), "--seeds", "0-1"]) == 0
    assert log.read_text().splitlines() == ["quick 0", "quick 1"]  # the resumed run ran only b
    assert list(outcomes_by_key(part)) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert repro.main(["--resume", str(part)]) == 2  # seed 0 alone is another run
    assert "ran budget 'quick' seeds 0, 1; pass the same (got 'quick' seed 0)" in capsys.readouterr().err


@pytest.mark.slow
def test_registered_reproductions_sweep_through_ray_as_they_run_serially(tmp_path, monkeypatch):
    """Two registered reproductions of the experiments area (a placeholder and proteus-gaussian, which
    reduces on torch's threads), swept over two seeds: the same verdicts and numbers on Ray as serially."""
    pytest.importorskip("ray")
    # each serial run in a new interpreter: a child forked from this test process, which earlier tests left
    # with OpenMP's thread pool, hangs in its first parallel op (icml-repro itself never runs torch ops)
    monkeypatch.setattr(child, "FORK", False)
    argv = ["--only", "grpo-bandit,proteus-gaussian", "--seeds", "0-1"]
    assert repro.main([*argv, "--out", str(tmp_path / "serial")]) == 0
    (serial,) = (tmp_path / "serial").iterdir()
    threads = str(results(serial)["proteus-gaussian"]["env"]["default_threads"])  # as in the test above
    assert (
        repro.main([*argv, "--backend", "ray", "--cpus-per-task", threads, "--out", str(tmp_path / "ray")])
        == 0
    )
    (ray,) = (tmp_path / "ray").iterdir()
    got = outcomes_by_key(ray)
    assert list(got) == [(n, s) for n in ("grpo-bandit", "proteus-gaussian") for s in (0, 1)]
    assert got == outcomes_by_key(serial)
    assert got["proteus-gaussian", 0][1] != got["proteus-gaussian", 1][1]  # the seed reached it
