"""The Cylindrical Representation Hypothesis (Gao et al. 2026): the cylinder decomposition of difference
vectors (central axis, normal plane, sectors), the penalty test, the spiral probe, and steerability with its
prediction from the geometry. Steering vectors and steered generation live in :mod:`icml_interp.steering`."""

from icml_interp.crh.cylinder import Cylinder, SpiralProbe, decompose, fit_spiral_probe, sector_bins
from icml_interp.crh.steerability import (
    CONCEPT,
    GIBBERISH,
    JUDGE_PROMPT,
    NORMAL,
    KeywordJudge,
    LMJudge,
    Steerability,
    continuation_perplexity,
    exponent_search,
    fit_steerability,
    geometry_correlation,
    geometry_features,
    label_outputs,
    sector_prediction,
)

__all__ = [
    "CONCEPT",
    "GIBBERISH",
    "JUDGE_PROMPT",
    "NORMAL",
    "Cylinder",
    "KeywordJudge",
    "LMJudge",
    "SpiralProbe",
    "Steerability",
    "continuation_perplexity",
    "decompose",
    "exponent_search",
    "fit_spiral_probe",
    "fit_steerability",
    "geometry_correlation",
    "geometry_features",
    "label_outputs",
    "sector_bins",
    "sector_prediction",
]
