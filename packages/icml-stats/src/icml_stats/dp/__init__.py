"""Label-private regression with public features: Cond-DP, conditioned DP-SGD (Jiang, Krichene and
Mayoraz, ICML 2026), its DP-SGD special case and a label-noise baseline.

The conditioning matrices need numpy only; :class:`CondDPSGD` and :class:`CondDPRegressor` need torch and
icml-theory's accountant (``pip install 'icml-stats[dp]'``); the opacus optimizer lives in
:mod:`icml_stats.dp.opacus` (``pip install 'icml-stats[dp,opacus]'``).
"""

from icml_stats.dp.conditioning import conditioning_matrix, frequency_conditioning
from icml_stats.dp.estimators import CondDPRegressor, DivergedError, LaplaceLabelRegressor

__all__ = [
    "CondDPRegressor",
    "CondDPSGD",
    "DivergedError",
    "LaplaceLabelRegressor",
    "calibrate_noise",
    "conditioning_matrix",
    "frequency_conditioning",
    "privacy_spent",
]


def __getattr__(name):  # torch is imported only when the SGD parts are used
    if name in ("CondDPSGD", "calibrate_noise", "privacy_spent"):
        from icml_stats.dp import sgd

        return getattr(sgd, name)
    raise AttributeError(f"module 'icml_stats.dp' has no attribute {name!r}")
