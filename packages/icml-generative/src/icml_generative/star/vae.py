"""STAR-VAE: a 1-D convolutional audio VAE with optional bidirectional Mamba blocks at the latent rate.

``audio (B, audio_channels, T)`` → a convolution, then per stride ``s``: a residual block (two dilated
convolutions) and a strided convolution (kernel ``2s``) → ``mamba_layers`` :class:`~.mamba.BiMamba` blocks
over the latent frames → a convolution to ``(mean, logvar)`` of ``latent_channels`` channels at
``T / hop_length`` frames. The decoder mirrors it (transposed convolutions). The paper's STAR-VAE is a
"strided CNN ResNet + Bi-Mamba" encoder and a "Mamba + CNN upsampling" decoder; widths, kernels, the
residual block are ours, sized for CPU; the activation is Snake (as in Oobleck) or SiLU.

A diffusers model (``ModelMixin``, ``ConfigMixin``): ``save_pretrained`` / ``from_pretrained`` (safetensors +
config), ``encode(audio).latent_dist`` (a diffusers ``DiagonalGaussianDistribution``: ``sample``, ``mode``,
``mean``, ``logvar``) and ``decode(z).sample``, like ``AutoencoderOobleck``. Train it with any loss; the STAR
term is :class:`~icml_generative.star.STARLoss` on ``latent_dist``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, overload

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
from diffusers.models.modeling_utils import ModelMixin
from diffusers.utils import BaseOutput
from torch import nn

from icml_generative.star.mamba import BiMamba
from icml_generative.validation import check_choice, check_int, check_ints, check_model_input

ACTIVATIONS = ("snake", "silu")


@dataclass
class STARVAEEncoderOutput(BaseOutput):
    """``latent_dist``: the diagonal Gaussian posterior, ``(B, latent_channels, frames)``."""

    latent_dist: DiagonalGaussianDistribution


@dataclass
class STARVAEDecoderOutput(BaseOutput):
    """``sample``: decoded audio ``(B, audio_channels, frames · hop_length)``."""

    sample: torch.Tensor


@dataclass
class STARVAEOutput(BaseOutput):
    """``sample``: the reconstruction; ``latent_dist``: the posterior; ``latents``: the decoded latents."""

    sample: torch.Tensor
    latent_dist: DiagonalGaussianDistribution
    latents: torch.Tensor


class Snake(nn.Module):
    """``x + sin²(α x) / α`` with a learned ``α > 0`` per channel on ``(B, C, L)`` (Ziyin et al. 2020; the
    activation of DAC, BigVGAN and Stable Audio's Oobleck VAE: a periodic bias that suits audio)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.zeros(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.log_alpha.exp()
        return x + torch.sin(alpha * x).square() / (alpha + 1e-9)


def _activation(kind: str, channels: int) -> nn.Module:
    return Snake(channels) if kind == "snake" else nn.SiLU()


class _ResBlock(nn.Module):
    def __init__(self, channels: int, dilation: int, activation: str) -> None:
        super().__init__()
        self.act1, self.act2 = _activation(activation, channels), _activation(activation, channels)
        self.conv1 = nn.Conv1d(channels, channels, 7, dilation=dilation, padding=3 * dilation)
        self.conv2 = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class _Down(nn.Module):
    """Residual blocks, then a strided convolution (kernel 2s): length ``L → L / s`` exactly."""

    def __init__(self, c_in: int, c_out: int, stride: int, activation: str) -> None:
        super().__init__()
        self.res = nn.Sequential(_ResBlock(c_in, 1, activation), _ResBlock(c_in, 3, activation))
        self.act = _activation(activation, c_in)
        self.pad = (stride // 2, stride - stride // 2)
        self.conv = nn.Conv1d(c_in, c_out, 2 * stride, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(self.act(self.res(x)), self.pad))


class _Up(nn.Module):
    """A transposed convolution (kernel 2s): length ``L → L · s`` exactly, then residual blocks."""

    def __init__(self, c_in: int, c_out: int, stride: int, activation: str) -> None:
        super().__init__()
        padding = (stride + 1) // 2
        self.act = _activation(activation, c_in)
        self.conv = nn.ConvTranspose1d(
            c_in, c_out, 2 * stride, stride=stride, padding=padding, output_padding=2 * padding - stride
        )
        self.res = nn.Sequential(_ResBlock(c_out, 1, activation), _ResBlock(c_out, 3, activation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res(self.conv(self.act(x)))


class _Sequence(nn.Module):
    """BiMamba blocks over ``(B, C, L)`` features (identity for zero blocks)."""

    def __init__(self, width: int, layers: int, d_state: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(BiMamba(width, d_state=d_state) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not len(self.blocks):
            return x
        h = x.transpose(1, 2)
        for block in self.blocks:
            h = block(h)
        return h.transpose(1, 2)


class STARVAE(ModelMixin, ConfigMixin):
    """The STAR-VAE autoencoder (module docstring). ``strides`` multiply to ``hop_length`` (default 320:
    16 kHz audio to 50 latent frames per second); stage ``i`` has ``base_channels · channel_multiples[i]``
    channels (one multiple per stride). ``mamba_layers = 0`` is the plain CNN VAE; ``activation`` is
    ``"snake"`` (:class:`Snake`) or ``"silu"``."""

    config: Any  # diffusers' FrozenDict of the registered arguments

    @register_to_config
    def __init__(
        self,
        audio_channels: int = 1,
        latent_channels: int = 16,
        base_channels: int = 16,
        channel_multiples: tuple[int, ...] = (1, 2, 4, 4),
        strides: tuple[int, ...] = (4, 4, 4, 5),
        mamba_layers: int = 1,
        mamba_state: int = 16,
        sampling_rate: int = 16000,
        activation: str = "snake",
    ) -> None:
        super().__init__()
        check_int(audio_channels, "audio_channels", 1, 64)
        check_int(latent_channels, "latent_channels", 1, 4096)
        check_int(base_channels, "base_channels", 1, 4096)
        multiples = check_ints(channel_multiples, "channel_multiples", 1, 64)
        strides = check_ints(strides, "strides", 1, 1024)
        if len(multiples) != len(strides):
            raise ValueError(
                f"channel_multiples and strides must have the same length, got {len(multiples)} and {len(strides)}"
            )
        check_int(mamba_layers, "mamba_layers", 0, 64)
        check_int(mamba_state, "mamba_state", 1, 1024)
        check_int(sampling_rate, "sampling_rate", 1)
        check_choice(activation, "activation", ACTIVATIONS)
        widths = [base_channels * m for m in multiples]
        top = 2 * widths[-1]
        self.encoder_in = nn.Conv1d(audio_channels, widths[0], 7, padding=3)
        self.encoder_blocks = nn.ModuleList(
            _Down(c_in, c_out, s, activation)
            for c_in, c_out, s in zip(widths, [*widths[1:], top], strides, strict=True)
        )
        self.encoder_sequence = _Sequence(top, mamba_layers, mamba_state)
        self.encoder_act = _activation(activation, top)
        self.encoder_out = nn.Conv1d(top, 2 * latent_channels, 3, padding=1)
        self.decoder_in = nn.Conv1d(latent_channels, top, 3, padding=1)
        self.decoder_sequence = _Sequence(top, mamba_layers, mamba_state)
        self.decoder_blocks = nn.ModuleList(
            _Up(c_in, c_out, s, activation)
            for c_in, c_out, s in reversed(list(zip([*widths[1:], top], widths, strides, strict=True)))
        )
        self.decoder_act = _activation(activation, widths[0])
        self.decoder_out = nn.Conv1d(widths[0], audio_channels, 7, padding=3)

    @property
    def hop_length(self) -> int:
        """Audio samples per latent frame (the product of the strides)."""
        return math.prod(self.config.strides)

    @overload
    def encode(self, audio: torch.Tensor, return_dict: Literal[True] = True) -> STARVAEEncoderOutput: ...

    @overload
    def encode(self, audio: torch.Tensor, return_dict: Literal[False]) -> tuple: ...

    def encode(self, audio: torch.Tensor, return_dict: bool = True) -> STARVAEEncoderOutput | tuple:
        """The posterior of ``audio (B, audio_channels, T)``, ``T`` a multiple of ``hop_length``."""
        check_model_input(audio, "audio", self, ("batch", self.config.audio_channels, "samples"))
        if audio.shape[-1] % self.hop_length:
            raise ValueError(
                f"audio length must be a multiple of hop_length ({self.hop_length}), got {audio.shape[-1]}"
            )
        h = self.encoder_in(audio)
        for block in self.encoder_blocks:
            h = block(h)
        h = self.encoder_out(self.encoder_act(self.encoder_sequence(h)))
        posterior = DiagonalGaussianDistribution(h)
        return STARVAEEncoderOutput(latent_dist=posterior) if return_dict else (posterior,)

    @overload
    def decode(self, z: torch.Tensor, return_dict: Literal[True] = True) -> STARVAEDecoderOutput: ...

    @overload
    def decode(self, z: torch.Tensor, return_dict: Literal[False]) -> tuple: ...

    def decode(self, z: torch.Tensor, return_dict: bool = True) -> STARVAEDecoderOutput | tuple:
        """Audio ``(B, audio_channels, frames · hop_length)`` from latents ``(B, latent_channels, frames)``."""
        check_model_input(z, "z", self, ("batch", self.config.latent_channels, "frames"))
        h = self.decoder_sequence(self.decoder_in(z))
        for block in self.decoder_blocks:
            h = block(h)
        audio = self.decoder_out(self.decoder_act(h))
        return STARVAEDecoderOutput(sample=audio) if return_dict else (audio,)

    def forward(
        self,
        audio: torch.Tensor,
        sample_posterior: bool = True,
        generator: torch.Generator | None = None,
        return_dict: bool = True,
    ) -> STARVAEOutput | tuple:
        """Encode, draw latents (the posterior mean when ``sample_posterior`` is false), decode."""
        posterior = self.encode(audio).latent_dist
        z = posterior.sample(generator) if sample_posterior else posterior.mode()
        out = self.decode(z).sample
        return (
            STARVAEOutput(sample=out, latent_dist=posterior, latents=z)
            if return_dict
            else (out, posterior, z)
        )
