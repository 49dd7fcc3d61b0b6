"""Progressive multi-view generation by iterative token unmasking (MaskGIT's confidence sampler).

Every target token starts masked. At step ``s`` of ``T`` the model predicts all masked tokens; a token is
drawn for each (temperature ``temperature``), its confidence is ``log p(token) + tau_s * Gumbel`` with the
annealed ``tau_s = gumbel * (1 - (s + 1) / T)``, and the ``n_s = floor(gamma((s + 1) / T) * N)``
least-confident masked positions stay masked (``gamma`` the cosine schedule, so ``n_{T-1} = 0``); the rest
are committed. Committed tokens are never remasked, and every token is committed within ``T`` steps.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from icml_generative.validation import check_int, check_number, check_tensor, random_device
from icml_generative.viewmask.model import MultiViewTransformer, check_generator, check_model


class Sample(NamedTuple):
    tokens: torch.Tensor  # (B, V, h, w) committed token ids
    order: torch.Tensor  # (B, V, h, w) the step at which each token was committed


def unmasking_counts(num_tokens: int, steps: int) -> list[int]:
    """How many target tokens stay masked after each step: ``floor(cos(pi/2 (s+1)/T) N)``, made strictly
    decreasing while tokens remain (so each step commits at least one) and 0 after the last."""
    n = check_int(num_tokens, "num_tokens", 1, 1 << 24)
    t = check_int(steps, "steps", 1, 4096)
    counts, left = [], n
    for s in range(t):
        want = math.floor(math.cos(math.pi / 2 * (s + 1) / t) * n + 1e-9) if s < t - 1 else 0
        left = max(0, min(left - 1, want))
        counts.append(left)
    return counts


@torch.no_grad()
def sample_views(
    model: MultiViewTransformer,
    condition: torch.Tensor,
    *,
    steps: int = 12,
    temperature: float = 1.0,
    gumbel: float = 4.5,
    text: torch.Tensor | None = None,
    guidance: float = 0.0,
    camera: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Sample:
    """Generate the ``num_views - 1`` target views' tokens for ``condition`` ``(B, h, w)`` in ``steps`` model
    evaluations (twice that with classifier-free ``guidance`` > 0: logits ``c + guidance (c - u)``, ``c`` with
    the text and ``u`` with it dropped). Returns the tokens and the step at which each was committed."""
    check_model(model)
    check_generator(generator)
    check_int(steps, "steps", 1, 4096)
    check_number(temperature, "temperature", above=0, maximum=100)
    check_number(gumbel, "gumbel", 0, 100)
    check_number(guidance, "guidance", 0, 100)
    if guidance > 0 and text is None:
        raise ValueError("guidance > 0 needs text")
    h, w = model.grid
    check_tensor(condition, "condition", ("B", h, w))
    b, nv = condition.shape[0], model.num_views - 1
    device = condition.device
    tokens = torch.full((b, nv, h, w), model.mask_id, dtype=torch.long, device=device)
    model.check_inputs(condition, tokens, None, text, camera)
    order = torch.full_like(tokens, -1)
    n = nv * h * w
    counts = unmasking_counts(n, steps)
    flat, flat_order = tokens.view(b, n), order.view(b, n)
    for s, keep_masked in enumerate(counts):
        logits = model(condition, tokens, text=text, camera=camera).float()
        if guidance > 0 and text is not None:
            uncond = model(
                condition, tokens, text=torch.full_like(text, model.null_text), camera=camera
            ).float()
            logits = logits + guidance * (logits - uncond)
        logits = logits.reshape(b, n, -1)
        # shifted by the maximum and divided in float64: logits / temperature overflowed float32 to inf for
        # a temperature below ~1e-38 (accepted; below ~1e-45 it is 0 in float32), and log_softmax(inf - inf)
        # drew token 0 everywhere instead of the argmax. Shifted, the limit is greedy (0 for the best logit,
        # -inf for the others); at temperature 1 the values are unchanged
        scaled = ((logits - logits.amax(-1, keepdim=True)).double() / temperature).float()
        logp = torch.log_softmax(scaled, dim=-1)
        u = torch.rand(logp.shape, generator=generator, device=random_device(generator, "cpu")).to(device)
        drawn = (logp - torch.log(-torch.log(u.clamp(1e-20, 1 - 1e-7)))).argmax(-1)  # Gumbel-max sampling
        conf = logp.gather(-1, drawn[..., None])[..., 0]
        tau = gumbel * (1 - (s + 1) / steps)
        if tau > 0:
            g = (
                torch.rand(b, n, generator=generator, device=random_device(generator, "cpu"))
                .to(device)
                .clamp(1e-20, 1 - 1e-7)
            )
            conf = conf + tau * -torch.log(-torch.log(g))
        masked = flat == model.mask_id
        conf = torch.where(masked, conf, torch.full_like(conf, math.inf))  # committed: never remasked
        still = conf.argsort(dim=1)[:, :keep_masked]
        commit = masked.clone()
        commit.scatter_(1, still, False)
        flat[commit] = drawn[commit]
        flat_order[commit] = s
    return Sample(tokens, order)


@torch.no_grad()
def generate_views(
    tokenizer: torch.nn.Module,
    model: MultiViewTransformer,
    images: torch.Tensor,
    **kwargs: object,
) -> torch.Tensor:
    """Decoded target views ``(B, V, C, H, W)`` for condition ``images`` ``(B, C, H, W)`` in [0, 1]:
    tokenize, :func:`sample_views` (``kwargs`` passed on), decode."""
    encode, decode = getattr(tokenizer, "encode", None), getattr(tokenizer, "decode", None)
    if not callable(encode) or not callable(decode):
        raise TypeError(f"tokenizer must have encode and decode methods, got {type(tokenizer).__name__}")
    condition = encode(images)
    sample = sample_views(model, condition, **kwargs)  # type: ignore[arg-type]
    b, nv, h, w = sample.tokens.shape
    out = decode(sample.tokens.reshape(b * nv, h, w))
    return out.reshape(b, nv, *out.shape[1:])
