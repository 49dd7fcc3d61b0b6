"""Activation patching, true path patching, attribution patching and cross-model layer patching, with
normalized effects ``(patched - clean) / (corrupt - clean)`` in tidy tables (:class:`PatchingResult`)."""

from icml_interp.patching.activation import activation_patching, patch_hooks, run_with_patches
from icml_interp.patching.attribution import attribution_patching
from icml_interp.patching.cross_model import cross_model_layer_patching, prefill_patch
from icml_interp.patching.path import path_patching
from icml_interp.patching.result import PatchingResult, answer_logprob, logit_diff, normalized_effect

__all__ = [
    "PatchingResult",
    "activation_patching",
    "answer_logprob",
    "attribution_patching",
    "cross_model_layer_patching",
    "logit_diff",
    "normalized_effect",
    "patch_hooks",
    "path_patching",
    "prefill_patch",
    "run_with_patches",
]
