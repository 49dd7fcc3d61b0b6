"""Benchmark ``repro-ray-sweep``: a seed sweep of a registered reproduction run serially and on a local Ray.

Three runs of ``icml-repro --only proteus-gaussian --quick --seeds ...`` (its quick budget whatever the
benchmark's, which sets the number of seeds; each run its own ``python -m icml_tools.repro`` process, timed
whole: Ray's start included): the serial runner (one reproduction at a time, on the threads
torch starts with), Ray with the default CPUs per task (the same threads: one task at a time on a 2-core
machine) and Ray with one CPU per task (as many tasks at once as there are cores). The speed-up is the serial
time over each Ray time. Correctness first: the default Ray run must write the serial run's verdicts and
numbers exactly, and the one-CPU run the same verdicts with numbers within ``1e-6`` relative (a different
thread count reorders float sums); a run that does not gets no speed-up.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from icml_tools.protocol import check_run_args

# reduces on torch's threads; 16-19 s a seed on 2 cores since c78a237 (7 s at 095f17f, when the
# docs/repro_ray_sweep_cpu.json table was measured)
REPRODUCTION = "proteus-gaussian"
SEEDS = {"quick": "0-3", "full": "0-7"}
RELATIVE = 1e-6


def _run(out: Path, seeds: str, extra: list[str]) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "icml_tools.repro", "--only", REPRODUCTION, "--quick", "--seeds", seeds]
    start = time.perf_counter()
    proc = subprocess.run([*cmd, *extra, "--out", str(out)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd + extra)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    (folder,) = out.iterdir()
    results = json.loads((folder / "results.json").read_text())["results"]
    return seconds, {(r["name"], r["seed"]): r for r in results}


def _agree(a: dict, b: dict, relative: float) -> bool:
    if a.keys() != b.keys():
        return False
    for key, ra in a.items():
        rb = b[key]
        if ra["verdict"] != rb["verdict"]:
            return False
        for field in ("ours", "baseline"):
            x, y = ra["result"][field], rb["result"][field]
            if not math.isclose(x, y, rel_tol=relative, abs_tol=0.0):
                return False
    return True


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    check_run_args(budget, seed)
    seeds = SEEDS[budget]
    with tempfile.TemporaryDirectory(prefix="repro-ray-sweep-") as tmp:
        serial_s, serial = _run(Path(tmp) / "serial", seeds, [])
        rows = [
            {
                "runner": "serial",
                "seeds": seeds,
                "seconds": round(serial_s, 2),
                "agrees": True,
                "speedup": 1.0,
            }
        ]
        for label, extra, relative in (
            ("ray, default CPUs per task", ["--backend", "ray"], 0.0),
            ("ray, 1 CPU per task", ["--backend", "ray", "--cpus-per-task", "1"], RELATIVE),
        ):
            seconds, got = _run(Path(tmp) / label.replace(" ", "_").replace(",", ""), seeds, extra)
            agrees = _agree(got, serial, relative)
            rows.append(
                {
                    "runner": label,
                    "seeds": seeds,
                    "seconds": round(seconds, 2),
                    "agrees": agrees,
                    "speedup": round(serial_s / seconds, 3) if agrees else None,
                }
            )
    for row in rows:
        row.update(reproduction=f"{REPRODUCTION} --quick", budget=budget)
    return rows
