"""External visual cues (Grounding IDs; VISER): grid lines, one symbol per cell, horizontal scan lines, and the
structured prompts that name the same partitions.

Pixel positions (documented, deterministic; ``H``, ``W`` the image's height and width):

- Partition boundaries: the ``k``-th of ``n`` partitions along an axis of length ``S`` spans
  ``[round(k * S / n), round((k + 1) * S / n))`` (numpy's round, half to even). :func:`partition_boxes` gives
  the cells ``(top, bottom, left, right)`` row by row.
- A line at boundary ``b`` (the interior boundaries only, ``k = 1 .. n - 1``) covers the ``width`` pixel rows
  (or columns) ``[b - width // 2, b - width // 2 + width)``, clipped to the image.
- A symbol is drawn with the built-in 3x5 pixel font scaled by ``scale``; its top-left pixel is the cell's
  ``(top + margin, left + margin)`` and it covers ``5 * scale`` rows and ``3 * scale`` columns (a symbol of
  ``c`` characters: ``4 * scale * c - scale`` columns, one blank ``scale``-wide column between characters).

Images are numpy arrays ``(H, W)`` or ``(H, W, C)``, integer (``uint8`` ...) or float; overlays return a new
array of the same shape and dtype and never change the input. A colour is one number (every channel) or
one per channel.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np

from icml_interp.validation import check_int, check_type

# 3x5 glyphs, rows top to bottom, "1" = ink
_FONT = {
    "A": ("010", "101", "111", "101", "101"),
    "B": ("110", "101", "110", "101", "110"),
    "C": ("011", "100", "100", "100", "011"),
    "D": ("110", "101", "101", "101", "110"),
    "E": ("111", "100", "110", "100", "111"),
    "F": ("111", "100", "110", "100", "100"),
    "G": ("011", "100", "101", "101", "011"),
    "H": ("101", "101", "111", "101", "101"),
    "I": ("111", "010", "010", "010", "111"),
    "J": ("001", "001", "001", "101", "010"),
    "K": ("101", "101", "110", "101", "101"),
    "L": ("100", "100", "100", "100", "111"),
    "M": ("101", "111", "111", "101", "101"),
    "N": ("110", "101", "101", "101", "101"),
    "O": ("010", "101", "101", "101", "010"),
    "P": ("110", "101", "110", "100", "100"),
    "Q": ("010", "101", "101", "110", "011"),
    "R": ("110", "101", "110", "101", "101"),
    "S": ("011", "100", "010", "001", "110"),
    "T": ("111", "010", "010", "010", "010"),
    "U": ("101", "101", "101", "101", "111"),
    "V": ("101", "101", "101", "101", "010"),
    "W": ("101", "101", "111", "111", "101"),
    "X": ("101", "101", "010", "101", "101"),
    "Y": ("101", "101", "010", "010", "010"),
    "Z": ("111", "001", "010", "100", "111"),
    "0": ("111", "101", "101", "101", "111"),
    "1": ("010", "110", "010", "010", "111"),
    "2": ("110", "001", "010", "100", "111"),
    "3": ("110", "001", "010", "001", "110"),
    "4": ("101", "101", "111", "001", "001"),
    "5": ("111", "100", "110", "001", "110"),
    "6": ("011", "100", "111", "101", "111"),
    "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"),
    "9": ("111", "101", "111", "001", "110"),
}
FONT_CHARACTERS = "".join(_FONT)


def glyph(text: str, scale: int = 1) -> np.ndarray:
    """The boolean ink mask of ``text`` in the built-in 3x5 font, ``(5 * scale, 4 * scale * len - scale)``."""
    check_type(text, "text", str, "a non-empty string of A-Z / 0-9")
    check_int(scale, "scale", minimum=1, maximum=64)
    if not text or any(c not in _FONT for c in text):
        raise ValueError(
            f"text must be a non-empty string of the characters {FONT_CHARACTERS!r}, got {text!r}"
        )
    blank = np.zeros((5, 1), dtype=bool)
    parts: list[np.ndarray] = []
    for i, c in enumerate(text):
        if i:
            parts.append(blank)
        parts.append(np.array([[ch == "1" for ch in row] for row in _FONT[c]], dtype=bool))
    mask = np.concatenate(parts, axis=1)
    return np.kron(mask, np.ones((scale, scale), dtype=bool))


def default_symbols(n: int, kind: str = "letters") -> list[str]:
    """``n`` partition symbols: ``"letters"`` A, B, ..., Z, then AA, AB, ...; ``"numbers"`` 1, 2, ..."""
    check_int(n, "n", minimum=1, maximum=702)
    if kind == "numbers":
        return [str(i + 1) for i in range(n)]
    if kind != "letters":
        raise ValueError(f"kind must be 'letters' or 'numbers', got {kind!r}")
    letters = string.ascii_uppercase
    singles = list(letters)
    doubles = [a + b for a in letters for b in letters]
    return (singles + doubles)[:n]


def _default_for(rows: int, cols: int) -> list[str]:
    """The default symbols of a ``rows`` x ``cols`` grid (at most 702 cells: A .. ZZ)."""
    if rows * cols > 702:
        raise ValueError(
            f"rows x cols must be at most 702 cells (A .. ZZ) without symbols, got {rows}x{cols}"
        )
    return default_symbols(rows * cols)


def _check_image(image) -> np.ndarray:
    if not isinstance(image, np.ndarray):
        raise TypeError(f"image must be a numpy array (H, W) or (H, W, C), got {type(image).__name__}")
    if image.ndim not in (2, 3) or image.shape[0] < 1 or image.shape[1] < 1 or image.size == 0:
        raise ValueError(f"image must be a non-empty array (H, W) or (H, W, C), got shape {image.shape}")
    if not (np.issubdtype(image.dtype, np.integer) or np.issubdtype(image.dtype, np.floating)):
        raise TypeError(f"image must hold integers or floats, got dtype {image.dtype}")
    if np.issubdtype(image.dtype, np.floating) and not np.isfinite(image).all():
        raise ValueError("image holds NaN or infinite values")
    return image


def _color(color, image: np.ndarray) -> np.ndarray:
    """``color`` as an array that broadcasts over one pixel of ``image`` (checked for the dtype's range)."""
    try:
        value = np.asarray(color, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"color must be one number or one per channel, got {color!r}") from None
    channels = image.shape[2] if image.ndim == 3 else 1
    if value.ndim > 1 or (value.ndim == 1 and value.shape[0] not in (1, channels)):
        raise ValueError(f"color must be one number or {channels} (one per channel), got {color!r}")
    if not np.isfinite(value).all():
        raise ValueError(f"color must be finite, got {color!r}")
    if np.issubdtype(image.dtype, np.integer):
        info = np.iinfo(image.dtype)
        if (value < info.min).any() or (value > info.max).any():
            raise ValueError(
                f"color must be within {image.dtype}'s range [{info.min}, {info.max}], got {color!r}"
            )
    elif (np.abs(value) > np.finfo(image.dtype).max).any():
        raise ValueError(f"color must be within {image.dtype}'s finite range, got {color!r}")
    if image.ndim == 2 and value.ndim == 1:
        value = value[0]
    return value


def _edges(size: int, n: int) -> np.ndarray:
    return np.round(np.arange(n + 1) * size / n).astype(int)


def _check_grid(image: np.ndarray, rows: int, cols: int, width: int = 0) -> None:
    check_int(rows, "rows", minimum=1)
    check_int(cols, "cols", minimum=1)
    h, w = image.shape[:2]
    if rows > h:
        raise ValueError(f"rows must be at most the image height {h} (one pixel per partition), got {rows}")
    if cols > w:
        raise ValueError(f"cols must be at most the image width {w} (one pixel per partition), got {cols}")
    # a line as wide as the smallest cell covers an interior cell of that size
    sizes = []
    if rows > 1:
        sizes.append(int(np.diff(_edges(h, rows)).min()))
    if cols > 1:
        sizes.append(int(np.diff(_edges(w, cols)).min()))
    if width and sizes and width >= min(sizes):
        raise ValueError(
            f"width {width} leaves no pixels inside the cells of a {rows}x{cols} grid on a {h}x{w} image"
        )


def partition_boxes(shape: Sequence[int], rows: int, cols: int = 1) -> list[tuple[int, int, int, int]]:
    """The cells of a ``rows`` x ``cols`` grid on an image of ``shape`` ``(H, W, ...)``, row by row, each as
    ``(top, bottom, left, right)`` (bottom and right exclusive)."""
    if not isinstance(shape, (tuple, list)) or len(shape) < 2:
        raise TypeError(f"shape must be an image shape (H, W, ...), got {shape!r}")
    h, w = (check_int(s, "shape", minimum=1) for s in shape[:2])
    _check_grid(np.empty((h, w), dtype=np.uint8), rows, cols)
    ys, xs = _edges(h, rows), _edges(w, cols)
    return [
        (int(ys[r]), int(ys[r + 1]), int(xs[c]), int(xs[c + 1])) for r in range(rows) for c in range(cols)
    ]


def _lines(image: np.ndarray, rows: int, cols: int, width: int, color) -> np.ndarray:
    out = image.copy()
    value = _color(color, image)
    h, w = image.shape[:2]
    for b in _edges(h, rows)[1:-1]:
        out[max(0, b - width // 2) : min(h, b - width // 2 + width)] = value
    for b in _edges(w, cols)[1:-1]:
        out[:, max(0, b - width // 2) : min(w, b - width // 2 + width)] = value
    return out


def grid_overlay(image: np.ndarray, rows: int, cols: int, *, width: int = 1, color=255) -> np.ndarray:
    """``image`` with the interior lines of a ``rows`` x ``cols`` grid drawn in ``color`` (see the module
    docstring for the pixel positions)."""
    image = _check_image(image)
    check_int(width, "width", minimum=1)
    _check_grid(image, rows, cols, width)
    return _lines(image, rows, cols, width, color)


def scan_lines(image: np.ndarray, n: int, *, width: int = 1, color=255) -> np.ndarray:
    """``image`` cut into ``n`` horizontal strips by ``n - 1`` lines (VISER's cue): ``grid_overlay(image, n, 1)``."""
    image = _check_image(image)
    check_int(n, "n", minimum=1)
    check_int(width, "width", minimum=1)
    if n > image.shape[0]:
        raise ValueError(
            f"n must be at most the image height {image.shape[0]} (one pixel per strip), got {n}"
        )
    _check_grid(image, n, 1, width)
    return _lines(image, n, 1, width, color)


def symbol_overlay(
    image: np.ndarray,
    rows: int,
    cols: int = 1,
    symbols: Sequence[str] | None = None,
    *,
    scale: int = 1,
    margin: int = 1,
    color=255,
) -> np.ndarray:
    """``image`` with one symbol in each cell of a ``rows`` x ``cols`` grid, row by row (default: A, B, ...),
    drawn at the cell's top-left corner plus ``margin`` (see the module docstring)."""
    image = _check_image(image)
    check_int(scale, "scale", minimum=1, maximum=64)
    check_int(margin, "margin", minimum=0)
    boxes = partition_boxes(image.shape, rows, cols)
    symbols = _default_for(rows, cols) if symbols is None else symbols
    if isinstance(symbols, str) or not isinstance(symbols, Sequence):
        raise TypeError(f"symbols must be a list of strings (one per cell), got {type(symbols).__name__}")
    if len(symbols) != len(boxes):
        raise ValueError(
            f"symbols must hold one symbol per cell ({rows}x{cols} = {len(boxes)}), got {len(symbols)}"
        )
    value = _color(color, image)
    out = image.copy()
    for (top, bottom, left, right), symbol in zip(boxes, symbols, strict=True):
        try:
            mask = glyph(symbol, scale)
        except (TypeError, ValueError) as err:
            raise type(err)(f"symbols: {err}") from None
        gh, gw = mask.shape
        if top + margin + gh > bottom or left + margin + gw > right:
            raise ValueError(
                f"symbols: {symbol!r} at scale {scale} with margin {margin} needs {gh + margin}x{gw + margin} "
                f"pixels, but its cell is {bottom - top}x{right - left}"
            )
        region = out[top + margin : top + margin + gh, left + margin : left + margin + gw]
        region[mask] = value
    return out


def structured_prompt(
    question: str, rows: int, cols: int = 1, symbols: Sequence[str] | None = None, *, cue: str = "grid"
) -> str:
    """The prompt that names the partitions the overlay drew, before ``question``: for ``cue="grid"``, "The
    image is divided into a 3x3 grid of cells labelled A, B, ... row by row, left to right."; for
    ``"scan"``, horizontal strips scanned top to bottom (VISER's sequential scan)."""
    check_type(question, "question", str, "a string")
    if cue not in ("grid", "scan"):
        raise ValueError(f"cue must be 'grid' or 'scan', got {cue!r}")
    check_int(rows, "rows", minimum=1)
    check_int(cols, "cols", minimum=1)
    if cue == "scan" and cols != 1:
        raise ValueError(f"cols must be 1 for cue='scan' (horizontal strips), got {cols}")
    n = rows * cols
    symbols = _default_for(rows, cols) if symbols is None else symbols
    if isinstance(symbols, str) or not isinstance(symbols, Sequence):
        raise TypeError(f"symbols must be a list of strings (one per cell), got {type(symbols).__name__}")
    if len(symbols) != n:
        raise ValueError(f"symbols must hold one symbol per partition ({n}), got {len(symbols)}")
    if not all(isinstance(s, str) and s for s in symbols):
        raise ValueError(f"symbols must be non-empty strings, got {list(symbols)!r}")
    names = ", ".join(symbols)
    if cue == "grid":
        head = (
            f"The image is divided into a {rows}x{cols} grid of cells labelled {names}, row by row, left to "
            "right. Look at the cells one by one."
        )
    else:
        head = (
            f"The image is divided into {rows} horizontal strips labelled {names}, top to bottom. Scan the "
            "strips one by one, from top to bottom."
        )
    return f"{head} {question}".rstrip()
