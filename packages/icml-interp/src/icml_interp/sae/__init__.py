"""Sparse autoencoders for any torch model: TopK, BatchTopK, ReLU+L1 and JumpReLU SAEs, a streaming activation
source with a shuffling buffer, training with AuxK, metrics (FVU, L0, dead/dense latents, spliced-in loss) and
SAELens-compatible save/load. See ``docs/sae.md``."""

from icml_interp.sae.config import SAEConfig
from icml_interp.sae.io import SAEFileError, load_sae, save_sae
from icml_interp.sae.metrics import evaluate_sae, firing_counts, firing_frequencies, spliced_loss
from icml_interp.sae.model import SAE, topk_activation
from icml_interp.sae.source import ActivationSource, from_tokens, splice, to_tokens
from icml_interp.sae.train import TrainLog, auxk_ablation, geometric_median, train_sae

__all__ = [
    "SAE",
    "ActivationSource",
    "SAEConfig",
    "SAEFileError",
    "TrainLog",
    "auxk_ablation",
    "evaluate_sae",
    "firing_counts",
    "firing_frequencies",
    "from_tokens",
    "geometric_median",
    "load_sae",
    "save_sae",
    "splice",
    "spliced_loss",
    "to_tokens",
    "topk_activation",
    "train_sae",
]
