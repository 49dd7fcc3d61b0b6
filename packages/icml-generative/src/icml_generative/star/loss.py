"""The STAR regularizer: a per-channel KL weight that grows with the channel index, and its diagnostics.

STAR (Structured Topology-Aware Regularization) replaces a VAE's scalar ``β · KL`` by

    L_STAR = Σ_c β_c · KL(q(z_c | x) ‖ N(0, 1)),    β_c = β_min + (β_max − β_min) · ((c − 1) / (C − 1))^γ,

so low-index channels (small β: a "safe harbour") keep structure and high-index channels (large β: a
"noise floor") hold what is left (texture) or collapse to the prior. ``γ > 1`` widens the low-β region. The
formula is the one of the project page (STAR-VAE.github.io); β_min, β_max and γ are not given there, so the
defaults here (β_min = 1e-5, β_max = 1e-2, γ = 2) are ours. ``β_min = β_max`` is the β-VAE loss.

Diagnostics: :func:`per_channel_kl`, :func:`channel_correlation` / :func:`latent_correlation` (the paper's
"LC"), :func:`channel_ordering` (Spearman of channel index against per-channel KL) and
:func:`truncation_curve` (reconstruction distance with the channels from ``keep`` on set to the prior mean).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from icml_generative.sampling.metrics import spearman
from icml_generative.validation import as_real_tensor, check_choice, check_int, check_number, check_tensor

REDUCTIONS = ("sum", "mean")
MAX_CHANNELS = 2**20
MAX_BETA = 1e30  # the weights are stored in float32


def beta_schedule(
    channels: int, beta_min: float = 1e-5, beta_max: float = 1e-2, gamma: float = 2.0
) -> torch.Tensor:
    """The STAR weights ``β_c`` for ``c = 1..channels`` (float64, shape ``(channels,)``): monotone from
    ``beta_min`` to ``beta_max`` with the convex (``gamma > 1``), linear (``= 1``) or concave (``< 1``) power
    ``((c − 1) / (C − 1))^gamma``. One channel gets ``beta_min``."""
    channels = check_int(channels, "channels", 1, MAX_CHANNELS)
    beta_min, beta_max = _check_betas(beta_min, beta_max)
    gamma = check_number(gamma, "gamma", above=0)
    if channels == 1:
        return torch.full((1,), beta_min, dtype=torch.float64)
    u = torch.arange(channels, dtype=torch.float64) / (channels - 1)
    return beta_min + (beta_max - beta_min) * u**gamma


def matched_uniform_beta(
    channels: int, beta_min: float = 1e-5, beta_max: float = 1e-2, gamma: float = 2.0
) -> float:
    """The uniform β with the same total KL pressure ``Σ_c β_c`` as the STAR schedule: its mean."""
    return float(beta_schedule(channels, beta_min, beta_max, gamma).mean())


def _check_betas(beta_min: Any, beta_max: Any) -> tuple[float, float]:
    beta_min = check_number(beta_min, "beta_min", 0, MAX_BETA)
    beta_max = check_number(beta_max, "beta_max", 0, MAX_BETA)
    if beta_min > beta_max:
        raise ValueError(f"beta_min ({beta_min}) must not exceed beta_max ({beta_max})")
    return beta_min, beta_max


def posterior_moments(posterior: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, logvar)`` of a diagonal Gaussian posterior given as a ``torch.distributions.Normal``, an object
    with ``mean`` and ``logvar`` (diffusers' ``DiagonalGaussianDistribution`` and
    ``OobleckDiagonalGaussianDistribution``), an object with ``mean`` and ``std``, or a ``(mean, logvar)``
    pair of tensors."""

    def tensor_attr(name: str) -> bool:
        return isinstance(getattr(posterior, name, None), torch.Tensor)

    if isinstance(posterior, torch.distributions.Normal):
        mean, logvar = posterior.loc, 2 * torch.log(posterior.scale)
    elif isinstance(posterior, (tuple, list)) and len(posterior) == 2:
        mean, logvar = posterior
    elif tensor_attr("mean") and tensor_attr("logvar"):
        mean, logvar = posterior.mean, posterior.logvar
    elif tensor_attr("mean") and tensor_attr("std"):
        mean, logvar = posterior.mean, 2 * torch.log(posterior.std)
    else:
        raise TypeError(
            "posterior must be a torch.distributions.Normal, an object with mean and logvar (or std) tensors, "
            f"or a (mean, logvar) pair, got {type(posterior).__name__}"
        )
    check_tensor(mean, "posterior mean", floating=True, finite=True)
    check_tensor(logvar, "posterior logvar", floating=True, finite=True)
    if mean.shape != logvar.shape:
        raise ValueError(
            f"posterior mean and logvar must have the same shape, got {tuple(mean.shape)} and {tuple(logvar.shape)}"
        )
    if mean.ndim < 2:
        raise ValueError(f"posterior must be shaped (batch, channels, ...), got {tuple(mean.shape)}")
    return mean, logvar


def per_channel_kl(posterior: Any, channel_dim: int = 1, reduction: str = "mean") -> torch.Tensor:
    """``KL(q(z_c | x) ‖ N(0, 1))`` per channel ``c``, shape ``(channels,)``, differentiable.

    Each latent element contributes ``(μ² + σ² − log σ² − 1) / 2`` nats (the exact KL, as
    ``torch.distributions.kl_divergence``; note that diffusers' ``OobleckDiagonalGaussianDistribution.kl``
    omits the ``1/2``). Over the positions (every dimension but batch and channel) the nats are averaged
    (``reduction="mean"``, the default: nats per latent frame, the scale of stable-audio-tools' KL term
    ``kl.sum(1).mean()``, on which β ≈ 1e-4 is usual) or summed (``"sum"``: nats per example); over the
    batch (dimension 0) they are averaged. With ``"sum"`` the channels' values sum to the total KL per
    example.

    In the moments' dtype; half-precision moments are computed in float32 (``σ² − log σ² − 1`` cancels for
    channels near the prior: in bfloat16 such a channel's KL was off by up to 64 %), and ``σ² − log σ² − 1``
    is formed without that cancellation (a series near the prior, ``expm1`` elsewhere): a channel near the
    prior keeps its digits and no KL is negative.
    """
    mean, logvar = posterior_moments(posterior)
    check_choice(reduction, "reduction", REDUCTIONS)
    channel_dim = _channel_dim(channel_dim, mean.ndim)
    out_dtype = torch.promote_types(mean.dtype, logvar.dtype)
    dtype = torch.promote_types(out_dtype, torch.float32)
    m, lv = mean.to(dtype), logvar.to(dtype)
    kl = 0.5 * (m.square() + _expm1_minus_x(lv))
    kl = kl.movedim(channel_dim, 1).flatten(2)  # (batch, channels, positions)
    kl = kl.sum(2) if reduction == "sum" else kl.mean(2)
    return kl.mean(0).to(out_dtype)


def _expm1_minus_x(x: torch.Tensor) -> torch.Tensor:
    """``exp(x) − 1 − x``, differentiable and without the cancellation of ``x.exp() − x − 1`` near 0 (in float32
    that lost every digit at ``|x|`` ≈ 1e-4 and went negative): the Taylor series to ``x¹⁰`` where ``|x| < 0.1``
    (truncation below float64's rounding), ``expm1(x) − x`` elsewhere. Within 8 ulp of the exact value in
    float32 and float64, the gradient within 5 ulp of ``expm1(x)``."""
    small = x.abs() < 0.1
    t = torch.where(small, x, torch.zeros_like(x))  # large x stay out of the series (and of its gradient)
    series = torch.zeros_like(t)
    for k in range(10, 1, -1):  # Horner: x² · (1/2! + x/3! + … + x⁸/10!)
        series = series * t + 1 / math.factorial(k)
    return torch.where(small, t.square() * series, torch.expm1(x) - x)


def _channel_dim(channel_dim: Any, ndim: int) -> int:
    channel_dim = check_int(channel_dim, "channel_dim", -ndim + 1, ndim - 1)
    channel_dim %= ndim
    if channel_dim == 0:
        raise ValueError("channel_dim must not be the batch dimension 0")
    return channel_dim


class STARLoss(nn.Module):
    """``Σ_c β_c · KL_c`` for any VAE whose latents have ``channels`` channels on ``channel_dim``: a drop-in
    replacement of the ``β · KL`` term (reconstruction and adversarial terms are unchanged).

    ``loss = STARLoss(16)(posterior)`` with any posterior :func:`posterior_moments` reads (diffusers'
    ``AutoencoderKL`` / ``AutoencoderOobleck`` ``encode(x).latent_dist`` included). ``STARLoss.uniform(C, β)``
    is the β-VAE term; ``matched_uniform(...)`` the uniform β of equal total pressure. ``reduction`` as in
    :func:`per_channel_kl`. The weights are the buffer ``betas`` (float32; moved with ``.to``).
    """

    betas: torch.Tensor

    def __init__(
        self,
        channels: int,
        beta_min: float = 1e-5,
        beta_max: float = 1e-2,
        gamma: float = 2.0,
        channel_dim: int = 1,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.register_buffer("betas", beta_schedule(channels, beta_min, beta_max, gamma).float())
        self.channels, self.beta_min, self.beta_max, self.gamma = int(channels), beta_min, beta_max, gamma
        self.channel_dim = check_int(channel_dim, "channel_dim")
        if self.channel_dim == 0:
            raise ValueError("channel_dim must not be the batch dimension 0")
        self.reduction = check_choice(reduction, "reduction", REDUCTIONS)

    @classmethod
    def uniform(cls, channels: int, beta: float, channel_dim: int = 1, reduction: str = "mean") -> STARLoss:
        """The β-VAE term ``β · Σ_c KL_c`` (STAR with ``β_min = β_max = beta``)."""
        return cls(channels, beta, beta, 1.0, channel_dim, reduction)

    @classmethod
    def matched_uniform(
        cls,
        channels: int,
        beta_min: float = 1e-5,
        beta_max: float = 1e-2,
        gamma: float = 2.0,
        channel_dim: int = 1,
        reduction: str = "mean",
    ) -> STARLoss:
        """The uniform term with the total pressure ``Σ_c β_c`` of ``STARLoss(channels, beta_min, beta_max, gamma)``."""
        beta = matched_uniform_beta(channels, beta_min, beta_max, gamma)
        return cls.uniform(channels, beta, channel_dim, reduction)

    def per_channel(self, posterior: Any) -> torch.Tensor:
        """The per-channel KL the loss weights (shape ``(channels,)``)."""
        kl = per_channel_kl(posterior, self.channel_dim, self.reduction)
        if kl.shape[0] != self.channels:
            raise ValueError(
                f"posterior has {kl.shape[0]} channels on dim {self.channel_dim}, the loss was built for {self.channels}"
            )
        return kl

    def forward(self, posterior: Any) -> torch.Tensor:
        kl = self.per_channel(posterior)
        return (self.betas.to(kl) * kl).sum()

    def extra_repr(self) -> str:
        return (
            f"channels={self.channels}, beta_min={self.beta_min:g}, beta_max={self.beta_max:g}, "
            f"gamma={self.gamma:g}, channel_dim={self.channel_dim}, reduction={self.reduction!r}"
        )


def channel_correlation(latents: torch.Tensor, channel_dim: int = 1) -> torch.Tensor:
    """Pearson correlation matrix ``(C, C)`` (float64) of the latent channels, over every batch element and
    position. A constant channel has no correlation: its row and column are 0 (1 on the diagonal), with a
    ``RuntimeWarning``."""
    check_tensor(latents, "latents", floating=True, finite=True)
    if latents.ndim < 2:
        raise ValueError(f"latents must be shaped (batch, channels, ...), got {tuple(latents.shape)}")
    channel_dim = _channel_dim(channel_dim, latents.ndim)
    x = latents.detach().double().movedim(channel_dim, 0).flatten(1)  # (C, samples)
    if x.shape[1] < 2:
        raise ValueError(f"latents must hold at least 2 values per channel, got {x.shape[1]}")
    x = x - x.mean(1, keepdim=True)
    norm = x.norm(dim=1)
    constant = norm <= 1e-12 * max(x.abs().max().item(), 1e-300)
    if constant.any():
        warnings.warn(
            f"channel_correlation: channels {constant.nonzero().flatten().tolist()} are constant; their "
            "correlations are set to 0",
            RuntimeWarning,
            stacklevel=2,
        )
    z = x / torch.where(constant, torch.ones_like(norm), norm)[:, None]
    z[constant] = 0
    corr = (z @ z.T).clamp(-1, 1)
    corr.fill_diagonal_(1.0)
    return corr


def latent_correlation(latents: torch.Tensor, channel_dim: int = 1) -> float:
    """The mean absolute off-diagonal channel correlation (the paper's "LC"; lower is better), 0 for one
    channel."""
    corr = channel_correlation(latents, channel_dim)
    c = corr.shape[0]
    if c == 1:
        return 0.0
    return float((corr.abs().sum() - c) / (c * (c - 1)))


def channel_ordering(kl: torch.Tensor | Sequence[float]) -> float:
    """Spearman correlation of the channel index against per-channel KL: near −1 when information is
    packed into low channels (what STAR aims at), near 0 when unordered. NaN with a warning for fewer than 3
    channels or a constant KL."""
    values = as_real_tensor(kl, "kl")
    if values.ndim != 1 or not torch.isfinite(values).all():
        raise ValueError(
            f"kl must be a 1-D sequence of finite numbers (one per channel), got shape {tuple(values.shape)}"
        )
    return spearman(torch.arange(len(values), dtype=torch.float64), values.cpu())


def truncate_channels(latents: torch.Tensor, keep: int, channel_dim: int = 1) -> torch.Tensor:
    """A copy of ``latents`` with channels ``keep, keep + 1, ...`` (0-based) set to 0, the prior mean."""
    check_tensor(latents, "latents", floating=True, finite=True)
    if latents.ndim < 2:
        raise ValueError(f"latents must be shaped (batch, channels, ...), got {tuple(latents.shape)}")
    channel_dim = _channel_dim(channel_dim, latents.ndim)
    keep = check_int(keep, "keep", 0, latents.shape[channel_dim])
    out = latents.clone()
    out.narrow(channel_dim, keep, latents.shape[channel_dim] - keep).zero_()
    return out


def truncation_curve(
    decode: Callable[[torch.Tensor], torch.Tensor],
    latents: torch.Tensor,
    reference: torch.Tensor,
    distance: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | float],
    keeps: Sequence[int] | None = None,
    channel_dim: int = 1,
) -> dict[int, float]:
    """``{keep: distance(decode(truncate_channels(latents, keep)), reference)}`` for each ``keep`` (default
    every count from 1 to C), under ``torch.no_grad``. How much reconstruction survives when only the first
    ``keep`` channels are kept: flat for ordered latents, steep where information is spread out."""
    if not callable(decode):
        raise TypeError(f"decode must be callable (latents -> audio), got {type(decode).__name__}")
    if not callable(distance):
        raise TypeError(
            f"distance must be callable (estimate, reference) -> number, got {type(distance).__name__}"
        )
    check_tensor(latents, "latents", floating=True, finite=True)
    if latents.ndim < 2:
        raise ValueError(f"latents must be shaped (batch, channels, ...), got {tuple(latents.shape)}")
    check_tensor(reference, "reference")
    if reference.ndim == 0 or reference.shape[0] != latents.shape[0]:
        raise ValueError(
            f"reference must have one item per latent (batch {latents.shape[0]}), got shape {tuple(reference.shape)}"
        )
    c = latents.shape[_channel_dim(channel_dim, latents.ndim)]
    keeps = list(range(1, c + 1)) if keeps is None else [check_int(k, "keeps", 0, c) for k in keeps]
    out: dict[int, float] = {}
    with torch.no_grad():
        for k in keeps:
            value = distance(decode(truncate_channels(latents, k, channel_dim)), reference)
            out[k] = float(value.mean()) if isinstance(value, torch.Tensor) else float(value)
            if not math.isfinite(out[k]):
                warnings.warn(
                    f"truncation_curve: distance at keep={k} is {out[k]}", RuntimeWarning, stacklevel=2
                )
    return out
