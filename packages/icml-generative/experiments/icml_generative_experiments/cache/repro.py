"""Reproduction ``navicache-frontier``: NaviCache against EasyCache, TeaCache, First-Block Cache and MagCache.

The testbed (:mod:`icml_generative_experiments.cache.testbed`): a six-block diffusers ``DiTTransformer2DModel`` on
moving-sprite clips of 4 frames (16×16, 3 channels) stacked as the 12 channels of one 16×16 image
(:func:`~icml_generative_experiments.cache.testbed.tiled_dit_class`, ``layout="channels"``: absolute 2-D sin-cos
positions, adaLN-Zero class conditioning), trained here by flow matching (6000 steps for the full budget,
1500 for the quick one, see :data:`BUDGETS`), sampled with Euler steps and classifier-free guidance (two
passes per step). It replaced the tiny Wan testbed, whose clips did
not move as their labels said (``docs/navicache.md``); the Wan testbed stays in the package.

For every method and threshold of its sweep, on each seed, we sample the same
noise and class labels as the uncached reference and record the full transformer forwards per pass
(evaluated blocks / blocks, so a First-Block-Cache skip costs 1/6), the sampler's wall time, PSNR and
SSIM of the clips against the reference, and the error-judgment accuracy: a shadow copy of the model
without cache computes the true block-stack output at every step of the cached run (outside the timing),
which gives the true relative change ``mean|out_t − out_c| / mean|out_c|`` since the last computed step
``c``; Spearman and MAE compare it with the method's prediction over the steps where a prediction is
made (NaviCache, EasyCache and TeaCache predict that quantity; diffusers' FBCache and MagCache expose no
prediction of it, so they have none).

Matching: each method's sweep gives points (forwards, PSNR, MAE); the values at the target forward
counts of :data:`TARGETS` are interpolated linearly between the two sweep points around each target.
TeaCache's polynomial and MagCache's ratios are calibrated on separate clips (other noise and labels).

Criterion of the rounds before issue 24 (fixed before those runs; still computed and reported in the notes and
the ``matched`` rows, no longer the verdict): (a) at the headline target (18 of 30 forwards) NaviCache's PSNR ≥
EasyCache's and its MAE < EasyCache's, both, in at least 2 of 3 seeds (quick budget: in its one seed; an
undefined value counts as a loss), (b) NaviCache's PSNR is never below First-Block Cache's at any target of any
seed where both are defined, and (c) the testbed is valid (motion accuracy ≥
:data:`~icml_generative_experiments.cache.testbed.MOTION_ACCURACY_MIN`).

Issue 24: the design that can decide, fixed here and in ``docs/navicache.md`` before its full run. The earlier
verdicts failed on a testbed whose measured ratio is smooth, the precondition under which the paper says the
filter helps (a noisy ratio) being absent, and on a criterion (MAE and PSNR wins at one matched point) that two
rules making mostly the same decisions cannot settle. The verdict now has three parts:

1. Port equivalence (a Must-hold test, not part of ``run``): ``tests/test_navicache_port.py`` drives our
   ``level="model"`` NaviCache with the released settings (50 steps, 10 alignment steps, Q = R = 0.05, the
   preset thresholds and larger ones) and a line-by-line transcription of the released ``navicache_forward``
   with the same model and noise; the skip decisions must be identical step by step and the clips equal.
2. The method's regime (:mod:`icml_generative_experiments.cache.noisy_ratio`): a synthetic trace family whose
   measured ratio carries multiplicative log-normal noise of stated size σ ∈ :data:`~icml_generative_experiments.
   cache.noisy_ratio.SIGMAS` (0, 0.1, 0.2, 0.4); every rule is NaviCache's accumulate-and-skip rule and they
   differ only in the ratio: ``filtered`` (the released Kalman filter, Q = R = 0.05), ``instant`` (EasyCache's
   last measurement) and ``oracle`` (the true, noise-free ratio). Each rule's threshold is swept on each trace;
   at equal numbers of skipped steps (9, 12, 15 of the 23 that may be skipped) the metric is the total true
   error of the outputs reused at the skipped steps; per (trace, noise draw) the item is the mean over the three
   skip counts of ``log(error(rule) / error(instant))``; intervals: ``icml_tools.claims.nested_bootstrap_interval``
   over (traces, noise draws), 10,000 resamples, 95 %. Full budget: 100 traces × 10 noise draws; quick: 20 × 5;
   all drawn from ``numpy.random.default_rng([24, seed])`` (the full run: ``--seed 0``).
   Headroom: at σ = 0.2 and at σ = 0.4 the oracle's interval against instant is below 0 (the noise costs the
   instantaneous ratio something a better estimate can win back). Criterion: at σ = 0.2 and at σ = 0.4 the
   filtered rule's interval against instant is below 0. σ = 0 and 0.1 are reported.
3. Usefulness at matched compute, on this DiT testbed (the full budget: the 6000-step model, noise seeds 0, 1, 2
   with batch 4, i.e. the seeds of the earlier full runs with ``--seed 0``; 30 Euler steps, CFG 4; the sweeps of
   :data:`THRESHOLDS`). New arms: ``fewer-steps``, the uncached sampler with 15, 18 and 21 Euler steps (the same
   shifted schedule over fewer steps, so 18 steps cost 18 forwards per pass), and ``Oracle``
   (:mod:`icml_generative_experiments.cache.oracle`), the same skip rule judged by the true relative change of the
   block stack's output (an uncached copy of the stack run on the current input). PSNR per clip against the
   uncached 30-step clip, interpolated per clip at 18 of 30 forwards along each sweep as before; paired
   differences per clip, nested bootstrap over seeds and clips (10,000 resamples, 95 %). Testbed check (kept):
   motion accuracy ≥ 0.75. Headroom: Oracle − fewer-steps interval above 0 (a skip rule can beat running fewer
   steps here). Criterion: NaviCache − EasyCache interval above −0.5 dB (non-inferior) and NaviCache −
   fewer-steps interval above 0.

``passed`` needs part 2 (its headroom and its criterion) and part 3 (testbed check, headroom and both
comparisons); part 1 is gated by the fast test suite. A part whose headroom fails cannot decide its claim: it
is reported as such and does not pass. A value that is undefined (a sweep that does not reach the target) counts
as not met.
"""

from __future__ import annotations

import copy
import math
import os
import time
from typing import Any, TypedDict

import numpy as np
import torch

from icml_generative.cache.baselines import calibrate_mag_ratios, count_block_forwards
from icml_generative.cache.hooks import find_transformer_blocks
from icml_generative.cache.metrics import psnr, spearman, ssim
from icml_generative.cache.navicache import (
    EasyCacheConfig,
    NaviCacheConfig,
    apply_easycache,
    apply_navicache,
    get_cache_stats,
    remove_navicache,
)
from icml_generative.cache.teacache import TeaCacheConfig, apply_teacache, fit_teacache_coefficients
from icml_generative_experiments.cache.matching import interp_at
from icml_generative_experiments.cache.noisy_ratio import DECIDING_SIGMAS, SIGMAS, regime_study
from icml_generative_experiments.cache.oracle import apply_oracle_cache, uncached_blocks
from icml_generative_experiments.cache.testbed import (
    MOTION_ACCURACY_MIN,
    DiTTestbedConfig,
    TestbedConfig,
    class_tokens,
    flow_sigmas,
    motion_accuracy,
    pretrained_testbed,
    sample_flow_euler,
)
from icml_tools.claims import nested_bootstrap_interval
from icml_tools.progress import status

SYSTEM = "navicache-frontier"
CLAIM = (
    "NaviCache (Lv et al., ICML 2026): a Kalman-filtered, test-time calibrated estimate of the output/input "
    "change ratio judges block-skipping error more accurately than the instantaneous ratio of calibration-free "
    "caches (EasyCache) and gives better quality at the same compute."
)
GUIDANCE = 4.0
SHIFT = 3.0
# Threshold sweeps: 12 values per method, dense enough that each sweep has points a forward or two apart
# around the matched targets (the earlier 7-value sweeps left gaps of 3–5 forwards to interpolate across).
_STACK = (0.02, 0.03, 0.045, 0.06, 0.08, 0.1, 0.125, 0.15, 0.19, 0.24, 0.32, 0.45)
THRESHOLDS = {
    "NaviCache": _STACK,
    "NaviCache-drift": _STACK,
    "EasyCache": _STACK,
    "TeaCache": _STACK,
    "FBCache": (0.01, 0.02, 0.03, 0.04, 0.055, 0.07, 0.085, 0.1, 0.125, 0.15, 0.22, 0.3),
    "MagCache": (0.01, 0.02, 0.04, 0.06, 0.08, 0.11, 0.15, 0.2, 0.25, 0.32, 0.4, 0.6),
    "Oracle": _STACK,  # issue 24: the skip rule judged by the true change (the usefulness headroom)
}
# Each budget has its own testbed recipe (and so its own weight cache, keyed by the config's ``key()``): the
# DiT (frames as channels) trained for 6000 steps for the full budget (once, then cached: ~6 min on one
# core), the same model trained for 1500 steps for the quick one (~1.5 min), so that a fresh
# ``icml-repro --quick`` does not wait for the long training. The earlier Wan recipes (``TestbedConfig``)
# and the tiled-DiT recipe failed the testbed check (docs/navicache.md); the Wan ones are kept here.
WAN_QUICK_TESTBED = TestbedConfig(frames=4, train_steps=600)
WAN_FULL_TESTBED = TestbedConfig()
QUICK_TESTBED = DiTTestbedConfig(train_steps=1500)
FULL_TESTBED = DiTTestbedConfig(train_steps=6000)


class Budget(TypedDict):
    steps: int  # sampler steps
    batch: int  # clips per seed
    seeds: int
    sweep: tuple[int, ...]  # indices into each method's THRESHOLDS
    calib_batch: int  # clips for TeaCache's and MagCache's calibration
    motion_clips: int  # clips for the testbed check
    testbed: DiTTestbedConfig


BUDGETS: dict[str, Budget] = {
    "quick": {
        "steps": 30,
        "batch": 2,
        "seeds": 1,
        "sweep": (2, 3, 4, 5, 6, 7, 8, 9),  # chosen on the Wan quick testbed (12–25 forwards there), kept
        "calib_batch": 2,
        "motion_clips": 32,
        "testbed": QUICK_TESTBED,
    },
    "full": {
        "steps": 30,
        "batch": 4,
        "seeds": 3,
        "sweep": tuple(range(12)),
        "calib_batch": 4,
        "motion_clips": 64,
        "testbed": FULL_TESTBED,
    },
}
TARGET_FRACTIONS = (0.5, 0.6, 0.7)  # matched forwards, as a fraction of the schedule
HEADLINE = 0.6
# issue 24, part 3 (fixed before the full run): paired per clip at the headline forwards
NONINFERIORITY_DB = -0.5  # NaviCache - EasyCache: the interval's lower end above this
BOOTSTRAP = 10_000


def sampling_inputs(
    cfg: TestbedConfig | DiTTestbedConfig, batch: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded sampler inputs for ``batch`` clips: ``(noise, cond, uncond)``, random class tokens and the null
    ones."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(batch, cfg.channels, cfg.frames, cfg.size, cfg.size, generator=g)
    labels = torch.randint(0, 4, (batch,), generator=g)
    cond = class_tokens(labels)
    return noise, cond, torch.zeros_like(cond)


def _apply(model, method: str, threshold: float, steps: int, calib: dict) -> None:
    from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig

    align = math.ceil(0.2 * steps)
    if method in ("NaviCache", "NaviCache-drift"):
        state = "ratio" if method == "NaviCache" else "ratio+drift"
        apply_navicache(model, NaviCacheConfig(threshold=threshold, alignment_steps=align, state=state))
    elif method == "EasyCache":
        apply_easycache(model, EasyCacheConfig(threshold=threshold, alignment_steps=align))
    elif method == "TeaCache":
        apply_teacache(
            model, TeaCacheConfig(threshold=threshold, coefficients=calib["tea"], alignment_steps=align)
        )
    elif method == "FBCache":
        model.enable_cache(FirstBlockCacheConfig(threshold=threshold))
    elif method == "MagCache":
        model.enable_cache(
            MagCacheConfig(
                threshold=threshold, num_inference_steps=steps, mag_ratios=calib["mag"], retention_ratio=0.2
            )
        )
    elif method == "Oracle":
        apply_oracle_cache(model, calib["oracle_blocks"], threshold, alignment_steps=align)
    else:
        raise ValueError(f"unknown method {method!r}")


def _remove(model, method: str) -> None:
    if method in ("FBCache", "MagCache"):
        model.disable_cache()
    else:
        remove_navicache(model)


class _Shadow:
    """An uncached copy of the model that records the block stack's output at every step (the oracle)."""

    def __init__(self, model) -> None:
        self.model = copy.deepcopy(model)
        blocks = find_transformer_blocks(self.model, "shadow")
        self.outputs: list[torch.Tensor] = []
        blocks[-1][1].register_forward_hook(lambda m, a, o: self.outputs.append(o))
        self.seconds = 0.0

    def __call__(self, x, sigma, cond) -> None:
        start = time.perf_counter()
        t = torch.full((x.shape[0],), sigma * 1000.0)
        self.model(x, timestep=t, encoder_hidden_states=cond, return_dict=False)
        self.seconds += time.perf_counter() - start


def _sample(model, noise, cond, uncond, steps, shadow: _Shadow | None = None):
    sigmas = flow_sigmas(steps, SHIFT)
    callback = None
    if shadow is not None:
        shadow.outputs.clear()
        shadow.seconds = 0.0

        def callback(i, x, v):
            shadow(x, float(sigmas[i]), cond)

    start = time.perf_counter()
    out = sample_flow_euler(model, noise, cond, uncond, GUIDANCE, steps, SHIFT, step_callback=callback)
    seconds = time.perf_counter() - start - (shadow.seconds if shadow is not None else 0.0)
    return out, seconds


def _judgment(stats, outputs: list[torch.Tensor]) -> tuple[list[float], list[float], list[int]]:
    """Predicted and true relative change since the last computed step, on the steps with a prediction (the
    third list)."""

    def rel(a, b):
        return (a - b).abs().mean().item() / (b.abs().mean().item() + 1e-12)

    predicted, true, at = [], [], []
    last = None
    for r in stats.records:
        if math.isfinite(r.predicted) and last is not None:
            predicted.append(r.predicted)
            true.append(rel(outputs[r.step], outputs[last]))
            at.append(r.step)
        if r.computed:
            last = r.step
    return predicted, true, at


def _finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _clip_psnr(out: torch.Tensor, ref: torch.Tensor) -> list[float]:
    """PSNR of each clip of the batch against its reference clip."""
    return [psnr(out[i], ref[i]) for i in range(out.shape[0])]


def _paired_interval(diff: np.ndarray) -> list[float]:
    """The nested bootstrap interval of paired differences ``(seeds, clips)``; NaN ends if any is undefined."""
    if not np.isfinite(diff).all():
        return [math.nan, math.nan]
    return nested_bootstrap_interval(diff, resamples=BOOTSTRAP, seed=0)


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`)."""
    from icml_tools.assets import cache_dir  # the workspace's cache-dir convention (a dev dependency)

    b = BUDGETS[budget]
    steps = b["steps"]
    targets = [round(f * steps, 6) for f in TARGET_FRACTIONS]
    headline = round(HEADLINE * steps, 6)

    # part 2: the method's regime, synthetic traces with a noisy ratio (no model; seconds)
    status("the noisy-ratio trace study")
    regime = regime_study(budget, seed)

    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, int(os.environ.get("ICML_NAVICACHE_THREADS", "1"))))
    try:
        cfg = b["testbed"]
        model, info = pretrained_testbed(cfg, cache_dir())
        num_blocks = len(find_transformer_blocks(model, SYSTEM))
        # the testbed check: the uncached model's clips must move as their labels say
        status("checking the testbed: motion accuracy of its samples")
        motion = motion_accuracy(model, cfg, n=b["motion_clips"], num_steps=steps, guidance_scale=GUIDANCE)
        shadow = _Shadow(model)
        oracle_blocks = uncached_blocks(model)  # copied before any cache is applied

        # calibration of the offline baselines, on clips of their own
        status("calibrating TeaCache and MagCache")
        noise, cond, uncond = sampling_inputs(cfg, b["calib_batch"], 10_000 + seed)
        apply_teacache(model, TeaCacheConfig(calibrate=True, num_inference_steps=steps))
        mag = calibrate_mag_ratios(
            model, lambda: _sample(model, noise, cond, uncond, steps), steps, calls_per_step=2
        )
        calib = {
            "mag": mag,
            "tea": fit_teacache_coefficients([get_cache_stats(model)], degree=4),
            "oracle_blocks": oracle_blocks,
        }
        remove_navicache(model)

        rows, per_seed, clip_curves, fewer = [], [], [], []
        navi_runs = []  # seed 0's NaviCache runs: (forwards, threshold, step records, true change per step)
        for s in range(b["seeds"]):
            noise, cond, uncond = sampling_inputs(cfg, b["batch"], seed * 1000 + s)
            ref, ref_seconds = _sample(model, noise, cond, uncond, steps)
            rows.append(
                {
                    "seed": s,
                    "method": "uncached",
                    "threshold": 0.0,
                    "forwards": float(steps),
                    "wall_s": ref_seconds,
                    "psnr": math.inf,
                    "ssim": 1.0,
                    "spearman": math.nan,
                    "mae": math.nan,
                }
            )
            # the fewer-steps arm: the uncached sampler with as many steps as the matched forwards
            fewer_seed = {}
            for target in targets:
                out, seconds = _sample(model, noise, cond, uncond, int(target))
                fewer_seed[target] = _clip_psnr(out, ref)
                rows.append(
                    {
                        "kind": "fewer_steps",
                        "seed": s,
                        "method": "fewer-steps",
                        "forwards": target,
                        "wall_s": seconds,
                        "psnr": psnr(out, ref),
                        "ssim": ssim(out, ref),
                    }
                )
            fewer.append(fewer_seed)
            curves, clips = {}, {}
            for method, grid in THRESHOLDS.items():
                status(f"seed {s}: sweeping {method}'s threshold ({len(b['sweep'])} runs)")
                points, clip_points = [], []
                for threshold in (grid[i] for i in b["sweep"]):
                    _apply(model, method, threshold, steps, calib)
                    try:
                        with count_block_forwards(model) as counter:
                            out, seconds = _sample(model, noise, cond, uncond, steps, shadow)
                        predicted: list[float] = []
                        true: list[float] = []
                        if method not in ("FBCache", "MagCache"):
                            stats = get_cache_stats(model)
                            predicted, true, at = _judgment(stats, shadow.outputs)
                    finally:
                        _remove(model, method)
                    forwards = counter.blocks / (num_blocks * 2)  # per pass (cond and uncond)
                    if s == 0 and method == "NaviCache":
                        navi_runs.append(
                            (forwards, threshold, list(stats.records), dict(zip(at, true, strict=True)))
                        )
                    mae = float(np.mean(np.abs(np.subtract(predicted, true)))) if predicted else math.nan
                    row = {
                        "seed": s,
                        "method": method,
                        "threshold": threshold,
                        "forwards": forwards,
                        "wall_s": seconds,
                        "psnr": psnr(out, ref),
                        "ssim": ssim(out, ref),
                        "spearman": spearman(predicted, true) if predicted else math.nan,
                        "mae": mae,
                    }
                    rows.append(row)
                    points.append(row)
                    clip_points.append((forwards, _clip_psnr(out, ref)))
                curves[method] = points
                clips[method] = clip_points
            per_seed.append(curves)
            clip_curves.append(clips)

        # the balanced preset against the uncached sampler, timed without the shadow
        noise, cond, uncond = sampling_inputs(cfg, b["batch"], seed * 1000)
        ref, ref_seconds = _sample(model, noise, cond, uncond, steps)
        apply_navicache(model, NaviCacheConfig.preset("balanced"))
        try:
            out, preset_seconds = _sample(model, noise, cond, uncond, steps)
            preset_forwards = get_cache_stats(model).steps_computed
        finally:
            remove_navicache(model)
        preset = {
            "forwards": preset_forwards,
            "uncached_forwards": steps,
            "wall_s": preset_seconds,
            "uncached_wall_s": ref_seconds,
            "speedup": ref_seconds / preset_seconds,
            "psnr": psnr(out, ref),
            "ssim": ssim(out, ref),
        }
    finally:
        torch.set_num_threads(threads)

    # the criterion of the rounds before issue 24 (reported, not the verdict)
    matched, wins, fbc_ok, fbc_compared = [], 0, True, 0
    for s, curves in enumerate(per_seed):
        for target in targets:
            entry = {"seed": s, "target_forwards": target}
            for method, points in curves.items():
                entry[f"{method}_psnr"] = interp_at([(p["forwards"], p["psnr"]) for p in points], target)
                entry[f"{method}_mae"] = interp_at([(p["forwards"], p["mae"]) for p in points], target)
            matched.append(entry)
            if math.isfinite(entry["NaviCache_psnr"]) and math.isfinite(entry["FBCache_psnr"]):
                fbc_ok &= entry["NaviCache_psnr"] >= entry["FBCache_psnr"]
                fbc_compared += 1
        head = next(e for e in matched if e["seed"] == s and e["target_forwards"] == headline)
        wins += int(
            head["NaviCache_psnr"] >= head["EasyCache_psnr"] and head["NaviCache_mae"] < head["EasyCache_mae"]
        )
    testbed_ok = motion["accuracy"] >= MOTION_ACCURACY_MIN
    need = 1 if len(per_seed) == 1 else math.ceil(2 * len(per_seed) / 3)
    old_passed = bool(wins >= need and fbc_ok and fbc_compared > 0 and testbed_ok)

    # part 3 (issue 24): per-clip PSNR at matched forwards, paired per clip, nested bootstrap over seeds and clips
    clip_matched = []  # (seed, clip, target) -> method -> PSNR
    at_head: dict[str, list[list[float]]] = {
        m: [] for m in ("NaviCache", "EasyCache", "Oracle", "fewer-steps")
    }
    for s, clips in enumerate(clip_curves):
        for m in at_head:
            at_head[m].append([])
        for c in range(b["batch"]):
            for target in targets:
                clip_entry: dict[str, Any] = {
                    "kind": "clip_matched",
                    "seed": s,
                    "clip": c,
                    "target_forwards": target,
                }
                for method, pts in clips.items():
                    clip_entry[f"{method}_psnr"] = interp_at([(f, v[c]) for f, v in pts], target)
                clip_entry["fewer-steps_psnr"] = fewer[s][target][c]
                clip_matched.append(clip_entry)
                if target == headline:
                    for m in at_head:
                        at_head[m][s].append(clip_entry[f"{m}_psnr"])
    head_psnr = {m: np.asarray(v, dtype=float) for m, v in at_head.items()}  # (seeds, clips)
    comparisons = {
        "Oracle - fewer-steps": ("headroom", head_psnr["Oracle"] - head_psnr["fewer-steps"], 0.0),
        "NaviCache - EasyCache": (
            "criterion",
            head_psnr["NaviCache"] - head_psnr["EasyCache"],
            NONINFERIORITY_DB,
        ),
        "NaviCache - fewer-steps": ("criterion", head_psnr["NaviCache"] - head_psnr["fewer-steps"], 0.0),
    }
    useful_rows, useful = [], {}
    for name, (role, diff, bound) in comparisons.items():
        lo, hi = _paired_interval(diff)
        met = bool(lo > bound)  # False when undefined (NaN)
        useful[name] = met
        useful_rows.append(
            {
                "kind": "usefulness",
                "comparison": name,
                "role": role,
                "target_forwards": headline,
                "mean_db": float(diff.mean()) if np.isfinite(diff).all() else math.nan,
                "ci_low": lo,
                "ci_high": hi,
                "bound_db": bound,
                "met": met,
            }
        )
    usefulness_headroom = useful["Oracle - fewer-steps"]
    usefulness_ok = (
        testbed_ok
        and usefulness_headroom
        and useful["NaviCache - EasyCache"]
        and useful["NaviCache - fewer-steps"]
    )
    passed = bool(regime["passed"] and usefulness_ok)

    ours = _finite_mean(head_psnr["NaviCache"].ravel().tolist())
    baseline = _finite_mean(head_psnr["EasyCache"].ravel().tolist())
    methods = list(THRESHOLDS)
    # the per-step figure: seed 0's NaviCache run nearest the headline forwards (the lower threshold on a tie)
    shown_forwards, shown_threshold, records, true_at = min(
        navi_runs, key=lambda run: abs(run[0] - HEADLINE * steps)
    )
    regime_rows = regime["rows"]

    def regime_series(comparison: str) -> list[float]:
        return [r["mean_log_error_ratio"] for r in regime_rows if r["comparison"] == comparison]

    figures = [
        {
            "name": "navicache_frontier",
            "title": "Quality against compute (interpolated at matched forwards, seed 0)",
            "xlabel": "full transformer forwards per pass",
            "ylabel": "PSNR vs uncached (dB)",
            "x": targets,
            "series": {
                **{m: [e[f"{m}_psnr"] for e in matched if e["seed"] == 0] for m in methods},
                "fewer steps (uncached)": [_finite_mean(fewer[0][t]) for t in targets],
            },
            "kind": "line",
        },
        {
            "name": "navicache_sweep",
            "title": "Threshold sweeps, seed 0: PSNR at each threshold of the sweep",
            "xlabel": "sweep index (low to high threshold)",
            "ylabel": "PSNR vs uncached (dB)",
            "x": list(range(len(b["sweep"]))),
            "series": {m: [p["psnr"] for p in per_seed[0][m]] for m in methods},
            "kind": "line",
        },
        {
            "name": "navicache_steps",
            "title": f"NaviCache per step, seed 0, threshold {shown_threshold:g} "
            f"({shown_forwards:g} of {steps} forwards)",
            "xlabel": "denoising step",
            "ylabel": "relative output change since the last computed step",
            "x": [r.step for r in records],
            "series": {
                "predicted (accumulated; none on forced steps)": [r.predicted for r in records],
                "true (uncached shadow model)": [true_at.get(r.step, math.nan) for r in records],
                "measured (computed steps)": [r.measured for r in records],
                "skipped steps (marked at 0)": [math.nan if r.computed else 0.0 for r in records],
            },
            "kind": "line",
        },
        {
            "name": "navicache_regime",
            "title": "Noisy-ratio traces: true error at equal skips against the instantaneous ratio",
            "xlabel": "measurement noise s (std of log z)",
            "ylabel": "mean log(error / error of instant)",
            "x": list(SIGMAS),
            "series": {
                "filtered (NaviCache) vs instant": regime_series("filtered vs instant"),
                "oracle (true ratio) vs instant": regime_series("oracle vs instant"),
            },
            "kind": "line",
        },
    ]

    def interval_text(rows_: list[dict], key: str, value: str) -> str:
        return "; ".join(
            f"{r[key]}: {r[value]:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]" for r in rows_
        )

    regime_text = "; ".join(
        f"s={r['sigma']:g} {r['comparison']} {r['mean_log_error_ratio']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
        for r in regime_rows
    )
    deciding = ", ".join(f"{x:g}" for x in DECIDING_SIGMAS)
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": f"PSNR (dB) per clip vs the uncached sampler at {headline:g} of {steps} forwards, mean over seeds "
        "and clips (higher is better)",
        "ours": ours,
        "baseline": baseline,
        "criterion": (
            f"(regime) noisy-ratio traces: at s = {deciding} the interval of mean log(true error at equal skips, "
            "filtered / instant) below 0, headroom: the oracle's below 0 at the same s; (usefulness) DiT testbed at "
            f"{headline:g} of {steps} forwards, per-clip PSNR, nested bootstrap over seeds and clips: NaviCache - "
            f"EasyCache interval above {NONINFERIORITY_DB:g} dB and NaviCache - fewer uncached steps above 0, "
            f"headroom: Oracle - fewer steps above 0, on a valid testbed (motion accuracy >= {MOTION_ACCURACY_MIN}); "
            "port equivalence with the released rule: tests/test_navicache_port.py"
        ),
        "passed": passed,
        "rows": rows
        + [dict(kind="matched", **e) for e in matched]
        + clip_matched
        + useful_rows
        + regime_rows
        + [dict(kind="balanced_preset", **preset)]
        + [dict(kind="testbed_check", threshold=MOTION_ACCURACY_MIN, passed=testbed_ok, **motion)],
        "figures": figures,
        "cache": f"built: trained testbed ({info['train_seconds']:.0f} s)"
        if info["trained_now"]
        else "hit: testbed",
        "threads": "min(default, $ICML_NAVICACHE_THREADS), 1 unless set: the testbed trains and the wall-clock "
        "speed-ups are timed on one torch thread, so neither depends on the core count or on load beside it",
        "notes": (
            f"Regime (noisy-ratio traces, {regime_rows[0]['traces']} traces x {regime_rows[0]['noise_draws']} "
            f"noise draws): headroom {'met' if regime['headroom'] else 'NOT met (cannot decide)'}, criterion "
            f"{'met' if regime['criterion'] else 'not met'}; {regime_text}. "
            f"Usefulness at {headline:g} forwards (dB, per clip, {len(per_seed)} seed(s) x {b['batch']} clips): "
            f"headroom {'met' if usefulness_headroom else 'NOT met (cannot decide)'}; "
            f"{interval_text(useful_rows, 'comparison', 'mean_db')}. "
            f"Testbed {type(cfg).__name__} ({cfg.frames} frames, {cfg.train_steps} training steps) "
            f"{'trained now' if info['trained_now'] else 'loaded from ' + str(info['path'])} "
            f"({info['train_seconds']:.0f} s training); testbed check: motion direction of "
            f"{motion['n']} generated clips matches the label in {motion['accuracy']:.2f} (chance "
            f"{motion['chance']:.2f}, needed {MOTION_ACCURACY_MIN}; the measure reads training clips at "
            f"{motion['data_accuracy']:.2f}); {steps} Euler steps, CFG {GUIDANCE}, batch "
            f"{b['batch']}, {len(per_seed)} seed(s). Criterion of the rounds before issue 24 (reported, not the "
            f"verdict): NaviCache wins vs EasyCache at the headline in {wins} (needed {need}); never below "
            f"FBCache: {fbc_ok}; it would give {'pass' if old_passed else 'fail'}. Balanced preset: "
            f"{preset_forwards}/{steps} forwards, speed-up {preset['speedup']:.2f}x, PSNR {preset['psnr']:.1f} dB. "
            "Wall times are on a shared, loaded 2-core machine and noisy."
        ),
    }
