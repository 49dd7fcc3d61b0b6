"""SSL4RL's self-supervised tasks: turn any image into verifiable ``(images, prompt, answer)`` examples.

Every builder takes one image (a PIL image or an array) and a seed or ``numpy.random.Generator`` and
returns an :class:`SSLExample`. Images are first made *canonical*: converted to ``mode`` ("L" grayscale or
"RGB", so grayscale and colour inputs mix freely), centre-cropped to a square and resized to ``size`` pixels
(smaller images are upsampled; images whose short side is below ``min_side`` raise ``ValueError``, and the
dataset builder skips them with a warning, as the release skips images under 28 px). Pixel values are
float32 in ``[0, 1]``, arrays ``(size, size, channels)``.

Tasks, after the release's builders (PKU-ML/SSL4RL ``build_benchmarks/``) unless marked [design]:

* ``rotation``: (original, rotated) with the angle drawn from ``0, g, 2g, ...`` (``g = granularity``,
  counter-clockwise). Both images are centre-cropped to the largest square that fits inside the rotated
  image for *every* angle of the set, so neither the borders nor the image size give the angle away
  (the release crops per angle; for 90-degree steps on square images the two agree). Answer: the degrees.
* ``jigsaw``: a ``grid x grid`` mosaic whose tiles are shown in shuffled order (tile ``i`` shows patch
  ``order[i]``). Answer: the 1-based inverse permutation in row-major order, ``inv[order[i]] = i + 1``, i.e.
  for each original position, the shown tile that holds it. [design: the tiles come as one mosaic image.]
* ``position``: (full image, augmented quadrant crop resized to ``size``); augmentations colour jitter,
  grayscale, blur and solarize. Answer: ``top-left`` | ``top-right`` | ``bottom-left`` | ``bottom-right``.
* ``contrastive``: two SimCLR-style views (random resized crop, flip, colour jitter, grayscale, blur) of the
  same image (``positive``) or of two images (``negative``).
* ``patch`` [design; the release has no patch task]: one cell of a ``grid x grid`` grid is filled with
  mid-grey; the answer is the hidden cell's ``code x code`` block means quantized to ``levels`` levels,
  comma-separated in row-major order, scored by :func:`icml_agents.ssl4rl.rewards.score_patch`.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from icml_agents.validation import check_bool, check_choice, check_int, check_real, check_seed

MODES = ("L", "RGB")
QUADRANTS = ("top-left", "top-right", "bottom-left", "bottom-right")
CONTRASTIVE = ("negative", "positive")
INSTRUCTION = " Think step by step, then give the final answer as <answer>...</answer>."
TEXT_SHADES = " .:#"  # serialize_image's characters, dark to bright
MAX_SIZE = 4096  # the largest canonical side: (4096, 4096, 3) float32 is 200 MB per view


@dataclass
class SSLExample:
    """One verifiable example: ``images`` (float32 ``(size, size, C)`` in [0, 1]), ``prompt``, ``answer``
    (the ground-truth string the rewards score against) and ``label`` (the answer as indices into the task's
    answer space, for categorical policies: one int, or one int per position for jigsaw and patch)."""

    task: str
    images: list
    prompt: str
    answer: str
    label: tuple
    meta: dict = field(default_factory=dict)


def to_array(image, mode: str = "L") -> np.ndarray:
    """A PIL image or an array as float32 ``(H, W, C)`` in [0, 1] with ``C = 1`` ("L") or 3 ("RGB").

    Arrays: ``(H, W)`` or ``(H, W, 1)`` grayscale, ``(H, W, 3)`` RGB, ``(H, W, 4)`` RGBA (alpha dropped);
    uint8 / integers in [0, 255] are divided by 255, floats must already lie in [0, 1]. Grayscale becomes RGB
    by repetition, RGB becomes grayscale by ITU-R 601 luma (PIL's ``convert("L")`` weights).
    """
    check_choice(mode, "mode", MODES)
    if isinstance(image, Image.Image):
        if image.mode not in ("F", "I", "I;16", "I;16B", "I;16L"):  # 8-bit modes: through L or RGB uint8
            image = image.convert("L" if image.mode in ("1", "L", "LA") else "RGB")
        image = np.asarray(image)  # float and wide-integer modes take the array rules below
    arr = np.asarray(image)
    if arr.dtype == bool:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "ui":
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"integer image values must lie in [0, 255], got [{arr.min()}, {arr.max()}]")
        arr = arr.astype(np.float32) / 255.0
    elif arr.dtype.kind == "f":
        arr = arr.astype(np.float32)
        if not np.isfinite(arr).all():
            raise ValueError("image contains NaN or infinite values")
        if arr.size and (arr.min() < 0 or arr.max() > 1):
            raise ValueError(f"float image values must lie in [0, 1], got [{arr.min():.3g}, {arr.max():.3g}]")
    else:
        raise TypeError(f"image must be a PIL image or a numeric array, got dtype {arr.dtype}")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4):
        raise ValueError(f"image must be (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), got shape {arr.shape}")
    arr = arr[:, :, :3]
    if mode == "L" and arr.shape[2] == 3:
        arr = arr @ np.array([0.299, 0.587, 0.114], dtype=np.float32)[:, None]
    elif mode == "RGB" and arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    return np.ascontiguousarray(arr, dtype=np.float32)


def _channels(arr: np.ndarray) -> list[Image.Image]:
    return [Image.fromarray(arr[:, :, c], mode="F") for c in range(arr.shape[2])]


def _stack(channels: list[Image.Image]) -> np.ndarray:
    return np.clip(np.stack([np.asarray(c, dtype=np.float32) for c in channels], axis=2), 0.0, 1.0)


def resize(arr: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of ``(H, W, C)`` to ``(size, size, C)``."""
    return _stack([c.resize((size, size), Image.Resampling.BILINEAR) for c in _channels(arr)])


def center_crop(arr: np.ndarray, side: int) -> np.ndarray:
    """The central ``side x side`` window of ``(H, W, C)``."""
    h, w = arr.shape[:2]
    if side > min(h, w):
        raise ValueError(f"crop side {side} exceeds the image size {h}x{w}")
    top, left = (h - side) // 2, (w - side) // 2
    return arr[top : top + side, left : left + side]


def canonical(image, size: int = 16, mode: str = "L", min_side: int = 8) -> np.ndarray:
    """``image`` converted to ``mode``, centre-cropped to a square and resized to ``(size, size, C)``."""
    check_int(size, "size", 4, MAX_SIZE)
    check_int(min_side, "min_side", 1)
    arr = to_array(image, mode)
    h, w = arr.shape[:2]
    if min(h, w) < min_side:
        raise ValueError(f"image is {h}x{w}, smaller than min_side={min_side} pixels")
    arr = center_crop(arr, min(h, w))
    return arr if arr.shape[0] == size else resize(arr, size)


def rotate(arr: np.ndarray, degrees: float) -> np.ndarray:
    """Counter-clockwise rotation of ``(H, W, C)`` with ``expand=True`` (bilinear; exact for multiples of 90)."""
    if degrees % 90 == 0:
        return np.ascontiguousarray(np.rot90(arr, k=int(degrees // 90) % 4, axes=(0, 1)))
    return _stack(
        [c.rotate(degrees, resample=Image.Resampling.BILINEAR, expand=True) for c in _channels(arr)]
    )


def inscribed_side(side: int, angles) -> int:
    """The side of the largest centred axis-aligned square inside a ``side``-square rotated by every angle."""
    worst = max(abs(math.cos(math.radians(a))) + abs(math.sin(math.radians(a))) for a in angles)
    return math.floor(side / worst + 1e-9)


def rotation_angles(granularity: int = 90) -> list[int]:
    """``[0, g, 2g, ...]`` below 360; ``granularity`` must divide 360."""
    if 360 % check_int(granularity, "granularity", 1):
        raise ValueError(f"granularity must be a positive integer dividing 360, got {granularity!r}")
    return list(range(0, 360, granularity))


def _random_square_crop(arr: np.ndarray, rng, scale: float) -> np.ndarray:
    """A random square window of side ``U(scale, 1)`` times the side of ``(S, S, C)``, resized back to ``S``."""
    size = arr.shape[0]
    side = max(1, round(size * rng.uniform(scale, 1.0)))
    top, left = int(rng.integers(size - side + 1)), int(rng.integers(size - side + 1))
    window = np.ascontiguousarray(arr[top : top + side, left : left + side])
    return window if side == size else resize(window, size)


def rotation_task(
    image,
    seed=0,
    granularity: int = 90,
    size: int = 16,
    mode: str = "L",
    min_side: int = 8,
    angle: int | None = None,
    reference: bool = True,
    crop_scale: float = 1.0,
) -> SSLExample:
    """(original, rotated) images; answer: the counter-clockwise angle in degrees.

    ``reference=False`` shows the rotated image alone (classical RotNet; the model must know which way up
    the content belongs). ``crop_scale < 1`` [design] takes from each view, independently, a random square
    crop of side ``U(crop_scale, 1) x`` the view's side and resizes it back, so the two views no longer
    align pixel for pixel and the angle must be read from the shape rather than by matching pixels."""
    check_real(crop_scale, "crop_scale", "(0, 1]")
    check_bool(reference, "reference")
    rng = check_seed(seed)
    angles = rotation_angles(granularity)
    if angle is not None and (isinstance(angle, bool) or angle not in angles):
        raise ValueError(f"angle must be None or one of {angles} (granularity={granularity}), got {angle!r}")
    k = int(rng.integers(len(angles))) if angle is None else angles.index(angle)
    base = canonical(image, size, mode, min_side)
    crop = inscribed_side(size, angles)
    rotated = rotate(base, angles[k])
    views = [center_crop(base, crop), center_crop(rotated, crop)]
    views = [v if crop == size else resize(v, size) for v in views]
    if crop_scale < 1:
        views = [_random_square_crop(v, rng, crop_scale) for v in views]
    choices = ", ".join(map(str, angles))
    if reference:
        prompt = (
            f"The first image is the original; the second is the same image rotated counter-clockwise by one "
            f"of {choices} degrees. By how many degrees was it rotated?" + INSTRUCTION
        )
    else:
        views = views[1:]
        prompt = (
            f"This image was rotated counter-clockwise by one of {choices} degrees. By how many degrees was "
            "it rotated?" + INSTRUCTION
        )
    return SSLExample("rotation", views, prompt, str(angles[k]), (k,), {"granularity": granularity})


def jigsaw_task(
    image, seed=0, grid: int = 2, size: int = 16, mode: str = "L", min_side: int = 8
) -> SSLExample:
    """A shuffled ``grid x grid`` mosaic; answer: the 1-based inverse permutation, row-major."""
    check_int(grid, "grid", 2)
    rng = check_seed(seed)
    base = canonical(image, size, mode, min_side)
    cell = size // grid
    if cell < 1:
        raise ValueError(
            f"grid={grid} is too large for size={size}: a {grid}x{grid} jigsaw needs size >= grid"
        )
    base = center_crop(base, cell * grid)
    n = grid * grid
    patches = [
        base[r * cell : (r + 1) * cell, c * cell : (c + 1) * cell] for r in range(grid) for c in range(grid)
    ]
    order = rng.permutation(n)
    shown = [patches[j] for j in order]
    mosaic = np.concatenate([np.concatenate(shown[r * grid : (r + 1) * grid], axis=1) for r in range(grid)])
    inverse = np.empty(n, dtype=int)
    inverse[order] = np.arange(n)  # inverse[order[i]] = i (0-based)
    mosaic = mosaic if mosaic.shape[0] == size else resize(mosaic, size)
    prompt = (
        f"The image was cut into a {grid}x{grid} grid and its tiles shuffled. Tiles are numbered 1 to {n} "
        f"in row-major order. For each original position in row-major order, which tile holds it? "
        f"Answer with {n} comma-separated numbers." + INSTRUCTION
    )
    answer = ",".join(str(i + 1) for i in inverse)
    return SSLExample("jigsaw", [mosaic], prompt, answer, tuple(int(i) for i in inverse), {"grid": grid})


def _jitter(arr: np.ndarray, rng, strength: float) -> np.ndarray:
    brightness = 1 + rng.uniform(-strength, strength)
    contrast = 1 + rng.uniform(-strength, strength)
    mean = arr.mean()
    return np.clip((arr - mean) * contrast + mean * brightness, 0, 1)


def _blur(arr: np.ndarray, rng) -> np.ndarray:
    """Separable Gaussian blur, sigma ~ U(0.1, 1) pixels per 16 of image side, edges replicated."""
    sigma = float(rng.uniform(0.1, 1.0)) * arr.shape[0] / 16
    radius = max(1, math.ceil(2 * sigma))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps = (taps / taps.sum()).astype(np.float32)
    padded = np.pad(arr, ((radius, radius), (radius, radius), (0, 0)), mode="edge")
    h, w = arr.shape[:2]
    rows = sum(t * padded[i : i + h] for i, t in enumerate(taps))  # (h, w + 2r, C)
    return np.clip(sum(t * rows[:, i : i + w] for i, t in enumerate(taps)), 0, 1).astype(np.float32)


def _gray(arr: np.ndarray) -> np.ndarray:
    return (
        np.repeat(arr @ np.array([0.299, 0.587, 0.114], np.float32)[:, None], 3, 2)
        if arr.shape[2] == 3
        else arr
    )


def position_task(
    image, seed=0, size: int = 16, mode: str = "L", min_side: int = 8, augment: bool = True
) -> SSLExample:
    """(full image, augmented quadrant crop); answer: which quadrant."""
    check_bool(augment, "augment")
    rng = check_seed(seed)
    base = canonical(image, size, mode, min_side)
    q = int(rng.integers(4))
    half = size // 2
    top, left = (q // 2) * half, (q % 2) * half
    crop = base[top : top + half, left : left + half]
    if augment:  # the release's augmentations, each with probability 0.5
        crop = _jitter(crop, rng, 0.4) if rng.random() < 0.5 else crop
        crop = _gray(crop) if rng.random() < 0.5 else crop
        crop = _blur(crop, rng) if rng.random() < 0.5 else crop
        crop = np.where(crop > 0.5, 1 - crop, crop) if rng.random() < 0.5 else crop  # solarize
    crop = resize(np.ascontiguousarray(crop), size)
    prompt = (
        "The second image is a crop of one quadrant of the first image, possibly recoloured or blurred. "
        f"Which quadrant: {', '.join(QUADRANTS)}?" + INSTRUCTION
    )
    return SSLExample("position", [base, crop], prompt, QUADRANTS[q], (q,))


def simclr_view(arr: np.ndarray, rng, scale=(0.08, 1.0), size: int | None = None) -> np.ndarray:
    """A SimCLR view: random resized crop (area ``scale``, aspect 3/4..4/3), flip p=0.5, colour jitter p=0.8,
    grayscale p=0.2, blur p=0.5."""
    h, w = arr.shape[:2]
    size = h if size is None else size
    area = h * w * rng.uniform(*scale)
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    ch = int(np.clip(round(math.sqrt(area / aspect)), 1, h))
    cw = int(np.clip(round(math.sqrt(area * aspect)), 1, w))
    top, left = int(rng.integers(h - ch + 1)), int(rng.integers(w - cw + 1))
    view = _stack(
        [
            c.resize((size, size), Image.Resampling.BILINEAR)
            for c in _channels(np.ascontiguousarray(arr[top : top + ch, left : left + cw]))
        ]
    )
    view = view[:, ::-1] if rng.random() < 0.5 else view
    view = _jitter(view, rng, 0.8) if rng.random() < 0.8 else view
    view = _gray(view) if rng.random() < 0.2 else view
    view = _blur(np.ascontiguousarray(view), rng) if rng.random() < 0.5 else view
    return np.ascontiguousarray(view, dtype=np.float32)


def contrastive_task(
    image,
    other,
    seed=0,
    size: int = 16,
    mode: str = "L",
    min_side: int = 8,
    positive: bool | None = None,
    scale=(0.08, 1.0),
) -> SSLExample:
    """Two views: of ``image`` twice (``positive``) or of ``image`` and ``other`` (``negative``)."""
    if positive is not None:
        check_bool(positive, "positive")
    if (
        not isinstance(scale, (tuple, list))
        or len(scale) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scale)
        or not 0 < scale[0] <= scale[1] <= 1
    ):
        raise ValueError(f"scale must be a pair (low, high) with 0 < low <= high <= 1, got {scale!r}")
    rng = check_seed(seed)
    positive = bool(rng.random() < 0.5) if positive is None else bool(positive)
    first = canonical(image, size, mode, min_side)
    try:  # checked even when the pair is positive and other is not shown
        second = canonical(other, size, mode, min_side)
    except (TypeError, ValueError) as err:
        raise type(err)(f"other: {err}") from None
    second = first if positive else second
    views = [simclr_view(first, rng, scale), simclr_view(second, rng, scale)]
    prompt = (
        "Are these two augmented views of the same image (positive) or of different images "
        "(negative)?" + INSTRUCTION
    )
    return SSLExample("contrastive", views, prompt, CONTRASTIVE[int(positive)], (int(positive),))


def patch_task(
    image,
    seed=0,
    grid: int = 4,
    code: int = 2,
    levels: int = 4,
    size: int = 16,
    mode: str = "L",
    min_side: int = 8,
    cell: tuple[int, int] | None = None,
) -> SSLExample:
    """[design] Masked-patch reconstruction: one grid cell is greyed out; answer its quantized block means."""
    check_int(grid, "grid", 2)
    check_int(code, "code", 1)
    check_int(levels, "levels", 2)
    if cell is not None and (
        not isinstance(cell, (tuple, list))
        or len(cell) != 2
        or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v < grid for v in cell
        )
    ):
        raise ValueError(
            f"cell must be None or a pair (row, column) of integers in [0, {grid}), got {cell!r}"
        )
    rng = check_seed(seed)
    base = canonical(image, size, mode, min_side)
    side = size // grid
    if side < code:
        raise ValueError(f"a {grid}x{grid} grid of a {size}-pixel image has cells smaller than code={code}")
    r, c = (int(rng.integers(grid)), int(rng.integers(grid))) if cell is None else cell
    block = side // code
    hidden = base[r * side : r * side + block * code, c * side : c * side + block * code].mean(axis=2)
    means = hidden.reshape(code, block, code, block).mean(axis=(1, 3)).reshape(-1)
    quantized = np.minimum((means * levels).astype(int), levels - 1)
    masked = base.copy()
    masked[r * side : (r + 1) * side, c * side : (c + 1) * side] = 0.5
    prompt = (
        f"One cell (row {r + 1}, column {c + 1}) of a {grid}x{grid} grid is greyed out. Split the hidden "
        f"cell into {code}x{code} blocks and give each block's brightness from 0 (dark) to {levels - 1} "
        f"(bright), row-major, comma-separated." + INSTRUCTION
    )
    return SSLExample(
        "patch",
        [masked],
        prompt,
        ",".join(map(str, quantized)),
        tuple(int(q) for q in quantized),
        {"cell": (r, c), "levels": levels},
    )


BUILDERS: dict[str, Callable[..., SSLExample]] = {
    "rotation": rotation_task,
    "jigsaw": jigsaw_task,
    "position": position_task,
    "contrastive": contrastive_task,
    "patch": patch_task,
}


def answer_space(task: str, **kwargs) -> list[str]:
    """Every answer string of a task with a finite answer space, in label order (rotation, position,
    contrastive, and jigsaw as permutations)."""
    if task == "rotation":
        return [str(a) for a in rotation_angles(kwargs.get("granularity", 90))]
    if task == "position":
        return list(QUADRANTS)
    if task == "contrastive":
        return list(CONTRASTIVE)
    if task == "jigsaw":
        n = kwargs.get("grid", 2) ** 2
        return [",".join(str(i + 1) for i in p) for p in itertools.permutations(range(n))]
    raise ValueError(f"task must be rotation, position, contrastive or jigsaw, got {task!r}")


def serialize_image(arr: np.ndarray, shades: str = TEXT_SHADES) -> str:
    """A grayscale rendering of ``(H, W, C)`` as text, one line per row, ``len(shades)`` brightness levels."""
    gray = (
        np.asarray(arr, dtype=np.float32).mean(axis=2) if np.ndim(arr) == 3 else np.asarray(arr, np.float32)
    )
    idx = np.minimum((gray * len(shades)).astype(int), len(shades) - 1)
    return "\n".join("".join(shades[i] for i in row) for row in idx)


def load_image_folder(path) -> list[Image.Image]:
    """Every image file under ``path`` (sorted; unreadable files are skipped with a warning)."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"path must be an existing folder, got {str(path)!r}")
    images = []
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            with Image.open(file) as im:
                images.append(im.copy())
        except (OSError, ValueError):
            warnings.warn(f"skipping {file}: not a readable image", stacklevel=2)
    return images


def build_examples(images, task: str, n_per_image: int = 1, seed: int = 0, **task_kwargs) -> list[SSLExample]:
    """Examples of ``task`` for every image (a folder path, an array ``(N, H, W[, C])`` or a list); images the
    builder rejects (too small, malformed) are skipped with one warning giving the count."""
    check_choice(task, "task", tuple(BUILDERS))
    check_int(n_per_image, "n_per_image", 1)
    if isinstance(images, (str, Path)):
        if not Path(images).is_dir():
            raise ValueError(
                f"images must be an existing folder, an array or a list of images, got {str(images)!r}"
            )
        images = load_image_folder(images)
    try:
        images = list(images)
    except TypeError:
        raise TypeError(
            f"images must be a folder path, an array (N, H, W[, C]) or a list of images, got {type(images).__name__}"
        ) from None
    if not images:
        raise ValueError("images is empty")
    rng = check_seed(seed)
    out, skipped, first_error = [], 0, None
    for i, image in enumerate(images):
        for _ in range(n_per_image):
            try:
                if task == "contrastive":
                    j = int(rng.integers(len(images) - 1)) if len(images) > 1 else 0
                    other = images[j + (j >= i)] if len(images) > 1 else image
                    ex = contrastive_task(image, other, rng, **task_kwargs)
                else:
                    ex = BUILDERS[task](image, rng, **task_kwargs)
            except (ValueError, TypeError) as err:
                skipped += 1
                first_error = first_error or err
                break
            out.append(ex)
    if first_error is not None and skipped == len(images):  # a bad task argument, or no usable image
        raise type(first_error)(
            f"images: the {task} builder rejected all {len(images)} images (or its arguments {sorted(task_kwargs)}); "
            f"the first error: {first_error}"
        )
    if skipped:
        warnings.warn(
            f"skipped {skipped} of {len(images)} images that the {task} builder rejected", stacklevel=2
        )
    return out


def build_dataset(
    images, task: str, n_per_image: int = 1, seed: int = 0, as_text: bool = False, **task_kwargs
):
    """A ``datasets.Dataset`` with columns ``prompt``, ``answer``, ``task`` and ``images`` (PIL images), ready
    for ``trl.GRPOTrainer`` with the rewards of :mod:`icml_agents.ssl4rl.rewards`.

    ``prompt`` is conversational, ``[{"role": "user", "content": text}]``, as TRL's multimodal path requires:
    the trainer inserts one image placeholder per entry of ``images`` before the text and applies the
    processor's chat template (the rewards accept the conversational completions it then passes).
    ``as_text=True`` writes the images into the prompt with :func:`serialize_image` (for text-only models),
    drops ``images`` and keeps ``prompt`` a plain string."""
    from datasets import Dataset  # lazy: the `trl` extra

    check_bool(as_text, "as_text")
    rows: dict[str, list] = {"prompt": [], "answer": [], "task": []}
    examples = build_examples(images, task, n_per_image=n_per_image, seed=seed, **task_kwargs)
    if not as_text:
        rows["images"] = []
    for ex in examples:
        if as_text:
            pictures = "\n\n".join(f"Image {k + 1}:\n{serialize_image(im)}" for k, im in enumerate(ex.images))
            rows["prompt"].append(f"{pictures}\n\n{ex.prompt}")
        else:
            rows["prompt"].append([{"role": "user", "content": ex.prompt}])
            rows["images"].append(
                [
                    Image.fromarray((np.squeeze(im, 2) if im.shape[2] == 1 else im) * 255).convert(
                        "L" if im.shape[2] == 1 else "RGB"
                    )
                    for im in ex.images
                ]
            )
        rows["answer"].append(ex.answer)
        rows["task"].append(ex.task)
    return Dataset.from_dict(rows)
