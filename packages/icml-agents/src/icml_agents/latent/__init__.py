"""Latent reasoning for Hugging Face causal LMs: Coconut's continuous thoughts, Soft-Thinking's concept
tokens and LT-Tuning's Context-Prediction-Fusion with confidence-driven switching (Liu, Min & Cheng, ICML
2026), with the curriculum data and feature-collapse diagnostics. The fusion, the switch and the second-stage
data rule are our reconstruction; see :mod:`.thoughts` and :mod:`.curriculum`."""

from icml_agents.latent.curriculum import (
    LatentTokens,
    build_sequence,
    select_latent_steps,
    token_confidences,
)
from icml_agents.latent.diagnostics import CollapseDiagnostics, collapse_diagnostics, effective_rank
from icml_agents.latent.loops import (
    ConfidenceSwitch,
    LatentGeneration,
    LatentLM,
    LatentOutput,
    generate,
    latent_forward,
    left_pad,
)
from icml_agents.latent.thoughts import ContextPredictionFusion, HiddenThought, SoftThought, soft_embedding

__all__ = [
    "CollapseDiagnostics",
    "ConfidenceSwitch",
    "ContextPredictionFusion",
    "HiddenThought",
    "LatentGeneration",
    "LatentLM",
    "LatentOutput",
    "LatentTokens",
    "SoftThought",
    "build_sequence",
    "collapse_diagnostics",
    "effective_rank",
    "generate",
    "latent_forward",
    "left_pad",
    "select_latent_steps",
    "soft_embedding",
    "token_confidences",
]
