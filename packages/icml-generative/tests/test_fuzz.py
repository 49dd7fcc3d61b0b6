"""The bad-input contract (GUIDE "Bad input"), one fuzz test per public API of icml-generative.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument;
never NaN/inf from finite input without a warning.
"""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers.hooks.hooks import CacheContext
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_generative
from icml_generative import cache, sampling
from icml_generative.cache import (
    CacheStats,
    EasyCacheConfig,
    InstantRatio,
    NaviCacheConfig,
    RatioDriftKalman,
    RatioKalman,
    StepRecord,
    TeaCacheConfig,
    apply_easycache,
    apply_navicache,
    apply_teacache,
    cache_context,
    calibrate_mag_ratios,
    count_block_forwards,
    fit_teacache_coefficients,
    get_cache_stats,
    install_enable_cache_adapter,
    plot_cache_stats,
    psnr,
    remove_navicache,
    spearman,
    ssim,
    uninstall_enable_cache_adapter,
)
from icml_generative.cache.hooks import HEAD_HOOK
from icml_generative.sampling import (
    frechet_distance,
    gaussian_mixture_score,
    karras_sigmas,
    sample_pf_ode,
    sliced_wasserstein,
)
from icml_tools.fuzz import Coverage, fuzz_call, rejects


def _load_test_cache():
    """The tiny plain-torch DiT of test_cache.py (the tests folder is not a package: import mode importlib)."""
    spec = importlib.util.spec_from_file_location(
        "_icml_generative_test_cache", Path(__file__).with_name("test_cache.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TinyDiT = _load_test_cache().TinyDiT

FUZZ = Coverage()
FUZZ.exempt(CacheStats, "the statistics container get_cache_stats returns; the hooks fill it")
FUZZ.exempt(StepRecord, "one row of CacheStats.records, built by the hooks")

# ---- sampling -----------------------------------------------------------------------------------------------

MEANS = np.array([[0.0, 1.0], [2.0, -1.0], [-1.5, 0.5]])  # (k=3, d=2)
STDS = np.array([0.3, 0.7, 1.2])
WEIGHTS = np.array([0.5, 0.2, 0.3])
X = torch.tensor([[0.1, 0.2], [3.0, -2.0], [-1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)  # (n=4, d=2)


@FUZZ.covers(gaussian_mixture_score)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_gaussian_mixture_score(data):
    """The mixture's parameters and the returned score function's arguments, fuzzed together."""

    def score(means, stds, weights, x, sigma):
        return gaussian_mixture_score(means, stds, weights)(x, sigma)

    def check(s):
        assert isinstance(s, torch.Tensor) and s.shape[1:] == (2,)
        if not torch.isfinite(s).all():  # an overflow fuzz_call checked was warned about
            return True
        # the score of a mixture points into the convex hull of the means, stretched by at most 1 / var_min
        return bool((s.abs() < 1e6).all())

    fuzz_call(
        data,
        score,
        {"means": MEANS, "stds": STDS, "weights": WEIGHTS, "x": X, "sigma": 0.5},
        check=check,
        related={"means": ["stds", "weights", "x"], "stds": ["means"], "weights": ["means"], "x": ["means"]},
    )


@FUZZ.covers(karras_sigmas)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_karras_sigmas(data):
    def check(s):
        assert isinstance(s, torch.Tensor) and s.dtype == torch.float64 and s.ndim == 1 and len(s) >= 2
        return bool(torch.isfinite(s).all() and (s > 0).all() and (s[1:] < s[:-1]).all())

    fuzz_call(
        data,
        karras_sigmas,
        {"n": 6, "sigma_min": 0.002, "sigma_max": 80.0, "rho": 7.0},
        check=check,
        related={"sigma_min": ["sigma_max", "rho"], "sigma_max": ["sigma_min", "rho"]},
    )
    s = karras_sigmas(6, 0.002, 80.0)
    assert math.isclose(s[0], 80.0) and math.isclose(s[-1], 0.002)


SCORE = gaussian_mixture_score(MEANS, STDS, WEIGHTS)
BAD_SCORE_FNS = st.sampled_from(
    [
        None,
        3,
        "score",
        lambda x, sigma: x[:1],
        lambda x, sigma: np.zeros(tuple(x.shape)),
        lambda x, sigma: None,
    ]
)


@FUZZ.covers(sample_pf_ode)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sample_pf_ode(data):
    x_t = 5.0 * X

    def check(x):
        # the flow pulls a noisy sample towards the data: it ends nearer the means' span than it began
        assert isinstance(x, torch.Tensor) and x.is_floating_point()
        if x.shape != x_t.shape or not torch.isfinite(x).all():  # another x_T, or an overflow (warned)
            return True
        return bool(x.norm() < x_t.norm())

    fuzz_call(
        data,
        sample_pf_ode,
        {"score_fn": SCORE, "x_T": x_t, "sigmas": [5.0, 2.0, 0.5, 0.0], "method": "heun"},
        check=check,
        strategies={"score_fn": BAD_SCORE_FNS},
    )


@FUZZ.covers(sliced_wasserstein)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sliced_wasserstein(data):
    y = X + torch.tensor([1.0, 0.0], dtype=torch.float64)
    fuzz_call(
        data,
        sliced_wasserstein,
        {"x": X, "y": y, "n_projections": 16, "seed": 0},
        check=lambda d: isinstance(d, float) and d >= 0,
        related={"x": ["y"], "y": ["x"]},
    )
    assert sliced_wasserstein(X * 1e300, X * 1e300 + 1e300) > 0  # no overflow
    assert sliced_wasserstein(X, X) == 0.0


@FUZZ.covers(frechet_distance)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_frechet_distance(data):
    y = X + torch.tensor([1.0, 0.0], dtype=torch.float64)
    fuzz_call(
        data,
        frechet_distance,
        {"x": X, "y": y},
        check=lambda d: isinstance(d, float) and d >= 0,
        related={"x": ["y"], "y": ["x"]},
    )
    assert frechet_distance(X, y) == pytest.approx(1.0)  # equal covariances: the squared mean shift
    assert frechet_distance(X * 1e150, y * 1e150) == pytest.approx(1e300)  # no overflow on the way
    with pytest.warns(RuntimeWarning, match="overflows"):
        assert frechet_distance(X * 1e300, y * 1e300) == math.inf


# ---- cache: metrics --------------------------------------------------------------------------------------------

CLIP = torch.linspace(-1.0, 1.0, 2 * 8 * 8, dtype=torch.float32).reshape(2, 8, 8)  # (frames, H, W)
NOISY = CLIP + 0.1 * torch.sin(torch.arange(2 * 8 * 8, dtype=torch.float32)).reshape(2, 8, 8)


@FUZZ.covers(psnr)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_psnr(data):
    fuzz_call(
        data,
        psnr,
        {"x": NOISY, "ref": CLIP, "data_range": 2.0},
        check=lambda p: isinstance(p, float) and (p == math.inf or math.isfinite(p)),
        related={"x": ["ref"], "ref": ["x"]},
        allow_non_finite=True,  # inf is the documented PSNR of a clip equal to its reference
    )
    assert psnr(CLIP, CLIP) == math.inf and 15 < psnr(NOISY, CLIP) < 40
    assert math.isfinite(psnr(CLIP.double() * 1e300, CLIP.double() * -1e300))  # no overflow


@FUZZ.covers(ssim)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_ssim(data):
    fuzz_call(
        data,
        ssim,
        {"x": NOISY, "ref": CLIP, "data_range": 2.0, "window": 5, "sigma": 1.5},
        check=lambda s: isinstance(s, float) and -1 <= s <= 1 + 1e-9,
        related={"x": ["ref", "window"], "ref": ["x", "window"], "window": ["x", "ref"]},
    )
    big = CLIP.double() * 1e300
    assert ssim(CLIP, CLIP, window=5) == 1.0 and ssim(big, big, 2e300, window=5) == 1.0


@FUZZ.covers(spearman)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_spearman(data):
    fuzz_call(
        data,
        spearman,
        {"a": np.array([0.1, 0.5, 0.3, 0.9]), "b": np.array([1.0, 4.0, 2.0, 3.0])},
        # NaN (< 3 pairs, a constant input) comes with a RuntimeWarning, which fuzz_call requires
        check=lambda r: isinstance(r, float) and (math.isnan(r) or -1 - 1e-12 <= r <= 1 + 1e-12),
        related={"a": ["b"], "b": ["a"]},
    )
    assert spearman([1, 2, 3], [3, 2, 1]) == -1.0


# ---- cache: configurations and estimators ---------------------------------------------------------------------


@FUZZ.covers(NaviCacheConfig)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_navicache_config(data):
    def check(c):
        assert (
            c.threshold > 0
            and c.state in ("ratio", "ratio+drift", "instant")
            and c.level in ("blocks", "model")
        )
        return None in (c.alignment_steps, c.num_inference_steps) or c.alignment_steps < c.num_inference_steps

    fuzz_call(
        data,
        NaviCacheConfig,
        {
            "threshold": 0.05,
            "alignment_steps": 2,
            "num_inference_steps": 10,
            "state": "ratio+drift",
            "process_noise": 0.05,
            "measurement_noise": 0.05,
            "drift_noise": 0.005,
            "level": "model",
        },
        check=check,
        related={"alignment_steps": ["num_inference_steps"], "num_inference_steps": ["alignment_steps"]},
    )
    rejects(NaviCacheConfig.preset, "turbo", name="preset")


@FUZZ.covers(EasyCacheConfig)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_easycache_config(data):
    fuzz_call(
        data,
        EasyCacheConfig,
        {"threshold": 0.05, "alignment_steps": 2, "num_inference_steps": 10, "level": "blocks"},
        check=lambda c: c.to_navicache().state == "instant" and c.to_navicache().level == c.level,
        related={"alignment_steps": ["num_inference_steps"], "num_inference_steps": ["alignment_steps"]},
    )


@FUZZ.covers(TeaCacheConfig)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_teacache_config(data):
    def check(c):
        return all(isinstance(v, float) and math.isfinite(v) for v in c.coefficients) and callable(
            c.modulated_input
        )

    fuzz_call(
        data,
        TeaCacheConfig,
        {
            "threshold": 0.1,
            "coefficients": [0.5, 1.0, 0.0],
            "alignment_steps": 2,
            "num_inference_steps": 10,
            "calibrate": False,
        },
        check=check,
        related={
            "alignment_steps": ["num_inference_steps"],
            "num_inference_steps": ["alignment_steps"],
            "calibrate": ["coefficients"],
        },
    )
    rejects(TeaCacheConfig, coefficients=[1.0], modulated_input="norm1", name="modulated_input")


@FUZZ.covers(RatioKalman, RatioDriftKalman, InstantRatio)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_ratio_estimators(data):
    def check(est):  # a measured ratio of 1.2 then 1.0: the estimate lies between them, positive
        est.align(1.2, 0)
        est.update(1.0, 1, 0.5)
        k = est.predict(1)
        return math.isfinite(k) and 0 < k <= 1.2 + 1e-9

    fuzz_call(data, RatioKalman, {"process_noise": 0.05, "measurement_noise": 0.05}, check=check)
    fuzz_call(
        data,
        RatioDriftKalman,
        {"process_noise": 0.05, "measurement_noise": 0.05, "drift_noise": 0.005},
        check=check,
    )
    assert check(InstantRatio()) and InstantRatio().k is None


# ---- cache: hooks on a tiny DiT ------------------------------------------------------------------------------

STEPS = 4
LATENT = torch.linspace(-1, 1, 3 * 1 * 2 * 2).reshape(1, 3, 1, 2, 2)  # (B, C, F, H, W): 4 tokens
COND = torch.nn.functional.one_hot(torch.tensor([1]), 8).float()[:, None, :]  # (B, 1, 8)


def _model():
    torch.manual_seed(0)
    return TinyDiT().eval()


@torch.no_grad()
def _sample(model, steps=STEPS):
    x = LATENT.clone()
    for i in range(steps):
        t = torch.tensor([1000.0 * (1 - i / steps)])
        with cache_context(model, "cond", step_index=i, num_inference_steps=steps, sigma=1 - i / steps):
            v = model(x, t, COND)[0]
        x = x - v / steps
    return x


def _apply_and_sample(apply):
    def run(module, config):
        apply(module, config)
        try:
            _sample(module)
            return get_cache_stats(module)
        finally:
            remove_navicache(module)

    return run


def _stats_ok(stats):
    """The statistics of a 4-step run; NaN only where StepRecord documents it (no prediction on forced steps, no
    measurement on skipped steps or at step 0), which is why the callers pass allow_non_finite=True."""
    assert isinstance(stats, CacheStats) and len(stats.records) == STEPS
    for r in stats.records:
        assert r.forced or not math.isnan(r.predicted), r  # inf: no ratio measured yet, the step computes
        assert not (r.computed and r.step > 0) or math.isfinite(r.measured), r
    return stats.steps_computed + stats.steps_skipped == STEPS and stats.records[-1].computed


def _cached():
    model = _model()
    apply_navicache(model)
    return model


NOT_MODULES = st.sampled_from([None, "transformer", object(), 3])
BAD_MODULES = st.one_of(  # modules without transformer blocks: refused by the block-level caches only
    NOT_MODULES, st.sampled_from([torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2))])
)


@FUZZ.covers(apply_navicache)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_apply_navicache(data):
    state = data.draw(st.sampled_from(["ratio", "ratio+drift", "instant"]), label="state")
    level = data.draw(st.sampled_from(["blocks", "model"]), label="level")
    fuzz_call(
        data,
        _apply_and_sample(apply_navicache),
        {
            "module": _model(),
            "config": NaviCacheConfig(threshold=0.5, alignment_steps=2, state=state, level=level),
        },
        check=_stats_ok,
        allow_non_finite=True,  # StepRecord's documented NaNs, checked by _stats_ok
        strategies={
            # _cached: a cache is already applied; a module without blocks is fine for level="model"
            "module": st.one_of(BAD_MODULES if level == "blocks" else NOT_MODULES, st.builds(_cached)),
            "config": st.sampled_from([EasyCacheConfig(), {"threshold": 0.1}, "balanced", 0.05, object()]),
        },
    )


@FUZZ.covers(apply_easycache)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_apply_easycache(data):
    fuzz_call(
        data,
        _apply_and_sample(apply_easycache),
        {"module": _model(), "config": EasyCacheConfig(threshold=0.5, alignment_steps=2)},
        check=_stats_ok,
        allow_non_finite=True,  # StepRecord's documented NaNs, checked by _stats_ok
        strategies={
            "module": st.one_of(BAD_MODULES, st.builds(_cached)),
            "config": st.sampled_from([NaviCacheConfig(), {"threshold": 0.1}, "balanced", 0.05, object()]),
        },
    )


@FUZZ.covers(apply_teacache)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_apply_teacache(data):
    fuzz_call(
        data,
        _apply_and_sample(apply_teacache),
        {
            "module": _model(),
            "config": TeaCacheConfig(threshold=0.5, coefficients=[1.0, 0.0], alignment_steps=2),
        },
        check=_stats_ok,
        allow_non_finite=True,  # StepRecord's documented NaNs, checked by _stats_ok
        strategies={
            "module": st.one_of(BAD_MODULES, st.builds(_cached)),
            "config": st.sampled_from([None, NaviCacheConfig(), {"threshold": 0.1}, [1.0, 0.0], object()]),
        },
    )


@FUZZ.covers(get_cache_stats, remove_navicache)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_get_cache_stats_and_remove_navicache(data):
    def stats_after_a_run(module):
        get_cache_stats(module)  # refuses a module without a cache before the run
        _sample(module)
        return get_cache_stats(module)

    def removed(module):
        remove_navicache(module)
        return module

    def no_hooks(module):
        return all(
            getattr(m, "_diffusers_hook", None) is None or m._diffusers_hook.get_hook(HEAD_HOOK) is None
            for m in module.modules()
        )

    bad = st.one_of(BAD_MODULES, st.builds(_model))  # _model: no cache applied
    fuzz_call(  # allow_non_finite: StepRecord's documented NaNs, checked by _stats_ok
        data,
        stats_after_a_run,
        {"module": _cached()},
        check=_stats_ok,
        strategies={"module": bad},
        allow_non_finite=True,
    )
    fuzz_call(data, removed, {"module": _cached()}, check=no_hooks, strategies={"module": BAD_MODULES})
    rejects(get_cache_stats, _model(), name="module")


@FUZZ.covers(cache_context)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_cache_context(data):
    def context_inside(module, name, step_index, num_inference_steps, sigma, timestep):
        fields = {"step_index": step_index, "num_inference_steps": num_inference_steps, "sigma": sigma}
        with cache_context(module, name, timestep=timestep, **fields):
            inside = module.blocks[0]._diffusers_hook.get_hook(HEAD_HOOK).state_manager._context
        assert module.blocks[0]._diffusers_hook.get_hook(HEAD_HOOK).state_manager._context is None  # reset
        return inside

    def check(ctx):
        assert isinstance(ctx, CacheContext) and isinstance(ctx.name, str) and ctx.name
        assert ctx.step_index is None or (isinstance(ctx.step_index, int) and ctx.step_index >= 0)
        return ctx.sigma is None or (math.isfinite(ctx.sigma) and ctx.sigma >= 0)

    fuzz_call(
        data,
        context_inside,
        {
            "module": _cached(),
            "name": "cond",
            "step_index": 2,
            "num_inference_steps": 10,
            "sigma": 0.5,
            "timestep": torch.tensor([500.0]),
        },
        check=check,
        strategies={"module": st.sampled_from([None, "transformer", object(), 3])},
    )
    rejects(lambda: cache_context(_cached(), "cond", step=1).__enter__(), name="fields")


@FUZZ.covers(calibrate_mag_ratios)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_calibrate_mag_ratios(data):
    model = _model()

    def run():
        with torch.no_grad():
            for i in range(2):
                model(LATENT, torch.tensor([1000.0 - 500 * i]), COND)

    def check(ratios):
        assert isinstance(ratios, list) and ratios[0] == 1.0
        return all(math.isfinite(r) and r > 0 for r in ratios)

    fuzz_call(
        data,
        calibrate_mag_ratios,
        {"model": model, "run": run, "num_inference_steps": 2, "calls_per_step": 1},
        check=check,
        # another model: run() never calls it, and the refusal names run
        related={
            "model": ["run"],
            "num_inference_steps": ["run"],
            "calls_per_step": ["run", "num_inference_steps"],
        },
        strategies={
            "model": st.one_of(BAD_MODULES, st.builds(_model)),  # another model: run() never calls it
            "run": st.sampled_from([None, 3, "run", lambda: None]),
        },
    )


@FUZZ.covers(count_block_forwards)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_count_block_forwards(data):
    def counted(model):
        with count_block_forwards(model) as counter:
            with torch.no_grad():
                model(LATENT, torch.tensor([500.0]), COND)
        return counter

    fuzz_call(
        data,
        counted,
        {"model": _model()},
        check=lambda c: c.blocks == 3 and c.full_forwards == 1.0,
        strategies={"model": BAD_MODULES},
    )


def _calibration(pairs):
    return CacheStats(calibration=list(pairs))


LINEAR_PAIRS = [(0.1 * i, 0.3 * i + 0.05) for i in range(1, 9)]


@FUZZ.covers(fit_teacache_coefficients)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_fit_teacache_coefficients(data):
    def check(coefficients):
        assert isinstance(coefficients, list) and coefficients
        # every fit of degree >= 1 reproduces the linear calibration data
        return all(math.isfinite(c) for c in coefficients) and (
            len(coefficients) == 1 or abs(np.polyval(coefficients, 0.45) - (0.3 * 0.45 + 0.05)) < 1e-6
        )

    fuzz_call(
        data,
        fit_teacache_coefficients,
        {"stats": [_calibration(LINEAR_PAIRS[:4]), _calibration(LINEAR_PAIRS[4:])], "degree": 2},
        check=check,
        related={"stats": ["degree"], "degree": ["stats"]},
        strategies={
            "stats": st.sampled_from(
                [
                    None,
                    "stats",
                    [None],
                    _calibration(LINEAR_PAIRS),  # one CacheStats, not a list of them
                    [CacheStats()],  # no calibration pairs
                    [_calibration([(math.nan, 1.0)] * 8)],
                    [_calibration([("x", 1.0)] * 8)],
                    [_calibration([(1.0,)] * 8)],
                ]
            )
        },
    )


FUZZ.exempt(install_enable_cache_adapter, "no arguments; tested in test_cache_enable.py")
FUZZ.exempt(uninstall_enable_cache_adapter, "no arguments; tested in test_cache_enable.py")
PLOT_STATS = CacheStats(
    records=[
        StepRecord(0, True, True),
        StepRecord(1, True, True, measured=0.03),
        StepRecord(2, False, False, predicted=0.02, ratio=2.0),
        StepRecord(3, True, False, predicted=0.3, measured=0.2, ratio=2.0),
        StepRecord(4, True, True, measured=0.1),
    ]
)


@FUZZ.covers(plot_cache_stats)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_plot_cache_stats(data):
    plt = pytest.importorskip("matplotlib.pyplot")  # icml-generative[plot]

    def drawn(stats, path, threshold, title):
        fig = plot_cache_stats(stats, path, threshold=threshold, title=title)
        ys = list(fig.axes[0].get_lines()[0].get_ydata())
        plt.close(fig)
        return ys

    def check(ys):
        expected = [r.predicted for r in PLOT_STATS.records]
        return all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(ys, expected, strict=True))

    record = {"step": 0, "computed": True, "forced": True, "predicted": 0.1, "measured": 0.1, "ratio": 1.0}
    fuzz_call(
        data,
        drawn,
        {"stats": PLOT_STATS, "path": None, "threshold": 0.1, "title": "steps"},
        check=check,
        allow_non_finite=True,  # the predicted change is NaN on forced steps, as StepRecord documents
        strategies={
            "stats": st.sampled_from(
                [
                    None,
                    "stats",
                    CacheStats(),  # no records
                    PLOT_STATS.records,  # the records, not the statistics
                    {"records": None},
                    {"records": [{"step": 0}]},
                    {"records": [{**record, "step": -1}]},
                    {"records": [{**record, "step": 1.5}]},
                    {"records": [{**record, "computed": 1}]},
                    {"records": [{**record, "predicted": math.inf}]},
                    {"records": [{**record, "measured": "0.1"}]},
                ]
            ),
            "path": st.sampled_from([3, b"steps.png", object(), ["steps.png"]]),  # never a real path
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_generative, sampling, cache)
