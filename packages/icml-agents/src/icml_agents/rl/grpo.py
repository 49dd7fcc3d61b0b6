"""A compact GRPO objective for torch policies: categorical-answer heads and token generators alike.

Shao et al. 2024 (DeepSeekMath, Sec. 4.1) with the variants TRL's ``GRPOTrainer`` exposes (we follow its
conventions so numbers are comparable):

* advantages (:func:`compute_advantages`): ``A_i = r_i - mean_group(r)``, divided by ``std + eps`` of the
  group (``scale="group"``), of the whole batch (``"batch"``), or not at all (``"none"``, Dr. GRPO). Groups
  whose rewards all tie have ``A = 0`` and so contribute no policy gradient; their fraction is returned
  (TRL logs it as ``frac_reward_zero_std``; it is the usual reason for "loss = 0, grad_norm = 0");
* per token: ``-min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) + beta KL3`` with ``rho = exp(logp -
  old_logp)`` and the k3 estimator ``KL3 = exp(ref - logp) - (ref - logp) - 1`` of KL(pi || pi_ref)
  (Schulman 2020), which is >= 0 and unbiased for samples from pi;
* aggregation (:func:`grpo_loss`): ``"grpo"`` averages each sequence over its tokens, then the sequences;
  ``"dapo"`` averages over all tokens of the batch; ``"dr_grpo"`` sums and divides by
  ``batch * max_completion_length``. A categorical policy is the one-token case (``T = 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icml_agents.rl.advantages import group_relative_advantages

SCALES = ("group", "batch", "none")
LOSS_TYPES = ("grpo", "dapo", "dr_grpo")


@dataclass
class GRPOConfig:
    """GRPO hyper-parameters (TRL's ``GRPOConfig`` names and defaults where they exist)."""

    num_generations: int = 8  # G, completions per prompt; completions of one prompt are consecutive
    epsilon: float = 0.2  # lower clip range
    epsilon_high: float | None = None  # upper clip range (DAPO's clip-higher); None: same as epsilon
    beta: float = 0.0  # weight of the k3 KL to the reference policy; 0 needs no reference
    scale_rewards: str = "group"  # "group" | "batch" | "none"
    loss_type: str = "dapo"  # "grpo" | "dapo" | "dr_grpo"
    num_iterations: int = 1  # optimisation passes per generation batch (mu)
    std_eps: float = 1e-4  # added to the standard deviation, as in TRL

    def __post_init__(self):
        if (
            isinstance(self.num_generations, bool)
            or not isinstance(self.num_generations, int)
            or self.num_generations < 2
        ):
            raise ValueError(f"num_generations must be an integer >= 2, got {self.num_generations!r}")
        if not self.epsilon >= 0 or (self.epsilon_high is not None and not self.epsilon_high >= 0):
            raise ValueError(
                f"epsilon and epsilon_high must be >= 0, got {self.epsilon!r}, {self.epsilon_high!r}"
            )
        if not self.beta >= 0:
            raise ValueError(f"beta must be >= 0, got {self.beta!r}")
        if self.scale_rewards not in SCALES:
            raise ValueError(f"scale_rewards must be one of {SCALES}, got {self.scale_rewards!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        if (
            isinstance(self.num_iterations, bool)
            or not isinstance(self.num_iterations, int)
            or self.num_iterations < 1
        ):
            raise ValueError(f"num_iterations must be an integer >= 1, got {self.num_iterations!r}")


def compute_advantages(rewards, group_size: int, scale: str = "group", eps: float = 1e-4):
    """Group-relative advantages and the fraction of groups whose rewards all tie.

    ``rewards`` is 1-D ``(n_groups * group_size,)``, groups consecutive. Returns ``(advantages, frac_zero_std)``
    with ``advantages`` a float tensor of the same length (float64 unless ``rewards`` is a float tensor).
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    centred = group_relative_advantages(rewards, group_size, normalize_std=scale == "group", eps=eps)
    centred = centred if isinstance(centred, torch.Tensor) else torch.from_numpy(centred)
    r = rewards if isinstance(rewards, torch.Tensor) else torch.as_tensor(rewards, dtype=torch.float64)
    r = r.to(centred.dtype).reshape(-1, group_size)  # (n_groups, G)
    tied = (r.max(dim=1).values - r.min(dim=1).values) == 0  # (n_groups,) exactly tied, no tolerance
    if scale == "batch":
        centred = centred / (r.reshape(-1).std() + eps) if r.numel() > 1 else centred
    return centred, float(tied.float().mean())


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def _check_logp(name: str, x, shape) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{name} must be a float tensor, got {type(x).__name__}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (batch, tokens), got shape {tuple(x.shape)}")
    return x


def grpo_loss(
    logp,
    old_logp,
    advantages,
    mask=None,
    ref_logp=None,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
):
    """The GRPO loss of a batch of completions and its statistics.

    ``logp`` ``(B, T)``: per-token log-probabilities of the sampled tokens under the current policy (with
    gradient); ``old_logp`` ``(B, T)``: the same under the sampling policy (detached; pass ``logp.detach()``
    when there is one optimisation pass per batch); ``advantages`` ``(B,)``; ``mask`` ``(B, T)``: 1 for
    completion tokens (default all ones); ``ref_logp`` ``(B, T)``: the reference policy, needed when
    ``beta > 0``. Returns ``(loss, stats)``; ``stats`` holds plain floats: ``kl`` (mean k3 over tokens),
    ``clip_ratio`` (fraction of tokens where the clip is active), ``mean_ratio``.
    """
    logp = _check_logp("logp", logp, None)
    old_logp = _check_logp("old_logp", old_logp, logp.shape)
    if not isinstance(advantages, torch.Tensor) or advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"advantages must be a tensor of shape ({logp.shape[0]},), got "
            f"{getattr(advantages, 'shape', advantages)!r}"
        )
    if mask is None:
        mask = torch.ones_like(logp)
    elif not isinstance(mask, torch.Tensor) or mask.shape != logp.shape:
        raise ValueError(f"mask must be a tensor of shape {tuple(logp.shape)}")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if beta > 0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta > 0")
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(1)  # (B, 1)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp.detach())  # (B, T)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (B, T)
    kl = None
    if ref_logp is not None:
        kl = k3_kl(logp, _check_logp("ref_logp", ref_logp, logp.shape).detach())
        if beta > 0:
            per_token = per_token + beta * kl
    masked = per_token * mask
    if loss_type == "grpo":
        loss = (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    elif loss_type == "dapo":
        loss = masked.sum() / mask.sum().clamp(min=1)
    else:  # dr_grpo
        length = logp.shape[1] if max_completion_length is None else max_completion_length
        loss = masked.sum() / (logp.shape[0] * length)
    n_tok = mask.sum().clamp(min=1)
    with torch.no_grad():
        is_clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        stats = {
            "clip_ratio": float((is_clipped.to(mask.dtype) * mask).sum() / n_tok),
            "mean_ratio": float((ratio * mask).sum() / n_tok),
            "kl": float((kl * mask).sum() / n_tok) if kl is not None else 0.0,
        }
    return loss, stats
