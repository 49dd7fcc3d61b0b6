"""AMNet: low-light video enhancement that takes any subset of its auxiliary modalities (events, infrared).

Our reconstruction (the paper's text was not available; docs/amnet.md): the abstract's parts are its
Spatial-Spectral Dual-Gated (S2DG) translator, which produces *implicit* auxiliary features from the RGB
features when a modality is missing, and fusion that works with any combination of inputs. Sizes, the
encoder/decoder, the exposure normalization and the temporal window are ours, sized for CPU.

Layout, for a window of ``window`` frames centred on the frame to enhance:

- RGB encoder on the exposure-normalized window (each sample scaled so its mean is ``brightness``):
  a 3×3 convolution at full resolution (the skip), a stride-2 convolution and a residual block →
  ``F_rgb`` ``(B, width, H/2, W/2)``; the same encoder shape per auxiliary modality (events as voxel grids
  of ``event_bins`` bins per frame interval, infrared as one channel per frame).
- Per auxiliary modality ``m``, an :class:`S2DGTranslator` ``T_m``: a 1×1 projection, the
  :class:`SpatialGate` ``F ⊙ σ(DWConv(F)) ⊙ GELU(Conv₁ₓ₁(F))``, the :class:`SpectralGate`
  ``IFFT2(FFT2(F) ⊙ 2σ(W · log(1 + |FFT2 F|) + b))`` (amplitude gated, phase kept; identity at ``W = b = 0``,
  its initialization) and a 1×1 projection.
- Fusion: the real ``F_m`` where modality ``m`` is given, ``T_m(F_rgb)`` where it is missing (zeros in a
  model built with ``translators=False``); a 1×1 convolution of ``[F_rgb, F_m…]`` and ``blocks`` residual
  blocks; a pixel-shuffle decoder with the RGB skip predicts a residual on the normalized centre frame.

Train with :func:`~icml_generative.amnet.amnet_loss` (L1 + SSIM + translator alignment, modality dropout);
enhance clips with :func:`~icml_generative.amnet.enhance`. A diffusers model (``ModelMixin``,
``ConfigMixin``): ``save_pretrained`` / ``from_pretrained``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from diffusers.utils import BaseOutput
from torch import nn

from icml_generative.validation import check_int, check_model_input, check_number, check_tensor

MODALITIES = ("events", "infrared")
MAX_WIDTH = 1024


def _check_features(x: Any, module: nn.Module) -> None:
    """Features ``(B, C, H, W)`` with the module's channel count and dtype (finite, non-empty)."""
    check_model_input(x, "x", module)
    channels = next(module.parameters()).shape[0]
    if x.ndim != 4 or x.shape[1] != channels:
        raise ValueError(f"x must be features shaped (B, {channels}, H, W), got {tuple(x.shape)}")


class SpatialGate(nn.Module):
    """``F ⊙ σ(DWConv₃ₓ₃(F)) ⊙ GELU(Conv₁ₓ₁(F))`` on ``(B, C, H, W)`` features."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        channels = check_int(channels, "channels", 1, MAX_WIDTH)
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.pointwise = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features(x, self)
        return x * torch.sigmoid(self.depthwise(x)) * F.gelu(self.pointwise(x))


class SpectralGate(nn.Module):
    """``IFFT2(FFT2(F) ⊙ g)`` with the real gate ``g = 2σ(W · log(1 + |FFT2 F|) + b)`` (``W``: a 1×1 channel mix
    of the log amplitudes, zero-initialized, so the gate starts at 1: the identity). The gate is a function of
    the amplitude alone, hence Hermitian-symmetric: the output is real and the phase is kept. Computed with
    ``rfft2`` (orthonormal) in float32 or float64: half-precision features (torch has no bfloat16 FFT, and a
    float16 one only on CUDA for power-of-two sizes) are transformed in float32, the gate is computed in the
    module's dtype, and the output is cast back to the features' dtype."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        channels = check_int(channels, "channels", 1, MAX_WIDTH)
        self.amplitude = nn.Conv2d(channels, channels, 1)
        nn.init.zeros_(self.amplitude.weight)
        if self.amplitude.bias is not None:
            nn.init.zeros_(self.amplitude.bias)

    def gate(self, amplitude: torch.Tensor) -> torch.Tensor:
        """The gate ``2σ(W · log(1 + amplitude) + b)`` for amplitudes ``(B, C, H, W')``."""
        return 2 * torch.sigmoid(self.amplitude(torch.log1p(amplitude)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features(x, self)
        spectrum = torch.fft.rfft2(x.to(torch.promote_types(x.dtype, torch.float32)), norm="ortho")
        gate = self.gate(spectrum.abs().to(x.dtype))
        return torch.fft.irfft2(spectrum * gate, s=x.shape[-2:], norm="ortho").to(x.dtype)


class S2DGTranslator(nn.Module):
    """The Spatial-Spectral Dual-Gated translator: ``Conv₁ₓ₁ → SpatialGate → SpectralGate → Conv₁ₓ₁`` from RGB
    features to one auxiliary modality's feature space (``(B, C, H, W) → (B, C, H, W)``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        channels = check_int(channels, "channels", 1, MAX_WIDTH)
        self.project_in = nn.Conv2d(channels, channels, 1)
        self.spatial = SpatialGate(channels)
        self.spectral = SpectralGate(channels)
        self.project_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features(x, self)
        return self.project_out(self.spectral(self.spatial(self.project_in(x))))


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.gelu(self.conv1(x)))


class _Encoder(nn.Module):
    """``(B, in, H, W)`` → the full-resolution skip ``(B, width/2, H, W)`` and features ``(B, width, H/2, W/2)``."""

    def __init__(self, channels_in: int, width: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(channels_in, width // 2, 3, padding=1)
        self.down = nn.Conv2d(width // 2, width, 3, stride=2, padding=1)
        self.res = _Residual(width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        skip = F.gelu(self.stem(x))
        return skip, self.res(F.gelu(self.down(skip)))


@dataclass
class AMNetOutput(BaseOutput):
    """``sample``: the enhanced centre frames ``(B, 3, H, W)``; ``rgb_features``: ``F_rgb``;
    ``real_features`` / ``translated_features``: per modality, the encoder's and the translator's features
    (present only where computed); ``present``: ``(B, M)`` booleans, which modality each sample was given."""

    sample: torch.Tensor
    rgb_features: torch.Tensor
    real_features: dict[str, torch.Tensor]
    translated_features: dict[str, torch.Tensor]
    present: torch.Tensor


class AMNet(ModelMixin, ConfigMixin):
    """The any-modality enhancer (module docstring). ``modalities``: the auxiliary modalities it accepts
    (a subset of ``("events", "infrared")``; empty for an RGB-only model); ``window``: frames per input
    window (odd); ``event_bins``: voxel bins per frame interval; ``width``: feature channels (even);
    ``blocks``: residual blocks after fusion; ``translators``: S2DG translators for missing modalities
    (False: zeros instead, the ablation); ``brightness``: the mean the RGB window is scaled to."""

    @register_to_config
    def __init__(
        self,
        modalities: Sequence[str] = MODALITIES,
        window: int = 3,
        event_bins: int = 5,
        width: int = 32,
        blocks: int = 2,
        translators: bool = True,
        brightness: float = 0.4,
    ) -> None:
        super().__init__()
        if isinstance(modalities, str) or not isinstance(modalities, Sequence):
            raise TypeError(f"modalities must be a sequence of names from {MODALITIES}, got {modalities!r}")
        mods = tuple(modalities)
        if any(m not in MODALITIES for m in mods) or len(set(mods)) != len(mods):
            raise ValueError(f"modalities must be distinct names from {MODALITIES}, got {modalities!r}")
        self.modalities = tuple(m for m in MODALITIES if m in mods)  # a fixed order
        self.window = check_int(window, "window", 1, 15)
        if self.window % 2 == 0:
            raise ValueError(f"window must be odd (frames centred on the one enhanced), got {window}")
        self.event_bins = check_int(event_bins, "event_bins", 1, 64)
        width = check_int(width, "width", 2, MAX_WIDTH)
        if width % 2:
            raise ValueError(f"width must be even, got {width}")
        blocks = check_int(blocks, "blocks", 0, 32)
        if not isinstance(translators, bool):
            raise TypeError(f"translators must be a bool, got {type(translators).__name__}")
        self.brightness = check_number(brightness, "brightness", above=0, maximum=1)
        self.has_translators = translators
        inputs = {"events": self.event_bins * self.window, "infrared": self.window}
        self.rgb_encoder = _Encoder(3 * self.window, width)
        self.encoders = nn.ModuleDict({m: _Encoder(inputs[m], width) for m in self.modalities})
        self.s2dg = nn.ModuleDict({m: S2DGTranslator(width) for m in self.modalities} if translators else {})
        self.fuse = nn.Conv2d(width * (1 + len(self.modalities)), width, 1)
        self.refine = nn.Sequential(*[_Residual(width) for _ in range(blocks)])
        self.up = nn.Conv2d(width, 4 * (width // 2), 3, padding=1)
        self.head1 = nn.Conv2d(width, width // 2, 3, padding=1)
        self.head2 = nn.Conv2d(width // 2, 3, 3, padding=1)

    def _check_inputs(
        self, frames: Any, aux: dict[str, Any], present: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        check_model_input(frames, "frames", self)
        if frames.ndim != 5 or frames.shape[1] != self.window or frames.shape[2] != 3:
            raise ValueError(
                f"frames must be windows shaped (B, {self.window}, 3, H, W), got {tuple(frames.shape)}"
            )
        b, _, _, h, w = frames.shape
        if h % 2 or w % 2:
            raise ValueError(f"frames must have an even height and width, got {h} x {w}")
        channels = {"events": self.event_bins, "infrared": 1}
        given: dict[str, torch.Tensor] = {}
        for m, x in aux.items():
            if x is None:
                continue
            if m not in self.modalities:
                raise ValueError(f"{m} given, but this model was built for modalities {self.modalities}")
            check_model_input(x, m, self)
            want = (b, self.window, channels[m], h, w)
            if tuple(x.shape) != want:
                raise ValueError(
                    f"{m} must be shaped {want} (the frames' batch, window and size), got {tuple(x.shape)}"
                )
            given[m] = x
        mask = torch.tensor(
            [[m in given for m in self.modalities]] * b, dtype=torch.bool, device=frames.device
        )
        if present is not None:
            check_tensor(present, "present", (b, len(self.modalities)))
            if present.dtype != torch.bool:
                raise TypeError(f"present must be a bool tensor, got dtype {present.dtype}")
            mask = mask & present.to(mask.device)
        return frames, given, mask

    def forward(
        self,
        frames: torch.Tensor,
        events: torch.Tensor | None = None,
        infrared: torch.Tensor | None = None,
        *,
        present: torch.Tensor | None = None,
        return_features: bool = False,
    ) -> AMNetOutput:
        """Enhance the centre frame of each window.

        ``frames`` ``(B, window, 3, H, W)`` (low-light RGB, ``H`` and ``W`` even); ``events``
        ``(B, window, event_bins, H, W)`` (the voxel grid of each frame's interval); ``infrared``
        ``(B, window, 1, H, W)``; None where missing. ``present`` ``(B, M)`` marks given modalities as missing
        per sample (modality dropout in training). ``return_features`` also computes the translators'
        features where the real ones are used (for the alignment loss).
        """
        frames, given, mask = self._check_inputs(frames, {"events": events, "infrared": infrared}, present)
        b = frames.shape[0]
        level = frames.mean(dim=(1, 2, 3, 4), keepdim=True).clamp_min(1e-4)
        x = frames * (self.brightness / level)
        skip, rgb = self.rgb_encoder(x.flatten(1, 2))
        real: dict[str, torch.Tensor] = {}
        translated: dict[str, torch.Tensor] = {}
        parts = [rgb]
        for i, m in enumerate(self.modalities):
            have = mask[:, i].view(b, 1, 1, 1)
            if m in given:
                real[m] = self.encoders[m](given[m].flatten(1, 2))[1]
            if self.has_translators and (return_features or not bool(mask[:, i].all())):
                translated[m] = self.s2dg[m](rgb)
            fallback = translated.get(m, torch.zeros_like(rgb))
            parts.append(torch.where(have, real[m], fallback) if m in real else fallback)
        fused = self.refine(self.fuse(torch.cat(parts, 1)))
        up = F.pixel_shuffle(self.up(fused), 2)
        residual = self.head2(F.gelu(self.head1(torch.cat([up, skip], 1))))
        sample = x[:, self.window // 2] + residual
        return AMNetOutput(sample, rgb, real, translated, mask)


__all__ = ["MODALITIES", "AMNet", "AMNetOutput", "S2DGTranslator", "SpatialGate", "SpectralGate"]
