import warnings

import numpy as np
import pytest
from PIL import Image

from icml_agents.ssl4rl import rewards as R
from icml_agents.ssl4rl import tasks as T


def ramp(h=16, w=16, c=None):
    img = np.arange(h * w, dtype=np.float32).reshape(h, w) / (h * w - 1)
    return img if c is None else np.repeat(img[:, :, None], c, 2)


def test_rotation_is_counter_clockwise_and_seeded():
    img = ramp()
    for k, angle in enumerate((0, 90, 180, 270)):
        ex = T.rotation_task(img, 0, angle=angle)
        assert ex.answer == str(angle) and ex.label == (k,)
        np.testing.assert_array_equal(ex.images[0][:, :, 0], img)
        np.testing.assert_array_equal(ex.images[1][:, :, 0], np.rot90(img, k))
        assert R.score_answer_match(f"<answer>{angle}</answer>", ex.answer) == 1.0
    a, b = T.rotation_task(img, 7), T.rotation_task(img, 7)
    assert a.answer == b.answer and all(np.array_equal(x, y) for x, y in zip(a.images, b.images, strict=True))
    assert {T.rotation_task(img, s).answer for s in range(40)} == {"0", "90", "180", "270"}


def test_fine_rotation_crops_so_that_borders_give_no_hint():
    img = np.ones((16, 16), np.float32)  # constant: any black corner would come from the rotation borders
    assert T.inscribed_side(16, T.rotation_angles(45)) == 11
    for angle in T.rotation_angles(45):
        ex = T.rotation_task(img, 0, granularity=45, angle=angle)
        for view in ex.images:
            assert view.shape == (16, 16, 1)
            assert view.min() > 0.97, angle  # no border pixels left
    assert not ex.images[0].shape != ex.images[1].shape
    single = T.rotation_task(img, 0, reference=False)
    assert len(single.images) == 1
    with pytest.raises(ValueError, match="granularity"):
        T.rotation_task(img, 0, granularity=7)


def test_rotation_crop_scale_crops_each_view_independently():
    img = ramp(32, 32)
    ex = T.rotation_task(img, 3, angle=0, crop_scale=0.5)
    a, b = ex.images
    assert a.shape == b.shape == (16, 16, 1) and ex.answer == "0"
    assert not np.allclose(a, b)  # angle 0, yet the two windows differ: no pixel-for-pixel match
    full = T.rotation_task(img, 3, angle=0, crop_scale=1.0)
    np.testing.assert_array_equal(full.images[0], full.images[1])
    for bad in (0, 1.5, "0.5", True):
        with pytest.raises(ValueError, match="crop_scale"):
            T.rotation_task(img, 0, crop_scale=bad)


def test_jigsaw_answer_is_the_inverse_permutation():
    img = ramp()
    for grid in (2, 3):
        ex = T.jigsaw_task(img, 3, grid=grid, size=12 if grid == 3 else 16)
        inv = [int(a) - 1 for a in ex.answer.split(",")]
        assert sorted(inv) == list(range(grid * grid)) and tuple(inv) == ex.label
        cell = ex.images[0].shape[0] // grid
        base = T.canonical(img, 12 if grid == 3 else 16)
        mosaic = ex.images[0]
        for j, shown in enumerate(inv):  # original patch j is displayed at tile `shown`
            r, c, sr, sc = j // grid, j % grid, shown // grid, shown % grid
            np.testing.assert_array_equal(
                mosaic[sr * cell : (sr + 1) * cell, sc * cell : (sc + 1) * cell],
                base[r * cell : (r + 1) * cell, c * cell : (c + 1) * cell],
            )
        assert R.score_jigsaw(f"<answer>{ex.answer}</answer>", ex.answer) == 1.0


def test_position_contrastive_and_patch():
    img = ramp()
    answers = {T.position_task(img, s, augment=False).answer for s in range(30)}
    assert answers == set(T.QUADRANTS)
    ex = T.position_task(img, 0, augment=False)
    q = T.QUADRANTS.index(ex.answer)
    expected = T.resize(
        np.ascontiguousarray(ex.images[0][(q // 2) * 8 : (q // 2) * 8 + 8, (q % 2) * 8 : (q % 2) * 8 + 8]), 16
    )
    np.testing.assert_allclose(ex.images[1], expected)
    pos = T.contrastive_task(img, ramp()[::-1], 1, positive=True)
    neg = T.contrastive_task(img, ramp()[::-1], 1, positive=False)
    assert (pos.answer, neg.answer) == ("positive", "negative") and all(
        v.shape == (16, 16, 1) for v in pos.images
    )
    ex = T.patch_task(img, 0, cell=(1, 2))
    hidden = img[4:8, 8:12].reshape(2, 2, 2, 2).mean(axis=(1, 3)).reshape(-1)
    assert ex.answer == ",".join(str(min(int(m * 4), 3)) for m in hidden)
    assert (ex.images[0][4:8, 8:12] == 0.5).all()
    assert R.score_patch(f"<answer>{ex.answer}</answer>", ex.answer) == 1.0


def test_grayscale_rgb_pil_and_uint8_inputs_mix():
    gray = ramp()
    rgb_u8 = (ramp(c=3) * 255).round().astype(np.uint8)
    pil_rgb = Image.fromarray(rgb_u8, "RGB")
    pil_l = Image.fromarray((gray * 255).round().astype(np.uint8), "L")
    rgba = np.concatenate([ramp(c=3), np.ones((16, 16, 1), np.float32)], 2)
    outs = [T.canonical(x, 16, "L") for x in (gray, rgb_u8, pil_rgb, pil_l, rgba, ramp(c=1))]
    for out in outs:
        assert out.shape == (16, 16, 1) and out.dtype == np.float32
        np.testing.assert_allclose(out, outs[0], atol=1 / 255 + 1e-6)
    assert T.canonical(gray, 16, "RGB").shape == (16, 16, 3)
    dim = Image.fromarray(np.array([[0, 1], [2, 3]], np.uint8), "L")  # a dark 8-bit image stays dark
    np.testing.assert_allclose(T.to_array(dim)[:, :, 0], [[0, 1 / 255], [2 / 255, 3 / 255]], rtol=1e-6)
    assert T.to_array(pil_rgb.convert("P"), "RGB").shape == (16, 16, 3)
    assert T.canonical(pil_rgb, 16, "RGB").shape == (16, 16, 3)
    examples = T.build_examples([gray, rgb_u8, pil_rgb, pil_l], "rotation", seed=0, mode="RGB")
    assert len(examples) == 4 and all(v.shape == (16, 16, 3) for ex in examples for v in ex.images)


def test_small_and_nonsquare_images():
    # An 8x8 image is upsampled to the 16-pixel canvas; a non-square one is centre-cropped first.
    assert T.canonical(ramp(8, 8), 16).shape == (16, 16, 1)
    assert T.canonical(ramp(10, 30), 16).shape == (16, 16, 1)
    with pytest.raises(ValueError, match="min_side"):
        T.rotation_task(ramp(5, 5), 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = T.build_examples([ramp(), ramp(4, 4), ramp(3, 40)], "jigsaw", seed=0)
    assert len(out) == 1 and any("skipped 2 of 3" in str(w.message) for w in caught)


def test_bad_values_raise():
    with pytest.raises(ValueError, match="float image values"):
        T.to_array(ramp() * 16)
    with pytest.raises(ValueError, match="NaN"):
        T.to_array(np.full((8, 8), np.nan))
    with pytest.raises(ValueError, match="integer image values"):
        T.to_array(np.full((8, 8), 300))
    with pytest.raises(ValueError, match="shape"):
        T.to_array(np.zeros((8, 8, 2)))
    with pytest.raises(ValueError, match="mode"):
        T.to_array(ramp(), mode="CMYK")
    with pytest.raises(TypeError, match="seed"):
        T.rotation_task(ramp(), seed="a")
    with pytest.raises(ValueError, match="task"):
        T.build_examples([ramp()], "colorize")
    with pytest.raises(ValueError, match="empty"):
        T.build_examples([], "rotation")


def test_answer_space_and_text_serialization():
    assert T.answer_space("rotation", granularity=45) == [str(a) for a in range(0, 360, 45)]
    assert len(T.answer_space("jigsaw")) == 24 and T.answer_space("jigsaw")[0] == "1,2,3,4"
    text = T.serialize_image(np.array([[0.0, 0.3], [0.6, 1.0]]))
    assert text == " .\n:#"


def test_image_folder_and_dataset(tmp_path):
    pytest.importorskip("datasets")
    Image.fromarray((ramp() * 255).astype(np.uint8), "L").save(tmp_path / "a.png")
    Image.fromarray((ramp(c=3) * 255).astype(np.uint8), "RGB").save(tmp_path / "b.png")
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.warns(UserWarning, match="notes.txt"):
        ds = T.build_dataset(tmp_path, "rotation", n_per_image=2, seed=0)
    assert ds.num_rows == 4 and set(ds.column_names) == {"prompt", "answer", "task", "images"}
    assert all(a in {"0", "90", "180", "270"} for a in ds["answer"])
    with pytest.warns(UserWarning, match="notes.txt"):
        text = T.build_dataset(tmp_path, "jigsaw", seed=0, as_text=True)
    assert "images" not in text.column_names and "Image 1:" in text[0]["prompt"]
