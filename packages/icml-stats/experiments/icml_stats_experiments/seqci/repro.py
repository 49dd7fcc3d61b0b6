"""Reproduction ``skci-type1-power``: SKCI keeps its type I error near the level with an online-estimated
Model-X conditional and has high power on the Gaussian CI benchmark.

Gaussian CI benchmark (:func:`~icml_stats.seqci.datasets.gaussian_ci`), d = 5, batches of 20, 1,000
samples per stream (50 batches; the first 40 samples only train), level 0.05:

* **null** (effect 0), one stream per repetition (fresh directions ``u, v`` and samples): SKCI, SKCI
  without shift, SKCI without normalization, SKCI with the oracle conditional (all four on the same
  kernel computations, :func:`~icml_stats.seqci.skci.run_ablation`) and e-CRT, all with the Model-X
  conditional estimated online except the oracle;
* **power**: effects a in {0.1, 0.25, 0.5, 1}: SKCI and e-CRT; rejection rates after n samples for the
  checkpoints below (rejection is sticky, so these are "rejected within n samples");
* **confounded nulls** (issue 25, :func:`~icml_stats.seqci.datasets.confounded_ci`): A and B both
  ``C.w + N(0, 1)``, (|w|, dim C) in {(1.5, 5), (3, 20)}: SKCI, SKCI with the conditional mean embedding
  of earlier versions (``estimator="cme"``), SKCI with the oracle conditional (shared kernels) and e-CRT.
  The whole grid of confounding strengths is the ``skci-confounding`` reproduction.

Budgets: quick 8 null streams, 4 per effect and 2 per confounded null; full 200 null streams, 50 per
effect and 100 per confounded null (50, not 100, per effect to fit the full run into our session on a
shared 2-core machine). The benchmark's scaling of ``u, v``
and these settings are our own (the paper's were not available);
the criterion below was fixed before any full run.
"""

from __future__ import annotations

import itertools
import math
import os
import warnings

import numpy as np
from threadpoolctl import threadpool_limits  # a scikit-learn dependency

from icml_stats.seqci.baselines import ECRT
from icml_stats.seqci.datasets import confounded_ci, gaussian_ci
from icml_stats.seqci.skci import SKCI, ConfoundingWarning, run_ablation
from icml_stats_experiments.parallel import map_spawned
from icml_tools.progress import status

D, BATCH, N, ALPHA = 5, 20, 1000, 0.05
EFFECTS = (0.1, 0.25, 0.5, 1.0)
CHECKPOINTS = (100, 200, 400, 600, 800, 1000)
VARIANTS = {
    "SKCI": {},
    "SKCI without shift": {"shift": False},
    "SKCI without normalization": {"normalize": False},
    "SKCI oracle": {"model_x": "oracle"},
    "SKCI (cme)": {"estimator": "cme"},
}
NULL_METHODS = (*VARIANTS, "e-CRT")
POWER_METHODS = ("SKCI", "e-CRT")
CONFOUNDED = ((1.5, 5), (3.0, 20))  # (|w|, dim C)
CONFOUNDED_VARIANTS = {"SKCI": {}, "SKCI (cme)": {"estimator": "cme"}, "SKCI oracle": {"model_x": "oracle"}}
CONFOUNDED_METHODS = (*CONFOUNDED_VARIANTS, "e-CRT")
BUDGETS = {
    "quick": {"null": 8, "power": 4, "confounded": 2},
    "full": {"null": 200, "power": 50, "confounded": 100},
}
POWER_EFFECT, POWER_MIN = 0.5, 0.8
SAMPLES_GAIN = 0.3  # power at 1,000 samples must exceed power at 100 samples by this much (a = 0.5)

CRITERION = (
    "(1) null, online-estimated conditional: SKCI rejects <= 0.05 + 2 sqrt(0.05 * 0.95 / R) of R streams "
    "(0.081 for R = 200); (2) the same bound for SKCI with the oracle conditional; (3) SKCI power at a = 0.5 "
    "within 1,000 samples >= 0.8; (4) SKCI power within 1,000 samples rises with a: each step up in a "
    "loses at most 2 SE (binomial, p = 0.5) and power at a = 1 > power at a = 0.1; (5) rises with samples: "
    "at a = 0.5, power within 1,000 samples >= power within 100 samples + 0.3; (6, added with issue 25 before "
    "its full run) on each confounded null, SKCI rejects <= 0.05 + 2 sqrt(0.05 * 0.95 / R) of R streams "
    "(0.094 for R = 100). Reported, not in the verdict "
    "(the issue asks for the ordering whatever it is): whether the ablations without shift and without "
    "normalization reject more often under the null than SKCI."
)


def _summary(result) -> dict:
    return {
        "rejected": bool(result.rejected),
        "stopping_time": result.stopping_time,
        "log10_wealth": [float(np.log10(max(w, 1e-300))) for w in result.wealth],
        "n_seen": [int(n) for n in result.n_seen],
    }


def _nulls(data, variants: dict, seed: int, rep: int) -> dict:
    """The SKCI ``variants`` (shared kernels) and e-CRT on one null stream."""
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfoundingWarning)  # the "cme" variant's, expected here
        out = run_ablation(
            data.a,
            data.b,
            data.c,
            variants,
            batch_size=BATCH,
            alpha=ALPHA,
            conditional=data.conditional(),
            random_state=[seed, rep],
        )
        out["e-CRT"] = ECRT(ALPHA, random_state=[seed, rep, 1]).run(data.a, data.b, data.c, batch_size=BATCH)
    return {name: _summary(r) for name, r in out.items()}


def null_repetition(seed: int, rep: int) -> dict:
    """One null stream of the Gaussian CI benchmark: the SKCI variants and e-CRT."""
    return _nulls(gaussian_ci(N, D, 0.0, seed=rep, data_seed=seed * 100_003 + rep), VARIANTS, seed, rep)


def confounded_repetition(seed: int, strength: float, d: int, rep: int) -> dict:
    """One confounded null stream (``|w| = strength``, ``dim C = d``)."""
    data = confounded_ci(N, d, strength, seed=rep, data_seed=seed * 100_003 + 90_000 + rep)
    return _nulls(data, CONFOUNDED_VARIANTS, seed, rep)


def power_repetition(seed: int, effect: float, rep: int) -> dict:
    """One alternative stream with effect ``effect``: SKCI and e-CRT (both online)."""
    data = gaussian_ci(N, D, effect, seed=50_000 + rep, data_seed=seed * 100_003 + 50_000 + rep)
    with threadpool_limits(limits=1):
        skci = SKCI(ALPHA, random_state=[seed, rep, 2]).run(data.a, data.b, data.c, batch_size=BATCH)
        ecrt = ECRT(ALPHA, random_state=[seed, rep, 3]).run(data.a, data.b, data.c, batch_size=BATCH)
    return {"SKCI": _summary(skci), "e-CRT": _summary(ecrt)}


def _call(job):
    kind, args = job
    if kind == "null":
        return null_repetition(*args)
    return power_repetition(*args) if kind == "power" else confounded_repetition(*args)


def _map(jobs: list, workers: int) -> list:
    return map_spawned(_call, jobs, workers)


def rate(runs: list[dict], n: int | None = None) -> float:
    """The fraction of runs that rejected within ``n`` samples (default: the whole stream)."""
    n = N if n is None else n
    return float(np.mean([r["stopping_time"] is not None and r["stopping_time"] <= n for r in runs]))


def bound(streams: int) -> float:
    return ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / streams)


def evaluate(
    type1: dict, power: dict, r_null: int, r_power: int, confounded: dict | None = None, r_conf: int = 1
) -> dict:
    """The criterion's checks from the measured rates: ``type1[method]``, ``power[(method, effect, n)]``,
    ``confounded[(strength, d)]`` (SKCI's rejection rate on each confounded null, ``r_conf`` streams)."""
    bound_null = bound(r_null)
    se = math.sqrt(0.25 / r_power)
    curve = [power[("SKCI", a, N)] for a in EFFECTS]
    return {
        "type1_skci": type1["SKCI"] <= bound_null,
        "type1_oracle": type1["SKCI oracle"] <= bound_null,
        "power_at_0.5": power[("SKCI", POWER_EFFECT, N)] >= POWER_MIN,
        "rises_with_effect": all(b >= a - 2 * se for a, b in itertools.pairwise(curve))
        and curve[-1] > curve[0],
        "rises_with_samples": power[("SKCI", POWER_EFFECT, N)]
        >= power[("SKCI", POWER_EFFECT, CHECKPOINTS[0])] + SAMPLES_GAIN,
        "type1_confounded": all(v <= bound(r_conf) for v in (confounded or {}).values()),
    }


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Type I error under the null and power curves on the Gaussian CI benchmark; sizes by ``budget``."""
    cfg = BUDGETS[budget]
    jobs: list[tuple[str, tuple]] = [("null", (seed, r)) for r in range(cfg["null"])]
    jobs += [("power", (seed, a, r)) for a in EFFECTS for r in range(cfg["power"])]
    n_power = len(EFFECTS) * cfg["power"]
    jobs += [("confounded", (seed, s, d, r)) for s, d in CONFOUNDED for r in range(cfg["confounded"])]
    workers = min(2, os.cpu_count() or 1)
    status(
        f"{len(jobs)} streams ({cfg['null']} null, {n_power} alternative, "
        f"{len(jobs) - cfg['null'] - n_power} confounded null) on {workers} processes"
    )
    results = _map(jobs, workers)
    null_runs, power_runs = results[: cfg["null"]], results[cfg["null"] : cfg["null"] + n_power]
    conf_runs = {
        point: results[cfg["null"] + n_power + i * cfg["confounded"] :][: cfg["confounded"]]
        for i, point in enumerate(CONFOUNDED)
    }
    conf_type1 = {
        (p, m): rate([r[m] for r in runs]) for p, runs in conf_runs.items() for m in CONFOUNDED_METHODS
    }
    type1 = {m: rate([r[m] for r in null_runs]) for m in NULL_METHODS}
    power = {}
    for i, a in enumerate(EFFECTS):
        chunk = power_runs[i * cfg["power"] : (i + 1) * cfg["power"]]
        for m in POWER_METHODS:
            for n in CHECKPOINTS:
                power[(m, a, n)] = rate([r[m] for r in chunk], n)
    checks = evaluate(
        type1,
        power,
        cfg["null"],
        cfg["power"],
        {p: conf_type1[(p, "SKCI")] for p in CONFOUNDED},
        cfg["confounded"],
    )
    ordering = {
        "no_shift_above_skci": type1["SKCI without shift"] > type1["SKCI"],
        "no_normalization_above_skci": type1["SKCI without normalization"] > type1["SKCI"],
    }
    rows = [
        {
            "setting": "null",
            "method": m,
            "effect": 0.0,
            "reps": cfg["null"],
            "rejection_rate": type1[m],
            "median_stopping_time": _median_stop([r[m] for r in null_runs]),
            "mean_final_log10_wealth": _mean_final([r[m] for r in null_runs]),
        }
        for m in NULL_METHODS
    ]
    for i, a in enumerate(EFFECTS):
        chunk = power_runs[i * cfg["power"] : (i + 1) * cfg["power"]]
        for m in POWER_METHODS:
            row = {
                "setting": "alternative",
                "method": m,
                "effect": a,
                "reps": cfg["power"],
                "rejection_rate": power[(m, a, N)],
                "median_stopping_time": _median_stop([r[m] for r in chunk]),
                "mean_final_log10_wealth": _mean_final([r[m] for r in chunk]),
            }
            row |= {f"power_n{n}": power[(m, a, n)] for n in CHECKPOINTS}
            rows.append(row)
    for (strength, d), runs in conf_runs.items():
        for m in CONFOUNDED_METHODS:
            rows.append(
                {
                    "setting": f"null, confounded |w|={strength:g}, dim C={d}",
                    "method": m,
                    "effect": 0.0,
                    "reps": cfg["confounded"],
                    "rejection_rate": conf_type1[((strength, d), m)],
                    "median_stopping_time": _median_stop([r[m] for r in runs]),
                    "mean_final_log10_wealth": _mean_final([r[m] for r in runs]),
                }
            )
    bets = null_runs[0]["SKCI"]["n_seen"]
    return {
        "system": "skci-type1-power",
        "claim": (
            "SKCI (kernel CI testing by betting with normalization and truncate-and-shift) keeps type I error "
            "near the level when the Model-X conditional is estimated online, while keeping high power."
        ),
        "metric": (
            f"null rejection rate at level {ALPHA} within {N} samples, conditional estimated online (lower is "
            "better, target <= 0.05 + 2 SE); ours: SKCI, baseline: e-CRT"
        ),
        "ours": type1["SKCI"],
        "baseline": type1["e-CRT"],
        "criterion": CRITERION,
        "passed": all(checks.values()),
        "rows": rows,
        "figures": [
            {
                "name": "skci_type1",
                "title": f"Type I error within {N} samples (level {ALPHA}, {cfg['null']} streams)",
                "xlabel": "method",
                "ylabel": "rejection rate",
                "x": list(NULL_METHODS),
                "series": {"type I error": [type1[m] for m in NULL_METHODS]},
                "kind": "bar",
            },
            {
                "name": "skci_power_vs_effect",
                "title": f"Power within {N} samples (d = {D}, batches of {BATCH})",
                "xlabel": "effect a",
                "ylabel": "rejection rate",
                "x": list(EFFECTS),
                "series": {m: [power[(m, a, N)] for a in EFFECTS] for m in POWER_METHODS},
                "kind": "line",
            },
            {
                "name": "skci_power_vs_samples",
                "title": "SKCI power within n samples",
                "xlabel": "samples seen",
                "ylabel": "rejection rate",
                "x": list(CHECKPOINTS),
                "series": {f"a = {a}": [power[("SKCI", a, n)] for n in CHECKPOINTS] for a in EFFECTS},
                "kind": "line",
            },
            {
                "name": "skci_wealth_paths",
                "title": "Median log10 wealth over streams (Ville threshold log10 20 = 1.30)",
                "xlabel": "samples seen",
                "ylabel": "median log10 wealth",
                "x": bets,
                "series": {
                    **{f"null: {m}": _median_path([r[m] for r in null_runs]) for m in VARIANTS},
                    **{
                        f"a = {a}: SKCI": _median_path(
                            [r["SKCI"] for r in power_runs[i * cfg["power"] : (i + 1) * cfg["power"]]]
                        )
                        for i, a in enumerate(EFFECTS)
                    },
                },
                "kind": "line",
            },
        ],
        "notes": (
            f"budget={budget}, seed={seed}: {cfg['null']} null streams, {cfg['power']} streams per effect, "
            f"{N} samples each; checks: "
            + ", ".join(f"{k}={'ok' if v else 'FAILED'}" for k, v in checks.items())
            + "; ablation ordering (reported, not in the verdict): "
            + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in ordering.items())
            + "; type I: "
            + ", ".join(f"{m} {type1[m]:.3f}" for m in NULL_METHODS)
            + "; confounded nulls: "
            + "; ".join(
                f"|w|={p[0]:g}, dim C={p[1]}: "
                + ", ".join(f"{m} {conf_type1[(p, m)]:.3f}" for m in CONFOUNDED_METHODS)
                for p in CONFOUNDED
            )
        ),
    }


def _median_stop(runs: list[dict]) -> float:
    stops = [r["stopping_time"] for r in runs if r["stopping_time"] is not None]
    return float(np.median(stops)) if stops else float("nan")


def _mean_final(runs: list[dict]) -> float:
    return float(np.mean([r["log10_wealth"][-1] for r in runs]))


def _median_path(runs: list[dict]) -> list[float]:
    return [float(v) for v in np.median(np.array([r["log10_wealth"] for r in runs]), axis=0)]
