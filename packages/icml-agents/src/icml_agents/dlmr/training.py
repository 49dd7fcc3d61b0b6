"""Helpers of DLMR's three training stages (our reconstruction): the frozen base's fingerprint, the
trainable-parameter fraction and the distillation loss of the memory stages.

* Stage 1, visual memory: answer cross-entropy with the visual memory in place of the image, plus
  :func:`distillation_loss` to the full-image model's next-token distribution.
* Stage 2, reasoning memory: continuation distillation (context compression): the base reading
  ``[recent context; reasoning memory]`` is pulled towards the base reading the whole history.
* Stage 3, router: formers frozen; GRPO (:func:`icml_agents.rl.grpo_loss`) on
  :func:`icml_agents.dlmr.token_cost_reward`, or the Gumbel-softmax relaxation of :meth:`Router.gumbel`.
"""

from __future__ import annotations

import hashlib
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from icml_agents.validation import at_least_float32, check_real, check_tensor


def freeze(model: nn.Module) -> nn.Module:
    """Turn off gradients of every parameter of ``model`` and put it in eval mode; returns it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def parameter_hash(model: nn.Module) -> str:
    """SHA-256 of every tensor of ``model``'s state dict (names, dtypes, shapes and bytes, in order): equal
    hashes mean bit-identical weights."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-d too
    return h.hexdigest()


def trainable_fraction(trainable: list[nn.Module] | nn.Module, base: nn.Module) -> float:
    """Parameters of the ``trainable`` modules over the parameters of the frozen ``base``."""
    if not isinstance(trainable, (nn.Module, list, tuple)):
        raise TypeError(f"trainable must be an nn.Module or a list of them, got {type(trainable).__name__}")
    mods = [trainable] if isinstance(trainable, nn.Module) else list(trainable)
    for m in [*mods, base]:
        if not isinstance(m, nn.Module):
            raise TypeError(f"trainable and base must be nn.Modules, got {type(m).__name__}")
    n_base = sum(p.numel() for p in base.parameters())
    if n_base == 0:
        raise ValueError("base must have parameters")
    return sum(p.numel() for m in mods for p in m.parameters()) / n_base


def distillation_loss(
    student_logits, teacher_logits, targets=None, *, ce_weight: float = 1.0, temperature: float = 1.0
):
    """``KL(teacher || student)`` over the rows of ``(N, V)`` logits (mean over rows, ``temperature``-scaled
    and multiplied by ``temperature**2`` as in Hinton et al.) plus ``ce_weight`` times the cross-entropy of
    ``targets`` ``(N,)`` (-100 ignored) when given. ``temperature`` is at most 100: beyond, the rounding of
    the log-probabilities, multiplied by ``temperature**2``, swamps the loss (it even turns negative).

    Half-precision logits (float16, bfloat16) are computed in float32 and the loss is cast back to the
    logits' dtype (the promotion of both when they differ): in half precision the rounding of the
    log-probabilities swamps a small KL (bfloat16 was off by a factor of three)."""
    s = check_tensor(student_logits, "student_logits", ndim=2, floating=True)
    t = check_tensor(teacher_logits, "teacher_logits", tuple(s.shape), floating=True).detach()
    ce_weight = check_real(ce_weight, "ce_weight", "[0, inf)")
    temperature = check_real(temperature, "temperature", "(0, 100]")
    if s.shape[0] < 1 or s.shape[1] < 1:
        raise ValueError(f"student_logits must have at least one row and one column, got {tuple(s.shape)}")
    if not bool(torch.isfinite(s.detach()).all()):
        raise ValueError("student_logits must be finite")
    if not bool(torch.isfinite(t).all()):
        raise ValueError("teacher_logits must be finite")
    if targets is not None:
        targets = check_tensor(targets, "targets", (s.shape[0],))
        if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
            raise TypeError(f"targets must be an integer tensor of class indices, got {targets.dtype}")
        if not bool(((targets == -100) | ((targets >= 0) & (targets < s.shape[1]))).all()):
            raise ValueError(
                f"targets must be class indices in [0, {s.shape[1] - 1}] or -100, got {targets.tolist()}"
            )
    out_dtype = torch.promote_types(s.dtype, t.dtype)
    s32, t32 = at_least_float32(s), at_least_float32(t)
    scaled_s, scaled_t = s32 / temperature, t32 / temperature
    if not bool(torch.isfinite(scaled_s.detach()).all() and torch.isfinite(scaled_t).all()):
        raise ValueError(
            f"temperature {temperature} is too small for these logits: logits / temperature overflows"
        )
    log_s = F.log_softmax(scaled_s, dim=-1)
    log_t = F.log_softmax(scaled_t, dim=-1)
    loss = (log_t.exp() * (log_t - log_s)).sum(dim=-1).mean() * temperature**2
    if targets is not None and bool((targets != -100).any()):
        loss = loss + ce_weight * F.cross_entropy(s32, targets.long(), ignore_index=-100)
    loss = loss.to(out_dtype)
    if not bool(torch.isfinite(loss.detach())):
        warnings.warn(
            f"distillation_loss: the loss overflows {loss.dtype} (logits or ce_weight too large)",
            RuntimeWarning,
            stacklevel=2,
        )
    return loss
