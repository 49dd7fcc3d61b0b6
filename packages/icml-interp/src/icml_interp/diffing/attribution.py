"""Attribution of SAE latents to a (segmentation) metric: activation × gradient.

The SAE is spliced into the module's output as ``h + decode(f) − decode(f.detach())``: the forward value
is unchanged (the error term is kept) while the gradient reaches the codes ``f``; the attribution of latent
j is ``Σ_tokens f_j · ∂metric/∂f_j``, the first-order change of the metric if the latent were removed
(sign flipped).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from icml_interp.sae.source import LAYOUTS, from_tokens, resolve_layout, to_tokens
from icml_interp.validation import (
    check_choice,
    check_d_in,
    check_finite,
    check_int,
    check_sae_like,
    check_tensor,
    check_type,
    eval_mode,
)


def latent_attribution(
    model: nn.Module,
    module: nn.Module,
    sae,
    inputs: torch.Tensor,
    metric: Callable[[torch.Tensor, slice], torch.Tensor],
    *,
    batch: int = 32,
    layout: str = "auto",
) -> torch.Tensor:
    """Activation × gradient of ``metric(model(inputs_batch), slice)`` (a scalar; summed over batches) per latent:
    ``(d_sae,)``. ``metric`` receives the model output and the batch's slice into ``inputs``."""
    check_type(model, "model", nn.Module, "a torch.nn.Module")
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    if not callable(metric):
        raise TypeError("metric must be callable (output, batch slice) -> scalar tensor")
    check_tensor(inputs, "inputs", "(batch, ...)")
    check_finite(inputs, "inputs")
    check_sae_like(sae)
    check_int(batch, "batch", minimum=1)
    check_choice(layout, "layout", LAYOUTS)
    d_in = sae.W_dec.shape[1]
    codes: list[torch.Tensor] = []

    def hook(mod, args, output):
        h = output[0] if isinstance(output, tuple) else output
        kind = resolve_layout(h, layout)
        tokens = to_tokens(h, kind)
        check_d_in(tokens.shape[-1], d_in)
        f = sae.encode(tokens.detach().to(sae.W_dec.dtype)).detach().requires_grad_(True)  # the SAE's dtype
        codes.append(f)
        # in the activations' dtype: a float32 SAE on a half model would otherwise promote the next layer's input
        new = from_tokens((tokens + sae.decode(f) - sae.decode(f.detach())).to(tokens.dtype), h, kind)
        return (new, *output[1:]) if isinstance(output, tuple) else new

    total = torch.zeros(sae.W_dec.shape[0], dtype=torch.float64, device=sae.W_dec.device)
    # the hook is removed and every submodule's training flag restored afterwards, also on a raise
    with module.register_forward_hook(hook), eval_mode(model):
        for i in range(0, inputs.shape[0], batch):
            codes.clear()
            sl = slice(i, min(i + batch, inputs.shape[0]))
            try:
                output = model(inputs[sl])
            except (RuntimeError, TypeError, ValueError, IndexError) as err:
                if isinstance(err, ValueError) and "activation width" in str(err):
                    raise  # the SAE does not fit module's output: check_d_in's message says so
                raise ValueError(
                    f"model failed on inputs[{sl.start}:{sl.stop}] ({type(err).__name__}: {err}); check that "
                    "inputs are what the model takes (dtype, shape)"
                ) from err
            value = metric(output, sl)
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise ValueError("metric must return a scalar tensor")
            if not bool(torch.isfinite(value.detach()).all()):
                raise ValueError(f"metric returned {float(value.detach())} on inputs[{sl.start}:{sl.stop}]")
            if not codes:
                raise ValueError("module did not run during the forward pass; is it part of model?")
            grads = torch.autograd.grad(value, codes)
            for f, g in zip(codes, grads, strict=True):
                wide = torch.promote_types(f.dtype, torch.float32)  # a float16 sum over tokens overflows
                total += (f.detach().to(wide) * g.to(wide)).sum(0).double()
    if not bool(torch.isfinite(total).all()):
        raise ValueError("the attribution overflowed (activation x gradient is not finite): rescale metric")
    return total.float()
