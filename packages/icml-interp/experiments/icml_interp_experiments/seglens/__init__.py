"""Med-SegLens testbed (ICML 2026): synthetic scans with a planted cohort shift, a tiny U-Net and SegFormer,
Dice, and the latent-repair pieces of the reproduction ``seglens-repair``. See ``docs/seglens.md``."""

from icml_interp_experiments.seglens.data import CLASSES, COHORTS, CONCEPTS, Scans, make_scans
from icml_interp_experiments.seglens.models import ARCHITECTURES, TinySegFormer, TinyUNet
from icml_interp_experiments.seglens.train import (
    dice_per_class,
    predict,
    pretrained,
    soft_dice,
    train_segmenter,
)

__all__ = [
    "ARCHITECTURES",
    "CLASSES",
    "COHORTS",
    "CONCEPTS",
    "Scans",
    "TinySegFormer",
    "TinyUNet",
    "dice_per_class",
    "make_scans",
    "predict",
    "pretrained",
    "soft_dice",
    "train_segmenter",
]
