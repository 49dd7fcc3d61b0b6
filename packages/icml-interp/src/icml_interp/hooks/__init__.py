"""Named hook points (TransformerLens-style) on unmodified Hugging Face causal LMs, on plain torch hooks."""

from icml_interp.hooks.arch import ARCHITECTURES, ArchSpec, register_architecture, spec_for
from icml_interp.hooks.hooked import ActivationCache, HookedModel, HookPoint, act_name, wrap

__all__ = [
    "ARCHITECTURES",
    "ActivationCache",
    "ArchSpec",
    "HookPoint",
    "HookedModel",
    "act_name",
    "register_architecture",
    "spec_for",
    "wrap",
]
