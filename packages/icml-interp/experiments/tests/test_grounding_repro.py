"""The grid-scene testbed of ``grounding-ids-toy`` (:mod:`icml_interp_experiments.grounding`) and its
reproduction (the registered quick run trains three tiny LLaVAs on an empty cache; CI leaves it to
``icml-repro``)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from icml_interp.grounding import glyph, grid_overlay, symbol_overlay
from icml_interp_experiments.grounding import repro, scenes, vlm

TINY = replace(vlm.Config(), steps=3, batch=8, layers=4, hidden=32, intermediate=32, warmup=1)


def test_cells_partition_the_patch_grid_by_patch_centre():
    cells = [scenes.cell_patches(c) for c in range(16)]
    assert sorted(p for c in cells for p in c) == list(range(scenes.N_PATCHES))  # each patch in one cell
    assert scenes.cell_patches(0) == [0] and scenes.cell_patches(5) == [7, 8, 13, 14]
    for c in range(16):
        top, bottom, left, right = scenes.BOXES[c]
        for p in scenes.cell_patches(c):  # the patch centre lies in the cell
            assert top <= (p // 6) * 8 + 4 < bottom and left <= (p % 6) * 8 + 4 < right
        touching = scenes.touching_patches(c)  # every patch with a pixel in the cell, and no other
        expected = [p for p in range(36) if (p // 6) * 8 < bottom and (p // 6) * 8 + 8 > top
                    and (p % 6) * 8 < right and (p % 6) * 8 + 8 > left]  # fmt: skip
        assert sorted(touching) == expected and set(scenes.cell_patches(c)) <= set(touching)


def test_objects_are_drawn_in_their_cell_off_the_symbol_patch():
    for scene in scenes.scenes(50, seed=3, n_objects=(1, 8)):
        drawn = np.zeros((48, 48), dtype=bool)
        for color, shape, cell, dy, dx in scene.objects:
            top, bottom, left, right = scenes.BOXES[cell]
            assert dy >= 5 and dx >= 5 and top + dy + 6 <= bottom and left + dx + 6 <= right  # in the cell
            region = scene.image[top + dy : top + dy + 6, left + dx : left + dx + 6]
            ink = scenes.MASKS[shape]
            assert (region[ink] == scenes.COLORS[color]).all()
            assert (region[~ink] == 20).all()
            drawn[top + dy : top + dy + 6, left + dx : left + dx + 6] |= ink
        assert (scene.image[~drawn] == 20).all()  # nothing else is drawn
        kinds = [(o[0], o[1]) for o in scene.objects]
        assert len(set(kinds)) == len(kinds) and len({o[2] for o in scene.objects}) == len(kinds)


def test_cue_image_is_the_library_overlays_and_leaves_objects_alone():
    scene = scenes.scenes(1, seed=4, n_objects=12)[0]
    cued = scenes.cue_image(scene.image)
    expected = symbol_overlay(grid_overlay(scene.image, 4, 4), 4, 4, list(scenes.SYMBOLS))
    assert np.array_equal(cued, expected)
    assert (
        cued[13:18, 1:4] == np.where(glyph("E")[:, :, None], 255, 20)
    ).all()  # E: cell (1, 0) at (12, 0) + 1
    for _, _, cell, dy, dx in scene.objects:  # cues never cover an object
        top, _, left, _ = scenes.BOXES[cell]
        a = scene.image[top + dy : top + dy + 6, left + dx : left + dx + 6]
        b = cued[top + dy : top + dy + 6, left + dx : left + dx + 6]
        assert np.array_equal(a, b)


def test_sequences_and_layouts():
    sc = scenes.scenes(6, seed=5, n_objects=10)
    for condition, extra in (("none", 0), ("cue", 17), ("oracle", 12)):
        b = scenes.batch(sc, condition)
        assert b.input_ids.shape == (6, 1 + 36 + extra + 2)
        assert (b.input_ids[:, 1:37] == scenes.IMAGE_ID).all() and scenes.image_offset(b.input_ids) == 1
        kinds = [scenes.VOCAB[f"{s.objects[s.target][0]}-{s.objects[s.target][1]}"] for s in sc]
        assert b.input_ids[:, -1].tolist() == kinds
        assert b.answers.tolist() == [s.objects[s.target][2] for s in sc]
        layouts = scenes.question_layouts(b)
        assert [lay.match[0] for lay in layouts] == b.answers.tolist()
        assert layouts[0].image[5] == tuple(1 + p for p in scenes.cell_patches(5))
    cue = scenes.batch(sc, "cue")
    sym = scenes.symbol_layouts(cue)[0]
    assert [cue.input_ids[0, t[0]].item() for t in sym.text] == scenes.SYMBOL_IDS.tolist()
    oracle = scenes.batch(sc, "oracle")
    slots = [scenes.WORDS[i] for i in oracle.input_ids[0, 37:49].tolist()]  # one per kind, in KINDS order
    cells = {f"{c}-{s}": scenes.SYMBOLS[cell] for c, s, cell, _, _ in sc[0].objects}
    assert slots == [cells.get(k, "none") for k in scenes.KINDS]


def test_exchanged_moves_the_asked_object():
    scene = scenes.scenes(1, seed=6, n_objects=5)[0]
    other = (scene.target + 2) % 5  # another object
    cf = scenes.exchanged(scene, other)
    assert cf.answer == scene.objects[other][2] and cf.objects[other][2] == scene.answer
    assert [o[:2] for o in cf.objects] == [o[:2] for o in scene.objects]
    assert [o for i, o in enumerate(cf.objects) if i not in (scene.target, other)] == [
        o for i, o in enumerate(scene.objects) if i not in (scene.target, other)
    ]
    assert np.array_equal(cf.image, scenes.render(cf.objects))


def test_model_init_and_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    model, info = vlm.trained(TINY, "cue", seed=0)
    assert (
        info["trained now"]
        and (tmp_path / "grounding_ids" / f"{vlm.VERSION}-cue-seed0" / "train.json").exists()
    )
    again, info2 = vlm.trained(TINY, "cue", seed=0)
    assert not info2["trained now"]
    b = scenes.batch(scenes.scenes(10, seed=7, n_objects=3), "cue")
    with torch.no_grad():
        assert torch.equal(vlm.answer_logits(model, b), vlm.answer_logits(again, b))
    assert vlm.answer_logits(model, b).shape == (10, 16)
    assert vlm.accuracy(model, b).shape == (10,)
    pos = model.model.vision_tower.embeddings.position_embedding.weight
    assert 0.8 < float(pos.detach().std()) < 1.2  # unit-scale patch positions (documented init)
    assert vlm.trained(replace(TINY, steps=4), "cue", seed=0)[1]["trained now"]  # another config: retrained


def test_sign_flip_p_detects_a_planted_difference_only():
    rng = np.random.default_rng(0)
    a = (rng.random(300) < 0.8).astype(float)
    b = (rng.random(300) < 0.3).astype(float)
    assert repro._sign_flip_p(a, b, 2000, seed=0) < 0.001
    assert repro._sign_flip_p(a, a[rng.permutation(300)], 2000, seed=0) > 0.05


@pytest.mark.slow
def test_reproduction_end_to_end_on_tiny_models(tmp_path, monkeypatch):
    """The whole protocol on models trained for 20 steps (the verdict is meaningless; the dict is checked)."""
    from icml_tools.protocol import validate_result

    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(vlm, "Config", lambda: replace(TINY, steps=20, hidden=64, intermediate=128))
    monkeypatch.setitem(
        repro.BUDGETS,
        "tiny",
        {"seeds": (0, 1), "n_eval": 40, "n_analysis": 16, "permutations": 200, "resamples": 200},
    )
    out = repro.run("tiny")
    validate_result(out)
    json.dumps(out)
    assert set(out["seeds"]) == {"0", "1"} and "oracle clutter" not in out["seeds"]["1"]["accuracy"]
    assert out["headroom"]["seed"] == 0 and len(out["comparison"]["binding cue"]) == 4
    assert 0 <= out["comparison"]["swap accuracy cue"] <= 1
    assert out["cache"].startswith("built")
