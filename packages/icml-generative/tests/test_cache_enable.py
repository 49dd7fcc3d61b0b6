"""Our caches through diffusers' ``transformer.enable_cache(config)`` / ``disable_cache()`` / ``is_cache_enabled``
(the adapter of :mod:`icml_generative.cache.diffusers_adapter`), and the per-step plot
:func:`~icml_generative.cache.plot_cache_stats`."""

import functools
import importlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch
from diffusers.hooks import FirstBlockCacheConfig, apply_first_block_cache
from diffusers.models.cache_utils import CacheMixin

from icml_generative.cache import (
    CacheStats,
    EasyCacheConfig,
    NaviCacheConfig,
    StepRecord,
    TeaCacheConfig,
    apply_easycache,
    apply_navicache,
    apply_teacache,
    count_block_forwards,
    diffusers_adapter,
    get_cache_stats,
    install_enable_cache_adapter,
    plot_cache_stats,
    remove_navicache,
    uninstall_enable_cache_adapter,
)


def _load_test_cache():
    """The tiny models and the sampler of test_cache.py (the tests folder is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "icml_generative_test_cache_for_enable", Path(__file__).with_name("test_cache.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helpers = _load_test_cache()
STEPS = helpers.STEPS
DIFFUSERS_ENABLE_CACHE = diffusers_adapter.MARKER  # the attribute of our wrapper holding diffusers' method


def inputs():
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(1, helpers.CHANNELS, helpers.FRAMES, helpers.SIZE, helpers.SIZE, generator=g)
    cond = helpers.class_tokens(torch.tensor([1]))
    return noise, cond, torch.zeros_like(cond)


def sample(model):
    noise, cond, uncond = inputs()
    return helpers.sample_flow_euler(model, noise, cond, uncond, 3.0, STEPS)


@pytest.fixture(scope="module")
def wan():
    return helpers.tiny_wan().eval()


@pytest.fixture(scope="module")
def reference(wan):
    return sample(wan)


CONFIGS = {
    "navicache": (NaviCacheConfig(threshold=0.5, alignment_steps=2), apply_navicache),
    "navicache-drift": (
        NaviCacheConfig(threshold=0.5, alignment_steps=2, state="ratio+drift"),
        apply_navicache,
    ),
    "navicache-model": (NaviCacheConfig(threshold=0.2, alignment_steps=2, level="model"), apply_navicache),
    "easycache": (EasyCacheConfig(threshold=0.5, alignment_steps=2), apply_easycache),
    "teacache": (TeaCacheConfig(threshold=0.3, coefficients=[1.0, 0.0], alignment_steps=2), apply_teacache),
}


# -- enable_cache / disable_cache / is_cache_enabled ---------------------------------------------------------
@pytest.mark.parametrize("name", list(CONFIGS))
def test_enable_cache_skips_like_apply_and_disable_cache_restores_exact_outputs(wan, reference, name):
    config, apply = CONFIGS[name]
    apply(wan, config)  # the reference route: the apply function
    try:
        expected, expected_stats = sample(wan), get_cache_stats(wan).as_dict()
    finally:
        remove_navicache(wan)
    assert not wan.is_cache_enabled
    wan.enable_cache(config)
    try:
        assert wan.is_cache_enabled and wan._cache_config is config  # EasyCache's too, not a NaviCacheConfig
        with count_block_forwards(wan) as counter:
            cached = sample(wan)
        stats = get_cache_stats(wan)
    finally:
        wan.disable_cache()
    assert stats.steps_skipped > 0 and stats.steps_computed + stats.steps_skipped == STEPS
    assert [r.step for r in stats.records] == list(range(STEPS))
    assert all(r.computed for r in stats.records if r.step in (0, 1, STEPS - 1))  # alignment and last step
    assert counter.full_forwards == 2 * stats.steps_computed  # the skipped steps did not run the blocks
    assert stats.as_dict() == expected_stats and torch.equal(cached, expected)  # exactly what apply_* does
    assert not torch.equal(cached, reference)
    # disable_cache removed our hooks: not enabled, no statistics, the uncached outputs bit for bit
    assert not wan.is_cache_enabled and wan._cache_config is None and "disable_cache" not in vars(wan)
    assert all(getattr(m, "_diffusers_hook", None) is None or not m._diffusers_hook.hooks for m in wan.blocks)
    with pytest.raises(ValueError, match="no NaviCache, EasyCache or TeaCache is applied"):
        get_cache_stats(wan)
    assert torch.equal(sample(wan), reference)


def test_enable_cache_inside_a_diffusers_wan_pipeline(wan):
    pipe, generate_counted = helpers.wan_pipeline(wan)

    def generate():
        return generate_counted()[0]

    uncached = generate()
    pipe.transformer.enable_cache(NaviCacheConfig(threshold=0.5, alignment_steps=2))  # steps from the context
    try:
        cached = generate()
        stats = get_cache_stats(pipe.transformer)  # kept although the pipeline resets stateful hooks
        again = generate()  # the next generation starts over: the same decisions
    finally:
        pipe.transformer.disable_cache()
    assert stats.num_inference_steps == STEPS and 0 < stats.steps_skipped < STEPS
    assert stats.full_forwards == {"cond": stats.steps_computed, "uncond": stats.steps_computed}
    assert not torch.equal(cached, uncached) and torch.equal(again, cached)
    assert not pipe.transformer.is_cache_enabled
    assert torch.equal(generate(), uncached)


def test_enable_cache_on_a_cached_model_raises_diffusers_error(wan):
    wan.enable_cache(NaviCacheConfig(num_inference_steps=STEPS))
    try:
        for config in (NaviCacheConfig(), EasyCacheConfig(), FirstBlockCacheConfig(threshold=0.1)):
            with pytest.raises(ValueError, match=r"Caching has already been enabled with .*NaviCacheConfig"):
                wan.enable_cache(config)
    finally:
        wan.disable_cache()
    wan.enable_cache(FirstBlockCacheConfig(threshold=0.1))  # diffusers' cache first: ours is refused alike
    try:
        with pytest.raises(
            ValueError, match=r"Caching has already been enabled with .*FirstBlockCacheConfig"
        ):
            wan.enable_cache(TeaCacheConfig(coefficients=[1.0, 0.0]))
        with pytest.raises(ValueError, match=r"already has a cache: FirstBlockCacheConfig"):
            apply_navicache(wan, NaviCacheConfig())
    finally:
        wan.disable_cache()
    assert not wan.is_cache_enabled


def test_diffusers_own_configs_reach_diffusers_unchanged(wan, reference):
    config = FirstBlockCacheConfig(threshold=0.2)
    wan.enable_cache(config)  # through our wrapper
    try:
        assert wan._cache_config is config
        with count_block_forwards(wan) as counter:
            wrapped = sample(wan)
    finally:
        wan.disable_cache()
    assert not wan.is_cache_enabled and torch.equal(sample(wan), reference)
    original = getattr(CacheMixin.enable_cache, DIFFUSERS_ENABLE_CACHE)  # diffusers' own method
    original(wan, config)
    try:
        with count_block_forwards(wan) as direct:
            unwrapped = sample(wan)
    finally:
        wan.disable_cache()
    assert counter.blocks < 2 * STEPS * 3 and counter.blocks == direct.blocks
    assert torch.equal(wrapped, unwrapped) and not torch.equal(wrapped, reference)


@pytest.mark.parametrize("config", [None, {"threshold": 0.1}, "navicache", object()])
def test_unknown_config_raises_diffusers_error(wan, config):
    with pytest.raises(ValueError, match="is not supported") as ours:
        wan.enable_cache(config)
    with pytest.raises(ValueError) as theirs:
        getattr(CacheMixin.enable_cache, DIFFUSERS_ENABLE_CACHE)(wan, config)
    assert str(ours.value) == str(theirs.value) == f"Cache config {type(config)} is not supported."
    assert not wan.is_cache_enabled


def test_failed_enable_cache_leaves_no_cache():
    class NoBlocks(torch.nn.Module, CacheMixin):  # a diffusers-style model without a block list
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(2, 2)

    model = NoBlocks()
    with pytest.raises(ValueError, match="no transformer blocks"):
        model.enable_cache(NaviCacheConfig())
    assert not model.is_cache_enabled and "disable_cache" not in vars(model)


def test_the_adapter_is_idempotent_and_can_be_undone(wan, reference):
    wrapper = CacheMixin.enable_cache
    original = getattr(wrapper, DIFFUSERS_ENABLE_CACHE)
    assert wrapper.__wrapped__ is original and not hasattr(original, DIFFUSERS_ENABLE_CACHE)
    assert "NaviCacheConfig" in wrapper.__doc__ and original.__doc__ in wrapper.__doc__
    assert install_enable_cache_adapter() is False  # installed on import: not wrapped twice
    importlib.reload(diffusers_adapter)  # runs its install again
    assert CacheMixin.enable_cache is wrapper
    try:
        wan.enable_cache(NaviCacheConfig(threshold=0.5, alignment_steps=2))  # applied before the undo
        assert uninstall_enable_cache_adapter() is True
        assert CacheMixin.enable_cache is original and uninstall_enable_cache_adapter() is False
        sample(wan)
        assert get_cache_stats(wan).steps_skipped > 0
        wan.disable_cache()  # our instance-level disable_cache does not need the adapter
        assert not wan.is_cache_enabled and torch.equal(sample(wan), reference)
        with pytest.raises(ValueError, match="is not supported"):  # diffusers' own method again
            wan.enable_cache(NaviCacheConfig())
        apply_navicache(wan, NaviCacheConfig())  # the apply functions do not need it either
        assert wan.is_cache_enabled
        wan.disable_cache()
        assert install_enable_cache_adapter() is True
        assert getattr(CacheMixin.enable_cache, DIFFUSERS_ENABLE_CACHE) is original
    finally:
        install_enable_cache_adapter()
        if wan.is_cache_enabled:
            wan.disable_cache()


def test_a_wrapper_around_ours_is_left_alone():
    ours = CacheMixin.enable_cache

    @functools.wraps(ours)  # copies our marker into its __dict__
    def theirs(self, config):
        return ours(self, config)

    CacheMixin.enable_cache = theirs
    try:
        assert install_enable_cache_adapter() is False  # ours is already inside
        assert uninstall_enable_cache_adapter() is False  # and not on top: nothing to take off
        assert CacheMixin.enable_cache is theirs
    finally:
        CacheMixin.enable_cache = ours


def test_plain_torch_modules_get_no_enable_cache_and_still_use_apply_navicache():
    torch.manual_seed(0)
    model = helpers.TinyDiT().eval()
    uncached = sample(model)
    assert not hasattr(model, "enable_cache") and not hasattr(model, "is_cache_enabled")
    apply_navicache(model, NaviCacheConfig(threshold=0.3, alignment_steps=2))
    try:
        assert not hasattr(model, "disable_cache") and not hasattr(model, "_cache_config")
        cached = sample(model)
        assert get_cache_stats(model).steps_skipped > 0 and not torch.equal(cached, uncached)
    finally:
        remove_navicache(model)
    assert torch.equal(sample(model), uncached)
    apply_first_block_cache(model, FirstBlockCacheConfig(threshold=0.5))  # diffusers' hooks, as before
    assert not hasattr(model, "enable_cache")


# -- diffusers' memory options: pipe.enable_model_cpu_offload() -----------------------------------------------
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("offload_first", [True, False])
@pytest.mark.parametrize("level", ["blocks", "model"])
def test_caches_keep_working_under_enable_model_cpu_offload(level, offload_first, monkeypatch):
    # enable_model_cpu_offload puts an accelerate hook on the transformer, and the pipeline's end-of-call
    # maybe_free_model_hooks removes it (module.forward = module._old_forward) and adds it again. The old code
    # registered its hooks on the transformer over accelerate's: with the offload first, that removal dropped
    # them after the first generation (level="model": the second one ran all 24 forwards of 3 blocks instead
    # of 12 (72 blocks instead of 36), output 0.179 away from the first, get_cache_stats still reporting the
    # first run's 6 skips); with the cache first, disable_cache() set the forward past accelerate's hook, so
    # the next generation never called it (0 of 24 CpuOffload.pre_forward calls: on CUDA the offloaded
    # transformer is not moved to the GPU). On CPU the offload is the identity: everything is bit for bit.
    from accelerate.hooks import CpuOffload

    config = NaviCacheConfig(threshold=0.2 if level == "model" else 0.5, alignment_steps=2, level=level)
    pytest.importorskip("accelerate")  # enable_model_cpu_offload needs it
    pipe, generate = helpers.wan_pipeline(helpers.tiny_wan().eval())
    uncached, uncached_blocks = generate()
    pipe.transformer.enable_cache(config)  # the same pipeline without offload: what each generation gives
    expected, expected_blocks = generate()
    expected_stats = get_cache_stats(pipe.transformer).as_dict()
    pipe.transformer.disable_cache()
    assert uncached_blocks == 2 * STEPS * 3 and 0 < expected_blocks < uncached_blocks
    if offload_first:
        pipe.enable_model_cpu_offload(device="cpu")
    pipe.transformer.enable_cache(config)
    if not offload_first:
        pipe.enable_model_cpu_offload(device="cpu")
    for _ in range(3):  # each generation ends with maybe_free_model_hooks: remove, offload, add again
        frames, blocks = generate()
        assert blocks == expected_blocks and torch.equal(frames, expected)
        assert get_cache_stats(pipe.transformer).as_dict() == expected_stats
    offload_calls = []
    pre_forward = CpuOffload.pre_forward

    def counting(self, module, *args, **kwargs):
        if module is pipe.transformer:
            offload_calls.append(1)
        return pre_forward(self, module, *args, **kwargs)

    monkeypatch.setattr(CpuOffload, "pre_forward", counting)
    pipe.transformer.disable_cache()
    for _ in range(2):  # accelerate's hook runs on every forward again, and the cache stays off
        offload_calls.clear()
        frames, blocks = generate()
        assert len(offload_calls) == 2 * STEPS and blocks == uncached_blocks and torch.equal(frames, uncached)
    assert not pipe.transformer.is_cache_enabled and not pipe.transformer._diffusers_hook.hooks


# -- plot_cache_stats ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stats(wan):
    wan.enable_cache(NaviCacheConfig(threshold=0.5, alignment_steps=2))
    try:
        sample(wan)
        return get_cache_stats(wan)
    finally:
        wan.disable_cache()


def _nan_equal(a, b):
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True)
    )


def test_plot_cache_stats_draws_the_records_and_writes_a_png(stats, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    path = tmp_path / "steps.png"
    fig = plot_cache_stats(stats, path, threshold=0.5, title="NaviCache, tiny Wan")
    try:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert [p.name for p in tmp_path.iterdir()] == ["steps.png"]  # no temporary file left
        changes, rug = fig.axes
        assert changes.get_title() == "NaviCache, tiny Wan"
        lines = {line.get_label(): line for line in changes.get_lines()}
        predicted = lines["predicted change"]
        assert list(predicted.get_xdata()) == list(range(STEPS))
        assert _nan_equal(list(predicted.get_ydata()), [r.predicted for r in stats.records])
        measured = lines["measured change (computed steps)"]
        expected = [(r.step, r.measured) for r in stats.records if r.computed and math.isfinite(r.measured)]
        assert list(zip(measured.get_xdata(), measured.get_ydata(), strict=True)) == expected
        assert list(lines["threshold 0.5"].get_ydata()) == [0.5, 0.5]
        assert len(changes.patches) == stats.steps_skipped  # one shaded span per skipped step
        forced, decided, skipped = (list(line.get_xdata()) for line in rug.get_lines())
        assert forced == [r.step for r in stats.records if r.forced]
        assert decided == [r.step for r in stats.records if r.computed and not r.forced]
        assert skipped == [r.step for r in stats.records if not r.computed] and skipped
        labels = [t.get_text() for t in rug.get_yticklabels()]
        assert labels == [
            f"computed (forced) ({len(forced)})",
            f"computed ({len(decided)})",
            f"skipped ({len(skipped)})",
        ]
    finally:
        plt.close(fig)
    again = plot_cache_stats(stats.as_dict(), str(tmp_path / "dict.png"))  # as_dict, e.g. read from JSON
    try:
        line = again.axes[0].get_lines()[0]
        assert _nan_equal(list(line.get_ydata()), [r.predicted for r in stats.records])
        assert len(again.axes[0].get_lines()) == 2  # no threshold line when none is given
    finally:
        plt.close(again)


def test_plot_cache_stats_leaves_the_callers_backend_and_pyplot_figures(stats, tmp_path):
    """It used to call ``matplotlib.use("Agg")`` (switching the caller's backend) and leave its figure open in
    pyplot; it now builds a ``Figure`` without pyplot."""
    pytest.importorskip("matplotlib")
    import matplotlib
    import matplotlib.pyplot as plt

    backend = matplotlib.get_backend()
    plt.switch_backend("svg")  # the caller's (headless) choice
    try:
        user_figure = plt.figure()
        figures = plt.get_fignums()
        fig = plot_cache_stats(stats, tmp_path / "steps.png", threshold=0.5)
        assert matplotlib.get_backend() == "svg"
        assert plt.get_fignums() == figures == [user_figure.number]
        assert plt.gcf() is user_figure
        assert len(fig.axes) == 2 and (tmp_path / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        plt.close("all")
        plt.switch_backend(backend)


def test_plot_cache_stats_bad_input(stats, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.pyplot as plt

    with pytest.raises(TypeError, match="stats must be a CacheStats"):
        plot_cache_stats([r for r in stats.records])
    with pytest.raises(ValueError, match="stats has no step records"):
        plot_cache_stats(CacheStats())
    with pytest.raises(ValueError, match=r"stats\['records'\] must hold StepRecord fields"):
        plot_cache_stats({"records": [{"step": 0, "computed": True}]})
    bad = CacheStats(records=[StepRecord(step=0, computed=True, forced=True, predicted=math.inf)])
    with pytest.raises(ValueError, match="stats' records"):
        plot_cache_stats(bad)
    with pytest.raises(ValueError, match="threshold must be a finite number > 0"):
        plot_cache_stats(stats, threshold=0.0)
    with pytest.raises(TypeError, match="path must be a file path"):
        plot_cache_stats(stats, 3)
    with pytest.raises(TypeError, match="title must be a string"):
        plot_cache_stats(stats, title=None)

    def broken_savefig(self, fname, **kwargs):  # writes half a file, then fails
        Path(fname).write_bytes(b"\x89PNG")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", broken_savefig)
    with pytest.raises(OSError, match="disk full"):
        plot_cache_stats(stats, tmp_path / "steps.png")
    assert list(tmp_path.iterdir()) == []  # a failed save leaves no half-written file
    plt.close("all")


def test_plot_cache_stats_without_matplotlib(stats, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(ImportError, match=r"pip install 'icml-generative\[plot\]'"):
        plot_cache_stats(stats)
