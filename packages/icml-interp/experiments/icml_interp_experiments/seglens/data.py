"""Synthetic 2-D "brain scans" with a planted cohort shift (our own design; Med-SegLens uses BraTS cohorts).

Each scan (``size`` × ``size``, one channel, values ~[0, 1]) holds a head (a random ellipse) with a bright
skull rim, smooth textured tissue inside, and a lesion: a bright homogeneous **core** ellipse surrounded by an
**edema** ring (a larger ellipse minus the core). Labels: 0 background/tissue, 1 edema, 2 core.

The edema's width and offset vary and 20 % of lesions have none, so its extent must be read from the image,
not guessed from the core (an earlier version with a fixed-width concentric ring let the SegFormer segment
B's edema from the core's shape alone: it did not fail on B). Cohort ``"A"`` (the training distribution)
renders the edema hyper-intense (brighter than tissue) with a
striped texture. Cohort ``"B"`` carries the planted shift: the same geometry, but the edema is
**hypo-intense** (darker than tissue) with the same stripes, so a model trained on A misses it.

Ground-truth concept maps for the planted concepts (float masks, ``(n, size, size)``): ``"core"``,
``"edema"``, ``"skull"`` (the rim, a boundary concept) and ``"tissue"`` (inside the head, outside the lesion).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from icml_interp.validation import check_choice, check_int

COHORTS = ("A", "B")
CLASSES = ("background", "edema", "core")
CONCEPTS = ("core", "edema", "skull", "tissue")
EDEMA_INTENSITY = {"A": 0.70, "B": 0.20}  # tissue sits at 0.45, core at 0.95


@dataclass
class Scans:
    """A batch of scans: ``images`` (n, 1, H, W) float, ``labels`` (n, H, W) long, ``concepts`` name -> (n, H, W)."""

    images: torch.Tensor
    labels: torch.Tensor
    concepts: dict[str, torch.Tensor] = field(default_factory=dict)
    cohort: str = "A"

    def __len__(self) -> int:
        return self.images.shape[0]


def _ellipse(yy, xx, cy, cx, ay, ax, theta):
    c, s = math.cos(theta), math.sin(theta)
    dy, dx = yy - cy, xx - cx
    u, v = c * dx + s * dy, -s * dx + c * dy
    return (u / ax) ** 2 + (v / ay) ** 2  # <= 1 inside


def _smooth_noise(g: torch.Generator, size: int, cells: int) -> torch.Tensor:
    coarse = torch.randn(1, 1, cells, cells, generator=g)
    return F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)[0, 0]


def make_scans(cohort: str, n: int, seed: int, size: int = 48) -> Scans:
    """``n`` scans of ``cohort`` ("A" or "B"), deterministic in ``seed``; see the module docstring."""
    check_choice(cohort, "cohort", COHORTS)
    check_int(n, "n", minimum=1)
    check_int(size, "size", minimum=24)
    check_int(seed, "seed")
    # the cohort is folded into the seed so A and B never share an exact geometry
    g = torch.Generator().manual_seed(seed * 2 + COHORTS.index(cohort))
    yy, xx = torch.meshgrid(
        torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij"
    )
    s = size / 48.0

    def u(lo, hi):
        return float(lo + (hi - lo) * torch.rand((), generator=g))

    images = torch.zeros(n, 1, size, size)
    labels = torch.zeros(n, size, size, dtype=torch.long)
    concepts = {name: torch.zeros(n, size, size) for name in CONCEPTS}
    for i in range(n):
        cy, cx = size / 2 + u(-11, 11) * s, size / 2 + u(-11, 11) * s
        ay, ax, th = u(11, 12.5) * s, u(10.5, 12) * s, u(-0.5, 0.5)
        head_r = _ellipse(yy, xx, cy, cx, ay, ax, th)
        head = head_r <= 1.0
        inner = head_r <= 0.80  # inside the skull rim
        skull = head & ~inner
        # lesion: core axes 2.5..4.5 px; the edema ellipse is 1.5..6 px wider, off-centre by up to 2 px and turned
        # independently, and absent in 20 % of scans, so the edema's shape cannot be guessed from the core alone
        cay, cax, lth = u(2.5, 4.5) * s, u(2.5, 4.5) * s, u(0, math.pi)
        has_edema = bool(torch.rand((), generator=g) >= 0.2)
        eay, eax, eth = cay + u(1.5, 6) * s, cax + u(1.5, 6) * s, lth + u(-0.6, 0.6)
        oy, ox = u(-2, 2) * s, u(-2, 2) * s
        # anywhere that keeps the core inside the inner head (the edema is clipped to it), so lesion positions
        # vary across scans and a shuffled-image null sees little chance overlap
        reach = max(cay, cax) + 1 * s
        ang, rad = u(0, 2 * math.pi), math.sqrt(u(0, 1)) * max(0.0, 0.88 * min(ay, ax) - reach)
        ly, lx = cy + rad * math.sin(ang), cx + rad * math.cos(ang)
        core = (_ellipse(yy, xx, ly, lx, cay, cax, lth) <= 1.0) & inner
        edema = (_ellipse(yy, xx, ly + oy, lx + ox, eay, eax, eth) <= 1.0) & inner & ~core
        if not has_edema:
            edema = torch.zeros_like(core)
        tissue = inner & ~core & ~edema
        img = torch.zeros(size, size)
        img[inner] = 0.45
        img = img + inner * 0.06 * _smooth_noise(g, size, 6)
        img[skull] = 0.9
        # the edema: cohort intensity plus a stripe texture of random orientation and phase
        phi, ph = u(0, math.pi), u(0, 2 * math.pi)
        stripes = 0.08 * torch.sin(1.2 * (math.cos(phi) * xx + math.sin(phi) * yy) + ph)
        img = torch.where(edema, EDEMA_INTENSITY[cohort] + stripes, img)
        img = torch.where(core, torch.full_like(img, 0.95), img)
        img = img + 0.04 * torch.randn(size, size, generator=g)
        images[i, 0] = img
        labels[i][edema] = 1
        labels[i][core] = 2
        for name, m in (("core", core), ("edema", edema), ("skull", skull), ("tissue", tissue)):
            concepts[name][i] = m.float()
    return Scans(images, labels, concepts, cohort)
