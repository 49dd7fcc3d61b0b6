"""Cache contexts for any module, diffusers transformer or plain torch.

diffusers' ``CacheMixin.cache_context(name)`` tells every stateful hook which denoising call is running
("cond", "uncond"), so that hooks keep one state per call. Plain torch modules do not have that method;
:func:`cache_context` does the same for any module with hooks from :mod:`diffusers.hooks` under it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from contextlib import contextmanager

import torch
from diffusers.hooks.hooks import CacheContext, StateManager

from icml_generative.validation import check_int, check_module


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
    check_module(module, "cache_context")
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string such as 'cond' or 'uncond', got {name!r}")
    known = [f.name for f in dataclasses.fields(CacheContext) if f.name != "name"]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise TypeError(f"fields must be among {known}, got {unknown}")
    for key, minimum in (("step_index", 0), ("num_inference_steps", 1)):
        if fields.get(key) is not None:
            check_int(fields[key], key, minimum, why=" or None")
    sigma = fields.get("sigma")
    if sigma is not None and (
        isinstance(sigma, bool)
        or not isinstance(sigma, numbers.Real)
        or not (math.isfinite(sigma) and float(sigma) >= 0)
    ):
        raise ValueError(f"sigma must be a finite number >= 0 or None, got {sigma!r}")
    timestep = fields.get("timestep")
    if timestep is not None and not (
        (isinstance(timestep, numbers.Real) and not isinstance(timestep, bool) and math.isfinite(timestep))
        or (
            isinstance(timestep, torch.Tensor)
            and not timestep.is_complex()
            and bool(torch.isfinite(timestep).all())
        )
    ):
        raise ValueError(f"timestep must be a finite number, a finite tensor or None, got {timestep!r}")
    _set_context(module, CacheContext(name, **fields))
    try:
        yield
    finally:
        _set_context(module, None)
