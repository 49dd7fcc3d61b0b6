"""The continuous baseline of ``viewmask-voxels`` (ours): a pixel-space rectified-flow model that produces the
three target views jointly, conditioned on view 0, on the same backbone as ViewMask.

Each view is cut into ``cell x cell`` pixel patches (one per token position of the tokenizer's grid), so the
sequence, the view and 2-D position embeddings and the transformer blocks (:class:`ViewBackbone`, full
attention across views) are those of :class:`~icml_generative.viewmask.MultiViewTransformer`; only the
token embedding and the output head differ (a linear patch projection in and out, plus a flow-time
embedding), and a linear skip from each noisy patch to the output: the backbone's final LayerNorm removes
the scale of its input, which a denoiser needs (without the skip, a development run's denoising error at
t = 0.5 was 13x that with it). The skip adds 37k parameters; in all the baseline has 221,184 against
ViewMask's 159,168. The network predicts the clean patches (x-prediction; the velocity is
``(x_hat - x_t) / (1 - t)``, ``1 - t`` at least :data:`MIN_GAP`) and trains on the velocity error: a
development run that predicted the velocity directly left noise in every sample. Training:
``x_t = (1 - t) noise + t x``, the velocity target ``x - noise``; sampling: Euler steps from noise, one
model evaluation per step, so ``steps`` equals ViewMask's sampler steps at equal evaluations.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from icml_generative.viewmask.model import ViewBackbone

MIN_GAP = 0.05  # the smallest 1 - t a velocity divides by


class PixelFlow(nn.Module):
    def __init__(
        self,
        image_size: int = 32,
        channels: int = 3,
        patch: int = 4,
        num_views: int = 4,
        width: int = 128,
        depth: int = 4,
        heads: int = 4,
    ) -> None:
        super().__init__()
        if image_size % patch:
            raise ValueError(f"patch must divide image_size ({image_size}), got {patch}")
        self.image_size, self.channels, self.patch, self.num_views = image_size, channels, patch, num_views
        g = image_size // patch
        dim = channels * patch * patch
        self.backbone = ViewBackbone((g, g), num_views, width, depth, heads)
        self.patch_in = nn.Linear(dim, width)
        # patch features at the scale of the position embeddings (std 0.02), as ViewMask's token embeddings
        nn.init.normal_(self.patch_in.weight, std=0.02 / math.sqrt(dim))
        self.patch_out = nn.Linear(width, dim)
        self.skip = nn.Linear(dim, dim)  # the noisy patch straight to the velocity (see the module docstring)
        self.time = nn.Sequential(nn.Linear(64, width), nn.SiLU(), nn.Linear(width, width))
        self.role = nn.Parameter(torch.zeros(2, width))  # condition (clean) / target (noisy)

    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, V, C, H, W)`` → ``(B, V, g*g, C*p*p)``."""
        b, v, c, h, w = images.shape
        p = self.patch
        x = images.reshape(b, v, c, h // p, p, w // p, p).permute(0, 1, 3, 5, 2, 4, 6)
        return x.reshape(b, v, (h // p) * (w // p), c * p * p)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        b, v, _, _ = x.shape
        p, c, g = self.patch, self.channels, self.image_size // self.patch
        x = x.reshape(b, v, g, g, c, p, p).permute(0, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, v, c, g * p, g * p)

    def denoise(self, condition: torch.Tensor, noisy: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The clean target patches ``(B, V-1, g*g, C*p*p)`` predicted from ``noisy`` at flow times ``t`` ``(B,)``."""
        x = self.patch_in(torch.cat([condition[:, None], noisy], dim=1))
        freqs = torch.exp(-math.log(1000.0) * torch.arange(32, device=t.device) / 32)
        emb = self.time(
            torch.cat([torch.sin(1000 * t[:, None] * freqs), torch.cos(1000 * t[:, None] * freqs)], 1)
        )
        x = x + self.role[1] + emb[:, None, None, :]
        x[:, 0] = x[:, 0] - self.role[1] + self.role[0] - emb[:, None, :]
        views = torch.arange(self.num_views, device=x.device)
        return self.patch_out(self.backbone(x, views)[:, 1:]) + self.skip(noisy)

    def velocity(self, condition: torch.Tensor, noisy: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The velocity ``(x_hat - x_t) / (1 - t)`` of the predicted clean patches (``1 - t`` at least
        :data:`MIN_GAP`)."""
        gap = (1 - t).clamp_min(MIN_GAP)[:, None, None, None]
        return (self.denoise(condition, noisy, t) - noisy) / gap

    def loss(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Rectified-flow loss on all-view images ``(B, V, C, H, W)`` in [0, 1] (view 0 the condition),
        pixels scaled to [-1, 1]: the velocity error of the clean-patch prediction."""
        x = self.patchify(images * 2 - 1)
        cond, target = x[:, 0], x[:, 1:]
        b = x.shape[0]
        t = torch.rand(b, generator=generator).to(x.device)
        noise = torch.randn(target.shape, generator=generator).to(x.device)
        xt = (1 - t)[:, None, None, None] * noise + t[:, None, None, None] * target
        gap = (1 - t).clamp_min(MIN_GAP)[:, None, None, None]
        return (((self.denoise(cond, xt, t) - target) / gap) ** 2).mean()

    @torch.no_grad()
    def sample(
        self, condition: torch.Tensor, steps: int = 12, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Target views ``(B, V-1, C, H, W)`` in [0, 1] for condition images ``(B, C, H, W)``, ``steps`` Euler
        steps (one model evaluation each)."""
        cond = self.patchify(condition[:, None] * 2 - 1)[:, 0]
        b = cond.shape[0]
        g = (self.image_size // self.patch) ** 2
        x = torch.randn(b, self.num_views - 1, g, cond.shape[-1], generator=generator).to(cond.device)
        for s in range(steps):
            t = torch.full((b,), s / steps, device=cond.device)
            x = x + self.velocity(cond, x, t) / steps
        return ((self.unpatchify(x) + 1) / 2).clamp(0, 1)
