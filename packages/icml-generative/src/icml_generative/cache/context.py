"""Cache contexts for any module, diffusers transformer or plain torch.

diffusers' ``CacheMixin.cache_context(name)`` tells every stateful hook which denoising call is running
("cond", "uncond"), so that hooks keep one state per call. Plain torch modules do not have that method;
:func:`cache_context` does the same for any module with hooks from :mod:`diffusers.hooks` under it.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from diffusers.hooks.hooks import CacheContext, StateManager


def _set_context(module: torch.nn.Module, context: CacheContext | None) -> None:
    for sub in module.modules():
        registry = getattr(sub, "_diffusers_hook", None)
        if registry is None:
            continue
        for hook in registry.hooks.values():
            if not getattr(hook, "_is_stateful", False):
                continue
            for attr in vars(hook).values():
                if isinstance(attr, StateManager):
                    attr.set_context(context)


@contextmanager
def cache_context(module: torch.nn.Module, name: str, **fields):
    """Run the body in the cache context ``name`` (``step_index``, ``sigma``, ``num_inference_steps`` optional).

    Equivalent to ``module.cache_context(name, **fields)`` on a diffusers model; works on any module.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string such as 'cond' or 'uncond', got {name!r}")
    _set_context(module, CacheContext(name, **fields))
    try:
        yield
    finally:
        _set_context(module, None)
