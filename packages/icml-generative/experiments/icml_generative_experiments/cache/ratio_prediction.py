"""How well does each estimator predict the next output/input change ratio? A diagnostic of NaviCache's
mechanism, isolated from the skip decisions (written after the frontier runs; it fixes no verdict).

    uv run python -m icml_generative_experiments.cache.ratio_prediction [--budget full] [--out FILE]

On the reproduction's testbed (cached weights) and the frontier's clips (seed 0: noise seeds 0, 1, 2),
the uncached sampler runs every step and records the block stack's input ``x_t`` and output ``out_t`` of
the "cond" pass. For a measurement every ``gap`` steps (1: every step; 2, 3: as when one or two steps are
skipped in between), the ratio of an interval is ``z = mean|out_t − out_{t−gap}| / mean|x_t − x_{t−gap}|``.
Each estimator (EasyCache's last measurement, NaviCache's released scalar Kalman filter, our
ratio+drift) is aligned on the measurements inside the first ``ceil(0.2·steps)`` steps, updated with
every later measurement, and predicts the next interval's ratio before seeing it; the error is
``|k̂ − z| / z``. With ``--noise`` the estimators see ``z·(1 + ε)``, ε ~ N(0, s²), and are scored
against the noise-free ``z``: where filtering starts to pay.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
import torch

from icml_generative.cache.estimators import InstantRatio, RatioDriftKalman, RatioKalman
from icml_generative.cache.hooks import find_transformer_blocks, mean_abs
from icml_generative_experiments.cache.repro import BUDGETS, GUIDANCE, SHIFT, sampling_inputs
from icml_generative_experiments.cache.testbed import flow_sigmas, pretrained_testbed, sample_flow_euler

ESTIMATORS = {
    "EasyCache (last z)": InstantRatio,
    "NaviCache (Kalman, Q=R=0.05)": RatioKalman,
    "NaviCache-drift (ours)": RatioDriftKalman,
}


def trajectory(model, noise, cond, uncond, steps):
    """The cond pass's block-stack input and output at every step of the uncached sampler."""
    blocks = find_transformer_blocks(model, "diagnostic")
    xs, outs, calls = [], [], [0]

    def pre(module, args, kwargs):
        if calls[0] % 2 == 0:  # cond pass (cond then uncond at each step)
            xs.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

    def post(module, args, output):
        if calls[0] % 2 == 0:
            outs.append((output[0] if isinstance(output, tuple) else output).detach().clone())
        calls[0] += 1

    h1 = blocks[0][1].register_forward_pre_hook(pre, with_kwargs=True)
    h2 = blocks[-1][1].register_forward_hook(post)
    try:
        with torch.no_grad():
            sample_flow_euler(model, noise, cond, uncond, GUIDANCE, steps, SHIFT)
    finally:
        h1.remove()
        h2.remove()
    assert len(xs) == len(outs) == steps
    return xs, outs


def ratios(xs, outs, gap):
    """(end step, z) of consecutive intervals of ``gap`` steps."""
    return [
        (t, mean_abs(outs[t] - outs[t - gap]) / (mean_abs(xs[t] - xs[t - gap]) + 1e-8))
        for t in range(gap, len(xs), gap)
    ]


def score(zs, seen, align_steps, sigmas, make):
    """Relative errors of the predictions of the intervals after alignment."""
    est, errors, last = make(), [], None
    for (t, z), (_, z_seen) in zip(zs, seen, strict=True):
        if t < align_steps:
            est.align(z_seen, t)
        else:
            pred = est.predict(t - last)
            errors.append(abs(pred - z) / z)
            est.update(z_seen, t, float(sigmas[t]))
        last = t
    return errors


def judgment(xs, outs, every, align_steps, sigmas, make):
    """Error judgment on one fixed schedule (alignment steps, then every ``every``-th step and the last
    computed): the estimator's predicted relative change ``Σ k̂·mean|x_j − x_{j−1}| / mean|out_c|`` at each
    skipped step against the true ``mean|out_t − out_c| / mean|out_c|``; returns (predicted, true)."""
    n = len(xs)
    computed = [t < align_steps or t == n - 1 or (t - align_steps) % every == 0 for t in range(n)]
    est, c, acc, predicted, true = make(), 0, 0.0, [], []
    for t in range(1, n):
        if not computed[t]:
            acc += est.predict(t - c) * mean_abs(xs[t] - xs[t - 1]) / mean_abs(outs[c])
            predicted.append(acc)
            true.append(mean_abs(outs[t] - outs[c]) / mean_abs(outs[c]))
            continue
        z = mean_abs(outs[t] - outs[c]) / (mean_abs(xs[t] - xs[c]) + 1e-8)
        if t < align_steps:
            est.align(z, t)
        else:
            est.update(z, t, float(sigmas[t]))
        c, acc = t, 0.0
    return predicted, true


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", default="full", choices=tuple(BUDGETS))
    p.add_argument("--noise", type=float, nargs="*", default=[0.0, 0.05, 0.1, 0.2, 0.4])
    p.add_argument("--draws", type=int, default=50)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    from icml_tools.assets import cache_dir

    b = BUDGETS[a.budget]
    steps, align = b["steps"], math.ceil(0.2 * b["steps"])
    model, _ = pretrained_testbed(b["testbed"], cache_dir())
    sigmas = flow_sigmas(steps, SHIFT)
    trajs = [
        trajectory(model, *sampling_inputs(b["testbed"], b["batch"], s), steps) for s in range(b["seeds"])
    ]
    rng = np.random.default_rng(0)
    results = {"budget": a.budget, "steps": steps, "alignment_steps": align, "rows": []}
    for gap in (1, 2, 3):
        for s, (xs, outs) in enumerate(trajs):
            zs = ratios(xs, outs, gap)
            z = np.array([v for _, v in zs])
            jitter = float(np.median(np.abs(np.diff(np.log(z)))))
            row = {
                "gap": gap,
                "clip_seed": s,
                "z_min": float(z.min()),
                "z_max": float(z.max()),
                "median_abs_log_step_change": jitter,
            }
            for noise in a.noise:
                for name, make in ESTIMATORS.items():
                    errs = []
                    for _ in range(a.draws if noise > 0 else 1):
                        seen = [(t, v * (1 + noise * rng.standard_normal())) for t, v in zs]
                        errs.extend(score(zs, seen, align, sigmas, make))
                    row[f"{name} @ noise {noise}"] = float(np.mean(errs))
            results["rows"].append(row)
    # summary: mean over clips, per gap and noise
    print(f"{'gap':>3} {'noise':>6} " + " ".join(f"{n[:28]:>28}" for n in ESTIMATORS))
    for gap in (1, 2, 3):
        rows = [r for r in results["rows"] if r["gap"] == gap]
        for noise in a.noise:
            vals = [np.mean([r[f"{n} @ noise {noise}"] for r in rows]) for n in ESTIMATORS]
            print(f"{gap:>3} {noise:>6} " + " ".join(f"{v:>28.4f}" for v in vals))
        print(
            f"    z range {min(r['z_min'] for r in rows):.3f}–{max(r['z_max'] for r in rows):.3f}, "
            f"median |Δ log z| per interval {np.mean([r['median_abs_log_step_change'] for r in rows]):.3f}"
        )
    print("error judgment on fixed schedules (same skipped steps for every estimator), MAE / Spearman:")
    from icml_generative.cache.metrics import spearman

    results["judgment"] = []
    for every in (2, 3, 4):
        line = f"  compute every {every}: "
        for name, make in ESTIMATORS.items():
            pairs = [judgment(xs, outs, every, align, sigmas, make) for xs, outs in trajs]
            mae = float(np.mean([np.mean(np.abs(np.subtract(pr, tr))) for pr, tr in pairs]))
            rho = float(np.mean([spearman(pr, tr) for pr, tr in pairs]))
            results["judgment"].append(
                {
                    "every": every,
                    "estimator": name,
                    "mae": mae,
                    "spearman": rho,
                    "per_clip_mae": [float(np.mean(np.abs(np.subtract(pr, tr)))) for pr, tr in pairs],
                }
            )
            line += f"{name[:14]} {mae:.4f} / {rho:.3f}   "
        print(line)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
