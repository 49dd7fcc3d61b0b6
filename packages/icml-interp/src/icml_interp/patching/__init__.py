"""Activation patching, true path patching, attribution patching and cross-model layer patching, with
normalized effects ``(patched - clean) / (corrupt - clean)`` in tidy tables (:class:`PatchingResult`); edge
attribution patching (EAP, EAP-IG), exact edge patching, neuron attribution and faithfulness-threshold
circuit selection over the residual-stream graph (:mod:`icml_interp.patching.edges`)."""

from icml_interp.patching.activation import activation_patching, patch_hooks, run_with_patches
from icml_interp.patching.attribution import attribution_patching
from icml_interp.patching.cross_model import cross_model_layer_patching, prefill_patch
from icml_interp.patching.edges import (
    Circuit,
    EdgeScores,
    Graph,
    NeuronScores,
    build_graph,
    edge_attribution_patching,
    edge_patching,
    evaluate_circuit,
    faithfulness,
    find_circuit,
    neuron_attribution_patching,
)
from icml_interp.patching.path import path_patching
from icml_interp.patching.result import (
    PatchingResult,
    answer_logprob,
    logit_diff,
    logit_margin,
    normalized_effect,
)

__all__ = [
    "Circuit",
    "EdgeScores",
    "Graph",
    "NeuronScores",
    "PatchingResult",
    "activation_patching",
    "answer_logprob",
    "attribution_patching",
    "build_graph",
    "cross_model_layer_patching",
    "edge_attribution_patching",
    "edge_patching",
    "evaluate_circuit",
    "faithfulness",
    "find_circuit",
    "logit_diff",
    "logit_margin",
    "neuron_attribution_patching",
    "normalized_effect",
    "patch_hooks",
    "path_patching",
    "prefill_patch",
    "run_with_patches",
]
