"""Rendered grid scenes of coloured shapes and their token sequences (the testbed of ``grounding-ids-toy``).

A scene is a 48x48 RGB image with a 4x4 grid of 12-pixel cells, on the tiny LLaVA's 8-pixel patches (revision 1
of the protocol: cell boundaries do not follow patch boundaries); each occupied cell holds one 6x6 shape (4
colours x 3 shapes, every kind at most once per scene) 5 or 6 pixels from the cell's top-left corner, which
is kept free for the cell's symbol. The question ``where <kind>`` (one word per kind: ``red-circle``, ...)
asks for the cell of one of them; the answer, the next token, is the cell's symbol A..P, row by row.

Three conditions share the scenes:

- ``"none"``: the plain image and the plain question;
- ``"cue"``: grid lines and one symbol per cell drawn into the pixels (:mod:`icml_interp.grounding.cues`)
  and the structured prompt ``grid A B ... P`` before the question (the tokenised analogue of
  :func:`icml_interp.grounding.structured_prompt`);
- ``"oracle"``: the plain image, and each object's cell given as text: one slot per kind in ``KINDS`` order
  holding that kind's cell symbol or ``none`` — the headroom check's upper reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from icml_interp.grounding import Layout, grid_overlay, partition_boxes, symbol_overlay

SIZE, ROWS, COLS, PATCH, OBJECT = 48, 4, 4, 8, 6  # 12-pixel cells on 8-pixel patches (revision 1)
COLORS = {"red": (220, 50, 50), "green": (50, 200, 60), "blue": (60, 90, 235), "yellow": (225, 215, 40)}
SHAPES = ("circle", "square", "triangle")
SYMBOLS = tuple("ABCDEFGHIJKLMNOP")
MAX_OBJECTS = 12
CONDITIONS = ("none", "cue", "oracle")

# vocabulary (the image placeholder is id 2, LLaVA's image_token_id)
KINDS = tuple(f"{c}-{s}" for c in COLORS for s in SHAPES)  # one word per kind: "red-circle", ...
WORDS = ["<pad>", "<bos>", "<image>", "where", "grid", "none", *KINDS, *SYMBOLS]
VOCAB = {w: i for i, w in enumerate(WORDS)}
IMAGE_ID = VOCAB["<image>"]
SYMBOL_IDS = torch.tensor([VOCAB[s] for s in SYMBOLS])
N_PATCHES = (SIZE // PATCH) ** 2
BOXES = partition_boxes((SIZE, SIZE), ROWS, COLS)


def _masks() -> dict[str, np.ndarray]:
    y, x = np.mgrid[0:OBJECT, 0:OBJECT] + 0.5
    c = OBJECT / 2
    return {
        "circle": (y - c) ** 2 + (x - c) ** 2 <= c * c,
        "square": np.ones((OBJECT, OBJECT), dtype=bool),
        "triangle": np.abs(x - c) <= y / 2,  # apex at the top
    }


MASKS = _masks()


def cell_patches(cell: int) -> list[int]:
    """Image-token indices (row-major 8-pixel patches) whose centre lies in ``cell``: the partition of the
    analyses (each patch in exactly one cell)."""
    top, bottom, left, right = BOXES[cell]
    per_row = SIZE // PATCH
    centres = [(i, i * PATCH + PATCH / 2) for i in range(per_row)]
    ys = [i for i, c in centres if top <= c < bottom]
    xs = [i for i, c in centres if left <= c < right]
    return [y * per_row + x for y in ys for x in xs]


def touching_patches(cell: int) -> list[int]:
    """Image-token indices of every patch that overlaps ``cell`` (what the swap test patches)."""
    top, bottom, left, right = BOXES[cell]
    per_row = SIZE // PATCH
    ys = range(top // PATCH, (bottom - 1) // PATCH + 1)
    xs = range(left // PATCH, (right - 1) // PATCH + 1)
    return [y * per_row + x for y in ys for x in xs]


@dataclass
class Scene:
    """Objects as ``(colour, shape, cell, dy, dx)``, the asked object's index, and the RGB image."""

    objects: list[tuple[str, str, int, int, int]]
    target: int
    image: np.ndarray  # (48, 48, 3) uint8, without cues

    @property
    def answer(self) -> int:
        return self.objects[self.target][2]


def render(objects) -> np.ndarray:
    image = np.full((SIZE, SIZE, 3), 20, dtype=np.uint8)
    for color, shape, cell, dy, dx in objects:
        top, _, left, _ = BOXES[cell]
        region = image[top + dy : top + dy + OBJECT, left + dx : left + dx + OBJECT]
        region[MASKS[shape]] = COLORS[color]
    return image


_SLOTS = tuple((dy, dx) for dy in (5, 6) for dx in (5, 6))  # object offsets in its cell (clear of the symbol)


def sample_scene(rng: np.random.Generator, n_objects: int) -> Scene:
    kinds = [(c, s) for c in COLORS for s in SHAPES]
    picked = rng.choice(len(kinds), size=n_objects, replace=False)
    cells = rng.choice(ROWS * COLS, size=n_objects, replace=False)
    objects = [
        (kinds[k][0], kinds[k][1], int(cell), *_SLOTS[int(rng.integers(len(_SLOTS)))])
        for k, cell in zip(picked, cells, strict=True)
    ]
    return Scene(objects, int(rng.integers(n_objects)), render(objects))


def exchanged(scene: Scene, other: int) -> Scene:
    """The counterfactual scene: the asked object and object ``other`` trade cells (offsets stay)."""
    objs = list(scene.objects)
    t = scene.target
    (c1, s1, cell1, y1, x1), (c2, s2, cell2, y2, x2) = objs[t], objs[other]
    objs[t], objs[other] = (c1, s1, cell2, y1, x1), (c2, s2, cell1, y2, x2)
    return Scene(objs, t, render(objs))


def cue_image(image: np.ndarray) -> np.ndarray:
    lines = grid_overlay(image, ROWS, COLS, width=1, color=255)
    return symbol_overlay(lines, ROWS, COLS, list(SYMBOLS), scale=1, margin=1, color=255)


def _prefix(scene: Scene, condition: str, rng: np.random.Generator | None = None) -> list[int]:
    seq: list[int] = []
    if condition == "cue":
        seq += [VOCAB["grid"], *(VOCAB[s] for s in SYMBOLS)]
    elif condition == "oracle":  # one slot per kind, in KINDS order: that kind's cell symbol, or none
        cells = {f"{c}-{s}": cell for c, s, cell, _, _ in scene.objects}
        seq += [VOCAB[SYMBOLS[cells[k]]] if k in cells else VOCAB["none"] for k in KINDS]
    return seq


def tokens(scene: Scene, condition: str, rng: np.random.Generator | None = None) -> list[int]:
    """The sequence ``<bos>``, the image tokens, the condition's text (cue prompt or oracle pairs), the
    question ``where <kind>``; the answer is the next token."""
    color, shape = scene.objects[scene.target][:2]
    return [VOCAB["<bos>"], *[IMAGE_ID] * N_PATCHES, *_prefix(scene, condition, rng), VOCAB["where"],
            VOCAB[f"{color}-{shape}"]]  # fmt: skip


@dataclass
class Batch:
    input_ids: torch.Tensor  # (batch, seq)
    pixel_values: torch.Tensor  # (batch, 3, 48, 48), in [-1, 1]
    answers: torch.Tensor  # (batch,) cell index 0..8
    scenes: list[Scene]

    def inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "pixel_values": self.pixel_values}


def batch(scenes: list[Scene], condition: str, seed: int = 0) -> Batch:
    if condition not in CONDITIONS:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    rng = np.random.default_rng(seed)
    images = np.stack([cue_image(s.image) if condition == "cue" else s.image for s in scenes])
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1
    ids = torch.tensor([tokens(s, condition, rng) for s in scenes])
    return Batch(ids, pixels, torch.tensor([s.answer for s in scenes]), scenes)


def image_offset(ids: torch.Tensor) -> int:
    """Position of the first image token (after <bos>)."""
    return int((ids[0] == IMAGE_ID).nonzero()[0])


def question_layouts(b: Batch) -> list[Layout]:
    """One layout per scene: the 9 cells' image tokens; the text group is the question's kind token (the
    last one, where the answer is read), naming the asked object's cell."""
    start = image_offset(b.input_ids)
    seq = b.input_ids.shape[1]
    image = [[start + i for i in cell_patches(c)] for c in range(ROWS * COLS)]
    return [Layout(image, [[seq - 1]], [s.answer]) for s in b.scenes]


def symbol_layouts(b: Batch) -> list[Layout]:
    """Cue condition only: each cell's image tokens and its symbol token in the prompt."""
    start = image_offset(b.input_ids)
    image = [[start + i for i in cell_patches(c)] for c in range(ROWS * COLS)]
    out = []
    for row in b.input_ids:
        pos = [int((row == t).nonzero()[0]) for t in SYMBOL_IDS]
        out.append(Layout(image, [[p] for p in pos]))
    return out


def scenes(n: int, seed: int, n_objects: int | tuple[int, int]) -> list[Scene]:
    """``n`` scenes with ``n_objects`` objects each (a pair: uniform in ``[lo, hi]``)."""
    rng = np.random.default_rng(seed)
    lo, hi = (n_objects, n_objects) if isinstance(n_objects, int) else n_objects
    return [sample_scene(rng, int(rng.integers(lo, hi + 1))) for _ in range(n)]
