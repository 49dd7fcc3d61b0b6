"""Neural contextual bandits with a logistic link: NeuralLog-UCB-1 and NeuralLog-UCB-2 (Bae & Lee, ICML 2026)
beside NeuralUCB, NeuralTS, GLM-UCB, epsilon-greedy and uniform play; full and diagonal confidence matrices
kept by Sherman–Morrison; the effective dimension; a simulator and an offline replay evaluator.

Every policy has ``select(contexts) -> arm`` (one row of features per arm) and ``update(context, reward)``
(the chosen arm's row and its reward in [0, 1]). Parts of the NeuralLog algorithms are our reconstruction
from the abstract and secondary summaries (see ``docs/neural-logistic-bandits.md``).

Needs torch: ``pip install 'icml-theory[torch]'``.
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the installed-alone test
    raise ImportError(
        f"icml_theory.bandits needs torch ({exc.name} is missing): pip install 'icml-theory[torch]'"
    ) from exc

from icml_theory.bandits.confidence import DiagonalConfidence, FullConfidence, effective_dimension
from icml_theory.bandits.evaluation import (
    BanditRun,
    ReplayResult,
    classification_bandit,
    log_uniform,
    play,
    replay,
)
from icml_theory.bandits.networks import RewardNetwork, ntk_gram
from icml_theory.bandits.policies import (
    GLMUCB,
    BanditPolicy,
    EpsilonGreedy,
    NeuralBandit,
    NeuralLogUCB1,
    NeuralLogUCB2,
    NeuralTS,
    NeuralUCB,
    UniformRandom,
)

__all__ = [
    "GLMUCB",
    "BanditPolicy",
    "BanditRun",
    "DiagonalConfidence",
    "EpsilonGreedy",
    "FullConfidence",
    "NeuralBandit",
    "NeuralLogUCB1",
    "NeuralLogUCB2",
    "NeuralTS",
    "NeuralUCB",
    "ReplayResult",
    "RewardNetwork",
    "UniformRandom",
    "classification_bandit",
    "effective_dimension",
    "log_uniform",
    "ntk_gram",
    "play",
    "replay",
]
