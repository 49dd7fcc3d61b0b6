"""Feature caching for diffusion transformers: NaviCache and the baselines it is measured against.

- :func:`apply_navicache` / :func:`remove_navicache` / :class:`NaviCacheConfig` (presets "fast",
  "balanced", "quality"; ``state="ratio"`` as released, ``state="ratio+drift"`` our reconstruction).
- Baselines in the same harness: :func:`apply_easycache` (unfiltered ratio), :func:`apply_teacache`
  (offline polynomial, calibrated with :func:`fit_teacache_coefficients`); diffusers' own First-Block
  Cache and MagCache apply unchanged (:func:`calibrate_mag_ratios` gives MagCache its ratios).
- :func:`get_cache_stats`: steps computed / skipped, full forwards, predicted vs measured change per step.
- :func:`cache_context`: diffusers' ``cache_context`` for any module.
- diffusers' ``transformer.enable_cache(config)`` takes our configs too (:class:`NaviCacheConfig`,
  :class:`EasyCacheConfig`, :class:`TeaCacheConfig`) and ``disable_cache()`` removes them: diffusers has no
  registry for third-party caches, so importing this package wraps ``CacheMixin.enable_cache`` once (an
  adapter, see :mod:`icml_generative.cache.diffusers_adapter`; :func:`uninstall_enable_cache_adapter`
  undoes it). Other configs reach diffusers' method unchanged.
- :func:`plot_cache_stats`: predicted vs measured change and the computed / skipped steps of a run (PNG).
- The video testbed and the reproduction live in the repository's unpublished experiments area
  (``packages/icml-generative/experiments``).
"""

from icml_generative.cache.baselines import calibrate_mag_ratios, count_block_forwards
from icml_generative.cache.context import cache_context
from icml_generative.cache.diffusers_adapter import (  # importing it wraps CacheMixin.enable_cache (once)
    install_enable_cache_adapter,
    uninstall_enable_cache_adapter,
)
from icml_generative.cache.estimators import InstantRatio, RatioDriftKalman, RatioKalman
from icml_generative.cache.hooks import CacheStats, StepRecord
from icml_generative.cache.metrics import psnr, spearman, ssim
from icml_generative.cache.navicache import (
    PRESETS,
    EasyCacheConfig,
    NaviCacheConfig,
    apply_easycache,
    apply_navicache,
    get_cache_stats,
    remove_navicache,
)
from icml_generative.cache.plot import plot_cache_stats
from icml_generative.cache.teacache import TeaCacheConfig, apply_teacache, fit_teacache_coefficients

__all__ = [
    "PRESETS",
    "CacheStats",
    "EasyCacheConfig",
    "InstantRatio",
    "NaviCacheConfig",
    "RatioDriftKalman",
    "RatioKalman",
    "StepRecord",
    "TeaCacheConfig",
    "apply_easycache",
    "apply_navicache",
    "apply_teacache",
    "cache_context",
    "calibrate_mag_ratios",
    "count_block_forwards",
    "fit_teacache_coefficients",
    "get_cache_stats",
    "install_enable_cache_adapter",
    "plot_cache_stats",
    "psnr",
    "remove_navicache",
    "spearman",
    "ssim",
    "uninstall_enable_cache_adapter",
]
