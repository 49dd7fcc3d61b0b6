"""Group-relative advantages, the critic-free baseline of GRPO.

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", 2024,
Sec. 4.1 (GRPO, outcome supervision): for G completions of one prompt with rewards ``r_1..r_G``,
``A_i = (r_i - mean(r)) / std(r)``. We follow TRL's ``GRPOTrainer``: completions of one prompt are
consecutive, the standard deviation is the unbiased one (``torch.std``), and ``eps = 1e-4`` is added to
it, so a group whose rewards are all equal gets zero advantages, not NaN. ``normalize_std=False`` gives
the Dr. GRPO variant (Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", 2025).
"""

from __future__ import annotations

import numpy as np
import torch

from icml_agents.validation import check_int, check_real


def group_relative_advantages(rewards, group_size: int, normalize_std: bool = True, eps: float = 1e-4):
    """``(r - mean_group(r)) / (std_group(r) + eps)`` for rewards laid out as consecutive groups.

    ``rewards`` is 1-D, length ``n_groups * group_size`` (a torch tensor, a NumPy array or a sequence);
    the result has the same length and is a tensor for a tensor input, else a float64 NumPy array.
    """
    group_size = check_int(group_size, "group_size", 2, why=" (a group of one has no baseline)")
    check_real(eps, "eps", "[0, inf)")
    is_tensor = isinstance(rewards, torch.Tensor)
    if is_tensor:
        r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    else:
        try:
            r = torch.from_numpy(np.asarray(rewards, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(
                f"rewards must be numbers (a tensor, an array or a sequence), got {rewards!r}"
            ) from None
    if r.ndim != 1 or r.numel() == 0 or r.numel() % group_size:
        raise ValueError(
            f"rewards must be 1-D with a length that is a positive multiple of group_size={group_size}, "
            f"got shape {tuple(r.shape)}"
        )
    if not torch.isfinite(r).all():
        raise ValueError("rewards contain NaN or infinite values")
    grouped = r.reshape(-1, group_size)  # (n_groups, group_size); reshape: the input may be strided
    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_std:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + eps)
    advantages = advantages.reshape(-1)  # (n_groups * group_size,)
    return advantages if is_tensor else advantages.numpy()
