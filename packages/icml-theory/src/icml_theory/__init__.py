"""icml-theory: learning theory from ICML 2026: optimal RDP to f-DP accounting, stability, attention dynamics, bandits,
predictive coding, recursive reasoning.

The privacy accountants (:mod:`icml_theory.privacy`) and the L_p-stability bounds (:mod:`icml_theory.stability`)
need only numpy and scipy (``pip install icml-theory``). The parts built on torch
(:mod:`icml_theory.boolean`, :mod:`icml_theory.ca`, :mod:`icml_theory.bandits`, :mod:`icml_theory.pc`, :mod:`icml_theory.markov`,
:mod:`icml_theory.recursive`) need the ``torch`` extra
(``pip install 'icml-theory[torch]'``); they are imported when first used, so the accountant never pulls
torch in.
"""

from importlib import import_module
from importlib.metadata import version as _version

from icml_theory import privacy, stability  # noqa: F401  (stability: numpy and scipy only, imported eagerly)
from icml_theory.privacy import *  # noqa: F403  (each subpackage's public API, listed in its __all__)

__version__ = _version("icml-theory")

# torch-based subpackages, imported on first attribute access: name -> the public names they export
_LAZY = {
    "boolean": (
        "fourier_coefficients",
        "majority",
        "majority_coefficient",
        "majority_spectrum",
        "spectral_weights",
        "subset_sizes",
    ),
    "ca": (),
    "bandits": (),
    "pc": (),
    "markov": (),
    "recursive": (),
}
_LAZY_NAMES = {name: sub for sub, names in _LAZY.items() for name in names}

# star imports stay torch-free: the lazy names are attributes (icml_theory.majority), not in __all__
__all__ = [*privacy.__all__]


def __getattr__(name: str):
    if name in _LAZY:
        return import_module(f"icml_theory.{name}")
    if name in _LAZY_NAMES:
        return getattr(import_module(f"icml_theory.{_LAZY_NAMES[name]}"), name)
    raise AttributeError(f"module 'icml_theory' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_LAZY_NAMES})
