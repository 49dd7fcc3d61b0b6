"""Argument checks and helpers shared by the watermark schemes (the bispectral mark and its baselines)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def _dct_matrix(n: int = 8) -> np.ndarray:
    """The orthonormal DCT-II matrix ``(n, n)``: row ``k`` is ``c_k cos(π (2j + 1) k / 2n)``."""
    k, j = np.arange(n)[:, None], np.arange(n)[None, :]
    basis = np.cos(np.pi * (2 * j + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    basis[0] /= np.sqrt(2.0)
    return basis


DCT8 = _dct_matrix()


def block_dct(blocks: np.ndarray) -> np.ndarray:
    """The orthonormal 2-D DCT-II of every 8×8 block ``(..., 8, 8)`` (JPEG's transform)."""
    return np.asarray(DCT8 @ blocks @ DCT8.T)


def block_idct(coeffs: np.ndarray) -> np.ndarray:
    """The inverse of :func:`block_dct`."""
    return np.asarray(DCT8.T @ coeffs @ DCT8)


def key_seed(key: Any) -> int:
    """A 64-bit seed from a watermark key (an int, a str or bytes; the same key always gives the same seed)."""
    if isinstance(key, bool) or not isinstance(key, int | np.integer | str | bytes):
        raise TypeError(f"key must be an int, a str or bytes, got {type(key).__name__}")
    data = key.encode() if isinstance(key, str) else key if isinstance(key, bytes) else str(int(key)).encode()
    return int.from_bytes(hashlib.sha256(b"icml-watermark:" + data).digest()[:8], "little")


def as_panorama(image: Any, name: str = "image") -> np.ndarray:
    """``image`` as float64 ``(H, 2H, C)`` with values in ``[0, 1]`` (a 2-D image gets one channel)."""
    try:
        img = np.asarray(image, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of numbers, got {type(image).__name__}") from None
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[0] < 1 or img.shape[1] != 2 * img.shape[0] or img.shape[2] < 1:
        raise ValueError(
            f"{name} must be an equirectangular (H, 2H) or (H, 2H, C) array (width twice the height), got "
            f"shape {np.shape(image)}"
        )
    if not np.isfinite(img).all() or img.min() < 0 or img.max() > 1:
        raise ValueError(f"{name} must hold finite values in [0, 1]")
    return img


def as_bits(bits: Any) -> np.ndarray:
    """``bits`` as a non-empty 1-D int64 array of 0/1."""
    try:
        b = np.asarray(bits)
    except (TypeError, ValueError):
        raise ValueError(f"bits must be a non-empty 1-D sequence of 0/1, got {bits!r}") from None
    if b.ndim != 1 or b.size == 0 or b.dtype == object or not np.isin(b, (0, 1)).all():
        raise ValueError(f"bits must be a non-empty 1-D sequence of 0/1, got {bits!r}")
    return b.astype(np.int64)


def psnr(reference: Any, image: Any) -> float:
    """Peak signal-to-noise ratio in dB of ``image`` against ``reference`` (values in [0, 1], peak 1);
    ``inf`` for identical images."""
    arrays = []
    for value, name in ((reference, "reference"), (image, "image")):
        try:
            arrays.append(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be an array of numbers, got {type(value).__name__}") from None
    ref, img = arrays
    if ref.shape != img.shape:
        raise ValueError(f"reference and image must have the same shape, got {ref.shape} and {img.shape}")
    if ref.size == 0 or not (np.isfinite(ref).all() and np.isfinite(img).all()):
        raise ValueError("reference and image must be non-empty and finite")
    mse = float(np.mean((ref - img) ** 2))
    return float("inf") if mse == 0 else float(-10.0 * np.log10(mse))
