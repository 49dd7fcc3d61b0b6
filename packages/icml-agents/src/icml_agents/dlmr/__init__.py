"""DLMR: dual latent memories for a frozen (multimodal) language model. A visual memory compresses the
image-token hidden states, a recurrent reasoning memory tracks the generated segments, and a router decides
at each step boundary which memory to insert into the key-value cache and how many tokens. The formers, the
router, the insertion and the three training stages are our reconstruction (the paper's text was not
available; the closest public design is VisMem); see :mod:`.formers`, :mod:`.router` and :mod:`.session`."""

from icml_agents.dlmr.formers import MemoryFormer, ReasoningMemory, VisualMemory, load_memories, save_memories
from icml_agents.dlmr.router import MODES, Router, token_cost_reward
from icml_agents.dlmr.session import Boundary, MemorySession
from icml_agents.dlmr.training import distillation_loss, freeze, parameter_hash, trainable_fraction

__all__ = [
    "MODES",
    "Boundary",
    "MemoryFormer",
    "MemorySession",
    "ReasoningMemory",
    "Router",
    "VisualMemory",
    "distillation_loss",
    "freeze",
    "load_memories",
    "parameter_hash",
    "save_memories",
    "token_cost_reward",
    "trainable_fraction",
]
