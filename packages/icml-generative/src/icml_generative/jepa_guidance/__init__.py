"""JEPA guidance: minority sampling for diffusion models, steered away from the density a JEPA world model
implies (Park & Um, "JEPA guidance", ICML 2026; official code ``soobin-um/jepa-guidance``).

- :func:`jepa_score`, :func:`jepa_singular_values`, :func:`encoder_jvp`: the JEPA-score
  ``Σ log σ_i(J_f(x))``, exact or by a randomized top-``k`` sketch with finite-difference or forward-mode
  Jacobian-vector products, with documented error control.
- :class:`JEPAGuidance`: gradient descent on the JEPA-score of the Tweedie estimate inside any sampler, as a
  function for torch samplers or a ``callback_on_step_end`` for diffusers pipelines;
  :class:`TweedieGuidance` is the shared step (any objective), :func:`tweedie_x0` the algebra.
- :class:`MinorityGuidance`, :func:`minority_score`: the generator-centric baseline (Um et al.).
- :func:`train_jepa_encoder`, :func:`mlp_encoder`, :func:`sigreg_loss`, :func:`vicreg_regularizer`: a
  small JEPA-style encoder trained here (no pretrained world model can be downloaded).
"""

from icml_generative.jepa_guidance.encoder import (
    mlp_encoder,
    sigreg_loss,
    train_jepa_encoder,
    vicreg_regularizer,
)
from icml_generative.jepa_guidance.guidance import (
    JEPAGuidance,
    MinorityGuidance,
    TweedieGuidance,
    minority_score,
    tweedie_x0,
)
from icml_generative.jepa_guidance.score import encoder_jvp, jepa_score, jepa_singular_values

__all__ = [
    "JEPAGuidance",
    "MinorityGuidance",
    "TweedieGuidance",
    "encoder_jvp",
    "jepa_score",
    "jepa_singular_values",
    "minority_score",
    "mlp_encoder",
    "sigreg_loss",
    "train_jepa_encoder",
    "tweedie_x0",
    "vicreg_regularizer",
]
