"""The tiny vision-language model of ``grounding-ids-toy``: a transformers ``LlavaForConditionalGeneration``
(a CLIP vision tower of two layers over 8-pixel patches, LLaVA's two-layer projector, a four-layer Llama
language model) trained here from scratch on "which cell holds X?" (cross-entropy on the answer symbol).

Being a real LLaVA, everything in :mod:`icml_interp.grounding` runs on it through the hooks' ``llava`` map
exactly as on a downloaded checkpoint. Trained models are cached under
``cache_dir()/grounding_ids/<version>-<condition>-seed<s>``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icml_interp_experiments.grounding.scenes import (
    IMAGE_ID,
    MAX_OBJECTS,
    PATCH,
    SIZE,
    SYMBOL_IDS,
    WORDS,
    Batch,
    batch,
    scenes,
)

VERSION = "v2"  # revision 1: 4x4 grid of 12-pixel cells


@dataclass(frozen=True)
class Config:
    hidden: int = 64
    vision_layers: int = 2
    layers: int = 4
    heads: int = 4
    intermediate: int = 128
    steps: int = 1800
    batch: int = 64
    lr: float = 3e-4
    warmup: int = 100
    objects: tuple[int, int] = (1, MAX_OBJECTS)
    position_std: float = 1.0


def make_model(cfg: Config, seed: int):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    torch.manual_seed(seed)
    vision = CLIPVisionConfig(
        hidden_size=cfg.hidden, intermediate_size=cfg.intermediate, num_hidden_layers=cfg.vision_layers,
        num_attention_heads=cfg.heads, image_size=SIZE, patch_size=PATCH, projection_dim=cfg.hidden,
    )  # fmt: skip
    text = LlamaConfig(
        hidden_size=cfg.hidden, intermediate_size=cfg.intermediate, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads, vocab_size=len(WORDS),
        max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=1,
    )  # fmt: skip
    config = LlavaConfig(
        vision_config=vision, text_config=text, image_token_id=IMAGE_ID, vision_feature_layer=-1,
        vision_feature_select_strategy="default", projector_hidden_act="gelu",
    )  # fmt: skip
    model = LlavaForConditionalGeneration(config)
    with torch.no_grad():
        # Hugging Face's init (std 0.02 everywhere) leaves a tiny tower's image tokens nearly identical across
        # images (differences ~5% of their norm), and training stalls at chance; unit-scale patch positions
        # and a variance-preserving projector make patch content and position visible to the language model
        model.model.vision_tower.embeddings.position_embedding.weight.normal_(0.0, cfg.position_std)
        for layer in (model.model.multi_modal_projector.linear_1, model.model.multi_modal_projector.linear_2):
            layer.weight.normal_(0.0, layer.in_features**-0.5)
            layer.bias.zero_()
    return model


def answer_logits(model, b: Batch) -> torch.Tensor:
    """Logits of the cell symbols at the last position, ``(batch, cells)``."""
    out = model(**b.inputs(), logits_to_keep=1)
    return out.logits[:, -1, SYMBOL_IDS]


def train(cfg: Config, condition: str, seed: int, log_every: int = 250) -> tuple[Any, dict]:
    model = make_model(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / cfg.warmup))
    start, log = time.perf_counter(), []
    model.train()
    for step in range(cfg.steps):
        b = batch(scenes(cfg.batch, 100_000 * (seed + 1) + step, cfg.objects), condition, seed=step)
        loss = torch.nn.functional.cross_entropy(answer_logits(model, b), b.answers)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % log_every == 0 or step == cfg.steps - 1:
            log.append({"step": step, "loss": float(loss.detach())})
    model.eval()
    return model, {"losses": log, "seconds": time.perf_counter() - start, "steps": cfg.steps}


def trained(cfg: Config, condition: str, seed: int) -> tuple[Any, dict]:
    """The model of ``(condition, seed)``, from the cache when an earlier run trained it."""
    from transformers import LlavaForConditionalGeneration

    from icml_tools.assets import cache_dir, trained_model_folder

    return trained_model_folder(
        Path(cache_dir()) / "grounding_ids" / f"{VERSION}-{condition}-seed{seed}",
        asdict(cfg),
        lambda path: LlavaForConditionalGeneration.from_pretrained(path).eval(),
        lambda: train(cfg, condition, seed),
    )


@torch.no_grad()
def accuracy(model, b: Batch, chunk: int = 256) -> np.ndarray:
    """Per-scene hits (predicted cell == answer)."""
    hits = []
    for i in range(0, len(b.answers), chunk):
        sub = Batch(b.input_ids[i : i + chunk], b.pixel_values[i : i + chunk], b.answers[i : i + chunk],
                    b.scenes[i : i + chunk])  # fmt: skip
        hits.append((answer_logits(model, sub).argmax(-1) == sub.answers).numpy())
    return np.concatenate(hits)
