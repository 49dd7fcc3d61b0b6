"""NaviCache: test-time self-calibrated block skipping for diffusion transformers (Lv et al., ICML 2026).

At each denoising step NaviCache predicts how much the transformer's block stack output would change
since the last computed step, ``E += k̂ · mean|x_t − x_{t−1}| / mean|out_c|``, from the change of the
stack's input and an estimate ``k̂`` of the ratio between output and input changes; it skips the stack
(returning ``x_t + r_c``, the cached residual) while ``E < threshold``. ``k̂`` is calibrated at test
time from the measured ratios ``z = mean|out_t − out_c| / mean|x_t − x_c|`` of the computed steps: the
first ``alignment_steps`` steps are always computed and set it (Initial Alignment), a Kalman filter
refines it afterwards (Measurement Update); the last step is always computed.

``state="ratio"`` is the authors' released algorithm (scalar ratio, constant noises ``Q``, ``R``).
``state="ratio+drift"`` is the abstract's dual-state estimator with a time-dependent noise schedule,
**reconstructed by us** (the paper's text was not available): see
:class:`~icml_generative.cache.estimators.RatioDriftKalman`. ``state="instant"`` is the unfiltered
ratio of EasyCache, used by :func:`apply_easycache`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from icml_generative.cache.estimators import InstantRatio, RatioDriftKalman, RatioEstimator, RatioKalman
from icml_generative.cache.hooks import (
    LEVELS,
    CacheStats,
    ContextState,
    StackPolicy,
    apply_stack_cache,
    head_hook,
    mean_abs,
    remove_stack_cache,
)
from icml_generative.validation import check_cache_schedule, check_choice, check_instance, check_positive

STATES = ("ratio", "ratio+drift", "instant")


@dataclass
class NaviCacheConfig:
    """Configuration of :func:`apply_navicache`.

    Args:
        threshold: skip while the accumulated predicted relative output change is below it (> 0).
        alignment_steps: steps always computed at the start (Initial Alignment); None: 20% of the schedule.
        num_inference_steps: the schedule's length in model calls per generation and context,
            the denoising loop's length (``pipe.num_timesteps`` after a call; 2n-1 for n Heun or KDPM2
            steps, fewer than n for img2img with ``strength`` < 1); may be None when the cache context
            carries it.
        state: "ratio" (released), "ratio+drift" (our reconstruction) or "instant" (EasyCache's ablation).
        process_noise, measurement_noise: the Kalman filter's Q and R (released defaults 0.05 and 0.05).
        drift_noise: the drift's process noise (``state="ratio+drift"`` only).
        level: what is cached: "blocks" (the block stack's residual, diffusers-style hooks on the blocks;
            embedding and output head still run) or "model" (the whole forward's residual ``out − x`` on
            the raw latent, as in the authors' released code; needs equal input and output shapes).
    """

    threshold: float = 0.05
    alignment_steps: int | None = None
    num_inference_steps: int | None = None
    state: str = "ratio"
    process_noise: float = 0.05
    measurement_noise: float = 0.05
    drift_noise: float = 0.005
    level: str = "blocks"

    def __post_init__(self) -> None:
        check_cache_schedule(self.threshold, self.alignment_steps, self.num_inference_steps)
        check_choice(self.level, "level", LEVELS)
        check_choice(self.state, "state", STATES)
        for name in ("process_noise", "measurement_noise", "drift_noise"):
            check_positive(getattr(self, name), name)

    @classmethod
    def preset(cls, name: str, **overrides) -> NaviCacheConfig:
        """``"fast"``, ``"balanced"`` or ``"quality"``: the thresholds 0.07 / 0.05 / 0.04 of the authors'
        Wan2.1 presets (fast / mid / slow), with the alignment phase at 20% of the schedule (10 of 50)."""
        check_choice(name, "preset", tuple(PRESETS))
        return replace(cls(threshold=PRESETS[name]), **overrides)


PRESETS = {"fast": 0.07, "balanced": 0.05, "quality": 0.04}


class NaviCachePolicy(StackPolicy):
    """Accumulate ``k̂ · Δin / |out_c|`` and skip below the threshold; calibrate ``k̂`` from computed steps."""

    def __init__(self, config: NaviCacheConfig, name: str = "NaviCache") -> None:
        super().__init__(config.threshold, config.alignment_steps, config.num_inference_steps)
        self.name = name
        self.config = config
        self.estimator: RatioEstimator
        if config.state == "ratio":
            self.estimator = RatioKalman(config.process_noise, config.measurement_noise)
        elif config.state == "ratio+drift":
            self.estimator = RatioDriftKalman(
                config.process_noise, config.measurement_noise, config.drift_noise
            )
        else:
            self.estimator = InstantRatio()
        self.accumulated = 0.0

    def reset(self) -> None:
        self.estimator.reset()
        self.accumulated = 0.0

    def predict(self, ctx: ContextState, x: torch.Tensor, step: int) -> tuple[float, float]:
        if self.estimator.k is None:  # no measurement yet (only possible with a single alignment step)
            return math.inf, math.nan
        assert ctx.x_prev is not None and ctx.out_last is not None, "predictions follow a computed step"
        k = self.estimator.predict(step - ctx.last_compute_step)
        self.accumulated += k * mean_abs(x - ctx.x_prev) / (mean_abs(ctx.out_last) + 1e-12)
        return self.accumulated, k

    def on_compute(self) -> None:
        self.accumulated = 0.0

    def measure(self, ctx, x, out, step, aligning, sigma) -> None:
        z = mean_abs(out - ctx.out_last) / (mean_abs(x - ctx.x_last) + 1e-8)
        if aligning:
            self.estimator.align(z, step)
        else:
            self.estimator.update(z, step, sigma)


def apply_navicache(module: torch.nn.Module, config: NaviCacheConfig | None = None) -> None:
    """Apply NaviCache to a transformer (diffusers or plain torch, with a block list such as ``blocks``).

    Every call must run inside a cache context (``transformer.cache_context("cond")``, as diffusers
    pipelines do, or :func:`icml_generative.cache.cache_context`); with CFG the first context of step 0
    (usually "cond") makes the skip decisions and the others reuse them, keeping their own residuals.

    Example::

        apply_navicache(pipe.transformer, NaviCacheConfig.preset("balanced"))
        video = pipe(prompt, num_inference_steps=50).frames
        print(get_cache_stats(pipe.transformer).steps_skipped)
        remove_navicache(pipe.transformer)
    """
    config = check_instance(NaviCacheConfig() if config is None else config, "config", NaviCacheConfig)
    name = "EasyCache" if config.state == "instant" else "NaviCache"
    apply_stack_cache(module, NaviCachePolicy(config, name), config.level, config)


def remove_navicache(module: torch.nn.Module) -> None:
    """Remove NaviCache (or EasyCache, TeaCache) hooks; the module's forward is the original again."""
    remove_stack_cache(module, "remove_navicache")


def get_cache_stats(module: torch.nn.Module) -> CacheStats:
    """Statistics of the latest run of NaviCache, EasyCache or TeaCache on ``module``: steps computed and
    skipped, full forwards per context and, per step, the predicted and the measured output change."""
    return head_hook(module, "get_cache_stats").shared.stats


@dataclass
class EasyCacheConfig:
    """EasyCache (Zhou et al. 2025): NaviCache's accumulation with the last measured ratio, unfiltered."""

    threshold: float = 0.05
    alignment_steps: int | None = None
    num_inference_steps: int | None = None
    level: str = "blocks"

    def __post_init__(self) -> None:
        self.to_navicache()  # validates

    def to_navicache(self) -> NaviCacheConfig:
        return NaviCacheConfig(
            threshold=self.threshold,
            alignment_steps=self.alignment_steps,
            num_inference_steps=self.num_inference_steps,
            state="instant",
            level=self.level,
        )


def apply_easycache(module: torch.nn.Module, config: EasyCacheConfig | None = None) -> None:
    """Apply the EasyCache baseline (remove it with :func:`remove_navicache`)."""
    config = check_instance(EasyCacheConfig() if config is None else config, "config", EasyCacheConfig)
    navi = config.to_navicache()
    # the EasyCacheConfig itself becomes a diffusers model's _cache_config, as enable_cache would set it
    apply_stack_cache(module, NaviCachePolicy(navi, "EasyCache"), navi.level, config)
