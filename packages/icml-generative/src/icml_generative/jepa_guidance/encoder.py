"""A small JEPA-style encoder and its trainer, for when no pretrained world model can be downloaded.

Joint-embedding predictive objective on two corrupted views of each sample: a predictor maps the context
view's embedding to the target view's (``invariance``: mean squared error), and an anti-collapse term keeps
the embeddings spread:

- ``anti_collapse="sigreg"`` (default): sliced isotropic-Gaussian matching, the regularizer under which
  Balestriero et al. (arXiv 2510.05949) show that the Jacobian volume of a JEPA estimates the data density
  (LeJEPA's SIGReg, Balestriero & LeCun 2025). Each of ``projections`` random unit directions projects the
  batch's embeddings; their sorted values are matched to the standard normal quantiles (the exact 1-D
  Wasserstein-2 distance). LeJEPA tests each projection with the Epps–Pulley statistic instead: the
  quantile match is our choice (no tuning constant, exact in 1-D).
- ``anti_collapse="vicreg"``: VICReg's variance hinge (std of each dimension >= 1) and covariance
  penalty (Bardes, Ponce & LeCun, ICLR 2022).

Views: additive Gaussian noise of ``noise`` times the per-feature data std, and (``mask_ratio > 0``) a
random fraction of the features set to zero in the context view only (I-JEPA's masking, on features).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from icml_generative.validation import (
    check_choice,
    check_int,
    check_ints,
    check_model_input,
    check_module,
    check_number,
    check_tensor,
    check_trainable_dtype,
)

ANTI_COLLAPSE = ("sigreg", "vicreg")
MAX_WIDTH = 2**16
MAX_STEPS = 10**7


def mlp_encoder(in_features: int, embed_dim: int = 16, hidden: Sequence[int] = (128, 128)) -> nn.Sequential:
    """An MLP ``(n, in_features) -> (n, embed_dim)`` with SiLU activations (smooth, so its Jacobian varies
    smoothly and finite differences stay accurate); inputs of any shape ``(n, ...)`` are flattened."""
    check_int(in_features, "in_features", 1, MAX_WIDTH)
    check_int(embed_dim, "embed_dim", 1, MAX_WIDTH)
    widths = check_ints(
        tuple(hidden) if isinstance(hidden, (list, tuple)) else hidden, "hidden", 1, MAX_WIDTH
    )
    layers: list[nn.Module] = [nn.Flatten()]
    previous = in_features
    for w in widths:
        layers += [nn.Linear(previous, w), nn.SiLU()]
        previous = w
    layers.append(nn.Linear(previous, embed_dim))
    return nn.Sequential(*layers)


def sigreg_loss(z: torch.Tensor, projections: int = 64, seed: int = 0) -> torch.Tensor:
    """Sliced matching of embeddings ``z (n, D)`` to ``N(0, I)``: the mean over ``projections`` random unit
    directions of the squared 1-D Wasserstein-2 distance between the projected batch and the standard
    normal's quantiles ``Φ⁻¹((i + ½)/n)``. Zero only for a batch whose every projection is normal-quantile
    spaced; differentiable in ``z``."""
    check_tensor(z, "z", ("n", "d"), floating=True, finite=True)
    if z.shape[0] < 2 or z.shape[1] < 1:
        raise ValueError(f"z must hold at least 2 embeddings of at least 1 dimension, got {tuple(z.shape)}")
    check_int(projections, "projections", 1, 2**16)
    gen = torch.Generator().manual_seed(check_int(seed, "seed", 0, 2**63 - 1))
    theta = torch.randn(z.shape[1], projections, generator=gen, dtype=torch.float64).to(z)
    theta = theta / theta.norm(dim=0, keepdim=True)
    projected = torch.sort(z @ theta, dim=0).values  # (n, p)
    levels = (torch.arange(z.shape[0], dtype=torch.float64) + 0.5) / z.shape[0]
    quantiles = (math.sqrt(2) * torch.erfinv(2 * levels - 1)).to(z)[:, None]
    return _warn_overflow(((projected - quantiles) ** 2).mean(), "sigreg_loss", z)


def vicreg_regularizer(z: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """VICReg's anti-collapse terms on ``z (n, D)``: ``mean_d relu(1 − sqrt(var_d + eps))`` plus the mean
    squared off-diagonal covariance (times ``D / (D − 1)``, so a 1-D embedding has none)."""
    check_tensor(z, "z", ("n", "d"), floating=True, finite=True)
    if z.shape[0] < 2:
        raise ValueError(f"z must hold at least 2 embeddings, got {z.shape[0]}")
    eps = check_number(eps, "eps", above=0)
    wide = z.double()  # float32 embeddings near their range would overflow the mean and give NaN, not inf
    centered = wide - wide.mean(0)
    std = (centered.var(0) + eps).sqrt()
    variance = torch.relu(1 - std).mean()
    d = z.shape[1]
    if d == 1:
        return _warn_overflow(variance.to(z.dtype), "vicreg_regularizer", z)
    cov = centered.T @ centered / (z.shape[0] - 1)
    off = cov.masked_fill(torch.eye(d, dtype=torch.bool, device=z.device), 0.0)
    return _warn_overflow((variance + (off**2).sum() / (d * (d - 1))).to(z.dtype), "vicreg_regularizer", z)


def _warn_overflow(value: torch.Tensor, name: str, z: torch.Tensor) -> torch.Tensor:
    if not bool(torch.isfinite(value.detach())):
        warnings.warn(
            f"{name}: the loss overflows {z.dtype} (embeddings up to {z.abs().max().item():g})",
            RuntimeWarning,
            stacklevel=3,
        )
    return value


def train_jepa_encoder(
    encoder: nn.Module,
    data: torch.Tensor,
    *,
    steps: int = 1000,
    batch_size: int = 256,
    lr: float = 1e-3,
    noise: float = 0.1,
    mask_ratio: float = 0.0,
    anti_collapse: str = "sigreg",
    weight: float = 1.0,
    predictor_hidden: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Train ``encoder`` in place by the joint-embedding objective (module docstring) on ``data (n, ...)``.

    Loss = ``‖pred(f(context)) − f(target)‖²`` (mean) + ``weight`` × the anti-collapse term on both views'
    embeddings. Adam at ``lr``; batches and views from ``seed``. Returns ``{"predictor", "loss",
    "invariance", "regularizer", "seconds"}`` (per-step losses as lists). The encoder is left in eval mode.
    Float16 trainable parameters (the encoder's, or the predictor's, built in ``data``'s dtype) are refused
    (``ValueError``: Adam's ``eps`` rounds to 0 in float16 and the weights turn NaN): train in bfloat16, or
    in float32 under ``torch.autocast``.
    """
    module = check_module(encoder, "train_jepa_encoder", "encoder")
    check_trainable_dtype(module, "encoder", "train_jepa_encoder")
    check_model_input(data, "data", module)
    if data.dtype == torch.float16:  # a frozen or parameter-free encoder: the predictor head is float16
        raise ValueError(
            "train_jepa_encoder: data is float16, the dtype the predictor head is trained in, and Adam turns "
            "float16 weights to NaN (its eps, 1e-8, rounds to 0); pass bfloat16 or float32 data"
        )
    if data.ndim < 2 or data.shape[0] < 2:
        raise ValueError(
            f"data must be a batch of at least 2 samples shaped (n, ...), got {tuple(data.shape)}"
        )
    check_int(steps, "steps", 1, MAX_STEPS)
    check_int(batch_size, "batch_size", 2, 2**20)
    lr = check_number(lr, "lr", above=0)
    noise = check_number(noise, "noise", 0, 1e3)  # in data standard deviations
    mask_ratio = check_number(mask_ratio, "mask_ratio", 0.0, below=1.0)
    check_choice(anti_collapse, "anti_collapse", ANTI_COLLAPSE)
    weight = check_number(weight, "weight", 0, 1e6)
    check_int(predictor_hidden, "predictor_hidden", 1, MAX_WIDTH)
    check_int(seed, "seed", 0, 2**62)
    gen = torch.Generator().manual_seed(seed)
    modes = {m: m.training for m in module.modules()}  # put back if training fails
    module.train()
    try:
        # The predictor's initial weights and the encoder's own random layers on the CPU (dropout) draw from the
        # global CPU generator, seeded here inside a fork: the caller's random state is the same afterwards (on
        # CUDA, dropout draws from the caller's CUDA generator, as in any torch training loop).
        with torch.random.fork_rng(devices=[]):
            try:
                with torch.no_grad():
                    dim = module(data[:2]).reshape(2, -1).shape[1]
            except RuntimeError as err:
                raise ValueError(f"encoder refused data shaped {tuple(data.shape)}: {err}") from err
            torch.default_generator.manual_seed(
                seed
            )  # not torch.manual_seed: it also reseeds every CUDA device
            predictor = nn.Sequential(
                nn.Linear(dim, predictor_hidden), nn.SiLU(), nn.Linear(predictor_hidden, dim)
            )
            predictor.to(device=data.device, dtype=data.dtype)
            opt = torch.optim.Adam([*module.parameters(), *predictor.parameters()], lr=lr)
            feature_std = data.std(0, keepdim=True).clamp_min(1e-8)
            batch = min(batch_size, data.shape[0])
            log: dict[str, Any] = {"loss": [], "invariance": [], "regularizer": []}
            start = time.perf_counter()
            for step in range(steps):
                x = data[torch.randperm(data.shape[0], generator=gen)[:batch]]
                # drawn on the CPU (gen), the same draws on every device
                views = [
                    x + noise * feature_std * torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device)
                    for _ in range(2)
                ]
                if mask_ratio > 0:
                    keep = torch.rand(x.shape, generator=gen) >= mask_ratio
                    views[0] = views[0] * keep.to(device=x.device, dtype=x.dtype)
                z1, z2 = (module(v).reshape(batch, -1) for v in views)
                if not bool(torch.isfinite(z1).all() and torch.isfinite(z2).all()):
                    raise ValueError(_diverged("the embeddings", step, lr, noise, weight))
                invariance = ((predictor(z1) - z2) ** 2).mean()
                if anti_collapse == "sigreg":
                    reg = sigreg_loss(z1, seed=seed + step) + sigreg_loss(z2, seed=seed + step)
                else:
                    reg = vicreg_regularizer(z1) + vicreg_regularizer(z2)
                loss = invariance + weight * reg
                if not torch.isfinite(loss):
                    raise ValueError(_diverged(f"the loss ({loss.item()})", step, lr, noise, weight))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                log["loss"].append(loss.item())
                log["invariance"].append(invariance.item())
                log["regularizer"].append(reg.item())
    except BaseException:
        for m, mode in modes.items():
            m.training = mode
        raise
    module.eval()
    log["predictor"] = predictor.eval()
    log["seconds"] = time.perf_counter() - start
    return log


def _diverged(what: str, step: int, lr: float, noise: float, weight: float) -> str:
    return (
        f"train_jepa_encoder: {what} became non-finite at step {step}: lower lr ({lr}), noise ({noise}) "
        f"or weight ({weight})"
    )
