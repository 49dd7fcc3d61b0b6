"""Reading a layer's activations and the SAE's latent maps on a set of inputs."""

from __future__ import annotations

import torch
from torch import nn

from icml_interp.validation import (
    check_d_in,
    check_finite,
    check_int,
    check_sae_like,
    check_tensor,
    check_type,
    eval_mode,
)


@torch.no_grad()
def layer_activations(
    model: nn.Module, module: nn.Module, inputs: torch.Tensor, *, batch: int = 64
) -> torch.Tensor:
    """The output of ``module`` (first element if a tuple) while ``model`` runs on ``inputs``, concatenated over batches."""
    check_type(model, "model", nn.Module, "a torch.nn.Module")
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    check_tensor(inputs, "inputs", "(batch, ...)")
    check_finite(inputs, "inputs")
    check_int(batch, "batch", minimum=1)
    got: list[torch.Tensor] = []

    def hook(mod, args, output):
        got.append((output[0] if isinstance(output, tuple) else output).detach())

    # the hook is removed and every submodule's training flag restored afterwards, also on a raise
    with module.register_forward_hook(hook), eval_mode(model):
        for i in range(0, inputs.shape[0], batch):
            try:
                model(inputs[i : i + batch])
            except (RuntimeError, TypeError, ValueError, IndexError) as err:
                raise ValueError(
                    f"model failed on inputs[{i}:{i + batch}] ({type(err).__name__}: {err}); check that inputs "
                    "are what the model takes (dtype, shape)"
                ) from err
    if not got:
        raise ValueError("module did not run during the forward pass; is it part of model?")
    return torch.cat(got)


@torch.no_grad()
def latent_maps(sae, activations: torch.Tensor, *, batch: int = 16) -> torch.Tensor:
    """Encode conv activations ``(B, C, H, W)`` into latent maps ``(B, d_sae, H, W)`` (sequences ``(B, T, D)``
    give ``(B, d_sae, T)``)."""
    check_sae_like(sae)
    check_tensor(activations, "activations", "(B, C, H, W) or (B, T, D)", ndim=(3, 4))
    if not activations.is_floating_point():
        raise TypeError(f"activations must be a floating-point tensor, got {activations.dtype}")
    check_finite(activations, "activations")
    check_int(batch, "batch", minimum=1)
    check_d_in(
        activations.shape[1] if activations.dim() == 4 else activations.shape[-1],
        sae.W_dec.shape[1],
        "activations",
    )
    out = []
    for i in range(0, activations.shape[0], batch):
        h = activations[i : i + batch]
        if h.dim() == 4:
            b, c, hh, ww = h.shape
            f = sae.encode(h.permute(0, 2, 3, 1).reshape(-1, c))  # (b*hh*ww, d_sae)
            out.append(f.reshape(b, hh, ww, -1).permute(0, 3, 1, 2))
        else:
            b, t, d = h.shape
            out.append(sae.encode(h.reshape(-1, d)).reshape(b, t, -1).transpose(1, 2))
    return torch.cat(out)
