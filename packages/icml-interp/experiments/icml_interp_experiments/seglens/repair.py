"""Latent repair of cohort-B failures: the pieces of the reproduction, usable on their own.

Our own design (the paper's procedure beyond its abstract is not available; it selects what and where to
steer with the ground truth):

* ``fit_layer_sae`` trains an SAE (``icml_interp.sae``) on a layer's activations over cohort A ∪ B;
* **ground-truth-free** (no label of cohort B, and of cohort A only what the model predicts):
  region: :func:`core_band_region`, the band around the core the model itself predicts on the failing scan
  (the planted shift leaves the core's appearance unchanged, and edema surrounds the core by construction, as
  it does anatomically), its width from :func:`band_width`, a high quantile of how far the model's own edema
  reaches around its own core on cohort A; latents: the ``n_latents`` with the largest gap between the mean
  code over cohort-A tokens the model predicts as edema (also the reference values) and the mean code over
  cohort-B tokens inside the band (:func:`select_gt_free` with ``region_b``, the label-free mirror of the
  oracle's choice). Earlier region (kept: :func:`gt_free_region`): the tokens where one of the
  ``detect_latents`` fires (the latents of a *detect* SAE on an earlier layer with the largest firing-frequency
  ratio B : A); it overlapped the true edema with an F1 of only 0.0-0.5 and recovered 0-20 % of the failures.
  Earlier latent ranking (``region_b=None``): the largest gap in mean activation between the cohorts over all
  tokens;
* **oracle** (uses B's ground truth): latents with the largest gap between the mean code on true-edema
  tokens of A and of B, reference values = the A true-edema mean, region = the true edema;
* controls: the ground-truth-free latents and values in a **random region** of the same size per scan, and
  **random latents** (same count, alive, not selected) in the ground-truth-free region;
* every arm clamps the chosen latents to their reference values inside the region, keeping the SAE error
  term (:func:`icml_interp.intervene.intervene`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from icml_interp.diffing import cohort_latent_table, layer_activations
from icml_interp.intervene import Clamp, intervene, reference_mean
from icml_interp.sae import SAE, SAEConfig, evaluate_sae, to_tokens, train_sae
from icml_interp.validation import check_number, check_tensor
from icml_interp_experiments.seglens.data import Scans
from icml_interp_experiments.seglens.train import dice_per_class, predict

EDEMA, CORE = 1, 2


def as_map(acts: torch.Tensor) -> torch.Tensor:
    """Activations as a feature map ``(n, C, H, W)``: square-grid hidden states ``(n, H*W, C)`` are reshaped."""
    if acts.dim() == 4:
        return acts
    if acts.dim() != 3:
        raise ValueError(f"acts must be (n, C, H, W) or (n, H*W, C), got {tuple(acts.shape)}")
    n, t, c = acts.shape
    side = round(t**0.5)
    if side * side != t:
        raise ValueError(f"hidden states of {t} tokens are not a square grid")
    return acts.transpose(1, 2).reshape(n, c, side, side)


def layer_maps(model: nn.Module, layer: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The activations of ``layer`` on ``images`` as feature maps ``(n, C, H, W)`` (see :func:`as_map`)."""
    return as_map(layer_activations(model, layer, images))


def fit_layer_sae(
    acts: torch.Tensor, *, expansion: int, k: int, total_tokens: int, seed: int, aux: bool = True
) -> SAE:
    """A TopK SAE on feature maps ``(n, C, H, W)`` (tokens = pixels), AuxK on unless ``aux=False``."""
    d_in = acts.shape[1]
    cfg = SAEConfig(
        d_in=d_in,
        d_sae=expansion * d_in,
        architecture="topk",
        k=k,
        seed=seed,
        total_tokens=total_tokens,
        batch_size=4096,
        lr=4e-3,
        dead_steps=30,
        aux_coefficient=1 / 32 if aux else 0.0,
    )
    sae, _ = train_sae(acts, cfg, progress=False)
    return sae


def to_grid(mask: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """A (n, H, W) mask at the layer's grid (area fraction > 0.5)."""
    if tuple(mask.shape[-2:]) == tuple(grid):
        return mask.bool()
    return F.adaptive_avg_pool2d(mask[:, None].float(), grid)[:, 0] > 0.5


@torch.no_grad()
def codes_of(sae: SAE, acts: torch.Tensor) -> torch.Tensor:
    """Codes ``(n*H*W, d_sae)`` in pixel-token order of ``to_tokens`` (bchw)."""
    return torch.cat([sae.encode(to_tokens(acts[i : i + 32])) for i in range(0, acts.shape[0], 32)])


def select_gt_free(
    sae: SAE,
    model: nn.Module,
    fit_a: Scans,
    acts_a,
    acts_b,
    n_latents: int,
    region_b: torch.Tensor | None = None,
):
    """The label-free choice: (latents, reference values (d_sae,), B-specific latents among them, table).

    Reference values: the mean code over cohort-A tokens the model itself predicts as edema. Latents: the
    ``n_latents`` with the largest gap between those reference values and the mean code over cohort-B tokens
    inside ``region_b`` (bool, ``acts_b``'s (n, H, W) grid or flattened; the label-free band of
    :func:`core_band_region`), or, without ``region_b``, the largest gap between the cohorts' mean codes over
    all tokens (the earlier ranking)."""
    codes_a, codes_b = codes_of(sae, acts_a), codes_of(sae, acts_b)
    table = cohort_latent_table({"A": codes_a, "B": codes_b})
    grid = tuple(acts_a.shape[-2:])
    pred_edema = predict(model, fit_a.images).argmax(1) == EDEMA  # the model's own edema on A: no labels
    ref = reference_mean(codes_a, to_grid(pred_edema, grid).flatten())
    if region_b is None:
        # differential reliance: the largest gap in mean activation between the cohorts (either direction)
        gap = torch.tensor([abs(r["mean_A"] - r["mean_B"]) for r in table], dtype=torch.float64)
    else:
        region_b = region_b.flatten()
        if region_b.dtype != torch.bool or region_b.numel() != codes_b.shape[0]:
            raise ValueError(
                f"region_b must be a bool mask with one entry per cohort-B token ({codes_b.shape[0]}), "
                f"got {region_b.dtype} with {region_b.numel()} entries"
            )
        gap = (ref - reference_mean(codes_b, region_b)).abs()
    latents = gap.argsort(descending=True, stable=True)[:n_latents].tolist()
    b_up = [j for j in latents if table[j]["freq_B"] > table[j]["freq_A"]]
    return latents, ref, b_up, table


def detect_latents(sae: SAE, acts_a, acts_b, n: int = 2, min_freq: float = 0.005) -> list[int]:
    """The ``n`` latents most specific to cohort B: the largest firing-frequency ratio B : A among latents
    firing on at least ``min_freq`` of B's tokens (no labels)."""
    table = cohort_latent_table({"A": codes_of(sae, acts_a), "B": codes_of(sae, acts_b)})
    ranked = sorted((r for r in table if r["freq_B"] >= min_freq), key=lambda r: -r["log_ratio"])
    return [r["latent"] for r in ranked[:n] if r["log_ratio"] > 0]


def select_oracle(sae: SAE, fit_a: Scans, fit_b: Scans, acts_a, acts_b, n_latents: int):
    """The ground-truth choice: latents with the largest |mean code on true edema, A − B|; A's true-edema mean."""
    grid = tuple(acts_a.shape[-2:])
    ref_a = reference_mean(codes_of(sae, acts_a), to_grid(fit_a.labels == EDEMA, grid).flatten())
    ref_b = reference_mean(codes_of(sae, acts_b), to_grid(fit_b.labels == EDEMA, grid).flatten())
    latents = (ref_a - ref_b).abs().argsort(descending=True)[:n_latents].tolist()
    return latents, ref_a


@torch.no_grad()
def gt_free_region(sae: SAE, acts: torch.Tensor, b_up: list[int]) -> torch.Tensor:
    """(n, H, W) bool: where any of the B-specific latents fires."""
    n, _, h, w = acts.shape
    if not b_up:
        return torch.zeros(n, h, w, dtype=torch.bool)
    f = codes_of(sae, acts)[:, b_up]  # (n*h*w, len(b_up))
    return (f > 0).any(1).reshape(n, h, w)


def core_distance(pred: torch.Tensor) -> torch.Tensor:
    """(n, H, W) float: Euclidean distance in pixels from each pixel to the nearest pixel of ``pred`` (class ids
    (n, H, W)) labelled core; 0 on the core, ``inf`` everywhere in a scan without a core pixel."""
    from scipy.ndimage import distance_transform_edt

    pred = check_tensor(pred, "pred", "(n, H, W)", ndim=3, integer=True)
    out = torch.full(pred.shape, float("inf"))
    for i, core in enumerate((pred == CORE).numpy()):
        if core.any():
            out[i] = torch.from_numpy(distance_transform_edt(~core)).float()
    return out


def band_width(pred_a: torch.Tensor, quantile: float = 0.9) -> float:
    """How far the model's own edema reaches around its own core on reference scans: the ``quantile`` of the
    distance to the nearest predicted-core pixel over the pixels ``pred_a`` (class ids (n, H, W), the model's
    predictions on cohort A, no labels) calls edema."""
    pred_a = check_tensor(pred_a, "pred_a", "(n, H, W)", ndim=3, integer=True)
    quantile = check_number(quantile, "quantile", minimum=0, maximum=1, open_min=True)
    d = core_distance(pred_a)[pred_a == EDEMA]
    d = d[torch.isfinite(d)]
    if d.numel() == 0:
        raise ValueError("pred_a has no edema pixel in a scan with a core: the band width is undefined")
    return float(torch.quantile(d, quantile))


def core_band_region(pred: torch.Tensor, width: float) -> torch.Tensor:
    """(n, H, W) bool, the label-free region of the repair: the band of pixels at distance ``(0, width]`` from
    the core the model predicts (``pred``, class ids (n, H, W)) -- the predicted core dilated by ``width``
    pixels, minus the core. Empty for a scan without a predicted core."""
    check_number(width, "width", minimum=0, open_min=True)
    d = core_distance(pred)
    return (d > 0) & (d <= width)


def random_region(like: torch.Tensor, seed: int) -> torch.Tensor:
    """Per scan, a uniformly random token set of the same size as ``like`` (n, H, W)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros_like(like, dtype=torch.bool)
    for i in range(like.shape[0]):
        size = int(like[i].sum())
        idx = torch.randperm(like[i].numel(), generator=g)[:size]
        out[i].view(-1)[idx] = True
    return out


@torch.no_grad()
def steer_dice(
    model: nn.Module,
    layer: nn.Module,
    sae: SAE,
    images: torch.Tensor,
    labels: torch.Tensor,
    latents: list[int],
    values: torch.Tensor,
    region: torch.Tensor,
    *,
    tokens_layout: bool = False,
    batch: int = 32,
) -> torch.Tensor:
    """Edema Dice per scan with the latents clamped to ``values`` inside ``region`` (n, H, W) at ``layer``
    (``tokens_layout``: the layer outputs hidden states (n, H*W, C), so the mask is flattened)."""
    model.eval()
    dice = []
    for i in range(0, images.shape[0], batch):
        sl = slice(i, i + batch)
        mask = region[sl].flatten(1) if tokens_layout else region[sl]
        with intervene(layer, sae, Clamp(latents, values), mask=mask):
            logits = model(images[sl])
        dice.append(dice_per_class(logits, labels[sl])[:, EDEMA])
    return torch.cat(dice)


def sae_quality(sae: SAE, acts: torch.Tensor) -> dict:
    return {
        k: v
        for k, v in evaluate_sae(sae, acts).items()
        if k in ("fvu", "l0", "dead_fraction", "dense_fraction")
    }


__all__ = [
    "as_map",
    "band_width",
    "codes_of",
    "core_band_region",
    "core_distance",
    "detect_latents",
    "fit_layer_sae",
    "gt_free_region",
    "random_region",
    "sae_quality",
    "select_gt_free",
    "select_oracle",
    "steer_dice",
    "to_grid",
]
