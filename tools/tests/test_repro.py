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
    return {"system": "Pass", "claim": "claim A", "metric": "error (lower is better)", "ours": 0.1,
            "baseline": 0.2 + seed, "criterion": "ours < baseline", "passed": 0.1 < 0.2 + seed,
            "rows": [{"budget": budget, "seed": seed}],
            "figures": [{"name": "curve", "title": "t", "xlabel": "x", "ylabel": "y", "x": [1, 2, 3],
                         "series": {"ours": [3, 2, 1], "baseline": [3, 3, 3]}}]}


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
    registry.update(a=FakeEntryPoint("a", passing), boom=FakeEntryPoint("boom", raising),
                    bad=FakeEntryPoint("bad", bad_protocol))
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
    # the six packages each register one; their names are unique
    names = repro.discover()
    assert len(names) >= 6
    dists = {ep.dist.name for ep in names.values()}
    assert {"icml-compress", "icml-generative", "icml-interp", "icml-stats", "icml-agents", "icml-theory"} <= dists
