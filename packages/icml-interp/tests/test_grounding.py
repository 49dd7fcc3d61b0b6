"""icml_interp.grounding: cue overlays at their documented pixels, the analysis formulas against explicit loops,
a planted model whose answer reads a known ID subspace for the swap test, and tiny vision-language models."""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from icml_interp.grounding import (
    FONT_CHARACTERS,
    Layout,
    attention_mass,
    binding_by_layer,
    binding_score,
    chance_mass,
    default_symbols,
    glyph,
    grid_overlay,
    image_partitions,
    modality_gap,
    partition_attention_mass,
    partition_boxes,
    scan_lines,
    structured_prompt,
    swap_test,
    symbol_overlay,
)
from icml_interp.hooks import HookedModel
from icml_tools.fuzz import rejects

# ------------------------------------------------------------------ references: the documented pixel positions


def boundaries(size: int, n: int) -> list[int]:
    """Interior boundaries round(k * size / n), half to even (Fraction's round is exact and half to even)."""
    return [round(Fraction(k * size, n)) for k in range(1, n)]


def line_mask(h: int, w: int, rows: int, cols: int, width: int) -> np.ndarray:
    mask = np.zeros((h, w), dtype=bool)
    for b in boundaries(h, rows):
        for y in range(b - width // 2, b - width // 2 + width):
            if 0 <= y < h:
                mask[y, :] = True
    for b in boundaries(w, cols):
        for x in range(b - width // 2, b - width // 2 + width):
            if 0 <= x < w:
                mask[:, x] = True
    return mask


def cells(h: int, w: int, rows: int, cols: int) -> list[tuple[int, int, int, int]]:
    ys = [0, *boundaries(h, rows), h]
    xs = [0, *boundaries(w, cols), w]
    return [(ys[r], ys[r + 1], xs[c], xs[c + 1]) for r in range(rows) for c in range(cols)]


def random_image(shape, dtype=np.uint8, seed=0) -> np.ndarray:
    g = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return g.integers(0, 200, shape).astype(dtype)  # never 255: every drawn pixel changes
    return g.random(shape).astype(dtype)


# ------------------------------------------------------------------ cues


@pytest.mark.parametrize(("h", "w"), [(48, 48), (50, 37)])
@pytest.mark.parametrize(("rows", "cols"), [(3, 3), (4, 5), (2, 7), (1, 3), (3, 1)])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_grid_lines_at_documented_pixels(h, w, rows, cols, width):
    image = random_image((h, w))
    before = image.copy()
    out = grid_overlay(image, rows, cols, width=width)
    mask = line_mask(h, w, rows, cols, width)
    assert out.shape == image.shape and out.dtype == image.dtype
    assert (out[mask] == 255).all()
    assert np.array_equal(out[~mask], image[~mask])
    assert np.array_equal(out != image, mask)  # no other pixel changed
    np.testing.assert_array_equal(image, before)  # the input is untouched
    np.testing.assert_array_equal(grid_overlay(image, rows, cols, width=width), out)  # deterministic


def test_grid_lines_explicit_rows():
    image = np.zeros((48, 48), dtype=np.uint8)
    for width, expected in [(1, {16, 32}), (2, {15, 16, 31, 32}), (3, {15, 16, 17, 31, 32, 33})]:
        out = grid_overlay(image, 3, 1, width=width)
        assert set(np.nonzero(out.any(axis=1))[0].tolist()) == expected
        assert (out[sorted(expected)] == 255).all()
        cols_out = grid_overlay(image, 1, 3, width=width)
        assert set(np.nonzero(cols_out.any(axis=0))[0].tolist()) == expected
    # 37 columns in 4: boundaries 9.25, 18.5, 27.75 -> 9, 18 (half to even), 28
    out = grid_overlay(np.zeros((50, 37), dtype=np.uint8), 1, 4)
    assert np.nonzero(out.any(axis=0))[0].tolist() == [9, 18, 28]
    # 50 rows in 3: 16.67, 33.33 -> 17, 33
    out = grid_overlay(np.zeros((50, 37), dtype=np.uint8), 3, 1)
    assert np.nonzero(out.any(axis=1))[0].tolist() == [17, 33]


@pytest.mark.parametrize(("h", "w"), [(48, 48), (50, 37)])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("width", [1, 2])
def test_scan_lines_is_a_one_column_grid(h, w, n, width):
    image = random_image((h, w, 3))
    out = scan_lines(image, n, width=width, color=(10, 20, 30))
    np.testing.assert_array_equal(out, grid_overlay(image, n, 1, width=width, color=(10, 20, 30)))
    mask = line_mask(h, w, n, 1, width)
    assert (out[mask] == [10, 20, 30]).all()
    np.testing.assert_array_equal(out[~mask], image[~mask])


@pytest.mark.parametrize(
    ("shape", "dtype", "color", "value"),
    [
        ((48, 48), np.uint8, 255, 255),
        ((50, 37, 3), np.uint8, (255, 0, 128), [255, 0, 128]),
        ((50, 37, 3), np.uint8, 7, [7, 7, 7]),
        ((48, 48, 3), np.float32, (1.0, 0.5, 0.0), [1.0, 0.5, 0.0]),
        ((50, 37, 3), np.float32, 2.5, [2.5, 2.5, 2.5]),
        ((48, 48), np.int16, -5, -5),
    ],
)
def test_overlays_keep_shape_dtype_and_colour(shape, dtype, color, value):
    image = random_image(shape, dtype, seed=1)
    before = image.copy()
    h, w = shape[:2]
    mask = line_mask(h, w, 3, 4, 1)
    for out in (grid_overlay(image, 3, 4, color=color), grid_overlay(image, 3, 4, color=color)):
        assert out.shape == image.shape and out.dtype == image.dtype
        np.testing.assert_array_equal(
            out[mask], np.broadcast_to(np.asarray(value, dtype=dtype), out[mask].shape)
        )
        np.testing.assert_array_equal(out[~mask], image[~mask])
    sym = symbol_overlay(image, 2, 2, color=color)
    assert sym.shape == image.shape and sym.dtype == image.dtype
    assert (sym != image).any()
    np.testing.assert_array_equal(image, before)


@pytest.mark.parametrize(("h", "w"), [(48, 48), (50, 37)])
@pytest.mark.parametrize(
    ("rows", "cols", "symbols", "scale", "margin"),
    [
        (3, 3, None, 1, 1),
        (2, 2, ["1", "B2", "Z", "90"], 2, 0),
        (3, 2, None, 1, 3),
        (4, 1, ["Q", "W", "E", "R"], 2, 2),
    ],
)
def test_symbols_at_documented_pixels(h, w, rows, cols, symbols, scale, margin):
    image = random_image((h, w, 3), seed=2)
    before = image.copy()
    out = symbol_overlay(image, rows, cols, symbols, scale=scale, margin=margin, color=(255, 250, 245))
    expected = image.copy()
    names = symbols if symbols is not None else [chr(ord("A") + i) for i in range(rows * cols)]
    boxes = cells(h, w, rows, cols)
    assert partition_boxes(image.shape, rows, cols) == boxes
    for (top, _, left, _), name in zip(boxes, names, strict=True):
        ink = glyph(name, scale)
        for y in range(ink.shape[0]):
            for x in range(ink.shape[1]):
                if ink[y, x]:
                    expected[top + margin + y, left + margin + x] = (255, 250, 245)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(image, before)
    np.testing.assert_array_equal(
        symbol_overlay(image, rows, cols, symbols, scale=scale, margin=margin, color=(255, 250, 245)), out
    )


def test_glyph_font_and_shape():
    a = np.array([[c == "1" for c in row] for row in ("010", "101", "111", "101", "101")])
    np.testing.assert_array_equal(glyph("A"), a)
    np.testing.assert_array_equal(glyph("A", 3), np.kron(a, np.ones((3, 3), dtype=bool)))
    two = glyph("AB", 2)
    assert two.shape == (10, 4 * 2 * 2 - 2)
    assert not two[:, 6:8].any()  # the blank scale-wide column between characters
    np.testing.assert_array_equal(two[:, :6], glyph("A", 2))
    np.testing.assert_array_equal(two[:, 8:], glyph("B", 2))
    for c in FONT_CHARACTERS:
        g = glyph(c)
        assert g.shape == (5, 3) and g.any() and g.dtype == bool
    assert len({glyph(c).tobytes() for c in FONT_CHARACTERS}) == len(FONT_CHARACTERS)  # all distinct
    assert sorted(FONT_CHARACTERS) == sorted("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


@pytest.mark.parametrize(
    ("shape", "rows", "cols"), [((48, 48), 3, 3), ((50, 37, 3), 4, 5), ((7, 3), 7, 3), ((5, 9), 2, 4)]
)
def test_partition_boxes_tile_the_image(shape, rows, cols):
    boxes = partition_boxes(shape, rows, cols)
    assert len(boxes) == rows * cols
    count = np.zeros(shape[:2], dtype=int)
    for top, bottom, left, right in boxes:
        assert 0 <= top < bottom <= shape[0] and 0 <= left < right <= shape[1]
        count[top:bottom, left:right] += 1
    assert (count == 1).all()  # disjoint, and their union is the image
    assert boxes == cells(shape[0], shape[1], rows, cols)  # row by row


def test_default_symbols():
    letters = default_symbols(30)
    assert letters[:26] == list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert letters[26:] == ["AA", "AB", "AC", "AD"]
    assert default_symbols(702)[-1] == "ZZ" and len(set(default_symbols(702))) == 702
    assert default_symbols(12, "numbers") == [str(i) for i in range(1, 13)]
    assert default_symbols(1) == ["A"]


def test_structured_prompt():
    text = structured_prompt("Where is the cat?", 3, 3)
    assert text.endswith("Where is the cat?")
    assert "3x3 grid" in text and "A, B, C, D, E, F, G, H, I" in text
    assert text == structured_prompt("Where is the cat?", 3, 3)
    scan = structured_prompt("Count the dots.", 4, cue="scan", symbols=["1", "2", "3", "4"])
    assert "4 horizontal strips labelled 1, 2, 3, 4" in scan and scan.endswith("Count the dots.")
    assert scan == structured_prompt("Count the dots.", 4, cue="scan", symbols=["1", "2", "3", "4"])
    assert structured_prompt("", 2, 2).endswith("one by one.")


def test_cue_bad_input_names_the_argument():
    image = random_image((48, 40))
    rejects(grid_overlay, image, 49, 2, name="rows")
    rejects(grid_overlay, image, 2, 41, name="cols")
    rejects(scan_lines, image, 49, name="n")
    rejects(partition_boxes, (48, 40), 49, 2, name="rows")
    rejects(partition_boxes, (48, 40), 2, 41, name="cols")
    rejects(symbol_overlay, image, 2, 2, ["A", "B", "C"], name="symbols")
    rejects(symbol_overlay, image, 2, 2, "ABCD", name="symbols")
    rejects(structured_prompt, "q", 2, 2, ["A", "B", "C"], name="symbols")
    rejects(structured_prompt, "q", 2, 2, ["A", "B", "C", ""], name="symbols")
    rejects(structured_prompt, "q", 2, 2, cue="scan", name="cols")
    rejects(structured_prompt, "q", 2, 2, cue="spiral", name="cue")
    # a symbol too big for its cell (cells of 24x20; "AB" at scale 3 is 15x21)
    rejects(symbol_overlay, image, 2, 2, ["A", "AB", "C", "D"], scale=3, name="symbols")
    rejects(symbol_overlay, image, 2, 2, scale=2, margin=15, name="symbols")
    # unknown characters
    rejects(symbol_overlay, image, 2, 2, ["A", "b", "C", "D"], name="symbols")
    rejects(symbol_overlay, image, 2, 2, ["A", "?", "C", "D"], name="symbols")
    rejects(glyph, "a", name="text")
    rejects(glyph, "", name="text")
    rejects(default_symbols, 3, "roman", name="kind")
    rejects(default_symbols, 703, name="n")
    # colours out of the dtype's range
    for bad in (256, -1, (255, 0, 300), math.nan, (1, 2)):
        rejects(grid_overlay, np.zeros((10, 10, 3), np.uint8), 2, 2, color=bad, name="color")
    rejects(symbol_overlay, image, 2, 2, color=1000, name="color")
    rejects(scan_lines, image, 2, color=-3, name="color")
    # a width that leaves no pixels inside the cells
    rejects(grid_overlay, image, 3, 1, width=16, name="width")
    rejects(grid_overlay, image, 1, 4, width=10, name="width")
    rejects(scan_lines, image, 4, width=12, name="width")
    # 50 rows in 3: cells 17, 16, 17; lines of width 16 at rows 17 and 33 cover the middle cell
    rejects(grid_overlay, np.zeros((50, 37), np.uint8), 3, 1, width=16, name="width")
    assert (grid_overlay(np.zeros((50, 37), np.uint8), 3, 1, width=15)[17:33] == 0).all(axis=1).any()
    rejects(grid_overlay, np.zeros((4, 4, 2, 2)), 2, 2, name="image")
    rejects(grid_overlay, np.zeros((4, 4), dtype=bool), 2, 2, name="image")
    rejects(grid_overlay, np.full((4, 4), np.nan), 2, 2, name="image")
    rejects(grid_overlay, [[0, 0], [0, 0]], 2, 2, name="image")
    rejects(grid_overlay, image, 2, 2, color="white", name="color")
    rejects(grid_overlay, image, 2, 2, color=[None, "x"], name="color")
    rejects(grid_overlay, np.zeros((8, 8), np.float16), 2, 2, color=1e6, name="color")  # inf in float16
    rejects(
        symbol_overlay, np.zeros((40, 40), np.uint8), 30, 30, name="rows"
    )  # 900 cells: no default symbols
    rejects(structured_prompt, "q", 30, 30, name="rows")
    for fn, args, name in [
        (grid_overlay, (image, 49, 2), "rows"),
        (grid_overlay, (image, 2, 41), "cols"),
        (symbol_overlay, (image, 2, 41), "cols"),
        (symbol_overlay, (image, 2, 2, ["A", "B", "C"]), "symbols"),
        (structured_prompt, ("q", 2, 2, ["A"]), "symbols"),
        (grid_overlay, (image, 3, 3), "width"),
    ]:
        kwargs = {"width": 16} if name == "width" else {}
        with pytest.raises(ValueError, match=name):
            fn(*args, **kwargs)


# ------------------------------------------------------------------ references: the analysis formulas


def np_cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))


def loop_binding(img: np.ndarray, txt: np.ndarray, match) -> float:
    within, cross = [], []
    for t in range(txt.shape[0]):
        for p in range(img.shape[0]):
            (within if p == match[t] else cross).append(np_cos(txt[t], img[p]))
    return float(np.mean(within) - np.mean(cross))


def loop_gap(img: np.ndarray, txt: np.ndarray) -> float:
    mi = np.mean([v / np.linalg.norm(v) for v in img], axis=0)
    mt = np.mean([v / np.linalg.norm(v) for v in txt], axis=0)
    return float(np.sqrt(np.sum((mi - mt) ** 2)))


def loop_mass(pattern: np.ndarray, layout: Layout) -> list[float]:
    all_image = [q for part in layout.image for q in part]
    out = []
    for h in range(pattern.shape[0]):
        groups = []
        for group, part in zip(layout.text, layout.match, strict=True):
            fracs = []
            for q in group:
                total = sum(pattern[h, q, k] for k in all_image)
                own = sum(pattern[h, q, k] for k in layout.image[part])
                fracs.append(own / total if total > 0 else 0.0)
            groups.append(np.mean(fracs))
        out.append(float(np.mean(groups)))
    return out


def loop_chance(layout: Layout) -> float:
    n = sum(len(p) for p in layout.image)
    return float(np.mean([len(layout.image[m]) / n for m in layout.match]))


def random_pattern(g, heads: int, seq: int) -> torch.Tensor:
    raw = np.tril(g.random((heads, seq, seq)) + 0.01)
    return torch.tensor(raw / raw.sum(-1, keepdims=True))


LAYOUTS = [
    Layout(image=[[1, 2], [3, 4], [5, 6]], text=[[8], [9], [10, 11]]),  # identity match
    Layout(image=[[1, 2, 3], [4], [5, 6]], text=[[8], [9, 10], [11], [12], [13]], match=[2, 0, 2, 1, 0]),
    Layout(image=[[0, 4, 7], [2, 3]], text=[[8, 9], [10]], match=[1, 1]),
]


@pytest.mark.parametrize("seed", range(4))
def test_binding_score_and_gap_against_loops(seed):
    g = np.random.default_rng(seed)
    for n_p, n_t, match in [
        (3, 3, None),
        (3, 5, [2, 0, 2, 1, 0]),
        (4, 2, [3, 3]),
        (2, 6, [0, 1, 1, 0, 0, 1]),
    ]:
        img, txt = g.normal(size=(n_p, 8)), g.normal(size=(n_t, 8))
        got = binding_score(torch.tensor(img), torch.tensor(txt), match)
        want = loop_binding(img, txt, match if match is not None else list(range(n_p)))
        assert got.dtype == torch.float64 and got.shape == ()
        assert float(got) == pytest.approx(want, abs=1e-12)
        assert float(modality_gap(torch.tensor(img), torch.tensor(txt))) == pytest.approx(
            loop_gap(img, txt), abs=1e-12
        )
    # leading batch dimensions: one score per row, float32 input
    img, txt = g.normal(size=(5, 3, 6)), g.normal(size=(5, 7, 6))
    match = [0, 2, 1, 1, 0, 2, 2]
    got = binding_score(torch.tensor(img, dtype=torch.float32), torch.tensor(txt, dtype=torch.float32), match)
    assert got.shape == (5,)
    for b in range(5):
        want = loop_binding(
            img[b].astype(np.float32).astype(float), txt[b].astype(np.float32).astype(float), match
        )
        assert float(got[b]) == pytest.approx(want, abs=1e-9)
    gaps = modality_gap(torch.tensor(img), torch.tensor(txt))
    np.testing.assert_allclose(gaps.numpy(), [loop_gap(img[b], txt[b]) for b in range(5)], atol=1e-12)


def test_binding_score_hand_built():
    basis = torch.eye(5, dtype=torch.float64)[:3] * torch.tensor([[2.0], [0.5], [7.0]], dtype=torch.float64)
    assert float(binding_score(basis, basis)) == pytest.approx(1.0, abs=1e-15)  # 1 - 0
    assert float(binding_score(basis, basis[[1, 2, 0]])) == pytest.approx(
        -0.5, abs=1e-15
    )  # 0 - mean(1, 0, ...)
    assert float(binding_score(basis, basis[[0, 0, 2, 1]], [0, 0, 2, 1])) == pytest.approx(1.0, abs=1e-15)
    assert float(binding_score(basis, torch.zeros(3, 5, dtype=torch.float64))) == 0.0  # zero vectors: cos 0
    same = torch.ones(4, 5)
    assert float(modality_gap(same, 3 * same)) == pytest.approx(0.0, abs=1e-15)
    assert float(modality_gap(torch.eye(2), -torch.eye(2))) == pytest.approx(math.sqrt(2.0), abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_partition_attention_mass_and_chance_against_loops(seed):
    g = np.random.default_rng(seed)
    for layout in LAYOUTS:
        pattern = random_pattern(g, 3, 15)
        got = partition_attention_mass(pattern, layout)
        assert got.dtype == torch.float64 and got.shape == (3,)
        np.testing.assert_allclose(got.numpy(), loop_mass(pattern.numpy(), layout), atol=1e-12)
        np.testing.assert_allclose(partition_attention_mass(pattern[None].float(), layout).numpy(),
                                   loop_mass(pattern.float().double().numpy(), layout), atol=1e-6)  # fmt: skip
        assert chance_mass(layout) == pytest.approx(loop_chance(layout), abs=1e-15)
        # attention spread evenly over the image tokens has exactly the chance mass
        even = torch.zeros(2, 15, 15, dtype=torch.float64)
        flat = [q for p in layout.image for q in p]
        even[:, :, flat] = 1.0 / len(flat)
        np.testing.assert_allclose(
            partition_attention_mass(even, layout).numpy(), chance_mass(layout), atol=1e-15
        )
    # a query with no attention on image tokens contributes 0; attention on the own partition alone gives 1
    lay = LAYOUTS[0]
    none = torch.zeros(1, 15, 15, dtype=torch.float64)
    none[..., 0] = 1.0
    assert partition_attention_mass(none, lay).tolist() == [0.0]
    own = torch.zeros(1, 15, 15, dtype=torch.float64)
    for group, part in zip(lay.text, lay.match, strict=True):
        for q in group:
            own[0, q, list(lay.image[part])] = 0.5
    assert partition_attention_mass(own, lay).tolist() == [1.0]
    assert chance_mass(Layout(image=[[0], [1, 2, 3]], text=[[4], [5]])) == pytest.approx((1 / 4 + 3 / 4) / 2)
    assert chance_mass(Layout(image=[[0], [1, 2, 3]], text=[[4], [5]], match=[1, 1])) == pytest.approx(0.75)


def test_layout_checks():
    lay = Layout([[1, 2], (3,)], [[4]], match=[1])
    assert lay.image == ((1, 2), (3,)) and lay.text == ((4,),) and lay.match == (1,) and lay.max_position == 4
    assert Layout([[1], [2]], [[3], [4]]).match == (0, 1)
    rejects(Layout, [[1, 2]], [[3]], name="image")
    rejects(Layout, [[1], [2]], [[3]], name="match")
    rejects(Layout, [[1], [2]], [[3]], match=[2], name="match")
    rejects(Layout, [[1], [1]], [[3], [4]], name="image")
    rejects(Layout, [[1], [2]], [[2], [4]], name="text")
    rejects(Layout, [[1, 1], [2]], [[3], [4]], name="image[0]")
    rejects(Layout, [[1], [-2]], [[3], [4]], name="image[1]")
    rejects(Layout, [[1], [2]], [[3], []], name="text[1]")


# ------------------------------------------------------------------ a planted model for the swap test

K, FILLERS, ANSWERS, SEQ = 4, [4, 5, 6, 7], [8, 9, 10, 11], 8


def planted_model():
    """One layer, one head; the answer at the last position reads the ID dims 0..K-1 of the residual.

    ID token k embeds on dim k, fillers on dims 4..7; queries and keys are 0 (uniform causal attention),
    values the identity, the output projection keeps dims 0..K-1 only, the MLP writes nothing, and the
    unembedding row of answer token ANSWERS[k] is the unit vector on dim k: the answer is the ID present."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=12,
        hidden_size=16,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.embed_tokens.weight[:, :12] = torch.eye(12)  # token t embeds on dim t
        block = model.model.layers[0]
        block.input_layernorm.weight.fill_(1.0)
        block.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
        block.self_attn.v_proj.weight.copy_(torch.eye(16))
        block.self_attn.o_proj.weight[:K, :K] = 3.0 * torch.eye(K)
        for k, token in enumerate(ANSWERS):
            model.lm_head.weight[token, k] = 1.0
    return model


def planted_rows(g, n: int, ids: np.ndarray, where: np.ndarray) -> torch.Tensor:
    rows = g.choice(FILLERS, size=(n, SEQ))
    rows[np.arange(n), where] = ids
    return torch.tensor(rows, dtype=torch.long)


@pytest.fixture(scope="module")
def planted():
    return planted_model()


def test_planted_model_answers_the_id(planted):
    g = np.random.default_rng(0)
    ids, where = g.integers(0, K, 50), g.integers(0, SEQ, 50)
    logits = planted(input_ids=planted_rows(g, 50, ids, where)).logits[:, -1]
    assert logits.argmax(-1).tolist() == [ANSWERS[k] for k in ids]
    rest = [t for t in range(12) if t not in ANSWERS]
    assert (logits[:, rest] == 0).all()
    assert HookedModel(planted).n_heads == 1 and HookedModel(planted).d_model == 16


def test_swap_test_on_the_planted_model(planted):
    g = np.random.default_rng(1)
    n = 400
    base_id, source_id = g.integers(0, K, n), g.integers(0, K, n)
    where = g.integers(0, SEQ - 1, n)
    base = planted_rows(g, n, base_id, where)
    source = planted_rows(g, n, source_id, where)  # other fillers; the ID at the same position
    id_dims = torch.eye(16)[:K]
    common = {"layer": 0, "hook": "resid_pre", "answer_tokens": ANSWERS, "source_answers": source_id}

    whole = swap_test(planted, base, source, [[int(p)] for p in where], **common)
    assert whole.swap_accuracy == 1.0
    assert whole.predictions.tolist() == source_id.tolist()
    assert whole.clean_predictions.tolist() == base_id.tolist()
    assert whole.logits.shape == whole.clean_logits.shape == (n, K)

    sub = swap_test(planted, base, source, [[int(p)] for p in where], subspace=id_dims, **common)
    assert sub.swap_accuracy == 1.0 and sub.predictions.tolist() == source_id.tolist()
    # a subspace spanned by non-orthonormal rows of the same span does the same
    mixed = torch.tensor(g.normal(size=(K, K)), dtype=torch.float32) @ id_dims
    assert (
        swap_test(planted, base, source, [[int(p)] for p in where], subspace=mixed, **common).swap_accuracy
        == 1.0
    )

    # random swaps: filler positions carry no ID; the answer stays the base's, so swap accuracy is the
    # fraction of rows whose source answer happens to equal the base answer (chance 1/K)
    other = [[int((p + 1 + g.integers(0, SEQ - 1)) % SEQ)] for p in where]
    assert all(o[0] != p for o, p in zip(other, where, strict=True))
    rand = swap_test(planted, base, source, other, **common)
    same = float(np.mean(base_id == source_id))
    assert rand.swap_accuracy == same
    assert rand.predictions.tolist() == base_id.tolist()
    assert abs(same - 1 / K) < 4 * math.sqrt((1 / K) * (1 - 1 / K) / n)

    # a subspace orthogonal to the ID dims changes nothing
    ortho = torch.eye(16)[K:]
    off = swap_test(planted, base, source, [[int(p)] for p in where], subspace=ortho, **common)
    assert torch.equal(off.logits, off.clean_logits)
    assert off.predictions.tolist() == base_id.tolist() and off.swap_accuracy == same

    # patching a run with its own activations changes nothing
    for kwargs in ({}, {"subspace": id_dims}):
        own = swap_test(
            planted, base, base, [[int(p)] for p in where], **{**common, "source_answers": base_id}, **kwargs
        )
        assert torch.equal(own.logits, own.clean_logits)
        assert own.predictions.tolist() == own.clean_predictions.tolist() == base_id.tolist()
        assert own.swap_accuracy == 1.0


def test_swap_test_with_source_positions(planted):
    g = np.random.default_rng(2)
    n = 200
    base_id, source_id = g.integers(0, K, n), g.integers(0, K, n)
    base_at, source_at = g.integers(0, SEQ - 1, n), g.integers(0, SEQ - 1, n)
    base, source = planted_rows(g, n, base_id, base_at), planted_rows(g, n, source_id, source_at)
    found = swap_test(
        planted,
        base,
        source,
        [[int(p)] for p in base_at],
        source_positions=[[int(p)] for p in source_at],
        layer=0,
        answer_tokens=ANSWERS,
        source_answers=source_id,
        subspace=torch.eye(16)[:K],
    )
    assert found.swap_accuracy == 1.0
    # one position list for every row, and a tensor input given as a dict
    flat = swap_test(planted, {"input_ids": base}, {"input_ids": source}, [SEQ - 2], layer=0,
                     answer_tokens=ANSWERS, source_answers=source_id)  # fmt: skip
    both, neither = (
        (base_at == SEQ - 2) & (source_at == SEQ - 2),
        (base_at != SEQ - 2) & (source_at != SEQ - 2),
    )
    assert both.any() and neither.any()
    assert flat.predictions[both].tolist() == source_id[both].tolist()  # the ID moved in
    assert flat.predictions[neither].tolist() == base_id[neither].tolist()  # two fillers: nothing changed


def test_analysis_bad_input_names_the_argument(planted):
    img, txt = torch.randn(3, 4), torch.randn(3, 4)
    rejects(binding_score, img, txt, ["x", "y", "z"], name="match")
    rejects(binding_score, img, txt, [0, 1, 3], name="match")
    rejects(binding_score, img, txt, object(), name="match")
    rejects(binding_score, img, txt[:2], name="match")
    rejects(binding_score, img[:1], txt[:1], name="image_means")
    rejects(binding_score, img, torch.randn(3, 5), name="text_means")
    rejects(modality_gap, img, txt.double().fill_(torch.nan), name="text_acts")
    pattern = torch.full((1, 12, 12), 1 / 12)
    rejects(partition_attention_mass, pattern.clone().fill_(torch.nan), LAYOUTS[0], name="pattern")
    rejects(partition_attention_mass, pattern[:, :5, :5], LAYOUTS[0], name="layout")
    rejects(chance_mass, "layout", name="layout")
    ids = torch.full((2, SEQ), FILLERS[0])
    kw = {"layer": 0, "answer_tokens": ANSWERS, "source_answers": [0, 1]}
    rejects(swap_test, planted, ids.tolist(), ids, [1], **kw, name="base")
    rejects(swap_test, planted, ids, "ids", [1], **kw, name="source")
    rejects(swap_test, planted, ids, ids[:1], [1], **kw, name="base")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "answer_tokens": None}, name="answer_tokens")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "answer_tokens": [8, 12]}, name="answer_tokens")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "answer_tokens": [8.0, 9.0]}, name="answer_tokens")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "source_answers": [0, 4]}, name="source_answers")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "source_answers": [0]}, name="source_answers")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "source_answers": ["x", "y"]}, name="source_answers")
    rejects(swap_test, planted, ids, ids, [SEQ], **kw, name="positions")
    rejects(swap_test, planted, ids, ids, [1], **kw, source_positions=[1, 2], name="source_positions")
    rejects(swap_test, planted, ids, ids, [1], **{**kw, "layer": 1}, name="layer")
    rejects(swap_test, planted, ids, ids, [1], **kw, hook="pattern", name="hook")
    rejects(swap_test, planted, ids, ids, [1], **kw, subspace=torch.zeros(2, 16), name="subspace")
    rejects(swap_test, planted, ids, ids, [1], **kw, subspace=torch.ones(2, 15), name="subspace")
    lay = Layout([[0], [1]], [[2], [3]])
    for fn in (binding_by_layer, attention_mass):
        rejects(fn, planted, ids, lay, layers=[], name="layers")
        rejects(fn, planted, ids, lay, layers=object(), name="layers")
        rejects(fn, planted, ids, lay, layers=[1], name="layers")
        rejects(fn, planted, ids, [lay], name="layouts")
        rejects(fn, planted, ids[:, :3], lay, name="layouts")
        rejects(fn, planted, ids.tolist(), lay, name="inputs")
    rejects(image_partitions, torch.tensor([1, 39, 39, 2]), 39, (2, 2), 1, name="patch_grid")
    rejects(image_partitions, torch.tensor([1, 39, 39, 2]), 39, [1, 2], 1, name="patch_grid")
    rejects(image_partitions, torch.tensor([1, 39, 39, 2]), 39, (1, 2), 2, name="rows")


# ------------------------------------------------------------------ models left in training mode
def _grounding_inputs():
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, 256, (4, 10), generator=g), torch.randint(0, 256, (4, 10), generator=g)


GROUNDING = {
    "binding_by_layer": lambda m, x, y, lay: binding_by_layer(m, x, lay),
    "attention_mass": lambda m, x, y, lay: attention_mass(m, x, lay),
    "swap_test": lambda m, x, y, lay: swap_test(
        m, x, y, [1, 2], layer=1, answer_tokens=[3, 4, 5], source_answers=[0, 1, 2, 0]
    ),
}


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("what", list(GROUNDING))
def test_a_model_in_training_mode_gives_the_eval_mode_grounding(zoo, modes, arch, what):
    # the passes ran in the model's mode: with dropout 0.1 in training mode (GPT-2's default; Qwen2's
    # attention dropout) the per-row binding scores were off the eval-mode ones by up to 0.026 (GPT-2) /
    # 0.029 (Qwen2), the attention masses by 0.0010 / 0.00085 and the swap test's logits by 0.12 / 0.027
    # (one of Qwen2's 4 answers flipped). Now the model runs in eval mode (bit-identical) and every
    # submodule's mode comes back, also when a pass raises.
    x, y = _grounding_inputs()
    lay = Layout(image=[[1, 2], [3, 4], [5, 6]], text=[[7], [8], [9]])
    want, got = modes.train_vs_eval(getattr(zoo, arch)(), lambda m: GROUNDING[what](m, x, y, lay))
    for field in want.__dataclass_fields__:
        a, b = getattr(want, field), getattr(got, field)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(b, a)
        elif isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a, rtol=0, atol=0)
        else:
            assert b == a, field


# ------------------------------------------------------------------ tiny vision-language models

IMAGE_TOKEN = 39


@pytest.fixture(scope="module")
def llava(tiny_vision):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(**tiny_vision, projection_dim=32)
    text = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=IMAGE_TOKEN,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",  # drop CLS: 16 patch tokens,
    )
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(config).eval()


def llava_inputs(seed: int = 0, rows: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[1] + [IMAGE_TOKEN] * 16 + [5, 6, 7, 8, 9]] * rows)
    return {"input_ids": ids, "pixel_values": torch.randn(rows, 3, 32, 32, generator=g)}


def test_llava_shapes(llava):
    hooked = HookedModel(llava)
    assert (hooked.n_layers, hooked.n_heads, hooked.d_model, hooked.d_vocab) == (2, 4, 32, 40)
    inputs = llava_inputs()
    with torch.no_grad():
        own = llava(**inputs, use_cache=False)
        assert torch.equal(hooked(inputs["input_ids"], pixel_values=inputs["pixel_values"]), own.logits)
    parts = image_partitions(inputs["input_ids"][0], IMAGE_TOKEN, (4, 4), 2, 2)
    assert parts == [(1, 2, 5, 6), (3, 4, 7, 8), (9, 10, 13, 14), (11, 12, 15, 16)]
    assert image_partitions(inputs["input_ids"][0], IMAGE_TOKEN, (4, 4), 4) == [
        tuple(range(1 + 4 * r, 5 + 4 * r)) for r in range(4)
    ]
    layout = Layout(image=parts, text=[[17], [18], [19], [20, 21]])

    found = binding_by_layer(llava, inputs, layout)
    assert found.layers == [0, 1] and found.binding.shape == (2,) and found.modality_gap.shape == (2,)
    assert found.per_row.shape == (1, 2) and np.isfinite(found.binding).all()
    # against the residual stream the model itself reports (resid_pre of layer 1 = hidden_states[1])
    pre = binding_by_layer(llava, inputs, [layout], layers=[1], hook="resid_pre")
    with torch.no_grad():
        acts = llava(**inputs, use_cache=False, output_hidden_states=True).hidden_states[1][0]
    img = np.stack([acts[list(p)].double().mean(0).numpy() for p in parts])
    txt = np.stack([acts[list(t)].double().mean(0).numpy() for t in layout.text])
    assert pre.binding[0] == pytest.approx(loop_binding(img, txt, layout.match), abs=1e-6)
    flat_img = acts[[q for p in parts for q in p]].double().numpy()
    flat_txt = acts[[q for t in layout.text for q in t]].double().numpy()
    assert pre.modality_gap[0] == pytest.approx(loop_gap(flat_img, flat_txt), abs=1e-6)

    mass = attention_mass(llava, inputs, layout)
    assert mass.layers == [0, 1] and mass.mass.shape == (2, 4)
    assert mass.chance == pytest.approx(0.25)
    assert ((mass.mass >= 0) & (mass.mass <= 1)).all()
    # against the model's own eager attention
    eager = copy.deepcopy(llava)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        attn = eager(**inputs, use_cache=False, output_attentions=True).attentions
    for i in range(2):
        np.testing.assert_allclose(mass.mass[i], loop_mass(attn[i][0].double().numpy(), layout), atol=1e-6)

    source = llava_inputs(seed=1)
    swap = swap_test(
        llava, inputs, source, [list(parts[0])], layer=1, answer_tokens=[3, 4, 5], source_answers=[0]
    )
    assert swap.logits.shape == swap.clean_logits.shape == (1, 3)
    assert swap.predictions.shape == swap.clean_predictions.shape == swap.follows.shape == (1,)
    own_swap = swap_test(llava, inputs, inputs, [list(p) for p in [parts[0]]], layer=1, answer_tokens=[3, 4, 5],
                         source_answers=[0])  # fmt: skip
    assert torch.equal(own_swap.logits, own_swap.clean_logits)
    # two rows: one layout for both, and the images make a difference to the patched logits
    two = llava_inputs(seed=2, rows=2)
    assert binding_by_layer(llava, two, layout).per_row.shape == (2, 2)
    assert attention_mass(llava, two, [layout, layout]).mass.shape == (2, 4)
    whole = swap_test(llava, two, llava_inputs(seed=3, rows=2), [q for p in parts for q in p], layer=0,
                      answer_tokens=[3, 4, 5], source_answers=[0, 1])  # fmt: skip
    assert not torch.equal(whole.logits, whole.clean_logits)


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen_vl_dimensions_come_from_the_text_config(kind):
    text = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0},
    }
    tokens = {"image_token_id": 63, "video_token_id": 62, "vision_start_token_id": 61}
    if kind == "qwen2_vl":
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

        vision = {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2}
        model = Qwen2VLForConditionalGeneration(
            Qwen2VLConfig(text_config=text, vision_config=vision, **tokens)
        )
    else:
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 32,
                  "fullatt_block_indexes": [0]}  # fmt: skip
        model = Qwen2_5_VLForConditionalGeneration(
            Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
        )
    model.eval()
    assert model.config.model_type == kind
    hooked = HookedModel(model)
    assert (
        hooked.n_layers,
        hooked.n_heads,
        hooked.n_kv_heads,
        hooked.d_model,
        hooked.d_head,
        hooked.d_vocab,
    ) == (
        3,
        4,
        2,
        32,
        8,
        64,
    )
    assert hooked.blocks is model.model.language_model.layers
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(hooked(ids), model(input_ids=ids, use_cache=False).logits)  # text only
