from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from icml_tools import child, repro

HERE = Path(__file__).parent


@dataclass(frozen=True)
class FakeDist:
    name: str


@dataclass
class FakeEntryPoint:
    """A registered reproduction: its target is a function of :mod:`repro_fakes`."""

    name: str
    function: str
    dist: FakeDist = FakeDist("icml-fake")

    @property
    def value(self) -> str:
        return f"repro_fakes:{self.function}"

    def load(self):
        return EntryPoint(self.name, self.value, repro.GROUP).load()


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
    for bad in (["--timeout", "0"], ["--timeout", "soon"]):
        with pytest.raises(SystemExit) as exc:
            repro.main(bad)
        assert exc.value.code == 2
    assert "--timeout" in capsys.readouterr().err
