"""Grounding IDs (ICML 2026, "Grounding IDs: external cues create binding identifiers in vision-language
models"): external visual cues and the analyses of the latent identifiers they create.

Cues (:mod:`icml_interp.grounding.cues`, numpy images, documented pixel positions): :func:`grid_overlay`,
:func:`symbol_overlay`, :func:`scan_lines`, :func:`partition_boxes`, :func:`structured_prompt`.

Analyses (:mod:`icml_interp.grounding.analysis`) on any hooked vision-language model (transformers LLaVA and
Qwen2-VL / Qwen2.5-VL through the hooks' map, or a language model fed image tokens): :func:`binding_by_layer`
(binding score and modality gap per layer), :func:`attention_mass` (partition attention mass per head) and
:func:`swap_test` (patching partition activations from a counterfactual run, whole or in an ID subspace); the
formulas on plain tensors are :func:`binding_score`, :func:`modality_gap` and
:func:`partition_attention_mass`. A :class:`Layout` names each partition's image-token positions and the text
tokens that name them (:func:`image_partitions` finds the cells of an image's tokens).

The paper's code was not available: the formulas follow the paper's description as our research notes read
it (see the docs page).

Example::

    from icml_interp.grounding import Layout, binding_by_layer, grid_overlay, symbol_overlay
    image = symbol_overlay(grid_overlay(image, 3, 3), 3, 3)        # A..I, row by row
    found = binding_by_layer(model, {"input_ids": ids, "pixel_values": px}, layouts)
    found.binding                                                   # one score per layer
"""

from icml_interp.grounding.analysis import (
    AttentionMass,
    BindingResult,
    Layout,
    SwapResult,
    attention_mass,
    binding_by_layer,
    binding_score,
    chance_mass,
    image_partitions,
    modality_gap,
    partition_attention_mass,
    swap_test,
)
from icml_interp.grounding.cues import (
    FONT_CHARACTERS,
    default_symbols,
    glyph,
    grid_overlay,
    partition_boxes,
    scan_lines,
    structured_prompt,
    symbol_overlay,
)

__all__ = [
    "FONT_CHARACTERS",
    "AttentionMass",
    "BindingResult",
    "Layout",
    "SwapResult",
    "attention_mass",
    "binding_by_layer",
    "binding_score",
    "chance_mass",
    "default_symbols",
    "glyph",
    "grid_overlay",
    "image_partitions",
    "modality_gap",
    "partition_attention_mass",
    "partition_boxes",
    "scan_lines",
    "structured_prompt",
    "swap_test",
    "symbol_overlay",
]
