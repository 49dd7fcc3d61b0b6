"""Audio losses and metrics in plain torch: the multi-resolution STFT distance (a training loss and the
"STFT-D" metric), scale-invariant SDR, and spectral statistics for Fréchet distances.

Audio is ``(batch, samples)`` or ``(batch, channels, samples)``; channels are treated as more batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from icml_generative.validation import check_int, check_ints, check_number, check_same_shape, check_tensor

DEFAULT_FFT_SIZES = (2048, 1024, 512, 256, 128)


def check_audio(audio: torch.Tensor, name: str = "audio", channels: int | None = None) -> torch.Tensor:
    """A finite floating-point tensor shaped ``(batch, samples)`` or ``(batch, channels, samples)`` (with
    ``channels`` channels when given); returns it as ``(batch · channels, samples)``."""
    check_tensor(audio, name, floating=True, finite=True)
    if audio.ndim not in (2, 3):
        raise ValueError(
            f"{name} must be shaped (batch, samples) or (batch, channels, samples), got rank {audio.ndim} "
            f"{tuple(audio.shape)}"
        )
    if channels is not None and (audio.shape[1] if audio.ndim == 3 else 1) != channels:
        raise ValueError(f"{name} must have {channels} channel(s), got shape {tuple(audio.shape)}")
    if audio.shape[-1] < 1 or audio.shape[0] < 1:
        raise ValueError(f"{name} must hold at least one sample per example, got shape {tuple(audio.shape)}")
    return audio.reshape(-1, audio.shape[-1])


def _magnitude(x: torch.Tensor, n_fft: int) -> torch.Tensor:
    x = x.to(torch.promote_types(x.dtype, torch.float32))  # no half-precision FFT on CPU
    window = torch.hann_window(n_fft, dtype=x.dtype, device=x.device)
    spec = torch.stft(x, n_fft, hop_length=n_fft // 4, window=window, center=True, return_complex=True)
    return spec.abs()


def stft_distance(
    estimate: torch.Tensor,
    reference: torch.Tensor,
    fft_sizes: Sequence[int] = DEFAULT_FFT_SIZES,
    eps: float = 1e-7,
) -> torch.Tensor:
    """Multi-resolution STFT distance per example (shape ``(batch,)``, differentiable; ``.mean()`` is the
    usual loss): the mean over FFT sizes of spectral convergence ``‖|Y| − |X|‖_F / ‖|Y|‖_F`` plus the mean
    absolute log-magnitude difference ``mean |log(|Y| + eps) − log(|X| + eps)|`` (Yamamoto et al.,
    Parallel WaveGAN 2020; auraloss' ``MultiResolutionSTFTLoss`` with its defaults is the same form), Hann
    windows, hop ``n_fft / 4``, centred frames. 0 for identical signals."""
    x = check_audio(estimate, "estimate")
    y = check_audio(reference, "reference")
    check_same_shape(estimate, reference, "estimate and reference")
    sizes = check_ints(fft_sizes, "fft_sizes", 2)
    eps = check_number(eps, "eps", above=0, maximum=1.0)
    if max(sizes) // 2 >= x.shape[-1]:
        raise ValueError(
            f"fft_sizes must be below twice the signal length ({x.shape[-1]} samples), got {max(sizes)}"
        )
    batch = estimate.shape[0]
    total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for n_fft in sizes:
        mx, my = _magnitude(x, n_fft), _magnitude(y, n_fft)
        convergence = (my - mx).flatten(1).norm(dim=1) / my.flatten(1).norm(dim=1).clamp_min(eps)
        log_mag = (torch.log(my + eps) - torch.log(mx + eps)).abs().flatten(1).mean(1)
        total = total + convergence + log_mag
    return (total / len(sizes)).reshape(batch, -1).mean(1)


def si_sdr(estimate: torch.Tensor, reference: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Scale-invariant signal-to-distortion ratio in dB per example (shape ``(batch,)``; Le Roux et al.,
    ICASSP 2019), on zero-mean signals: ``10 log10(‖α y‖² / ‖α y − x‖²)`` with ``α = ⟨x, y⟩ / ‖y‖²``.
    Channels of one example are concatenated. Higher is better; ``+inf`` is clipped by ``eps``."""
    x = check_audio(estimate, "estimate")
    y = check_audio(reference, "reference")
    check_same_shape(estimate, reference, "estimate and reference")
    eps = check_number(eps, "eps", above=0, maximum=1.0)
    batch = estimate.shape[0]
    x, y = (
        x.reshape(batch, -1).to(torch.promote_types(x.dtype, torch.float32)),
        y.reshape(batch, -1).to(torch.promote_types(y.dtype, torch.float32)),
    )
    x = x - x.mean(1, keepdim=True)
    y = y - y.mean(1, keepdim=True)
    alpha = (x * y).sum(1, keepdim=True) / (y.square().sum(1, keepdim=True) + eps)
    target = alpha * y
    return 10 * torch.log10((target.square().sum(1) + eps) / ((target - x).square().sum(1) + eps))


def spectral_features(audio: torch.Tensor, n_fft: int = 512, bands: int = 32) -> torch.Tensor:
    """Per-example spectral statistics for Fréchet distances (shape ``(batch, 2 · bands)``, float64): the
    mean and standard deviation over frames of the log energy in ``bands`` equal-width frequency bands of a
    Hann-windowed STFT (hop ``n_fft / 4``). A fixed, training-free stand-in for learned audio embeddings
    (VGGish, CLAP and OpenL3 download weights). Channels are averaged."""
    check_audio(audio, "audio")
    n_fft = check_int(n_fft, "n_fft", 4)
    bands = check_int(bands, "bands", 1, n_fft // 2 + 1)
    if n_fft // 2 >= audio.shape[-1]:
        raise ValueError(
            f"n_fft must be below twice the signal length ({audio.shape[-1]} samples), got {n_fft}"
        )
    batch = audio.shape[0]
    x = audio.reshape(-1, audio.shape[-1]).double()
    power = _magnitude(x, n_fft).square()  # (B·C, freq, frames)
    edges = torch.linspace(0, power.shape[1], bands + 1).round().long()
    energy = torch.stack([power[:, a:b].sum(1) for a, b in itertools.pairwise(edges)], 1)
    log_energy = torch.log(energy + 1e-10).reshape(batch, -1, bands, energy.shape[-1]).mean(1)
    return torch.cat([log_energy.mean(-1), log_energy.std(-1, correction=0)], dim=1)
