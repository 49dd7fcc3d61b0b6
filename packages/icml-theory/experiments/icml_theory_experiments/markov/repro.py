"""Reproduction ``markov-stages``: does a one-layer attention-only transformer learn a mixture-of-lags chain
(lags 1, 3, 6 of decreasing weight) in stages, one lag at a time in decreasing importance, its heads ending on
distinct lags, and does the simplified gradient-flow ODE place the stages in time?

Task, model, budgets and criterion are fixed in ``packages/icml-theory/docs/markov-stages.md`` (committed
before the first evaluation run, seeds 0-2; seeds 100-102 were used for development) and restated in the
returned dict. Script: ``python -m icml_theory_experiments.markov.repro --budget full`` (prints the JSON).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

CHAIN: dict[str, Any] = {
    "n_states": 8,
    "lags": (1, 3, 6),
    "weights": (0.5, 0.3, 0.2),
    "concentration": 0.3,
    "kind": "geometric",
}
MODEL: dict[str, Any] = {"context": 12, "init_scale": 1e-3}
TRAIN: dict[str, Any] = {"optimizer": "adam", "lr": 2e-3, "batch_size": 64, "log_every": 25, "n_eval": 2048}
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"seeds": (0,), "steps": 4000, "small_steps": 2000},
    "full": {"seeds": (0, 1, 2), "steps": 8000, "small_steps": 4000},
}
SMALL_TRAIN = 256  # sequences in the early-stopping experiment's fixed training set
PLATEAU: dict[str, Any] = {"tol": 0.01, "window": 8, "min_length": 8, "smooth": 5}
MATCH_TOL = 0.02  # nats: a plateau belongs to a partial predictor when within this of its Bayes loss
GAP_MIN = 0.05  # headroom: the Bayes losses of lag 1, lags 1 and 3, all three differ pairwise by >= this
FLUCTUATION = 0.2  # headroom: eval-loss range over the last 10 records <= this times the smallest gap
ODE_FACTOR = 2.0  # ODE stage times within this factor of training's (after calibrating on the first stage)
PHASE_THRESHOLD = 0.3  # a head points at a lag with >= this much attention mass (and more than elsewhere)


def _levels(chain, eval_data) -> dict[tuple[int, ...], float]:
    """The partial predictors' log loss on the evaluation sequences (the same tokens the model is scored on)."""
    stages = list(chain.stage_losses())
    return {s: float(chain.partial_log_loss(eval_data, s).mean()) for s in stages}


def _run(job: tuple) -> dict:
    import torch

    from icml_theory.markov import (
        AttentionOnlyTransformer,
        MixtureOfLagsChain,
        crossing_times,
        detect_phases,
        find_plateaus,
        match_plateaus,
        train,
    )

    torch.set_num_threads(1)
    kind, seed, heads, steps = job
    chain = MixtureOfLagsChain(**CHAIN, seed=seed)
    rng = np.random.default_rng(seed + 10_000)
    length = MODEL["context"] + 1
    eval_data = chain.sample(TRAIN["n_eval"], length, rng)
    small = chain.sample(SMALL_TRAIN, length, rng) if kind == "small" else None
    model = AttentionOnlyTransformer(chain.n_states, heads=heads, seed=seed, **MODEL)
    log = train(model, chain, steps, seed=seed, eval_data=eval_data, train_data=small, **TRAIN)
    assert log.eval_loss is not None and log.mass is not None
    levels = _levels(chain, eval_data)
    plateaus = find_plateaus(log.steps, log.eval_loss, **PLATEAU)
    matched = match_plateaus(plateaus, {str(k): v for k, v in levels.items()}, MATCH_TOL)
    mass = log.lag_mass(chain.lags)
    phases = detect_phases(mass, PHASE_THRESHOLD)
    out = {
        "kind": kind,
        "seed": seed,
        "heads": heads,
        "levels": {str(k): v for k, v in levels.items()},
        "plateaus": [
            {"stage": key, "start": p.start, "end": p.end, "level": p.level} for key, p in matched
        ],
        "crossings": crossing_times(log.steps, log.eval_loss, list(levels.values())).tolist(),
        "final eval loss": float(log.eval_loss[-1]),
        "final head lags": [chain.lags[i] if i >= 0 else None for i in phases.head_lag[-1]],
        "final mass": mass[-1].round(3).tolist(),
        "first competitive step": None if phases.first("competitive") is None else int(log.steps[phases.first("competitive")]),
        "first cooperative step": None if phases.first("cooperative") is None else int(log.steps[phases.first("cooperative")]),
        "fluctuation": float(np.ptp(log.eval_loss[-10:])),
        "seconds": log.seconds,
        "curve": {"steps": log.steps.tolist(), "eval": log.eval_loss.round(4).tolist()},
    }  # fmt: skip
    if kind == "small":
        best = int(np.argmin(log.eval_loss))
        out["early stop"] = {"step": int(log.steps[best]), "eval loss": float(log.eval_loss[best]),
                             "final train loss": float(log.train_loss[-1])}  # fmt: skip
    return out


def _ode(seed: int) -> dict:
    from icml_theory.markov import MixtureOfLagsChain, StageODE, crossing_times, integrate, strengths

    chain = MixtureOfLagsChain(**CHAIN, seed=seed)
    s = strengths(chain)
    ode = StageODE(tuple(s), chain.lags, heads=3, candidates=MODEL["context"], init=MODEL["init_scale"])
    t_max = 40.0 * float(np.log(1 / ode.init) / s.min())
    sol = integrate(ode, t_max, 800, seed=seed)
    return {
        "seed": seed,
        "strengths": s.tolist(),
        "crossings": crossing_times(sol.times, sol.loss, ode.levels()).tolist(),
        "final attention": sol.attention[-1][:, [lag - 1 for lag in chain.lags]].round(3).tolist(),
    }


def _nearest(levels: dict[str, float], loss: float) -> str:
    """The stage whose level is nearest to ``loss``."""
    return min(levels, key=lambda k: abs(levels[k] - loss))


def _ratio(a, b) -> float | None:
    return (
        None if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b == 0 else float(a / b)
    )


def run(budget: str = "quick", seed: int = 0, workers: int | None = None) -> dict:
    from icml_theory.markov import MixtureOfLagsChain

    start = time.perf_counter()
    cfg = BUDGETS[budget]
    seeds = tuple(seed + s for s in cfg["seeds"])
    jobs = [("online", s, h, cfg["steps"]) for s in seeds for h in (3, 2, 1)]
    jobs += [("small", s, 3, cfg["small_steps"]) for s in seeds]
    workers = workers or min(2, len(jobs))
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_run, jobs))
    else:
        results = [_run(j) for j in jobs]
    odes = {s: _ode(s) for s in seeds}

    names = ["(1,)", "(1, 3)", "(1, 3, 6)"]
    headroom, per_seed = {}, {}
    for s in seeds:
        pop = list(MixtureOfLagsChain(**CHAIN, seed=s).stage_losses().values())[1:]
        gaps = [pop[0] - pop[1], pop[1] - pop[2], pop[0] - pop[2]]
        full = next(r for r in results if r["kind"] == "online" and r["seed"] == s and r["heads"] == 3)
        headroom[s] = {"population Bayes losses": pop, "gaps": gaps, "eval-loss range, last 10 records": full["fluctuation"],
                       "holds": min(gaps) >= GAP_MIN and full["fluctuation"] <= FLUCTUATION * min(gaps[:2])}  # fmt: skip
        firsts = {}
        for p in full["plateaus"]:
            if p["stage"] in names and p["stage"] not in firsts:
                firsts[p["stage"]] = p["start"]
        ordered = all(n in firsts for n in names) and firsts[names[0]] < firsts[names[1]] < firsts[names[2]]
        distinct = sorted(x for x in full["final head lags"] if x is not None) == [1, 3, 6]
        ode_t = odes[s]["crossings"]
        train_t = full["crossings"]  # the crossings into (1,), (1, 3) and all three
        scale = _ratio(train_t[0], ode_t[0])
        ratios = [
            _ratio(scale * o, t) if scale is not None else None
            for o, t in zip(ode_t[1:], train_t[1:], strict=True)
        ]
        ode_ok = all(r is not None and 1 / ODE_FACTOR <= r <= ODE_FACTOR for r in ratios)
        fewer = {
            h: next(r for r in results if r["kind"] == "online" and r["seed"] == s and r["heads"] == h)
            for h in (1, 2)
        }
        small = next(r for r in results if r["kind"] == "small" and r["seed"] == s)
        per_seed[s] = {
            "three plateaus matched": all(n in firsts for n in names),
            "plateau starts": firsts,
            "in decreasing importance order": ordered,
            "heads end on distinct lags": distinct,
            "final head lags": full["final head lags"],
            "training crossings (steps)": train_t,
            "ODE crossings (time)": ode_t,
            "ODE / training, stages 2 and 3 (calibrated on stage 1)": ratios,
            "ODE within factor": ode_ok,
            "final eval loss by heads": {h: r["final eval loss"] for h, r in ((3, full), *fewer.items())},
            "nearest stage by heads": {
                h: _nearest(r["levels"], r["final eval loss"]) for h, r in ((3, full), *fewer.items())
            },
            "early stopping": {
                **small["early stop"],
                "final eval loss": small["final eval loss"],
                "early-stop gain (nats)": small["final eval loss"] - small["early stop"]["eval loss"],
                "early-stopped stage": _nearest(small["levels"], small["early stop"]["eval loss"]),
            },
            "passed": all(n in firsts for n in names) and ordered and distinct and ode_ok,
        }
    head_ok = all(h["holds"] for h in headroom.values())
    passed = head_ok and all(p["passed"] for p in per_seed.values())
    rows = [{k: v for k, v in r.items() if k != "curve"} for r in results]
    first = seeds[0]
    curves = {
        f"H={r['heads']}": r["curve"]["eval"] for r in results if r["seed"] == first and r["kind"] == "online"
    }
    figure = {
        "name": "markov-stages",
        "title": f"Held-out loss, seed {first}, H = 1, 2, 3",
        "xlabel": "step", "ylabel": "log loss (nats)", "kind": "line",
        "x": next(r for r in results if r["seed"] == first and r["kind"] == "online")["curve"]["steps"],
        "series": curves,
    }  # fmt: skip
    full3 = [
        next(r for r in results if r["kind"] == "online" and r["seed"] == s and r["heads"] == 3)
        for s in seeds
    ]
    return {
        "system": "markov-stages",
        "claim": (
            "A one-layer attention-only transformer trained on a high-order Markov chain learns it in stages, one "
            "sparse attention pattern (lag) at a time in decreasing importance, moving from competitive to "
            "cooperative head specialization; a simplified gradient-flow ODE places the stages in time."
        ),
        "metric": "final eval loss minus the entropy rate on the same tokens, H = 3 (mean over seeds)",
        "ours": float(np.mean([r["final eval loss"] - r["levels"]["(1, 3, 6)"] for r in full3])),
        "baseline": float(np.mean([r["levels"]["(1,)"] - r["levels"]["(1, 3, 6)"] for r in full3])),
        "criterion": (
            f"headroom per seed: population Bayes losses of lag 1, lags 1+3, all three differ pairwise by >= {GAP_MIN} "
            f"nats and the eval-loss range over the last 10 records (H = 3) <= {FLUCTUATION} x the smaller stage gap. "
            f"Then, every seed, H = 3: plateaus found by find_plateaus({PLATEAU}) on the eval loss (every "
            f"{TRAIN['log_every']} steps, {TRAIN['n_eval']} held-out sequences) include one within {MATCH_TOL} nats of "
            "each partial predictor's loss on those tokens (lag 1; 1+3; all three), first reached in that order; the "
            f"three heads end pointing at distinct lags (mass >= {PHASE_THRESHOLD}); the ODE's crossing times of stages 2 "
            f"and 3, scaled so its stage-1 crossing equals training's, within a factor {ODE_FACTOR} of training's. "
            "H < 3 and early stopping on small data are reported, not gated."
        ),
        "passed": bool(passed),
        "headroom": {"holds": head_ok, **{str(k): v for k, v in headroom.items()}},
        "per seed": {str(k): v for k, v in per_seed.items()},
        "ode": {str(k): v for k, v in odes.items()},
        "rows": rows,
        "figures": [figure],
        "config": {
            "chain": CHAIN,
            "model": MODEL,
            "train": TRAIN,
            "budget": cfg,
            "small train set": SMALL_TRAIN,
        },
        "notes": f"budget={budget}, {time.perf_counter() - start:.0f} s, {workers} worker processes, torch 1 thread each",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("quick", "full"), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(run(args.budget, args.seed, args.workers), indent=1, default=float))


if __name__ == "__main__":
    main()
