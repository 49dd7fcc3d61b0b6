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

Gradient accumulation follows TRL: with ``"grpo"`` and ``"dr_grpo"`` divide each micro-batch's loss by the
number of micro-batches (give ``"dr_grpo"`` ``max_completion_length``, as TRL's config does, when micro-batches
are padded to different widths); with ``"dapo"`` pass ``num_items_in_batch`` (the completion tokens of the whole
accumulated batch) and do not divide, so that the micro-batch gradients sum to the full batch's gradient.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from icml_agents.rl.advantages import group_relative_advantages, max_exponent
from icml_agents.validation import (
    at_least_float32,
    check_choice,
    check_int,
    check_real,
    check_tensor,
    expm1_minus_x,
)

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

    def __post_init__(self) -> None:
        check_int(self.num_generations, "num_generations", 2)
        check_real(self.epsilon, "epsilon", "[0, inf)")
        if self.epsilon_high is not None:
            check_real(self.epsilon_high, "epsilon_high", "[0, inf)")
        check_real(self.beta, "beta", "[0, inf)")
        check_choice(self.scale_rewards, "scale_rewards", SCALES)
        check_choice(self.loss_type, "loss_type", LOSS_TYPES)
        check_int(self.num_iterations, "num_iterations", 1)
        check_real(self.std_eps, "std_eps", "[0, inf)")


def compute_advantages(rewards, group_size: int, scale: str = "group", eps: float = 1e-4):
    """Group-relative advantages and the fraction of groups whose rewards all tie.

    ``rewards`` is 1-D ``(n_groups * group_size,)``, groups consecutive. Returns ``(advantages, frac_zero_std)``
    with ``advantages`` a float tensor of the same length (float64 unless ``rewards`` is a float tensor; half
    precision is computed in float32 and cast back).
    """
    check_choice(scale, "scale", SCALES)
    out_dtype = None
    if isinstance(rewards, torch.Tensor) and rewards.dtype in (torch.float16, torch.bfloat16):
        out_dtype, rewards = rewards.dtype, rewards.float()  # eps / 2^e below would underflow in half
    centred = group_relative_advantages(rewards, group_size, normalize_std=scale == "group", eps=eps)
    centred = centred if isinstance(centred, torch.Tensor) else torch.from_numpy(centred)
    r = rewards if isinstance(rewards, torch.Tensor) else torch.as_tensor(rewards, dtype=torch.float64)
    r = r.to(centred.dtype).reshape(-1, group_size)  # (n_groups, G)
    tied = (r.max(dim=1).values - r.min(dim=1).values) == 0  # (n_groups,) exactly tied, no tolerance
    if scale == "batch" and r.numel() > 1:  # on r / 2^e >= max|r| (exact), so that the std cannot overflow
        two_e = 2.0 ** min(math.frexp(float(r.abs().max()))[1], max_exponent(r.dtype))
        flat = (r / two_e).reshape(-1)
        # the std of r - min(r) (the same std): exact differences, so rewards that tie but for an ulp are
        # not swamped by the rounding of their mean (float32 copies of 1000.1 had a batch std 25% off)
        centred = (centred / two_e) / ((flat - flat.min()).std() + eps / two_e)
    if out_dtype is not None:
        centred = centred.to(out_dtype)
    return centred, float(tied.float().mean())


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0).

    Computed without cancellation: for a log-ratio ``|d| < 0.1`` by its Taylor series
    ``d^2 (1/2! + d/3! + ... + d^8/10!)``, else as ``expm1(d) - d``. Evaluated as written, ``exp(d) - d - 1``
    cancels to rounding noise for a small ``d`` (in float32, the mean over log-ratios of spread 3e-4 was 28%
    low, and spread 1e-4 gave negative values). Half precision is computed in float32 and cast back."""
    check_tensor(logp, "logp", floating=True)
    check_tensor(ref_logp, "ref_logp", logp.shape, floating=True)
    for name, t in (("logp", logp), ("ref_logp", ref_logp)):
        if not bool(torch.isfinite(t.detach()).all()):
            raise ValueError(f"{name} must be finite, got NaN or inf")
    out_dtype = torch.promote_types(logp.dtype, ref_logp.dtype)
    delta = at_least_float32(ref_logp) - at_least_float32(logp)
    kl = expm1_minus_x(delta).to(out_dtype)
    if not bool(torch.isfinite(kl.detach()).all()):
        warnings.warn(
            "k3_kl: exp(ref_logp - logp) overflows (a log-ratio above ~709 in float64, ~88 in float32 and "
            "bfloat16, ~11 in float16); the estimate holds inf",
            RuntimeWarning,
            stacklevel=2,
        )
    return kl


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
    num_items_in_batch=None,
):
    """The GRPO loss of a batch of completions and its statistics.

    ``logp`` ``(B, T)``: per-token log-probabilities of the sampled tokens under the current policy (with
    gradient); ``old_logp`` ``(B, T)``: the same under the sampling policy (detached; pass ``logp.detach()``
    when there is one optimisation pass per batch); ``advantages`` ``(B,)``; ``mask`` ``(B, T)``: 1 for
    completion tokens (default all ones); ``ref_logp`` ``(B, T)``: the reference policy, needed when
    ``beta > 0``; ``advantages`` and ``mask`` are moved to ``logp``'s device. Returns ``(loss, stats)``;
    ``stats`` holds plain floats: ``kl`` (mean k3 over tokens), ``clip_ratio`` (fraction of tokens where the
    clip is active), ``mean_ratio``. Half precision (float16, bfloat16) is computed in float32; the loss is
    cast back to ``logp``'s dtype.

    ``num_items_in_batch`` (``loss_type="dapo"`` only; a number or a one-element tensor, as TRL's
    ``GRPOTrainer`` computes it): the number of completion tokens (the sum of ``mask``) over all the
    micro-batches of one optimiser step. The loss is then ``sum(per_token * mask) / num_items_in_batch``
    (the divisor clamped to at least 1), so that summing the micro-batch losses (not dividing them by their
    number) gives the full batch's loss and gradient. Without it, each micro-batch is averaged over its own
    tokens, and micro-batches with fewer tokens weigh more per token (TRL's ``"bnpo"``). Under data-parallel
    training that averages gradients over ranks, pass the global count divided by the number of ranks, as TRL
    does.
    """
    logp = check_tensor(logp, "logp", ndim=2, floating=True)  # (batch, tokens)
    old_logp = check_tensor(old_logp, "old_logp", logp.shape, floating=True)
    # advantages and mask often come from the CPU (rewards are Python lists): they follow logp's device
    advantages = check_tensor(advantages, "advantages", logp.shape[:1]).to(logp.device)
    mask = torch.ones_like(logp) if mask is None else check_tensor(mask, "mask", logp.shape).to(logp.device)
    if mask.is_complex() or not bool(((mask >= 0) & (mask <= 1)).all()):  # NaN fails both comparisons
        raise ValueError("mask must hold weights in [0, 1] (1 for completion tokens, 0 for padding)")
    if advantages.is_complex():
        raise TypeError(f"advantages must be a real tensor, got dtype {advantages.dtype}")
    check_choice(loss_type, "loss_type", LOSS_TYPES)
    epsilon = check_real(epsilon, "epsilon", "[0, inf)")  # as GRPOConfig: a negative range inverts the clip
    eps_high = epsilon if epsilon_high is None else check_real(epsilon_high, "epsilon_high", "[0, inf)")
    beta = check_real(beta, "beta", "[0, inf)")
    if max_completion_length is not None:
        check_int(max_completion_length, "max_completion_length", 1)
    n_items = None
    if num_items_in_batch is not None:
        if loss_type != "dapo":
            raise ValueError(
                f"num_items_in_batch applies to loss_type='dapo' only, got loss_type={loss_type!r}; for 'grpo' "
                "and 'dr_grpo', divide each micro-batch's loss by the number of micro-batches (as TRL does)"
            )
        if isinstance(num_items_in_batch, torch.Tensor):
            if num_items_in_batch.numel() != 1 or num_items_in_batch.is_complex():
                raise ValueError(
                    "num_items_in_batch must be a number in [0, inf) or a one-element real tensor, got a tensor "
                    f"of shape {tuple(num_items_in_batch.shape)} and dtype {num_items_in_batch.dtype}"
                )
            num_items_in_batch = num_items_in_batch.item()
        n_items = max(check_real(num_items_in_batch, "num_items_in_batch", "[0, inf)"), 1.0)
    if beta > 0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta > 0")
    if ref_logp is not None:
        ref_logp = check_tensor(ref_logp, "ref_logp", logp.shape, floating=True).detach()
    # padding may hold anything (it is zeroed before use, so a NaN there reaches neither the loss nor the
    # gradient); completion tokens must be finite
    completion = mask.detach() != 0
    for name, t in (("logp", logp), ("old_logp", old_logp), ("ref_logp", ref_logp)):
        if t is not None and not bool((torch.isfinite(t.detach()) | ~completion).all()):
            raise ValueError(f"{name} must be finite on the completion tokens (mask != 0), got NaN or inf")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages must be finite, got NaN or inf")
    out_dtype = logp.dtype
    # half precision in float32: sums over more than 65504 tokens overflow float16 (the loss became 0 or NaN)
    # and k3 of small log-ratios cancels to rounding noise
    logp, old_logp = (
        at_least_float32(torch.where(completion, t, torch.zeros_like(t))) for t in (logp, old_logp)
    )
    if ref_logp is not None:
        ref_logp = at_least_float32(torch.where(completion, ref_logp, torch.zeros_like(ref_logp)))
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(1)  # (B, 1)
    ratio = torch.exp(logp - old_logp.detach())  # (B, T)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (B, T)
    kl = None
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        if beta > 0:
            per_token = per_token + beta * kl
    masked = per_token * mask
    if loss_type == "grpo":
        loss = (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    elif loss_type == "dapo":
        loss = masked.sum() / (mask.sum().clamp(min=1) if n_items is None else n_items)
    else:  # dr_grpo
        length = logp.shape[1] if max_completion_length is None else max_completion_length
        loss = masked.sum() / float(logp.shape[0] * length)  # a float: any int length converts
    loss = loss.to(out_dtype)
    if not bool(torch.isfinite(loss.detach())):
        warnings.warn(
            "grpo_loss: the loss overflows (an importance ratio exp(logp - old_logp), a k3 term, a weight or "
            f"a length too large for {out_dtype}); it is {float(loss)}",
            RuntimeWarning,
            stacklevel=2,
        )
    n_tok = mask.sum().clamp(min=1)
    with torch.no_grad():
        is_clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        stats = {
            "clip_ratio": float((is_clipped.to(mask.dtype) * mask).sum() / n_tok),
            "mean_ratio": float((ratio * mask).sum() / n_tok),
            "kl": float((kl * mask).sum() / n_tok) if kl is not None else 0.0,
        }
    if not all(math.isfinite(v) for v in stats.values()):
        warnings.warn(f"grpo_loss: a statistic overflows {logp.dtype}: {stats}", RuntimeWarning, stacklevel=2)
    return loss, stats
