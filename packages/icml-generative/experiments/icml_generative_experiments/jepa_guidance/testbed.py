"""Worlds with rare modes, generators trained on biased samples of them, and the samplers of the
``jepa-minority`` reproduction.

**Mixture world** (known density): a 2-D isotropic Gaussian mixture, ``MODES`` = 8 components of std
``MODE_STD`` = 0.3 on a circle of radius 3; components 1 and 5 are rare (weight 0.035 each: 7 % of the
world), the six others share the rest. The generator's training sample is drawn from the same mixture
with the rare weights multiplied by ``BIAS`` = 0.15 (1.1 % rare): the generator under-represents what
the world holds.

**Digits world**: scikit-learn's bundled 8×8 digits (1797 images, pixels scaled to [-1, 1]); the world is
all of them, the generator is trained on classes 0-7 and 10 % of the 8s and 9s (rare).

**Generator**: an MLP denoiser ``D(x, σ)`` with EDM preconditioning (Karras et al. 2022: ``c_skip``,
``c_out``, ``c_in``, ``c_noise = log(σ)/4``; training σ log-normal, ``P_mean = −1.2, P_std = 1.2``),
Adam, batches of 512. Sampling: Euler steps of the probability-flow ODE on the EDM schedule
(:func:`~icml_generative.sampling.karras_sigmas`, ``σ_max = 20``, ``σ_min = 0.002``, 32 steps + a final
step to 0); ``x̂0 = D(z, σ)`` is the Tweedie estimate guidance works on.

**World model**: an MLP encoder trained on a world sample by
:func:`~icml_generative.jepa_guidance.train_jepa_encoder` (SIGReg anti-collapse).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from icml_generative.jepa_guidance import TweedieGuidance, mlp_encoder, train_jepa_encoder
from icml_generative.sampling import karras_sigmas

COMMON_STD, RARE_RADIUS, RARE_STD, RARE_MODES = 1.0, 3.0, 0.35, 4
RARE_WEIGHT, BIAS = 0.035, 0.15
SIGMA_MAX, SIGMA_MIN, STEPS = 20.0, 0.002, 32
DIGITS_RARE = (8, 9)
DIGITS_KEEP = 0.10


def mixture_params(bias: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(means (K, 2), stds (K,), weights (K,))``: component 0 is the common mode, 1.. the rare ones."""
    angle = 2 * math.pi * torch.arange(RARE_MODES, dtype=torch.float64) / RARE_MODES + math.pi / 4
    means = torch.cat(
        [torch.zeros(1, 2, dtype=torch.float64), RARE_RADIUS * torch.stack([angle.cos(), angle.sin()], 1)]
    )
    stds = torch.tensor([COMMON_STD] + [RARE_STD] * RARE_MODES, dtype=torch.float64)
    w = torch.tensor([1 - RARE_WEIGHT * RARE_MODES] + [RARE_WEIGHT * bias] * RARE_MODES, dtype=torch.float64)
    return means, stds, w / w.sum()


def mixture_sample(n: int, seed: int, bias: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    means, stds, w = mixture_params(bias)
    comp = torch.multinomial(w, n, replacement=True, generator=gen)
    x = means[comp] + stds[comp, None] * torch.randn(n, 2, generator=gen, dtype=torch.float64)
    return x.float()


def world_log_density(x: torch.Tensor) -> torch.Tensor:
    """The true log-density of the mixture world at ``x (n, 2)``, differentiable."""
    means, stds, w = (t.to(x) for t in mixture_params())
    sq = ((x[:, None, :] - means[None]) ** 2).sum(-1)
    log_comp = w.log() - torch.log(2 * math.pi * stds**2) - 0.5 * sq / stds**2
    return torch.logsumexp(log_comp, dim=1)


def rare_fraction(x: torch.Tensor) -> float:
    """Fraction of samples within 2 standard deviations of a rare mode's centre."""
    means, _stds, _ = mixture_params()
    d = torch.cdist(x.double(), means[1:])
    return float((d.min(dim=1).values < 2 * RARE_STD).double().mean())


def modes_covered(x: torch.Tensor) -> int:
    """Number of modes with at least one sample within 2 standard deviations of their centre."""
    means, stds, _ = mixture_params()
    d = torch.cdist(x.double(), means)
    return int(((d < 2 * stds[None]).any(dim=0)).sum())


def precision(samples: torch.Tensor, reference: torch.Tensor, k: int = 5) -> float:
    """Kynkäänniemi et al. (NeurIPS 2019) precision: the fraction of samples inside the union of the balls
    around each reference point reaching its ``k``-th nearest reference neighbour."""
    ref = reference.double()
    radii = torch.cdist(ref, ref).kthvalue(k + 1, dim=1).values  # (m,): the point itself is the first
    d = torch.cdist(samples.double(), ref)
    return float((d <= radii[None]).any(dim=1).double().mean())


def digits(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as ``(x (1797, 64) in [-1, 1], labels)``."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data / 8.0 - 1.0, dtype=torch.float32)
    return x, torch.tensor(data.target)


def digits_biased(seed: int) -> torch.Tensor:
    """The generator's digits: classes 0-7, and ``DIGITS_KEEP`` of the 8s and 9s (drawn with ``seed``)."""
    x, y = digits()
    rare = torch.isin(y, torch.tensor(DIGITS_RARE))
    keep = torch.rand(len(y), generator=torch.Generator().manual_seed(seed)) < DIGITS_KEEP
    return x[~rare | keep]


class Denoiser(nn.Module):
    """``D(x, σ) = c_skip x + c_out F(c_in x, log(σ)/4)`` with an MLP ``F`` (EDM preconditioning)."""

    def __init__(self, dim: int, sigma_data: float, width: int = 128, depth: int = 3) -> None:
        super().__init__()
        self.sigma_data = sigma_data
        layers: list[nn.Module] = []
        previous = dim + 1
        for _ in range(depth):
            layers += [nn.Linear(previous, width), nn.SiLU()]
            previous = width
        layers.append(nn.Linear(previous, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
        s = torch.as_tensor(sigma, dtype=x.dtype).reshape(-1, 1).expand(x.shape[0], 1)
        sd = self.sigma_data
        c_skip = sd**2 / (s**2 + sd**2)
        c_out = s * sd / (s**2 + sd**2).sqrt()
        c_in = 1 / (s**2 + sd**2).sqrt()
        return c_skip * x + c_out * self.net(torch.cat([c_in * x, s.log() / 4], dim=1))


def train_generator(data: torch.Tensor, steps: int, seed: int, width: int = 128) -> tuple[Denoiser, dict]:
    """EDM training of a :class:`Denoiser` on ``data (n, d)`` (``σ_data`` = the data's overall std)."""
    torch.manual_seed(seed)
    sigma_data = float(data.std())
    model = Denoiser(data.shape[1], sigma_data, width)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for _ in range(steps):
        x = data[torch.randint(len(data), (512,), generator=gen)]
        sigma = (torch.randn(len(x), 1, generator=gen) * 1.2 - 1.2).exp()
        noisy = x + sigma * torch.randn(x.shape, generator=gen)
        weight = (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2
        loss = (weight * (model(noisy, sigma) - x) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval(), {"seconds": time.perf_counter() - start, "loss_last": loss.item()}


def sample(
    model: Denoiser, noise: torch.Tensor, guidance: TweedieGuidance | None = None, steps: int = STEPS
) -> torch.Tensor:
    """Euler on the probability-flow ODE from ``σ_max · noise`` (DDIM in variance-exploding coordinates).

    ``guidance`` acts before each step on the variance-preserving latent ``z / sqrt(1 + σ²)`` (the
    coordinates of DDIM and of the paper's SDXL latents, where a constant ``η`` is a constant fraction of
    the latent's scale), with ``x0_fn = D(·, σ)`` and, for ``schedule="variance"``, DDPM's posterior
    variance between the two noise levels (``ᾱ = 1/(1 + σ²)``).
    """
    sigmas = [*karras_sigmas(steps, SIGMA_MIN, SIGMA_MAX).tolist(), 0.0]
    z = noise * SIGMA_MAX
    for i in range(steps):
        sigma, nxt = sigmas[i], sigmas[i + 1]
        if guidance is not None:
            c = math.sqrt(1 + sigma**2)
            a_t, a_prev = 1 / (1 + sigma**2), 1 / (1 + nxt**2)
            variance = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)

            def x0_fn(v: torch.Tensor, s: float = sigma, c: float = c) -> torch.Tensor:
                return model(v * c, s)

            zv = z / c
            guided = guidance(zv, x0_fn, i, steps, variance)
            if guided is not zv:  # an inactive step (or eta 0) leaves z untouched, bit for bit
                z = c * guided
        with torch.no_grad():
            x0 = model(z, sigma)
        z = z + (nxt - sigma) * (z - x0) / sigma
    return z.detach()


def train_world_encoder(
    world: torch.Tensor, embed_dim: int, steps: int, seed: int, **kwargs: Any
) -> tuple[nn.Module, dict]:
    """An MLP encoder trained as a JEPA on ``world`` (standardised per feature inside, each std floored at
    0.1x the overall std; the returned encoder takes raw inputs)."""
    # the floor: features that are (nearly) constant in the world (the digits' border pixels) would be divided
    # by ~0 and blow any generated deviation up into the encoder's saturated range
    mean, std = world.mean(0), world.std(0).clamp_min(0.1 * float(world.std()))
    torch.manual_seed(seed)
    core = mlp_encoder(world.shape[1], embed_dim)
    log = train_jepa_encoder(core, (world - mean) / std, steps=steps, seed=seed, **kwargs)
    return _Standardized(core, mean, std).eval(), log


class _Standardized(nn.Module):
    def __init__(self, core: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.core = core
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.core((x - self.mean) / self.std)


def paired_bootstrap(diff: np.ndarray, seed: int, draws: int = 2000) -> tuple[float, float]:
    """95 % percentile interval of the mean of paired differences."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(draws, len(diff)))
    means = diff[idx].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))
