"""SpeechCombine: vocabulary-safe weight arithmetic, ``θ = θ_cpt + λ (θ_instruct − θ_base)``, which gives a
model continually pre-trained on a new modality (new tokens) the instruction following of the instruct
version of its base, without instruction tuning.

:func:`combine` merges models in memory (or in place), :func:`combine_checkpoints` streams over safetensors
checkpoints with memory near one shard; :func:`plan_merge` (and ``combine_checkpoints(dry_run=True)``) is the
dry run, a :class:`MergeReport` of every tensor's :class:`TensorAction`. The rules (:mod:`.rules`): the delta
on shared tensors and on the base vocabulary's rows only, the CPT model's new rows kept exactly, tied
embeddings merged once and kept tied, λ per module kind (:func:`module_kind`); TIES and DARE as ablations.
"""

from icml_compress.merge.checkpoint import combine_checkpoints
from icml_compress.merge.model import combine, plan_merge
from icml_compress.merge.rules import (
    ACTIONS,
    METHODS,
    MODULE_KINDS,
    MergeReport,
    MergeSettings,
    TensorAction,
    module_kind,
)

__all__ = [
    "ACTIONS",
    "METHODS",
    "MODULE_KINDS",
    "MergeReport",
    "MergeSettings",
    "TensorAction",
    "combine",
    "combine_checkpoints",
    "module_kind",
    "plan_merge",
]
