from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest

from icml_tools import bench


def rows(budget, seed):
    return [
        {"impl": "a", "median_ms": 1.5, "budget": budget},
        {"impl": "b", "median_ms": 3.0, "speedup": 0.5},
    ]


def broken(budget, seed):
    return {"not": "a list"}


@pytest.fixture
def registry(monkeypatch):
    eps = {}
    monkeypatch.setattr(bench, "discover", lambda group=bench.GROUP: dict(eps))
    return eps


def entry(fn):
    return SimpleNamespace(value="fake:run", dist=SimpleNamespace(name="icml-fake"), load=lambda: fn)


def test_writes_csv_and_json(registry, tmp_path):
    registry.update(ok=entry(rows))
    assert bench.main(["--out", str(tmp_path), "--full"]) == 0
    (folder,) = tmp_path.iterdir()
    with (folder / "ok.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert (
        [r["impl"] for r in table] == ["a", "b"]
        and table[0]["budget"] == "full"
        and table[1]["speedup"] == "0.5"
    )
    payload = json.loads((folder / "results.json").read_text())
    assert payload["benchmarks"]["ok"]["rows"][1]["median_ms"] == 3.0 and "device" in payload["meta"]


def test_a_broken_benchmark_fails_the_run(registry, tmp_path):
    registry.update(bad=entry(broken), ok=entry(rows))
    assert bench.main(["--out", str(tmp_path)]) == 1
    (folder,) = tmp_path.iterdir()
    payload = json.loads((folder / "results.json").read_text())
    assert "must return a list of dicts" in payload["benchmarks"]["bad"]["error"]
    assert (folder / "ok.csv").exists()
    assert bench.main(["--only", "zzz", "--out", str(tmp_path)]) == 2


def test_run_benchmark_checks_arguments_and_rows(registry):
    registry.update(ok=entry(rows), bad=entry(broken))
    assert bench.run_benchmark("ok", "full", 1)[0]["budget"] == "full"
    with pytest.raises(ValueError, match="budget must be one of"):
        bench.run_benchmark("ok", "medium", 0)
    with pytest.raises(TypeError, match="must return a list of dicts"):
        bench.run_benchmark("bad")
    with pytest.raises(ValueError, match="no benchmark is registered as 'zzz'"):
        bench.run_benchmark("zzz")
