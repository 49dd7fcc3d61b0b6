"""The synthetic 3-D testbed of ``viewmask-voxels`` (ours): random voxel objects with coloured parts, rendered
orthographically at 4 azimuths, their silhouettes, visual hulls, and the metrics of the reproduction.

An object is a ``(G, G, G)`` grid of part labels (0 empty) indexed ``[x, y, z]``: a union of 2-4 axis-aligned
boxes, each with one palette colour. View ``k`` (azimuth ``90 k`` degrees about the vertical ``y`` axis) looks
at the object rotated by ``k`` quarter turns and shows the first occupied voxel along the viewing axis,
each voxel a ``cell x cell`` pixel square, on a black background. Image rows are ``y``, columns the
horizontal axis. Views 2 and 3 look from the opposite sides of views 0 and 1, so their silhouettes are the
mirror images (left-right) of those of views 0 and 1; their colours need not be.

Nothing in view 0 tells how deep the object is: the 90 and 270 degree views (depth profile) are uncertain
given the condition, but each determines the other's silhouette. That is the consistency the paper's joint
self-attention should capture and an independent-view model cannot.
"""

from __future__ import annotations

import numpy as np
import torch

PALETTE = np.array(
    [
        [0.90, 0.20, 0.20],
        [0.20, 0.80, 0.25],
        [0.25, 0.35, 0.95],
        [0.95, 0.85, 0.20],
        [0.85, 0.30, 0.85],
        [0.20, 0.85, 0.90],
    ],
    dtype=np.float32,
)
VIEWS = 4
SILHOUETTE_THRESHOLD = 0.1  # max channel above this: object (the palette's darkest channel max is 0.85)


def make_objects(n: int, grid: int = 8, seed: int = 0) -> np.ndarray:
    """``n`` random objects ``(n, G, G, G)`` int8 part labels in ``0..len(PALETTE)`` (0 empty): 2-4 boxes,
    sides ``max(1, G // 4)`` to ``G - G // 4`` voxels, later boxes painted over earlier ones."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, grid, grid, grid), dtype=np.int8)
    small, large = max(1, grid // 4), grid - grid // 4
    for i in range(n):
        for _ in range(rng.integers(2, 5)):
            lo, size = [], []
            for _axis in range(3):
                s = int(rng.integers(small, large + 1))
                size.append(s)
                lo.append(int(rng.integers(0, grid - s + 1)))
            colour = int(rng.integers(1, len(PALETTE) + 1))
            out[i, lo[0] : lo[0] + size[0], lo[1] : lo[1] + size[1], lo[2] : lo[2] + size[2]] = colour
    return out


def rotate(objects: np.ndarray, k: int) -> np.ndarray:
    """The objects turned ``k`` quarter turns about the vertical axis (x towards z)."""
    return np.rot90(objects, k, axes=(-3, -1))


def front_labels(objects: np.ndarray, k: int) -> np.ndarray:
    """The part label seen at each ``(y, x)`` voxel cell of view ``k``: ``(..., G, G)`` (0 background)."""
    turned = rotate(objects, k)  # [..., x, y, z]; the camera looks along +z
    occupied = turned > 0
    first = occupied.argmax(axis=-1)
    labels = np.take_along_axis(turned, first[..., None], axis=-1)[..., 0]
    labels = np.where(occupied.any(axis=-1), labels, 0)
    return np.swapaxes(labels, -1, -2)  # rows y, columns x


def paint(labels: np.ndarray, cell: int = 4) -> np.ndarray:
    """Images ``(..., 3, G*cell, G*cell)`` float32 in [0, 1] of view labels ``(..., G, G)``."""
    colours = np.concatenate([np.zeros((1, 3), np.float32), PALETTE])
    img = colours[labels].repeat(cell, axis=-3).repeat(cell, axis=-2)
    return np.ascontiguousarray(np.moveaxis(img, -1, -3))


def view_labels(objects: np.ndarray) -> np.ndarray:
    """The part labels seen in all 4 views: ``(n, 4, G, G)``."""
    return np.stack([front_labels(objects, k) for k in range(VIEWS)], axis=1)


def render(objects: np.ndarray, cell: int = 4) -> np.ndarray:
    """All 4 views of the objects: ``(n, 4, 3, G*cell, G*cell)`` float32 in [0, 1]."""
    return paint(view_labels(objects), cell)


def silhouettes(images: np.ndarray | torch.Tensor) -> np.ndarray:
    """Object masks of images ``(..., 3, H, W)``: ``(..., H, W)`` bool (max channel above the threshold)."""
    arr = images.detach().cpu().numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    return arr.max(axis=-3) > SILHOUETTE_THRESHOLD


def cell_silhouettes(images: np.ndarray | torch.Tensor, grid: int = 8) -> np.ndarray:
    """Silhouettes at voxel-cell resolution ``(..., G, G)``: a cell is inside when most of its pixels are."""
    sil = silhouettes(images)
    c = sil.shape[-1] // grid
    cells = sil.reshape(*sil.shape[:-2], grid, c, grid, c).mean(axis=(-3, -1))
    return cells > 0.5


def carve_hull(cells: np.ndarray) -> np.ndarray:
    """The visual hull ``(..., G, G, G)`` (``[x, y, z]``) of 4 cell silhouettes ``(..., 4, G, G)``: the voxels
    whose projection falls inside every view's silhouette."""
    g = cells.shape[-1]
    hull = np.ones((*cells.shape[:-3], g, g, g), dtype=bool)
    for k in range(VIEWS):
        sil = np.swapaxes(cells[..., k, :, :], -1, -2)  # [x, y] of view k
        turned = rotate(hull, k) & sil[..., :, :, None]
        hull = rotate(turned, -k)
    return hull


def project(hull: np.ndarray) -> np.ndarray:
    """Cell silhouettes ``(..., 4, G, G)`` of a voxel set ``(..., G, G, G)``."""
    return np.stack([np.swapaxes(rotate(hull, k).any(axis=-1), -1, -2) for k in range(VIEWS)], axis=-3)


def iou(a: np.ndarray, b: np.ndarray, axes: tuple[int, ...] = (-2, -1)) -> np.ndarray:
    """Intersection over union of boolean masks over ``axes`` (1 where both are empty)."""
    inter = (a & b).sum(axis=axes)
    union = (a | b).sum(axis=axes)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def mirror_iou(view_90: np.ndarray, view_270: np.ndarray) -> np.ndarray:
    """IoU between a 90 degree silhouette and the left-right mirror of a 270 degree one (1 when consistent)."""
    return iou(view_90, view_270[..., ::-1])


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PSNR in dB of images ``(..., 3, H, W)`` in [0, 1] (capped at 60 dB for identical images)."""
    mse = ((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2).mean(axis=(-3, -2, -1))
    return np.minimum(60.0, 10 * np.log10(1.0 / np.maximum(mse, 1e-6)))


def ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SSIM (scikit-image, 7x7 window, data range 1) of images ``(..., 3, H, W)``."""
    from skimage.metrics import structural_similarity

    a2, b2 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    flat_a = a2.reshape(-1, *a2.shape[-3:])
    flat_b = b2.reshape(-1, *b2.shape[-3:])
    vals = [
        structural_similarity(x, y, channel_axis=0, data_range=1.0)
        for x, y in zip(flat_a, flat_b, strict=True)
    ]
    return np.asarray(vals).reshape(a2.shape[:-3])


def view_metrics(
    condition: np.ndarray, generated: np.ndarray, truth: np.ndarray, grid: int = 8
) -> dict[str, np.ndarray]:
    """Per-object metrics of generated target views ``(n, 3, 3, H, W)`` against the true ones, given the
    condition view ``(n, 3, H, W)``: ``psnr``, ``ssim``, ``silhouette_iou`` (means over the 3 target views),
    ``hull_iou`` (the visual-hull consistency: the hull carved from the condition's and the generated
    silhouettes, reprojected, against the generated silhouettes, mean over target views), ``true_hull_iou``
    (that hull against the hull of the true silhouettes), ``mirror_iou`` (90 against mirrored 270) and the
    180-degree view's ``view180_silhouette_iou`` (reported apart: it mirrors the condition)."""
    sil_gen = silhouettes(generated)
    sil_true = silhouettes(truth)
    cells = cell_silhouettes(np.concatenate([condition[:, None], generated], axis=1), grid)
    true_cells = cell_silhouettes(np.concatenate([condition[:, None], truth], axis=1), grid)
    hull = carve_hull(cells)
    reproj = project(hull)
    sil_iou = iou(sil_gen, sil_true)  # (n, 3)
    return {
        "psnr": psnr(generated, truth).mean(axis=1),
        "ssim": ssim(generated, truth).mean(axis=1),
        "silhouette_iou": sil_iou.mean(axis=1),
        "hull_iou": iou(reproj[:, 1:], cells[:, 1:]).mean(axis=1),
        "true_hull_iou": iou(hull, carve_hull(true_cells), axes=(-3, -2, -1)),
        "mirror_iou": mirror_iou(sil_gen[:, 0], sil_gen[:, 2]),
        "view180_silhouette_iou": sil_iou[:, 1],
    }
