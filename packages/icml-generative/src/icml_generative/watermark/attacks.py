"""Image attacks for the watermark experiments of issue 31: additive Gaussian noise and a JPEG-like
quantization (the DCT quantization of baseline JPEG without its entropy coding, which is lossless).

Images are float arrays with values in ``[0, 1]``, ``(H, W)`` (grayscale), ``(H, W, 1)`` or ``(H, W, 3)``
(RGB); every attack returns a float64 array of the same shape with values in ``[0, 1]``.

:func:`jpeg_like` follows baseline JPEG (ITU-T T.81 / JFIF) step by step: RGB → YCbCr with the JFIF
full-range formulas (values in 0..255, then level-shifted by -128), an orthonormal 8×8 block DCT-II per
channel, division by the Annex K luminance (Y) or chrominance (Cb, Cr) table scaled for ``quality`` as the
IJG library does (:func:`quantization_table`), rounding, dequantization, the inverse DCT and the inverse
colour transform, rounded to multiples of 1/255 and clipped to ``[0, 1]``. There is **no chroma
subsampling** (4:4:4), so the chroma channels lose less than in a typical 4:2:0 JPEG. Sizes that are not
multiples of 8 are padded by edge replication and cropped back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from icml_generative.validation import check_int, check_number
from icml_generative.watermark._common import block_dct, block_idct

__all__ = ["gaussian_noise", "jpeg_like", "quantization_table"]

# ITU-T T.81 Annex K, tables K.1 (luminance) and K.2 (chrominance), in natural (row-major) order
_LUMINANCE = np.array(
    [
        [16, 11, 10, 16, 24, 40, 51, 61],
        [12, 12, 14, 19, 26, 58, 60, 55],
        [14, 13, 16, 24, 40, 57, 69, 56],
        [14, 17, 22, 29, 51, 87, 80, 62],
        [18, 22, 37, 56, 68, 109, 103, 77],
        [24, 35, 55, 64, 81, 104, 113, 92],
        [49, 64, 78, 87, 103, 121, 120, 101],
        [72, 92, 95, 98, 112, 100, 103, 99],
    ],
    dtype=np.float64,
)
_CHROMINANCE = np.array(
    [
        [17, 18, 24, 47, 99, 99, 99, 99],
        [18, 21, 26, 66, 99, 99, 99, 99],
        [24, 26, 56, 99, 99, 99, 99, 99],
        [47, 66, 99, 99, 99, 99, 99, 99],
        [99, 99, 99, 99, 99, 99, 99, 99],
        [99, 99, 99, 99, 99, 99, 99, 99],
        [99, 99, 99, 99, 99, 99, 99, 99],
        [99, 99, 99, 99, 99, 99, 99, 99],
    ],
    dtype=np.float64,
)

# JFIF full-range RGB -> YCbCr (before the +128 offset of Cb and Cr) and its inverse
_RGB_TO_YCBCR = np.array(
    [
        [0.299, 0.587, 0.114],
        [-0.168736, -0.331264, 0.5],
        [0.5, -0.418688, -0.081312],
    ]
)
_YCBCR_TO_RGB = np.array(
    [
        [1.0, 0.0, 1.402],
        [1.0, -0.344136, -0.714136],
        [1.0, 1.772, 0.0],
    ]
)


def _as_image(image: Any, name: str = "image") -> tuple[np.ndarray, tuple[int, ...]]:
    """``image`` as float64 ``(H, W, C)`` (C = 1 or 3) with values in ``[0, 1]``, and its original shape."""
    if image is None or isinstance(image, (str, bytes)):
        raise TypeError(f"{name} must be an array of numbers, got {type(image).__name__}")
    try:
        arr = np.asarray(image)
    except Exception:  # ragged sequences, tensors that need grad, ...
        raise TypeError(f"{name} must be an array of numbers, got {type(image).__name__}") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3)) or arr.size == 0:
        raise ValueError(
            f"{name} must be a non-empty (H, W), (H, W, 1) or (H, W, 3) array, got shape {arr.shape}"
        )
    img = arr.astype(np.float64)
    if not np.isfinite(img).all() or img.min() < 0 or img.max() > 1:
        raise ValueError(f"{name} must hold finite values in [0, 1]")
    return (img if img.ndim == 3 else img[:, :, None]), arr.shape


def gaussian_noise(image: Any, sigma: float, seed: int = 0) -> np.ndarray:
    """``image`` plus i.i.d. ``N(0, sigma²)`` noise per value (``np.random.default_rng(seed)``), clipped to
    ``[0, 1]``. ``sigma >= 0`` (0 returns the image unchanged, as float64); the same seed gives the same
    noise."""
    img, shape = _as_image(image)
    sigma = check_number(sigma, "sigma", minimum=0)
    seed = check_int(seed, "seed", 0)
    noise = np.random.default_rng(seed).standard_normal(shape)
    return np.clip(img.reshape(shape) + sigma * noise, 0.0, 1.0)


def quantization_table(quality: int, *, chroma: bool = False) -> np.ndarray:
    """The 8×8 JPEG quantization table (natural row-major order, float64) for ``quality`` in ``[1, 100]``:
    the Annex K luminance table (or the chrominance table if ``chroma``) scaled by the IJG formula
    ``scale = 5000 / q`` for ``q < 50``, else ``200 - 2q``; ``table = clip(floor((base·scale + 50) / 100),
    1, 255)``. ``quality = 50`` gives the Annex K table itself, ``quality = 100`` all ones."""
    quality = check_int(quality, "quality", 1, 100)
    if not isinstance(chroma, (bool, np.bool_)):
        raise TypeError(f"chroma must be True or False, got {chroma!r}")
    base = _CHROMINANCE if chroma else _LUMINANCE
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality  # IJG: integer division
    return np.clip(np.floor((base * scale + 50) / 100), 1, 255)


def _block_view(channel: np.ndarray) -> np.ndarray:
    """An ``(8r, 8c)`` array as ``(r, c, 8, 8)`` blocks (a copy)."""
    rows, cols = channel.shape[0] // 8, channel.shape[1] // 8
    return channel.reshape(rows, 8, cols, 8).transpose(0, 2, 1, 3).copy()


def _unblock(blocks: np.ndarray) -> np.ndarray:
    rows, cols = blocks.shape[:2]
    return blocks.transpose(0, 2, 1, 3).reshape(8 * rows, 8 * cols)


def jpeg_like(image: Any, quality: int = 75) -> np.ndarray:
    """A JPEG-like compression of ``image`` at ``quality`` (an int in ``[1, 100]``, IJG scale): YCbCr (JFIF,
    full range, level-shifted by 128), 8×8 block DCT, quantization by the scaled Annex K tables, inverse, back
    to RGB, rounded to multiples of 1/255 and clipped to ``[0, 1]``. No chroma subsampling and no entropy
    coding (it is lossless, so it does not change the image). A grayscale ``(H, W)`` or ``(H, W, 1)`` image
    uses the luminance table only. Sizes not divisible by 8 are edge-padded, then cropped back."""
    img, shape = _as_image(image)
    quality = check_int(quality, "quality", 1, 100)
    height, width, channels = img.shape
    pad = ((0, -height % 8), (0, -width % 8), (0, 0))
    padded = np.pad(img, pad, mode="edge") * 255.0
    if channels == 3:
        planes = padded @ _RGB_TO_YCBCR.T  # Y, Cb - 128, Cr - 128
        planes[..., 0] -= 128.0  # level shift: Cb and Cr are already centred
        tables = [quantization_table(quality), *[quantization_table(quality, chroma=True)] * 2]
    else:
        planes = padded - 128.0
        tables = [quantization_table(quality)]
    out = np.empty_like(planes)
    for c, table in enumerate(tables):
        coeffs = block_dct(_block_view(planes[..., c]))
        quantized = np.round(coeffs / table) * table
        out[..., c] = _unblock(block_idct(quantized))
    if channels == 3:
        out[..., 0] += 128.0
        rgb = out @ _YCBCR_TO_RGB.T
    else:
        rgb = out + 128.0
    result = np.clip(np.round(rgb[:height, :width]), 0.0, 255.0) / 255.0
    return result.reshape(shape)
