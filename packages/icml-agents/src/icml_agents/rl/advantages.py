"""Group-relative advantages, the critic-free baseline of GRPO.

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", 2024,
Sec. 4.1 (GRPO, outcome supervision): for G completions of one prompt with rewards ``r_1..r_G``,
``A_i = (r_i - mean(r)) / std(r)``. We follow TRL's ``GRPOTrainer``: completions of one prompt are
consecutive, the standard deviation is the unbiased one (``torch.std``), and ``eps = 1e-4`` is added to
it, so a group whose rewards are all equal gets zero advantages, not NaN. ``normalize_std=False`` gives
the Dr. GRPO variant (Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", 2025).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from icml_agents.validation import check_bool, check_int, check_real


def group_relative_advantages(rewards, group_size: int, normalize_std: bool = True, eps: float = 1e-4):
    """``(r - mean_group(r)) / (std_group(r) + eps)`` for rewards laid out as consecutive groups.

    ``rewards`` is 1-D, length ``n_groups * group_size`` (a torch tensor, a NumPy array or a sequence);
    the result has the same length and is a tensor for a tensor input, else a float64 NumPy array. Half
    precision (float16, bfloat16) is computed in float32 and cast back to the input's dtype.
    """
    group_size = check_int(group_size, "group_size", 2, why=" (a group of one has no baseline)")
    check_real(eps, "eps", "[0, inf)")
    check_bool(normalize_std, "normalize_std")
    is_tensor = isinstance(rewards, torch.Tensor)
    if is_tensor:
        if rewards.is_complex():
            raise TypeError(f"rewards must be real numbers, got a tensor of dtype {rewards.dtype}")
        r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    else:
        try:
            arr = np.asarray(rewards)
            if arr.dtype.kind not in "biuf":  # strings, objects, complex: not rewards
                raise TypeError
            r = torch.from_numpy(arr.astype(np.float64))
        except (TypeError, ValueError):
            raise TypeError(
                f"rewards must be real numbers (a tensor, an array or a sequence), got {rewards!r}"
            ) from None
    if r.ndim != 1 or r.numel() == 0 or r.numel() % group_size:
        raise ValueError(
            f"rewards must be 1-D with a length that is a positive multiple of group_size={group_size}, "
            f"got shape {tuple(r.shape)}"
        )
    if not torch.isfinite(r).all():
        raise ValueError("rewards contain NaN or infinite values")
    out_dtype = r.dtype
    r = r.to(torch.promote_types(r.dtype, torch.float32))  # half precision: eps / 2^e below would underflow
    # computed on r / 2^e (exact) with 2^e >= max|r|, so rewards near the float range do not overflow
    # the mean or the variance: (r - m) / (sd + eps) = (r' - m') / (sd' + eps / 2^e)
    scale = 2.0 ** min(math.frexp(float(r.abs().max()))[1], max_exponent(r.dtype))
    grouped = (r / scale).reshape(-1, group_size)  # (n_groups, group_size); reshape: the input may be strided
    # centred on each group's minimum first: r - min is exact for rewards within a factor of 2 of each
    # other and exactly 0 for a tied group, whose mean alone is rounded (eight float32 copies of 1000.1 got
    # A = -0.369 each, the mean and std of a tie being one ulp of noise, and 1e30 in float64 -0.816)
    grouped = grouped - grouped.min(dim=1, keepdim=True).values  # in [0, 2]: |r / scale| <= 1
    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_std:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + eps / scale)  # eps / scale may be inf
    else:
        advantages = advantages * scale
    advantages = advantages.reshape(-1).to(out_dtype)  # (n_groups * group_size,)
    if not torch.isfinite(advantages).all():
        warnings.warn(
            "group_relative_advantages: the advantages hold NaN or inf (with eps=0 a group of tied rewards "
            f"divides 0 by 0; without normalize_std, differences of rewards near the {out_dtype} range "
            "overflow)",
            RuntimeWarning,
            stacklevel=2,
        )
    return advantages if is_tensor else advantages.numpy()


def max_exponent(dtype: torch.dtype) -> int:
    """The largest ``e`` with ``2^e`` finite in ``dtype`` (127 for float32, 1023 for float64): the cap of the
    power-of-two rescaling, since ``2^(e + 1)`` would be inf there and ``r / inf`` zero."""
    return math.frexp(torch.finfo(dtype).max)[1] - 1
