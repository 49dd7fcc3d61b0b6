"""BEDTime: a harness for describing time series in words (Sen et al., "BEDTime: a unified benchmark for
automatically describing time series", arXiv 2509.05215; ICML 2026).

- :mod:`~icml_agents.bedtime.series`: series generated from attributes (trend, seasonality, noise, a spike
  or level shift and its position), their template descriptions, the attribute parser, hard negatives.
- :mod:`~icml_agents.bedtime.tasks`: recognition, differentiation and generation items; attribute-level
  scores, BLEU and ROUGE-L for open descriptions.
- :mod:`~icml_agents.bedtime.modalities`: numeric text, rendered plots, raw arrays; five robustness
  transforms with a severity in [0, 1].
- :mod:`~icml_agents.bedtime.models`: describers (feature-based, random, any language-model backend, and a
  base class for trained attribute predictors) and :func:`evaluate` / :func:`results_table`.
- :func:`load_released`: the released files' records, for users who have them.
"""

from icml_agents.bedtime.data import load_released
from icml_agents.bedtime.modalities import TRANSFORMS, perturb, render_plot, serialize
from icml_agents.bedtime.models import (
    AttributeDescriber,
    BackendDescriber,
    Describer,
    FeatureDescriber,
    RandomDescriber,
    evaluate,
    one_hot,
    results_table,
)
from icml_agents.bedtime.series import (
    ATTRIBUTES,
    Attributes,
    describe,
    generate_series,
    hard_negative,
    parse_description,
    random_attributes,
)
from icml_agents.bedtime.tasks import (
    Item,
    attribute_scores,
    bleu,
    build_differentiation,
    build_generation,
    build_recognition,
    chance,
    rouge_l,
)

__all__ = [
    "ATTRIBUTES",
    "TRANSFORMS",
    "AttributeDescriber",
    "Attributes",
    "BackendDescriber",
    "Describer",
    "FeatureDescriber",
    "Item",
    "RandomDescriber",
    "attribute_scores",
    "bleu",
    "build_differentiation",
    "build_generation",
    "build_recognition",
    "chance",
    "describe",
    "evaluate",
    "generate_series",
    "hard_negative",
    "load_released",
    "one_hot",
    "parse_description",
    "perturb",
    "random_attributes",
    "render_plot",
    "results_table",
    "rouge_l",
    "serialize",
]
