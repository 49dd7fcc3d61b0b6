"""Reading a layer's activations and the SAE's latent maps on a set of inputs."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def layer_activations(
    model: nn.Module, module: nn.Module, inputs: torch.Tensor, *, batch: int = 64
) -> torch.Tensor:
    """The output of ``module`` (first element if a tuple) while ``model`` runs on ``inputs``, concatenated over batches."""
    if not isinstance(model, nn.Module) or not isinstance(module, nn.Module):
        raise TypeError("model and module must be torch.nn.Module instances")
    if not isinstance(inputs, torch.Tensor) or inputs.shape[0] == 0:
        raise ValueError(f"inputs must be a non-empty tensor batch, got {getattr(inputs, 'shape', inputs)!r}")
    got: list[torch.Tensor] = []

    def hook(mod, args, output):
        got.append((output[0] if isinstance(output, tuple) else output).detach())

    handle = module.register_forward_hook(hook)
    try:
        model.eval()
        for i in range(0, inputs.shape[0], batch):
            model(inputs[i : i + batch])
    finally:
        handle.remove()
    if not got:
        raise ValueError("module did not run during the forward pass; is it part of model?")
    return torch.cat(got)


@torch.no_grad()
def latent_maps(sae, activations: torch.Tensor, *, batch: int = 16) -> torch.Tensor:
    """Encode conv activations ``(B, C, H, W)`` into latent maps ``(B, d_sae, H, W)`` (sequences ``(B, T, D)``
    give ``(B, d_sae, T)``)."""
    if not isinstance(activations, torch.Tensor) or activations.dim() not in (3, 4):
        raise ValueError(
            f"activations must be (B, C, H, W) or (B, T, D), got {getattr(activations, 'shape', activations)!r}"
        )
    d_in = sae.W_dec.shape[1]
    width = activations.shape[1] if activations.dim() == 4 else activations.shape[-1]
    if width != d_in:
        raise ValueError(f"activation width {width} does not match the SAE's d_in = {d_in}")
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
