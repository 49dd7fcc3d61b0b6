"""Lookup-free quantization (LFQ, MAGVIT-v2: Yu et al. 2024) and a small convolutional image tokenizer on it.

LFQ quantizes each channel of a latent to its sign: a token of ``bits`` channels becomes one of the
``2^bits`` corners of the cube ``{-1, +1}^bits``, so the codebook is implicit and needs no lookup, no
nearest-neighbour search and no codebook loss. Zero counts as positive (``sign(0) = +1``). The index of a
token is its sign pattern read as a binary number, **most significant bit first**:
``index = Σ_k bit_k · 2^(bits − 1 − k)`` with ``bit_k = 1`` iff channel ``k`` is ``>= 0``; the signs
``(+, −, +)`` of three channels are index ``0b101 = 5``.

Training uses a straight-through gradient, a commitment loss ``mean (z − sign z)²`` and MAGVIT-v2's entropy
loss: with ``p(c | z) = softmax_c(2 τ ⟨z, c⟩)`` over all codes ``c``, the mean per-token entropy (small:
each token is sure of its code) minus ``γ`` times the entropy of the batch-averaged ``p`` (large: the batch
uses the whole codebook).

:class:`LFQTokenizer` is our own small design around it, sized for CPU: stride-2 convolutions to a
``(bits, H/f, W/f)`` latent, a parameter-free GroupNorm (normalising the latent before LFQ is the advice
given for it: the sign threshold 0 then sits inside the latent's range and the commitment loss stays
bounded), LFQ, and a decoder of nearest upsampling and convolutions back to ``[0, 1]`` images (a sigmoid). :func:`train_tokenizer` fits it with
AdamW on reconstruction MSE plus the quantizer loss.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from icml_generative._io import load_module, save_module
from icml_generative.validation import (
    check_choice,
    check_instance,
    check_int,
    check_model_input,
    check_number,
    check_tensor,
    check_trainable_dtype,
)

MAX_BITS = 16
MAX_STEPS = 1_000_000
DOWNSAMPLES = (1, 2, 4, 8)


class LFQOutput(NamedTuple):
    """``quantized (B, bits, H, W)`` in ``{−1, +1}`` (straight-through gradient), ``indices (B, H, W)`` int64,
    ``loss = entropy_weight · entropy_loss + commitment_weight · commitment_loss`` and its two terms
    (scalars)."""

    quantized: torch.Tensor
    indices: torch.Tensor
    loss: torch.Tensor
    entropy_loss: torch.Tensor
    commitment_loss: torch.Tensor


class TokenizerOutput(NamedTuple):
    """``reconstruction (B, C, H, W)`` in ``[0, 1]``, ``indices (B, h, w)`` int64,
    ``loss = reconstruction_loss + quantizer_loss`` (the MSE and LFQ's weighted loss; scalars)."""

    reconstruction: torch.Tensor
    indices: torch.Tensor
    loss: torch.Tensor
    reconstruction_loss: torch.Tensor
    quantizer_loss: torch.Tensor


class LFQ(nn.Module):
    """Lookup-free quantizer of ``bits`` channels (module docstring); ``2^bits`` codes.

    ``entropy_weight`` and ``commitment_weight`` weigh the two losses, ``diversity_gamma`` the codebook
    entropy inside the entropy loss and ``inv_temperature`` (τ) sharpens ``p(c | z)``. The entropy loss
    costs ``O(tokens · 2^bits)`` time and memory (all codes are scored), which is small up to about 10 bits.
    """

    codes: torch.Tensor
    powers: torch.Tensor

    def __init__(
        self,
        bits: int,
        entropy_weight: float = 0.1,
        commitment_weight: float = 0.25,
        diversity_gamma: float = 1.0,
        inv_temperature: float = 100.0,
    ) -> None:
        super().__init__()
        self.bits = check_int(bits, "bits", 1, MAX_BITS)
        self.entropy_weight = check_number(entropy_weight, "entropy_weight", 0, 1e6)
        self.commitment_weight = check_number(commitment_weight, "commitment_weight", 0, 1e6)
        self.diversity_gamma = check_number(diversity_gamma, "diversity_gamma", 0, 1e6)
        self.inv_temperature = check_number(inv_temperature, "inv_temperature", maximum=1e6, above=0)
        powers = 2 ** torch.arange(self.bits - 1, -1, -1)  # (bits,) MSB first
        codes = (torch.arange(2**self.bits)[:, None] & powers).ne(0).float() * 2 - 1  # (2^bits, bits) ±1
        # derived from bits: not saved with the weights
        self.register_buffer("powers", powers, persistent=False)
        self.register_buffer("codes", codes, persistent=False)

    @property
    def codebook_size(self) -> int:
        """The number of codes, ``2^bits``."""
        return 2**self.bits

    def extra_repr(self) -> str:
        return f"bits={self.bits}, codebook_size={self.codebook_size}"

    def _check_latent(self, z: object, name: str) -> torch.Tensor:
        return check_tensor(z, name, ("batch", self.bits, "height", "width"), floating=True, finite=True)

    def forward(self, z: torch.Tensor) -> LFQOutput:
        """Quantize ``z (B, bits, H, W)``: the codes with a straight-through gradient, their indices and the
        losses."""
        self._check_latent(z, "z")
        hard = torch.where(z >= 0, 1.0, -1.0).to(z.dtype)  # (B, bits, H, W)
        quantized = hard + (z - z.detach())  # exactly ±1, gradient of the identity
        commitment = (z - hard).square().mean()
        entropy = self._entropy_loss(z)
        loss = self.entropy_weight * entropy + self.commitment_weight * commitment
        return LFQOutput(quantized, self._indices(z), loss, entropy, commitment)

    def entropy_loss(self, z: torch.Tensor) -> torch.Tensor:
        """The mean per-token entropy of ``p(c | z) = softmax_c(2 τ ⟨z, c⟩)`` minus ``diversity_gamma`` times
        the entropy of its average over all tokens of ``z (B, bits, H, W)`` (nats)."""
        return self._entropy_loss(self._check_latent(z, "z"))

    def _entropy_loss(self, z: torch.Tensor) -> torch.Tensor:
        flat = z.permute(0, 2, 3, 1).reshape(-1, self.bits)  # (N, bits)
        logits = 2 * self.inv_temperature * flat @ self.codes.to(z.dtype).T  # (N, 2^bits)
        log_p = logits.log_softmax(-1)
        p = log_p.exp()
        per_token = -(p * log_p).sum(-1).mean()
        average = p.mean(0)  # (2^bits,)
        codebook = -(average * average.clamp_min(torch.finfo(z.dtype).tiny).log()).sum()
        return per_token - self.diversity_gamma * codebook

    def codes_to_indices(self, codes: torch.Tensor) -> torch.Tensor:
        """The index ``(B, H, W)`` int64 of the sign pattern of ``codes (B, bits, H, W)`` (any real values;
        ``>= 0`` is a one bit), MSB first."""
        return self._indices(self._check_latent(codes, "codes"))

    def _indices(self, z: torch.Tensor) -> torch.Tensor:
        bits = (z >= 0).long()  # (B, bits, H, W)
        return (bits * self.powers.view(1, -1, 1, 1)).sum(1)

    def indices_to_codes(self, indices: torch.Tensor) -> torch.Tensor:
        """The ±1 codes ``(B, bits, H, W)`` (the dtype of the ``codes`` buffer) of ``indices (B, H, W)``."""
        _check_indices(indices, "indices", self.codebook_size)
        bits = (indices.long().unsqueeze(1) & self.powers.view(1, -1, 1, 1)).ne(0)  # (B, bits, H, W)
        return bits.to(self.codes.dtype) * 2 - 1


def _check_indices(
    value: object, name: str, codebook_size: int, grid: tuple[int, int] | None = None
) -> torch.Tensor:
    """An integer tensor ``(B, h, w)`` (of ``grid`` if given) with values in ``[0, codebook_size)``."""
    shape: tuple[int | str, ...] = ("batch", *grid) if grid is not None else ("batch", "height", "width")
    indices = check_tensor(value, name, shape)
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got dtype {indices.dtype}")
    if indices.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(indices.shape)}")
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high >= codebook_size:
        raise ValueError(
            f"{name} must lie in [0, {codebook_size}) (the codebook size), got values in [{low}, {high}]"
        )
    return indices


def _groups(width: int) -> int:
    return math.gcd(8, width)


class LFQTokenizer(nn.Module):
    """Images ``(B, channels, image_size, image_size)`` in ``[0, 1]`` ↔ a ``grid`` of tokens, each an index in
    ``[0, 2^bits)``; ``downsample`` (1, 2, 4 or 8) pixels per token side, ``width`` channels throughout."""

    def __init__(
        self,
        image_size: int = 32,
        channels: int = 3,
        bits: int = 6,
        downsample: int = 4,
        width: int = 64,
        entropy_weight: float = 0.1,
        commitment_weight: float = 0.25,
    ) -> None:
        super().__init__()
        self.image_size = check_int(image_size, "image_size", 1, 4096)
        self.channels = check_int(channels, "channels", 1, 64)
        self.bits = check_int(bits, "bits", 1, MAX_BITS)
        self.downsample = check_choice(check_int(downsample, "downsample", 1, 8), "downsample", DOWNSAMPLES)
        if image_size % downsample:
            raise ValueError(f"image_size must be divisible by downsample ({downsample}), got {image_size}")
        self.width = check_int(width, "width", 1, 4096)
        self.entropy_weight = check_number(entropy_weight, "entropy_weight", 0, 1e6)
        self.commitment_weight = check_number(commitment_weight, "commitment_weight", 0, 1e6)
        stages, groups = int(math.log2(downsample)), _groups(width)

        def act(c: int) -> list[nn.Module]:
            return [nn.GroupNorm(_groups(c), c), nn.SiLU()]

        encoder: list[nn.Module] = [nn.Conv2d(channels, width, 3, padding=1)]
        for _ in range(stages):  # H → H/2
            encoder += [*act(width), nn.Conv2d(width, width, 4, stride=2, padding=1)]
        encoder += [*act(width), nn.Conv2d(width, bits, 1)]
        self.encoder = nn.Sequential(*encoder)
        # parameter-free normalisation of the latent per image, so that the sign threshold 0 sits inside it
        self.norm = nn.GroupNorm(1, bits, affine=False)
        self.quantizer = LFQ(bits, entropy_weight, commitment_weight)
        decoder: list[nn.Module] = [nn.Conv2d(bits, width, 3, padding=1)]
        for _ in range(stages):  # h → 2h
            decoder += [*act(width), nn.Upsample(scale_factor=2, mode="nearest")]
            decoder += [nn.Conv2d(width, width, 3, padding=1)]
        decoder += [nn.GroupNorm(groups, width), nn.SiLU(), nn.Conv2d(width, channels, 3, padding=1)]
        self.decoder = nn.Sequential(*decoder, nn.Sigmoid())

    def config(self) -> dict:
        """The keyword arguments that rebuild this tokenizer."""
        return {
            "image_size": self.image_size,
            "channels": self.channels,
            "bits": self.bits,
            "downsample": self.downsample,
            "width": self.width,
            "entropy_weight": self.entropy_weight,
            "commitment_weight": self.commitment_weight,
        }

    @property
    def grid(self) -> tuple[int, int]:
        """Tokens per image side, ``(h, w) = (image_size / downsample,) * 2``."""
        side = self.image_size // self.downsample
        return side, side

    @property
    def tokens_per_image(self) -> int:
        """``h · w``."""
        h, w = self.grid
        return h * w

    @property
    def codebook_size(self) -> int:
        """``2^bits``."""
        return self.quantizer.codebook_size

    def _check_images(self, images: object) -> torch.Tensor:
        x = check_model_input(images, "images", self)
        size, f = self.image_size, self.downsample
        expected = f"(batch, {self.channels}, {size}, {size})"
        if x.ndim != 4 or x.shape[1] != self.channels:
            raise ValueError(f"images must be shaped {expected}, got {tuple(x.shape)}")
        if x.shape[2] % f or x.shape[3] % f:
            raise ValueError(
                f"images must be shaped {expected}: height and width must be divisible by the downsampling "
                f"factor {f} and equal image_size, got {tuple(x.shape)}"
            )
        if x.shape[2] != size or x.shape[3] != size:
            raise ValueError(f"images must be shaped {expected} (image_size {size}), got {tuple(x.shape)}")
        if float(x.min()) < 0 or float(x.max()) > 1:
            raise ValueError(
                f"images must lie in [0, 1], got values in [{float(x.min()):g}, {float(x.max()):g}]"
            )
        return x

    def _latent(self, images: torch.Tensor) -> torch.Tensor:
        return self.norm(self.encoder(images))  # (B, bits, h, w)

    def forward(self, images: torch.Tensor) -> TokenizerOutput:
        """Encode, quantize and decode ``images (B, C, H, W)`` in ``[0, 1]``; the training losses."""
        x = self._check_images(images)
        q = self.quantizer(self._latent(x))
        reconstruction = self.decoder(q.quantized)  # (B, C, H, W)
        mse = F.mse_loss(reconstruction, x)
        return TokenizerOutput(reconstruction, q.indices, mse + q.loss, mse, q.loss)

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """The token indices ``(B, h, w)`` int64 of ``images (B, C, H, W)`` in ``[0, 1]``."""
        x = self._check_images(images)
        return self.quantizer._indices(self._latent(x))

    def decode(self, indices: torch.Tensor) -> torch.Tensor:
        """The images ``(B, C, H, W)`` in ``[0, 1]`` of token ``indices (B, h, w)``."""
        _check_indices(indices, "indices", self.codebook_size, self.grid)
        param = next(self.decoder.parameters())
        codes = self.quantizer.indices_to_codes(indices).to(param.device, param.dtype)
        return self.decoder(codes)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer into the folder ``path`` (``config.json`` + ``model.safetensors``) atomically."""
        return save_module(path, self, self.config())

    @classmethod
    def load(cls, path: str | os.PathLike) -> LFQTokenizer:
        """The tokenizer :meth:`save` wrote into ``path``, in eval mode."""
        return load_module(path, cls)


def train_tokenizer(
    tokenizer: LFQTokenizer,
    images: torch.Tensor,
    *,
    steps: int = 1000,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    log_every: int = 0,
) -> list[float]:
    """Train ``tokenizer`` in place on ``images (N, C, H, W)`` in ``[0, 1]``: AdamW at ``lr`` on its loss for
    ``steps`` minibatches of ``batch_size`` images drawn without replacement by a generator seeded with
    ``seed``. ``log_every > 0`` shows a progress bar with the mean loss of the last ``log_every`` steps.
    Returns the loss of every step; the tokenizer is left in eval mode. A tokenizer with float16 trainable
    parameters is refused (``ValueError``: AdamW's ``eps`` rounds to 0 in float16 and the weights turn NaN):
    train in bfloat16, or in float32 under ``torch.autocast``."""
    check_instance(tokenizer, "tokenizer", LFQTokenizer)
    check_trainable_dtype(tokenizer, "tokenizer", "train_tokenizer")
    tokenizer._check_images(images)
    check_int(steps, "steps", 1, MAX_STEPS)
    check_int(batch_size, "batch_size", 1, 2**20)
    lr = check_number(lr, "lr", maximum=10.0, above=0)
    check_int(seed, "seed", 0, 2**63 - 1)
    check_int(log_every, "log_every", 0)
    gen = torch.Generator().manual_seed(seed)
    batch = min(batch_size, images.shape[0])
    opt = torch.optim.AdamW(tokenizer.parameters(), lr=lr)
    losses: list[float] = []
    tokenizer.train()
    try:
        with tqdm(range(steps), desc="train_tokenizer", disable=log_every == 0) as bar:
            for step in bar:
                picked = torch.randperm(images.shape[0], generator=gen)[:batch].to(images.device)
                loss = tokenizer(images[picked]).loss
                if not torch.isfinite(loss):
                    raise ValueError(
                        f"train_tokenizer: the loss became {loss.item()} at step {step}: lower lr ({lr})"
                    )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                if log_every and (step + 1) % log_every == 0:
                    bar.set_postfix(loss=f"{sum(losses[-log_every:]) / log_every:.4g}")
    finally:
        tokenizer.eval()
    return losses
