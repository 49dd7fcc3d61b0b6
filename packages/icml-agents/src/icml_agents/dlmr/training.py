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

from icml_agents.validation import at_least_float32, check_real, check_tensor, expm1_minus_x


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
    ``targets`` ``(N,)`` (-100 ignored) when given. ``temperature`` is at most 100 (the limit of the
    earlier form, whose rounding, multiplied by ``temperature**2``, swamped the loss beyond; at 100 it was
    3e-4 off in float32, this form 1e-7).

    Half-precision logits (float16, bfloat16) are computed in float32 and the loss is cast back to the
    logits' dtype (the promotion of both when they differ): in half precision the rounding of the
    log-probabilities swamps a small KL (bfloat16 was off by a factor of three).

    The KL is formed from the logit differences, without the cancellation of ``sum p (log p - log q)``
    (see ``_TeacherStudentKL``): for near-identical distributions over 32k tokens (logits differing by 1e-3
    noise) that form was 4e-2 to 1e-1 off in float32 (relative), and 4x to 50x off or negative at 1e-4
    noise; this one was at most 1.0e-7 off the float64 loss of the same logits at 1e-3 noise (1.1e-6 at
    1e-4, 152k tokens). Rows go in blocks of about ``2**24`` elements and the gradient is recomputed from
    the logits, so that memory beyond the logits and their gradient is about eight blocks (0.5 GiB in
    float32), whatever the number of rows (the old form kept about six ``(N, V)`` tensors). Second
    derivatives are not available. Its limit: ``s - t`` keeps ~1e-7 of ``|t|``, so that far-apart rows of
    logits of size 1e3 to 1e4 were 2e-6 off (1e-3 at 1e6; the earlier form 1e-7); at sizes up to 100, 2e-7.
    """
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
    # rounding is monotone: logits / temperature overflows exactly where the largest |logit| does
    largest = torch.stack([s32.detach().amax(), -s32.detach().amin(), t32.amax(), -t32.amin()]).amax()
    if not bool(torch.isfinite(largest / temperature)):
        raise ValueError(
            f"temperature {temperature} is too small for these logits: logits / temperature overflows"
        )
    loss = _TeacherStudentKL.apply(s32, t32, temperature).mean() * temperature**2
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


_BLOCK = 1 << 24  # elements of (rows, vocab) per block: a 64 MiB float32 temporary


class _TeacherStudentKL(torch.autograd.Function):
    """Per-row ``KL(p || q)``, ``p = softmax(t / T)`` (the teacher, no gradient), ``q = softmax(s / T)``,
    ``(N, V) -> (N,)``, from the logit differences ``e = (s - t) / T - c``, ``c`` the mean of ``(s - t) / T``
    under ``p`` (any ``c`` gives the same KL; this one keeps ``e`` small):

        KL = log(sum p exp(e)) - sum p e = log1p(r + S) - r,   r = sum p e,   S = sum p (exp(e) - 1 - e).

    ``S`` is a sum of non-negative terms, each without cancellation (:func:`~icml_agents.validation.expm1_minus_x`), and ``r``
    (near 0, from the rounding of ``c``) enters both terms, so that its own rounding cancels to first order.
    ``sum p (log p - log q)`` instead subtracts two log-sum-exps rounded to ~1e-7 of ``log V``: that is as
    large as the KL of near-identical distributions. ``p`` is ``exp(t / T - max) / Z``, normalised by the sum
    of the same terms: a rounded ``log Z`` would scale every ``p``, and the KL, by ~1e-7 ``log V``. A row
    where ``p exp(e)`` overflows (a KL above ~88 in float32) takes ``log(sum p exp(e))`` as a log-sum-exp,
    exact to rounding at that size.

    The gradient ``dKL/ds = (q - p) / T = p expm1(e - L) / T``, ``L = log(sum p exp(e))``, is recomputed in
    blocks of rows from ``s``, ``t`` and per-row numbers, so that nothing of size ``(N, V)`` is saved.
    """

    @staticmethod
    def _block(s, t, temperature, rows, m, z, c, wide):
        """``(t / T - max, p, (s - t) / T - c)`` for a block of rows, each ``(b, V)``. With ``wide`` (logits
        so large that ``(s - t) / T`` may overflow), rows where it does take ``s`` and ``t`` less their
        maxima instead: a shift of a row's ``e`` changes neither its KL nor its gradient."""
        shifted = (t[rows] / temperature).sub_(m[rows])
        d = (s[rows] - t[rows]).div_(temperature)  # s - t is exact for logits within a factor 2
        if wide:
            sb, tb = s[rows], t[rows]
            less_max = (sb - sb.amax(1, keepdim=True)).sub_(tb - tb.amax(1, keepdim=True)).div_(temperature)
            d = torch.where(torch.isfinite(d).all(1, keepdim=True), d, less_max)
        return shifted, shifted.exp().div_(z[rows]), d.sub_(c[rows])

    @staticmethod
    def forward(ctx, s, t, temperature):
        blocks = _row_blocks(*s.shape)
        m = t.amax(dim=1, keepdim=True) / temperature  # (N, 1): the max of t / T (rounding is monotone)
        z = torch.cat([(t[b] / temperature).sub_(m[b]).exp_().sum(1, keepdim=True) for b in blocks])  # (N, 1)
        c = torch.zeros_like(m, dtype=torch.promote_types(s.dtype, t.dtype))  # (N, 1)
        largest = [abs(float(x)) for x in (s.amax(), s.amin(), t.amax(), t.amin())]
        wide = (max(largest[:2]) + max(largest[2:])) / temperature > torch.finfo(c.dtype).max / 2
        big_l, kl = torch.empty_like(c), torch.empty_like(c)  # (N, 1) each
        for b in blocks:
            shifted, p, e = _TeacherStudentKL._block(s, t, temperature, b, m, z, c, wide)  # (b, V) each
            c[b] = (p * e).sum(1, keepdim=True)  # the centre
            e.sub_(c[b])
            r = (p * e).sum(1, keepdim=True)  # (b, 1), near 0
            terms = expm1_minus_x(e).mul_(p)  # p (exp(e) - 1 - e) >= 0
            large = e > 20  # exp(e) alone may overflow where p is tiny: there p exp(e) - p (1 + e)
            if bool(large.any()):
                terms = torch.where(large, (shifted + e).exp_().div_(z[b]).sub_(p * (1 + e)), terms)
            lse = torch.log1p(r + terms.sum(1, keepdim=True))  # (b, 1): log(sum p exp(e))
            overflow = ~torch.isfinite(lse)
            if bool(overflow.any()):  # p exp(e) beyond the float range: the log-sum-exp
                lse = torch.where(overflow, torch.logsumexp(shifted + e, 1, keepdim=True) - z[b].log(), lse)
            big_l[b], kl[b] = lse, lse - r
        ctx.save_for_backward(s, t, m, z, c, big_l)
        ctx.temperature, ctx.wide = temperature, wide
        return kl.squeeze(1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        s, t, m, z, c, big_l = ctx.saved_tensors
        out = torch.empty_like(s)
        for b in _row_blocks(*s.shape):
            shifted, p, e = _TeacherStudentKL._block(
                s, t, ctx.temperature, b, m, z, c, ctx.wide
            )  # (b, V) each
            e.sub_(big_l[b])  # log(q / p)
            g = torch.expm1(e).mul_(p)  # q - p without cancellation
            large = e > 20  # q / p beyond e^20: exp(e) alone may overflow where p is tiny
            if bool(large.any()):
                g = torch.where(large, (shifted + e).exp_().div_(z[b]).sub_(p), g)
            out[b] = g.mul_(grad[b, None] / ctx.temperature)
        return out, None, None


def _row_blocks(n: int, v: int) -> list[slice]:
    """Slices of about ``_BLOCK`` elements of an ``(n, v)`` tensor, whole rows each."""
    step = max(1, _BLOCK // v)
    return [slice(i, i + step) for i in range(0, n, step)]
