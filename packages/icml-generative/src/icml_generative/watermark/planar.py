"""The planar baseline of issue 31: a blind block-DCT spread-spectrum watermark with informed (projection)
embedding, for equirectangular panoramas treated as flat images. Our design, in the family of Cox et al.'s
spread-spectrum marks; it is **not rotation-invariant**: a rotation of the sphere about its axis (a circular
shift of the columns) by a few pixels moves the 8×8 block grid and the mark no longer decodes. It is the
rotation-fragile reference the rotation-invariant bispectral mark is compared against.

Design
------
- **Carriers**: per channel, the image is cut into 8×8 blocks (``H`` and ``W = 2H`` multiples of 8) and
  each block gets the orthonormal 2-D DCT-II. The carrier coefficients are the zig-zag positions
  ``band[0]..band[1]`` (inclusive; JPEG's zig-zag order, position 0 is DC) of every block and channel, in the
  order (channel, block row, block column, zig-zag position): ``N = C · (H/8) · (W/8) · (hi - lo + 1)``.
- **Key**: ``rng = np.random.default_rng(key_seed(key))`` draws a permutation of the ``N`` carriers, which
  is split into ``n_bits`` disjoint groups of ``g = N // n_bits`` coefficients (the remainder is unused), and
  then a ±1 chip per used coefficient. Pattern ``p_k`` is the unit vector of the chips on group ``k``
  (``±1/√g``), so the patterns are orthonormal.
- **Decoding** is blind (needs the key and ``n_bits``, not the original): bit ``k`` is 1 iff the projection
  ``<x, p_k>`` of the carrier coefficients ``x`` is > 0.
- **Embedding** is informed: each projection is moved along ``p_k`` only, to ``(2 b_k - 1)·m`` (a
  projection already beyond ``m`` on the right side is left alone), with the largest margin ``m`` whose
  total squared change ``Σ_k max(0, m - s_k <x, p_k>)²`` (``s_k = ±1``; equal to the squared pixel error,
  the DCT being orthonormal) fits the budget of ``psnr_db``: ``10^(-psnr_db/10) · image.size``. ``m`` is
  found by bisection (the energy is monotone in ``m``); the result is clipped to ``[0, 1]``, which only
  brings it closer to the original, so its PSNR is at least ``psnr_db``. A :class:`RuntimeWarning` says when
  a bit does not decode from the clipped result (a budget too small for the image's own projections, or
  clipping of a saturated image).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from icml_generative.validation import check_int, check_number
from icml_generative.watermark._common import as_bits, as_panorama, block_dct, block_idct, key_seed

__all__ = ["dct_embed", "dct_extract"]


def _zigzag() -> np.ndarray:
    """JPEG's zig-zag scan of an 8×8 block as ``(64, 2)`` (row, column) pairs: anti-diagonals ``r + c = s``
    in turn, downwards-left (row increasing) for odd ``s``, upwards-right for even ``s``."""
    order = sorted(
        ((r, c) for r in range(8) for c in range(8)),
        key=lambda rc: (rc[0] + rc[1], rc[0] if (rc[0] + rc[1]) % 2 else -rc[0]),
    )
    return np.array(order, dtype=np.int64)


_ZIGZAG = _zigzag()
_BISECTION_STEPS = 200


def _check_image(image: Any) -> tuple[np.ndarray, bool]:
    """The image as ``(H, 2H, C)`` float64 in ``[0, 1]`` with ``H`` a multiple of 8, and whether it was 2-D."""
    if image is None or isinstance(image, (str, bytes)):
        raise TypeError(f"image must be an array of numbers, got {type(image).__name__}")
    try:
        raw = np.asarray(image)
    except Exception:  # ragged sequences, tensors that need grad, ...
        raise TypeError(f"image must be an array of numbers, got {type(image).__name__}") from None
    if raw.dtype.kind not in "biuf":
        raise TypeError(f"image must hold real numbers, got dtype {raw.dtype}")
    img = as_panorama(raw, "image")
    if img.shape[0] % 8:
        raise ValueError(
            f"image must have a height (and width) that is a multiple of 8, got shape {raw.shape}"
        )
    return img, raw.ndim == 2


def _check_band(band: Any) -> tuple[int, int]:
    if not isinstance(band, (tuple, list)) or len(band) != 2:
        raise TypeError(f"band must be a pair (lo, hi) of zig-zag positions, got {band!r}")
    lo = check_int(band[0], "band", 0, 63)
    hi = check_int(band[1], "band", lo, 63, why=" (band = (lo, hi) with lo <= hi)")
    return lo, hi


def _block_dct(img: np.ndarray) -> np.ndarray:
    """The block-DCT coefficients ``(C, H/8, W/8, 8, 8)`` of an ``(H, W, C)`` image."""
    height, width, channels = img.shape
    blocks = img.transpose(2, 0, 1).reshape(channels, height // 8, 8, width // 8, 8).transpose(0, 1, 3, 2, 4)
    return np.asarray(block_dct(blocks))


def _patterns(key: Any, n_total: int, n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The key's groups ``(n_bits, g)`` of carrier indices and their ±1 chips."""
    rng = np.random.default_rng(key_seed(key))
    group = n_total // n_bits
    order = rng.permutation(n_total)[: n_bits * group].reshape(n_bits, group)
    chips = (2 * rng.integers(0, 2, size=(n_bits, group)) - 1).astype(np.float64)
    return order, chips


def _check_n_bits(n_bits: Any, n_total: int) -> int:
    return check_int(
        n_bits, "n_bits", 1, n_total, why=" (the number of carrier coefficients of this image and band)"
    )


def _projections(x: np.ndarray, order: np.ndarray, chips: np.ndarray) -> np.ndarray:
    return np.asarray((x[order] * chips).sum(axis=1) / math.sqrt(order.shape[1]))


def _carrier_vector(img: np.ndarray, band: tuple[int, int]) -> np.ndarray:
    rows, cols = _ZIGZAG[band[0] : band[1] + 1].T
    return _block_dct(img)[..., rows, cols].reshape(-1)


def dct_extract(image: Any, key: Any, n_bits: int, *, band: tuple[int, int] = (1, 10)) -> np.ndarray:
    """Blindly decode ``n_bits`` bits (a 0/1 int64 array) from an ``(H, 2H[, C])`` image in ``[0, 1]``
    (``H`` a multiple of 8) with the watermark ``key`` (an int, a str or bytes) and the carrier ``band`` of
    zig-zag positions used to embed: bit ``k`` is 1 iff the carriers' projection on pattern ``k`` is > 0."""
    img, _ = _check_image(image)
    lo, hi = _check_band(band)
    x = _carrier_vector(img, (lo, hi))
    n_bits = _check_n_bits(n_bits, x.size)
    order, chips = _patterns(key, x.size, n_bits)
    return (_projections(x, order, chips) > 0).astype(np.int64)


def _margin(signed: np.ndarray, budget: float) -> float:
    """The largest ``m`` with ``Σ max(0, m - signed)² <= budget``, by bisection."""
    lo = float(signed.min())  # energy 0
    hi = float(signed.max()) + math.sqrt(budget) + 1.0  # energy > budget
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if float((np.maximum(0.0, mid - signed) ** 2).sum()) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def dct_embed(
    image: Any, bits: Any, key: Any, *, psnr_db: float = 38.0, band: tuple[int, int] = (1, 10)
) -> np.ndarray:
    """Embed ``bits`` (a non-empty 1-D sequence of 0/1) into an equirectangular image ``(H, 2H)`` or
    ``(H, 2H, C)`` with values in ``[0, 1]`` (``H`` a multiple of 8) under the watermark ``key`` (an int, a
    str or bytes), in the carriers of zig-zag positions ``band = (lo, hi)`` (``0 <= lo <= hi <= 63``) of
    every 8×8 block and channel, at a PSNR of at least ``psnr_db`` (> 0). Returns a float64 image of the
    input's shape in ``[0, 1]``; warns (``RuntimeWarning``) if some bit does not decode from it. See the
    module docstring for the design."""
    img, flat = _check_image(image)
    bit_array = as_bits(bits)
    psnr_db = check_number(psnr_db, "psnr_db", above=0)
    lo, hi = _check_band(band)
    x = _carrier_vector(img, (lo, hi))
    n_bits = bit_array.size
    if n_bits > x.size:
        raise ValueError(
            f"bits: n_bits = len(bits) = {n_bits} exceeds the number of carrier coefficients, at most {x.size}"
        )
    order, chips = _patterns(key, x.size, n_bits)
    signs = 2.0 * bit_array - 1.0
    signed = signs * _projections(x, order, chips)
    budget = 10.0 ** (-psnr_db / 10.0) * img.size
    margin = _margin(signed, budget)
    step = np.maximum(0.0, margin - signed) * signs  # the move of each projection along its pattern
    delta = np.zeros(x.size)
    delta[order] = chips * (step[:, None] / math.sqrt(order.shape[1]))  # the groups are disjoint
    # the change in the coefficient domain, back to pixels (the DCT is linear and orthonormal)
    height, width, channels = img.shape
    coeffs = np.zeros((channels, height // 8, width // 8, 8, 8))
    rows, cols = _ZIGZAG[lo : hi + 1].T
    coeffs[..., rows, cols] = delta.reshape(channels, height // 8, width // 8, hi - lo + 1)
    pixels = np.asarray(block_idct(coeffs))
    change = pixels.transpose(0, 1, 3, 2, 4).reshape(channels, height, width).transpose(1, 2, 0)
    out = np.clip(img + change, 0.0, 1.0)
    decoded = (_projections(_carrier_vector(out, (lo, hi)), order, chips) > 0).astype(np.int64)
    wrong = int((decoded != bit_array).sum())
    if wrong:
        warnings.warn(
            f"dct_embed: {wrong} of {n_bits} bits do not decode from the marked image (margin {margin:.3g}; "
            f"raise the budget (lower psnr_db), use fewer bits or a less saturated image)",
            RuntimeWarning,
            stacklevel=2,
        )
    return out[:, :, 0] if flat else out
