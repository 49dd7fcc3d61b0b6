"""Training and inference for :class:`~icml_generative.amnet.AMNet`: the loss with modality dropout and
translator alignment, sliding frame windows, and :func:`enhance` for clips with any subset of modalities."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from icml_generative.amnet.model import AMNet
from icml_generative.cache.metrics import ssim_map
from icml_generative.validation import check_instance, check_int, check_number, check_tensor, random_device

MAX_BATCH = 65536


class AMNetLoss(NamedTuple):
    """``loss`` (the total, differentiable) and its parts as floats: ``l1``, ``ssim`` (the mean SSIM, not the
    loss ``1 − ssim``) and ``alignment`` (0 where no modality was given)."""

    loss: torch.Tensor
    l1: float
    ssim: float
    alignment: float


def frame_windows(clip: torch.Tensor, window: int) -> torch.Tensor:
    """Sliding windows ``(T, window, ...)`` centred on each frame of ``clip`` ``(T, ...)``, the first and last
    frames repeated at the ends."""
    check_tensor(clip, "clip")
    if clip.ndim < 1 or clip.shape[0] == 0:
        raise ValueError(f"clip must have at least one frame along its first axis, got {tuple(clip.shape)}")
    window = check_int(window, "window", 1, 15)
    if window % 2 == 0:
        raise ValueError(f"window must be odd, got {window}")
    t = clip.shape[0]
    half = window // 2
    index = (torch.arange(t)[:, None] + torch.arange(-half, half + 1)[None, :]).clamp(0, t - 1)
    return clip[index.to(clip.device)]


def alignment_loss(translated: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """``mean |F̂ − sg(F)| + mean(1 − cos(F̂, sg(F)))`` (cosine over channels, per position): pulls the
    translator's features ``F̂`` towards the real encoder's ``F`` (not the reverse)."""
    check_tensor(translated, "translated", floating=True, finite=True)
    check_tensor(real, "real", floating=True, finite=True)
    if translated.shape != real.shape or translated.ndim < 2:
        raise ValueError(
            f"translated and real must be features (B, C, ...) of one shape, got {tuple(translated.shape)} "
            f"and {tuple(real.shape)}"
        )

    def loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        cosine = F.cosine_similarity(a, b, dim=1, eps=1e-6)
        return (a - b).abs().mean() + (1 - cosine).mean()

    value = loss(translated, real.detach())
    if not torch.isfinite(value):  # features near the dtype's range overflowed the sums: again in float64
        value = loss(translated.double(), real.detach().double()).to(translated.dtype)
        if not torch.isfinite(value):
            warnings.warn(
                f"alignment_loss: the loss exceeds the range of {translated.dtype}; it is {value.item()}",
                RuntimeWarning,
                stacklevel=2,
            )
    return value


def amnet_loss(
    model: AMNet,
    frames: torch.Tensor,
    target: torch.Tensor,
    events: torch.Tensor | None = None,
    infrared: torch.Tensor | None = None,
    *,
    dropout: float = 0.5,
    ssim_weight: float = 0.2,
    align_weight: float = 0.1,
    generator: torch.Generator | None = None,
) -> AMNetLoss:
    """``L1 + ssim_weight · (1 − SSIM) + align_weight · alignment`` on windows (``frames`` and the modalities as
    :meth:`AMNet.forward` takes them; ``target`` ``(B, 3, H, W)`` the clean centre frames). Each given modality
    is dropped per sample with probability ``dropout`` (the fusion then uses the translator, or zeros);
    the alignment term (:func:`alignment_loss`) uses every sample whose modality was given."""
    check_instance(model, "model", AMNet)
    dropout = check_number(dropout, "dropout", 0, 1)
    ssim_weight = check_number(ssim_weight, "ssim_weight", 0, 1e6)
    align_weight = check_number(align_weight, "align_weight", 0, 1e6)
    check_tensor(target, "target", floating=True, finite=True)
    if target.numel() and (target.min() < 0 or target.max() > 1):
        raise ValueError("target must hold clean frames with values in [0, 1]")
    check_tensor(frames, "frames")
    if frames.ndim != 5 or tuple(target.shape) != (frames.shape[0], 3, *frames.shape[-2:]):
        raise ValueError(
            f"target must be the clean centre frames (B, 3, H, W) of frames {tuple(frames.shape)}, "
            f"got {tuple(target.shape)}"
        )
    b, m = frames.shape[0], len(model.modalities)
    rand = torch.rand((b, m), generator=generator, device=random_device(generator, "cpu"))
    present = (rand >= dropout).to(frames.device)
    align = align_weight > 0 and model.has_translators
    out = model(frames, events, infrared, present=present, return_features=align)
    l1 = (out.sample - target).abs().mean()
    similarity = ssim_map(out.sample, target.to(out.sample.dtype), 1.0).mean()
    loss = l1 + ssim_weight * (1 - similarity)
    alignment = torch.zeros((), dtype=loss.dtype, device=loss.device)
    for name in out.real_features:
        if name in out.translated_features:
            alignment = alignment + alignment_loss(out.translated_features[name], out.real_features[name])
    if align:
        loss = loss + align_weight * alignment
    return AMNetLoss(loss, l1.item(), similarity.item(), alignment.item())


def _as_batch(value: Any, name: str, channels: int, frames: torch.Tensor | None) -> torch.Tensor:
    check_tensor(value, name, floating=True, finite=True)
    clip = value.unsqueeze(0) if value.ndim == 4 else value
    if clip.ndim != 5 or clip.shape[2] != channels or clip.numel() == 0:
        raise ValueError(
            f"{name} must be a clip (T, {channels}, H, W) or clips (N, T, {channels}, H, W), got {tuple(value.shape)}"
        )
    if frames is not None:
        if clip.shape[:2] != frames.shape[:2]:
            raise ValueError(
                f"{name} must have the frames' clips and frame count {tuple(frames.shape[:2])}, "
                f"got {tuple(clip.shape[:2])}"
            )
        if clip.shape[-2:] != frames.shape[-2:]:
            raise ValueError(
                f"{name} must have the frames' size {tuple(frames.shape[-2:])}, got {tuple(clip.shape[-2:])}"
            )
    return clip


def _pad(x: torch.Tensor, pad: tuple[int, ...]) -> torch.Tensor:
    """Pad clips ``(N, T, C, H, W)`` on the right and bottom by repeating the edge."""
    return F.pad(x.flatten(0, 1), pad, mode="replicate").unflatten(0, x.shape[:2])


@torch.no_grad()
def enhance(
    model: AMNet,
    frames: torch.Tensor,
    events: torch.Tensor | None = None,
    infrared: torch.Tensor | None = None,
    *,
    batch_size: int = 16,
    progress: bool = True,
) -> torch.Tensor:
    """Enhance low-light ``frames`` (a clip ``(T, 3, H, W)`` or clips ``(N, T, 3, H, W)``, values in ``[0, 1]``)
    with any subset of the auxiliaries: ``events`` as voxel grids ``(T, event_bins, H, W)`` (see
    :func:`~icml_generative.amnet.event_voxels`) and ``infrared`` ``(T, 1, H, W)`` (or with the clips' leading
    ``N``), None where missing. Each frame is enhanced from its window (ends repeated); ``batch_size`` windows
    run at a time, in evaluation mode, with a progress bar over batches when ``progress`` and there is more
    than one. Odd sizes are padded (edge values) and cropped back. Returns the enhanced frames, shaped like
    ``frames``, clipped to ``[0, 1]``."""
    check_instance(model, "model", AMNet)
    batch_size = check_int(batch_size, "batch_size", 1, MAX_BATCH)
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    clips = _as_batch(frames, "frames", 3, None)
    aux = {
        name: _as_batch(value, name, channels, clips)
        for name, value, channels in (("events", events, model.event_bins), ("infrared", infrared, 1))
        if value is not None
    }
    for name in aux:
        if name not in model.modalities:
            raise ValueError(f"{name} given, but this model was built for modalities {model.modalities}")
    n, t, _, h, w = clips.shape
    pad = (0, w % 2, 0, h % 2)
    if any(pad):  # even sizes for the model's stride-2 encoder
        clips, aux = _pad(clips, pad), {k: _pad(v, pad) for k, v in aux.items()}
    offsets = torch.arange(model.window, device=clips.device) - model.window // 2
    dtype = next(model.parameters()).dtype
    modes = {m: m.training for m in model.modules()}  # each submodule's own mode, put back afterwards
    model.eval()
    outputs = []
    try:
        starts = range(0, n * t, batch_size)
        for lo in tqdm(starts, desc="enhance", disable=not progress or len(starts) <= 1):
            # the windows of frames lo..lo + batch_size, built per batch (a long clip is not copied window-fold)
            flat = torch.arange(lo, min(lo + batch_size, n * t), device=clips.device)
            clip, frame = (flat // t)[:, None], ((flat % t)[:, None] + offsets).clamp(0, t - 1)
            batch = {"frames": clips[clip, frame].to(dtype)}
            batch.update({k: v[clip, frame].to(dtype) for k, v in aux.items()})
            outputs.append(model(**batch).sample)
    finally:
        for m, mode in modes.items():
            m.training = mode
    out = torch.cat(outputs)[..., :h, :w].clamp(0, 1).unflatten(0, (n, t))
    return out if frames.ndim == 5 else out[0]


__all__ = ["AMNetLoss", "alignment_loss", "amnet_loss", "enhance", "frame_windows"]
