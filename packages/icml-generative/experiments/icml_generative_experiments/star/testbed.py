"""Synthetic 16 kHz audio with a structured part and a textured part, and the training loops of the
``star-audio`` reproduction.

Each clip (``SAMPLES`` = 10240 samples, 0.64 s) mixes

* **structure**: one or two notes, each a harmonic tone of 2-4 partials (amplitudes ``1/k`` with ±30 %
  jitter), fundamental log-uniform in 110-440 Hz gliding linearly in log-frequency by up to ±half an
  octave over the note, under an ADSR envelope (attack 5-40 ms, decay 30-120 ms, sustain 0.3-0.8, release
  20-100 ms), random onsets; peak-normalised to 0.5;
* **texture**: 1-3 noise bursts, white noise band-passed (FFT mask) to one octave around a centre of
  1.5-6 kHz, 20-150 ms long with an exponentially decaying envelope, scaled so that the texture's RMS is
  0-20 dB (uniform) below the structure's;
* a white noise floor at -60 dB full scale (standard deviation 1e-3), as every recording has one (without
  it the log-magnitude term of the STFT distance is dominated by digital silence); the mix is scaled down
  to a peak of 0.95 where it exceeds it.

Clip ``i`` of a split comes from ``numpy.random.default_rng((split, seed, i))``: the same clip on every
machine. :func:`train_vae` and :func:`train_flow` are the reproduction's training loops (Adam, gradient
clipping at 1, fixed seeds).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from icml_generative.star import (
    STARVAE,
    LatentFlowTransformer,
    STARLoss,
    flow_matching_loss,
    stft_distance,
)

RATE = 16000
SAMPLES = 10240
SPLITS = {"train": 0, "heldout": 1, "heldout_b": 2}
FFT_SIZES = (1024, 512, 256, 128, 64)
NOISE_FLOOR = 1e-3
# hop 64 (250 latent frames per second): at hop 320 no VAE we could train within the CPU budget used its
# latents (STFT distance 1.75 with a near-zero β against 2.27 with every latent zeroed; docs/star.md)
VAE_CONFIG: dict[str, Any] = {
    "base_channels": 8,
    "channel_multiples": (1, 2, 4),
    "strides": (4, 4, 4),
    "mamba_layers": 0,
}


def _adsr(n: int, rng: np.random.Generator) -> np.ndarray:
    a, d, r = (int(RATE * rng.uniform(*span)) for span in ((0.005, 0.04), (0.03, 0.12), (0.02, 0.1)))
    sustain = rng.uniform(0.3, 0.8)
    env = np.full(n, sustain)
    a, d, r = min(a, n), min(d, max(n - a, 0)), min(r, n)
    env[:a] = np.linspace(0, 1, a, endpoint=False)
    env[a : a + d] = np.linspace(1, sustain, d, endpoint=False)
    if r:
        env[n - r :] *= np.linspace(1, 0, r)
    return env


def _note(rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(SAMPLES)
    start = int(rng.uniform(0, 0.5) * SAMPLES)
    length = int(rng.uniform(0.3, 1.0) * (SAMPLES - start))
    f0 = math.exp(rng.uniform(math.log(110), math.log(440)))
    glide = rng.uniform(-0.5, 0.5)  # octaves over the note
    freq = f0 * 2 ** (glide * np.linspace(0, 1, length))
    phase = 2 * np.pi * np.cumsum(freq) / RATE
    tone = sum(
        (1 / k) * (1 + rng.uniform(-0.3, 0.3)) * np.sin(k * phase + rng.uniform(0, 2 * np.pi))
        for k in range(1, int(rng.integers(2, 5)) + 1)
    )
    out[start : start + length] = tone * _adsr(length, rng)
    return out


def _burst(rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(SAMPLES)
    length = int(rng.uniform(0.02, 0.15) * RATE)
    start = int(rng.integers(0, SAMPLES - length))
    noise = rng.normal(size=length)
    centre = rng.uniform(1500, 6000)
    freqs = np.fft.rfftfreq(length, 1 / RATE)
    band = (freqs > centre / math.sqrt(2)) & (freqs < centre * math.sqrt(2))
    noise = np.fft.irfft(np.fft.rfft(noise) * band, length)
    out[start : start + length] = noise * np.exp(-np.arange(length) / (0.3 * length))
    return out


def clip(split: str, seed: int, index: int, parts: str = "mix") -> np.ndarray:
    """One clip (float64, ``(SAMPLES,)``); ``parts`` "structure" or "texture" returns that part alone."""
    rng = np.random.default_rng((SPLITS[split], seed, index))
    structure = np.sum([_note(rng) for _ in range(int(rng.integers(1, 3)))], axis=0)
    structure *= 0.5 / max(np.abs(structure).max(), 1e-9)
    texture = np.sum([_burst(rng) for _ in range(int(rng.integers(1, 4)))], axis=0)
    rms = lambda v: math.sqrt(float(np.mean(v**2))) or 1e-9  # noqa: E731
    texture *= rms(structure) / rms(texture) * 10 ** (-rng.uniform(0, 20) / 20)
    mix = structure + texture + NOISE_FLOOR * rng.normal(size=SAMPLES)
    gain = min(1.0, 0.95 / np.abs(mix).max())
    return {"mix": mix, "structure": structure, "texture": texture}[parts] * gain


def clips(split: str, seed: int, n: int, parts: str = "mix") -> torch.Tensor:
    """``n`` clips ``(n, 1, SAMPLES)`` float32."""
    return torch.tensor(np.stack([clip(split, seed, i, parts) for i in range(n)]), dtype=torch.float32)[
        :, None
    ]


def reconstruction_loss(estimate: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The multi-resolution STFT distance (spectral convergence + log-magnitude L1), the loss without KL. A
    waveform L1 term was left out: in the headroom pilots it did not help (STFT distance 1.83 with it, 1.80
    without, hop 320)."""
    return stft_distance(estimate, reference, FFT_SIZES).mean()


def train_vae(
    data: torch.Tensor,
    regularizer: STARLoss,
    steps: int,
    seed: int,
    batch: int = 8,
    lr: float = 2e-3,
    warmup: float = 0.25,
    **config: Any,
) -> tuple[STARVAE, dict[str, Any]]:
    """A :class:`STARVAE` (``config`` overrides :data:`VAE_CONFIG`) trained on ``data`` for ``steps`` Adam
    steps (one-cycle learning rate) with ``reconstruction_loss + w · regularizer``, ``w`` rising linearly from
    0 to 1 over the first ``warmup`` fraction of the steps (KL warm-up: without it every channel collapses to
    the prior before the decoder learns to read the latents); returns the model in eval mode and a log
    (seconds, last losses)."""
    torch.manual_seed(seed)
    model = STARVAE(latent_channels=regularizer.channels, **{**VAE_CONFIG, **config})
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.8, 0.99))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    start, recon_log, kl_log = time.perf_counter(), [], []
    for step in range(steps):
        x = data[torch.randint(0, len(data), (batch,), generator=gen)]
        out = model(x, generator=gen)
        recon = reconstruction_loss(out.sample, x)
        kl = regularizer(out.latent_dist)
        weight = min(1.0, step / max(warmup * steps, 1.0))
        opt.zero_grad(set_to_none=True)
        (recon + weight * kl).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        recon_log.append(recon.item())
        kl_log.append(kl.item())
    model.eval()
    tail = max(1, steps // 10)
    return model, {
        "seconds": time.perf_counter() - start,
        "recon_loss_last": float(np.mean(recon_log[-tail:])),
        "kl_term_last": float(np.mean(kl_log[-tail:])),
    }


@torch.no_grad()
def encode(model: STARVAE, data: torch.Tensor, seed: int, batch: int = 64) -> dict[str, torch.Tensor]:
    """Posterior means, log-variances and one posterior sample per clip (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    means, logvars, samples = [], [], []
    for i in range(0, len(data), batch):
        dist = model.encode(data[i : i + batch]).latent_dist
        means.append(dist.mean)
        logvars.append(dist.logvar)
        samples.append(dist.sample(gen))
    return {"mean": torch.cat(means), "logvar": torch.cat(logvars), "sample": torch.cat(samples)}


@torch.no_grad()
def decode(model: STARVAE, latents: torch.Tensor, batch: int = 64) -> torch.Tensor:
    return torch.cat([model.decode(latents[i : i + batch]).sample for i in range(0, len(latents), batch)])


def train_flow(
    latents: torch.Tensor, steps: int, seed: int, batch: int = 64, lr: float = 1e-3, **config: Any
) -> tuple[LatentFlowTransformer, dict[str, Any]]:
    """A :class:`LatentFlowTransformer` trained by :func:`flow_matching_loss` on ``latents`` (already scaled)."""
    torch.manual_seed(seed)
    model = LatentFlowTransformer(latent_channels=latents.shape[1], max_frames=latents.shape[2], **config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    start, log = time.perf_counter(), []
    for _ in range(steps):
        z = latents[torch.randint(0, len(latents), (batch,), generator=gen)]
        loss = flow_matching_loss(model, z, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        log.append(loss.item())
    model.eval()
    return model, {
        "seconds": time.perf_counter() - start,
        "loss_last": float(np.mean(log[-max(1, steps // 10) :])),
    }
