"""``transformer.enable_cache(NaviCacheConfig(...))`` on diffusers models: an adapter, not a registration.

diffusers' ``CacheMixin.enable_cache(config)`` (``diffusers/models/cache_utils.py``, 0.41 and 0.42 alike)
picks the cache through a fixed ``isinstance`` chain over its own configs and raises "Cache config ... is
not supported" for any other: diffusers has no registry a third-party cache could join. Importing
:mod:`icml_generative.cache` therefore wraps ``CacheMixin.enable_cache`` once
(:func:`install_enable_cache_adapter`):

- :class:`~icml_generative.cache.NaviCacheConfig`, :class:`~icml_generative.cache.EasyCacheConfig` and
  :class:`~icml_generative.cache.TeaCacheConfig` go to :func:`~icml_generative.cache.apply_navicache`,
  :func:`~icml_generative.cache.apply_easycache` and :func:`~icml_generative.cache.apply_teacache`; on a
  model that already has a cache they raise diffusers' own "Caching has already been enabled" error;
- every other config goes to diffusers' original method, unchanged (same behaviour, same errors).

``disable_cache()`` and ``is_cache_enabled`` need no wrapper: applying one of our caches to a diffusers
model sets its ``_cache_config`` (so ``is_cache_enabled`` is true and diffusers refuses to stack another
cache) and an instance-level ``disable_cache`` that removes our hooks, whichever way the cache was applied.

The wrapper keeps diffusers' method (its ``__wrapped__``); installing twice, or reloading this module,
wraps nothing again. :func:`uninstall_enable_cache_adapter` puts diffusers' method back. Plain torch
modules get no ``enable_cache``: use :func:`~icml_generative.cache.apply_navicache` there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from diffusers.models.cache_utils import CacheMixin

from icml_generative.cache.navicache import (
    EasyCacheConfig,
    NaviCacheConfig,
    apply_easycache,
    apply_navicache,
)
from icml_generative.cache.teacache import TeaCacheConfig, apply_teacache

MARKER = "__icml_generative_original__"  # on our wrapper: diffusers' method, as is its __wrapped__
# our config types and the function that applies each (checked with isinstance, subclasses included)
APPLY: tuple[tuple[type, Callable[..., None]], ...] = (
    (NaviCacheConfig, apply_navicache),
    (EasyCacheConfig, apply_easycache),
    (TeaCacheConfig, apply_teacache),
)
DOC_NOTE = """
        icml-generative adds (adapter installed by ``import icml_generative.cache``): ``NaviCacheConfig``,
        ``EasyCacheConfig`` and ``TeaCacheConfig`` apply NaviCache, EasyCache and TeaCache; ``disable_cache()``
        removes them.
"""


def _wrap(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    @functools.wraps(original)
    def enable_cache(self, config) -> None:
        apply = next((fn for config_type, fn in APPLY if isinstance(config, config_type)), None)
        if apply is None:
            return original(self, config)
        if self.is_cache_enabled:  # diffusers' own check and message
            raise ValueError(
                f"Caching has already been enabled with {type(self._cache_config)}. To apply a new caching "
                "technique, please disable the existing one first."
            )
        apply(self, config)  # sets _cache_config and the instance's disable_cache (hooks.apply_stack_cache)
        return None

    enable_cache.__doc__ = (original.__doc__ or "") + DOC_NOTE
    setattr(enable_cache, MARKER, original)
    return enable_cache


def _is_ours(method: Any) -> bool:
    """Whether ``method`` is our wrapper itself (a ``functools.wraps`` wrapper around ours copies the marker,
    but its ``__wrapped__`` is then our wrapper, not the marked original)."""
    original = getattr(method, MARKER, None)
    return original is not None and getattr(method, "__wrapped__", None) is original


def install_enable_cache_adapter() -> bool:
    """Let diffusers' ``CacheMixin.enable_cache`` apply our configs (done on ``import icml_generative.cache``).

    Returns True if it installed the wrapper, False if it was already installed (nothing is wrapped twice).
    """
    current = vars(CacheMixin)["enable_cache"]
    if getattr(current, MARKER, None) is not None:  # ours, or a functools.wraps wrapper around ours
        return False
    setattr(CacheMixin, "enable_cache", _wrap(current))  # noqa: B010 (mypy: a method is not assignable)
    return True


def uninstall_enable_cache_adapter() -> bool:
    """Restore diffusers' own ``CacheMixin.enable_cache``; our configs are then refused by it as before.

    Caches already applied stay and ``disable_cache()`` still removes them. Returns True if it removed the
    wrapper, False if none was installed (or another wrapper sits on top of ours, which it leaves alone).
    """
    current = vars(CacheMixin)["enable_cache"]
    if not _is_ours(current):
        return False
    setattr(CacheMixin, "enable_cache", getattr(current, MARKER))  # noqa: B010
    return True


install_enable_cache_adapter()
