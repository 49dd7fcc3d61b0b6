"""Named hook points (TransformerLens-style) on unmodified Hugging Face causal LMs, on plain torch hooks."""

from icml_interp.hooks.arch import ARCHITECTURES, ArchSpec, register_architecture, spec_for
from icml_interp.hooks.hooked import (
    HOOKED_ATTENTION,
    ActivationCache,
    HookedModel,
    HookPoint,
    act_name,
    wrap,
)

__all__ = [
    "ARCHITECTURES",
    "HOOKED_ATTENTION",
    "ActivationCache",
    "ArchSpec",
    "HookPoint",
    "HookedModel",
    "act_name",
    "register_architecture",
    "spec_for",
    "wrap",
]
