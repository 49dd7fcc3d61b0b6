"""Binary 2-D cellular automata on the Moore neighbourhood: rules (Life-like, totalistic, any table),
simulation on a torus, and the ``k``-step local map as a truth table for :mod:`icml_theory.boolean`.

Needs torch: ``pip install 'icml-theory[torch]'``.
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the installed-alone test
    raise ImportError(
        f"icml_theory.ca needs torch ({exc.name} is missing): pip install 'icml-theory[torch]'"
    ) from exc

from icml_theory.ca.dynamics import (
    as_pm1,
    local_map,
    local_table,
    simulate,
    step,
    window_image,
    window_step,
)
from icml_theory.ca.rules import GAME_OF_LIFE, Rule

__all__ = [
    "GAME_OF_LIFE",
    "Rule",
    "as_pm1",
    "local_map",
    "local_table",
    "simulate",
    "step",
    "window_image",
    "window_step",
]
