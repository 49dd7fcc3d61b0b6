"""Stage-wise learning of sparse attention on high-order Markov chains (Yüksel, Alvarez Lucendo, Flammarion,
arXiv 2602.19143): the mixture-of-lags task with exact Bayes losses, a one-layer attention-only transformer
with one-hot positions and hook points, training with full logging, plateau and phase detection, and a
simplified gradient-flow ODE. Needs torch: ``pip install 'icml-theory[torch]'``.

The task, the detection rules and the ODE are our reconstructions (the paper's text was not available
to us); each module's docstring says what is ours.
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the installed-alone test
    raise ImportError(
        f"icml_theory.markov needs torch ({exc.name} is missing): pip install 'icml-theory[torch]'"
    ) from exc

from icml_theory.markov.chain import ChiSquareResult, MixtureOfLagsChain
from icml_theory.markov.dynamics import (
    PhaseTrace,
    Plateau,
    crossing_times,
    detect_phases,
    find_plateaus,
    match_plateaus,
)
from icml_theory.markov.model import AttentionOnlyTransformer, HookPoint, lag_mass
from icml_theory.markov.ode import (
    ODESolution,
    StageODE,
    integrate,
    logistic_half_time,
    logistic_solution,
    strengths,
)
from icml_theory.markov.train import TrainingLog, sequence_loss, train

__all__ = [
    "AttentionOnlyTransformer",
    "ChiSquareResult",
    "HookPoint",
    "MixtureOfLagsChain",
    "ODESolution",
    "PhaseTrace",
    "Plateau",
    "StageODE",
    "TrainingLog",
    "crossing_times",
    "detect_phases",
    "find_plateaus",
    "integrate",
    "lag_mass",
    "logistic_half_time",
    "logistic_solution",
    "match_plateaus",
    "sequence_loss",
    "strengths",
    "train",
]
