from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from icml_tools import repro


@dataclass(frozen=True)
class FakeDist:
    name: str


@dataclass
class FakeEntryPoint:
    name: str
    fn: object
    value: str = "fake.module:run"
    dist: FakeDist = FakeDist("icml-fake")

    def load(self):
        return self.fn


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


@pytest.fixture
def registry(monkeypatch):
    eps = {}
    monkeypatch.setattr(repro, "discover", lambda group=repro.GROUP: dict(eps))
    return eps


def test_runs_all_reports_table_and_files(registry, tmp_path, capsys):
    registry.update(a=FakeEntryPoint("a", passing), b=FakeEntryPoint("b", failing))
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
        a=FakeEntryPoint("a", passing),
        boom=FakeEntryPoint("boom", raising),
        bad=FakeEntryPoint("bad", bad_protocol),
    )
    assert repro.main(["--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "boom in the reproduction" in captured.err and "missing the required key" in captured.err
    (folder,) = tmp_path.iterdir()
    verdicts = {r["name"]: r["verdict"] for r in json.loads((folder / "results.json").read_text())["results"]}
    assert verdicts == {"a": "PASS", "boom": "ERROR", "bad": "ERROR"}


def test_only_list_and_unknown(registry, tmp_path, capsys):
    registry.update(a=FakeEntryPoint("a", passing), b=FakeEntryPoint("b", failing))
    assert repro.main(["--list"]) == 0
    assert "fake.module:run" in capsys.readouterr().out
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


def test_the_runner_checks_budget_and_seed_before_the_call(registry, tmp_path, capsys):
    calls = []
    registry.update(
        a=FakeEntryPoint("a", lambda budget, seed: calls.append((budget, seed)) or passing(budget, seed))
    )
    for argv in (["--seed", "-1"], ["--seed", "x"]):
        with pytest.raises(SystemExit) as exc:
            repro.main([*argv, "--out", str(tmp_path)])
        assert exc.value.code == 2
    assert "seed must be >= 0" in capsys.readouterr().err
    assert calls == []
    with pytest.raises(ValueError, match="budget must be one of"):
        repro.run_reproduction("a", "medium", 0)
    with pytest.raises(TypeError, match="seed must be an int"):
        repro.run_reproduction("a", "quick", 1.5)
    with pytest.raises(ValueError, match="no reproduction is registered as 'zzz'"):
        repro.run_reproduction("zzz")
    assert calls == []
    assert repro.run_reproduction("a", "full", 2)["rows"] == [{"budget": "full", "seed": 2}]
    assert calls == [("full", 2)]


def test_run_reproduction_checks_the_result(registry):
    registry.update(bad=FakeEntryPoint("bad", bad_protocol))
    with pytest.raises(repro.ProtocolError, match="missing the required key"):
        repro.run_reproduction("bad")
