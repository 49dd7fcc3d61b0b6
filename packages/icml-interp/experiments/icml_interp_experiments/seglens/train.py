"""Training the testbed's segmenters on cohort A, Dice per class, and a weight cache.

Trained weights are cached as safetensors under ``icml_tools.assets.cache_dir() / "seglens"`` keyed by
architecture, seed and the training settings, so the reproduction trains each model once per machine.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from icml_interp.validation import check_choice, check_int, check_type
from icml_interp_experiments.seglens.data import CLASSES, Scans, make_scans
from icml_interp_experiments.seglens.models import ARCHITECTURES

N_CLASSES = len(CLASSES)


def dice_per_class(pred: torch.Tensor, labels: torch.Tensor, n_classes: int = N_CLASSES) -> torch.Tensor:
    """Dice of each class for each scan: ``pred`` (n, H, W) class ids or (n, C, H, W) logits, ``labels`` (n, H, W).

    Returns ``(n, n_classes)``; a class absent from both prediction and label scores 1 (nothing to miss).
    """
    check_type(pred, "pred", torch.Tensor, "a torch.Tensor")
    check_type(labels, "labels", torch.Tensor, "a torch.Tensor")
    if pred.dim() == 4:
        pred = pred.argmax(1)
    if pred.shape != labels.shape or labels.dim() != 3:
        raise ValueError(
            f"pred must be (n, H, W) class ids or (n, C, H, W) logits matching labels (n, H, W); "
            f"got pred {tuple(pred.shape)}, labels {tuple(labels.shape)}"
        )
    out = torch.empty(labels.shape[0], n_classes)
    for c in range(n_classes):
        p, t = (pred == c).flatten(1).float(), (labels == c).flatten(1).float()
        inter, total = (p * t).sum(1), p.sum(1) + t.sum(1)
        out[:, c] = torch.where(total > 0, 2 * inter / total.clamp_min(1e-9), torch.ones_like(total))
    return out


def soft_dice(logits: torch.Tensor, labels: torch.Tensor, cls: int) -> torch.Tensor:
    """Differentiable Dice of class ``cls`` per scan, from softmax probabilities: ``(n,)``."""
    prob = logits.softmax(1)[:, cls].flatten(1)
    target = (labels == cls).flatten(1).float()
    return 2 * (prob * target).sum(1) / (prob.sum(1) + target.sum(1)).clamp_min(1e-6)


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, batch: int = 64) -> torch.Tensor:
    """Logits ``(n, C, H, W)`` in eval mode, in batches."""
    model.eval()
    return torch.cat([model(images[i : i + batch]) for i in range(0, images.shape[0], batch)])


def train_segmenter(
    model: nn.Module,
    scans: Scans,
    *,
    steps: int = 400,
    batch: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = False,
) -> list[float]:
    """Adam on cross-entropy + (1 − soft Dice of edema and core); random flips as augmentation. Returns losses."""
    check_int(steps, "steps", minimum=1)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    weight = torch.tensor([1.0, 3.0, 3.0])  # the lesion classes are small
    losses = []
    it = range(steps)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"train {type(model).__name__}")
    model.train()
    for _ in it:
        idx = torch.randint(len(scans), (batch,), generator=g)
        x, y = scans.images[idx], scans.labels[idx]
        if torch.rand((), generator=g) < 0.5:
            x, y = x.flip(-1), y.flip(-1)
        if torch.rand((), generator=g) < 0.5:
            x, y = x.flip(-2), y.flip(-2)
        logits = model(x)
        loss = F.cross_entropy(logits, y, weight=weight)
        loss = loss + sum(1 - soft_dice(logits, y, c).mean() for c in (1, 2))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def cache_root() -> Path:
    from icml_tools.assets import cache_dir

    return cache_dir() / "seglens"


def cached_path(arch: str, seed: int = 0, *, n_train: int = 512, steps: int = 400, size: int = 48) -> Path:
    """Where :func:`pretrained` keeps the weights of that segmenter."""
    return cache_root() / f"{arch}-s{seed}-n{n_train}-t{steps}-px{size}.safetensors"


def pretrained(
    arch: str,
    seed: int = 0,
    *,
    n_train: int = 512,
    steps: int = 400,
    size: int = 48,
    cache: bool = True,
    progress: bool = False,
) -> nn.Module:
    """A segmenter of ``arch`` ("unet" | "segformer") trained on ``n_train`` cohort-A scans (seeded), from the cache if there."""
    check_choice(arch, "arch", ARCHITECTURES)
    from safetensors.torch import load_file, save_file

    torch.manual_seed(seed)
    model = ARCHITECTURES[arch]()
    path = cached_path(arch, seed, n_train=n_train, steps=steps, size=size)
    if cache and path.is_file():
        model.load_state_dict(load_file(str(path)))
        return model.eval()
    train_segmenter(
        model,
        make_scans("A", n_train, seed=10_000 + seed, size=size),
        steps=steps,
        seed=seed,
        progress=progress,
    )
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        os.close(fd)
        try:
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp)
            os.replace(tmp, path)  # atomic: a failed save leaves no half-written file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return model.eval()
