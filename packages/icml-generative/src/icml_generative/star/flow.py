"""STAR-Gen: flow matching on VAE latents with logit-normal time sampling and a transformer velocity field.

Rectified flow (Liu et al. 2023; Lipman et al. 2023) on latents ``z_1 (B, C, L)`` of a frozen VAE:
``z_t = (1 − t) z_0 + t z_1`` with ``z_0 ~ N(0, I)``, loss ``‖v_θ(z_t, t | c) − (z_1 − z_0)‖²`` and
``logit(t) ~ N(m, s²)`` (Esser et al., SD3, 2024; the paper uses ``N(0, 1)``). Sampling integrates
``dz/dt = v_θ`` from noise at ``t = 0`` to data at ``t = 1`` (Euler or Heun).

The paper's velocity field is an LLM decoder over text tokens and audio latents with a hybrid mask
(causal over text, bidirectional over audio). :class:`LatentFlowTransformer` keeps that mask and layout at
a small size: optional context tokens (``context_dim`` features, e.g. a text encoder's states) come first
and attend causally among themselves and never to the audio; latent frames attend to every context token
and to each other. Time enters as a sinusoidal embedding added to every latent frame; frames have learned
positions. Widths, depth and the time embedding are ours.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from icml_generative.validation import (
    check_choice,
    check_int,
    check_model_input,
    check_number,
    check_tensor,
    random_device,
)

METHODS = ("euler", "heun")


def logit_normal_times(
    n: int,
    mean: float = 0.0,
    std: float = 1.0,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``n`` times in ``(0, 1)`` with ``logit(t) ~ N(mean, std²)``: ``sigmoid(mean + std · ε)``."""
    n = check_int(n, "n", 0, 2**28)
    mean = check_number(mean, "mean")
    std = check_number(std, "std", above=0)
    eps = torch.randn(n, generator=generator, device=random_device(generator, device), dtype=dtype)
    eps = eps if device is None else eps.to(device)
    return torch.sigmoid(mean + std * eps)


def _time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = 1000.0 * t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=1)
    return F.pad(emb, (0, dim - 2 * half))


class _Block(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, w))
        return x + self.mlp(self.norm2(x))


class LatentFlowTransformer(ModelMixin, ConfigMixin):
    """The velocity field ``v_θ(z_t, t | context)`` on latents ``(B, latent_channels, frames)``, frames up to
    ``max_frames``; ``context_dim`` set enables conditioning on ``context (B, tokens, context_dim)`` with an
    optional boolean ``context_mask (B, tokens)`` (False: padding). See the module docstring for the mask."""

    config: Any

    @register_to_config
    def __init__(
        self,
        latent_channels: int = 16,
        max_frames: int = 64,
        width: int = 128,
        layers: int = 4,
        heads: int = 4,
        mlp_ratio: int = 4,
        context_dim: int | None = None,
    ) -> None:
        super().__init__()
        check_int(latent_channels, "latent_channels", 1, 4096)
        check_int(max_frames, "max_frames", 1, 2**20)
        check_int(width, "width", 1, 2**14)
        check_int(layers, "layers", 1, 256)
        check_int(heads, "heads", 1, 2**14)
        if width % heads:
            raise ValueError(f"width ({width}) must be a multiple of heads ({heads})")
        check_int(mlp_ratio, "mlp_ratio", 1, 16)
        if context_dim is not None:
            check_int(context_dim, "context_dim", 1, 2**16, why=" or None")
        self.latent_in = nn.Linear(latent_channels, width)
        self.position = nn.Parameter(torch.zeros(max_frames, width))
        nn.init.normal_(self.position, std=0.02)
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.context_in = nn.Linear(context_dim, width) if context_dim is not None else None
        self.blocks = nn.ModuleList(_Block(width, heads, mlp_ratio) for _ in range(layers))
        self.norm_out = nn.LayerNorm(width)
        self.latent_out = nn.Linear(width, latent_channels)
        nn.init.zeros_(self.latent_out.weight)
        nn.init.zeros_(self.latent_out.bias)

    def attention_mask(
        self, tokens: int, frames: int, context_mask: torch.Tensor | None, device
    ) -> torch.Tensor:
        """The hybrid boolean mask ``(B or 1, 1, tokens + frames, tokens + frames)`` (True: may attend)."""
        n = tokens + frames
        mask = torch.ones(n, n, dtype=torch.bool, device=device)
        mask[:tokens, :tokens] = torch.ones(tokens, tokens, dtype=torch.bool, device=device).tril()
        mask[:tokens, tokens:] = False
        mask = mask[None, None]
        if context_mask is not None:
            keys = torch.cat([context_mask, context_mask.new_ones(context_mask.shape[0], frames)], dim=1)
            mask = mask & keys[:, None, None, :]
            mask = mask | torch.eye(n, dtype=torch.bool, device=device)  # a padded token still sees itself
        return mask

    def forward(
        self,
        z_t: torch.Tensor,
        t: torch.Tensor,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        cfg = self.config
        check_model_input(z_t, "z_t", self, ("batch", cfg.latent_channels, "frames"))
        batch, _, frames = z_t.shape
        if frames > cfg.max_frames:
            raise ValueError(f"z_t has {frames} frames, more than max_frames ({cfg.max_frames})")
        if not isinstance(t, torch.Tensor):
            t = torch.tensor(check_number(t, "t", 0.0, 1.0), dtype=z_t.dtype, device=z_t.device)
        check_tensor(t, "t", floating=True, finite=True)
        if t.ndim == 0:
            t = t.expand(batch)
        check_tensor(t, "t", (batch,))
        x = self.latent_in(z_t.transpose(1, 2)) + self.position[:frames]
        x = x + self.time_mlp(_time_embedding(t, cfg.width).to(x.dtype))[:, None]
        tokens = 0
        if context is not None:
            if self.context_in is None:
                raise ValueError("context was given but the model was built without context_dim")
            check_model_input(context, "context", self, (batch, "tokens", cfg.context_dim))
            tokens = context.shape[1]
            x = torch.cat([self.context_in(context.to(x.dtype)), x], dim=1)
            if context_mask is not None:
                check_tensor(context_mask, "context_mask", (batch, tokens))
                if context_mask.dtype != torch.bool:
                    raise TypeError(f"context_mask must be a bool tensor, got dtype {context_mask.dtype}")
        elif context_mask is not None:
            raise ValueError("context_mask was given without context")
        mask = self.attention_mask(tokens, frames, context_mask, x.device) if tokens else None
        for block in self.blocks:
            x = block(x, mask)
        return self.latent_out(self.norm_out(x[:, tokens:])).transpose(1, 2)


def flow_matching_loss(
    model: nn.Module,
    latents: torch.Tensor,
    context: torch.Tensor | None = None,
    context_mask: torch.Tensor | None = None,
    time_mean: float = 0.0,
    time_std: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The rectified-flow loss ``mean ‖v_θ(z_t, t | c) − (z_1 − z_0)‖²`` on data latents ``z_1 = latents``, one
    logit-normal time per example."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"flow_matching_loss needs a torch.nn.Module as model, got {type(model).__name__}")
    check_tensor(latents, "latents", floating=True, finite=True)
    if latents.ndim < 2:
        raise ValueError(f"latents must be shaped (batch, ...), got {tuple(latents.shape)}")
    batch = latents.shape[0]
    t = logit_normal_times(batch, time_mean, time_std, generator, latents.device, latents.dtype)
    draw = random_device(generator, latents.device)
    noise = torch.randn(latents.shape, generator=generator, device=draw, dtype=latents.dtype).to(
        latents.device
    )
    tt = t.reshape(batch, *([1] * (latents.ndim - 1)))
    z_t = (1 - tt) * noise + tt * latents
    kwargs = {} if context is None else {"context": context, "context_mask": context_mask}
    return F.mse_loss(model(z_t, t, **kwargs), latents - noise)


@torch.no_grad()
def sample_flow(
    model: nn.Module,
    noise: torch.Tensor,
    steps: int = 32,
    method: str = "euler",
    context: torch.Tensor | None = None,
    context_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Integrate ``dz/dt = model(z, t | context)`` from ``noise`` (``z_0``) at ``t = 0`` to ``t = 1`` with
    ``steps`` uniform Euler or Heun steps (Euler: one evaluation per step, Heun: two)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"sample_flow needs a torch.nn.Module as model, got {type(model).__name__}")
    check_tensor(noise, "noise", floating=True, finite=True)
    steps = check_int(steps, "steps", 1, 10**6)
    check_choice(method, "method", METHODS)
    kwargs = {} if context is None else {"context": context, "context_mask": context_mask}
    z = noise
    times = torch.linspace(0, 1, steps + 1, dtype=noise.dtype, device=noise.device)
    for t0, t1 in itertools.pairwise(times):
        v = model(z, t0.expand(z.shape[0]), **kwargs)
        if method == "heun":
            z_next = z + (t1 - t0) * v
            v = (v + model(z_next, t1.expand(z.shape[0]), **kwargs)) / 2
        z = z + (t1 - t0) * v
    return z
