"""The reproduction ``bispectrum-watermark`` (:mod:`icml_generative_experiments.watermark.repro`): the
procedural panoramas, the pooled interval, and (slow) one small run through the runner."""

import numpy as np
import pytest

import icml_generative_experiments.watermark.repro as repro
from icml_generative.watermark import sht
from icml_generative_experiments.watermark.testbed import panorama, unit_vectors
from icml_tools.repro import run_reproduction


def test_panoramas_are_seeded_rgb_fields_in_range():
    a, b = panorama(32, 3), panorama(32, 3)
    assert a.shape == (32, 64, 3) and np.array_equal(a, b)
    assert 0 <= a.min() and a.max() <= 1 and not np.array_equal(a, panorama(32, 4))
    x = unit_vectors(16)
    assert (
        np.allclose(np.linalg.norm(x, axis=-1), 1.0) and (x[:8, :, 2] > 0).all()
    )  # z up: top rows are north
    # the content the watermark degrees see: energy at degrees 20-24 is small next to the low degrees
    coeffs = sht(panorama(128, 0), 24)
    low, high = np.linalg.norm(coeffs[1:25]), np.linalg.norm(coeffs[400:625])
    assert high < 0.5 * low


def test_pooled_interval_is_the_clopper_pearson_of_all_bits():
    summary = repro.pooled([1.0, 0.5], 8)  # 12 of 16 bits
    assert summary["mean"] == 0.75
    assert summary["low"] == pytest.approx(0.4762, abs=1e-3) and summary["high"] == pytest.approx(
        0.9273, abs=1e-3
    )


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    monkeypatch.setitem(repro.BUDGETS, "quick", {"panoramas": 1, "rotations": 2})
    result = run_reproduction("bispectrum-watermark", "quick", 0)
    table = {row["condition"]: row for row in result["rows"] if "condition" in row}
    assert (
        result["ours"] == table["ours, rotated"]["mean"]
        and result["baseline"] == table["dct, rotated"]["mean"]
    )
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
    assert result["psnr"]["ours"]["min"] >= repro.PSNR_FLOOR - 1e-9
    assert table["dct"]["mean"] == 1.0  # the planar mark decodes unrotated
    heights = [row["height"] for row in result["rows"] if "height" in row]
    assert heights == list(repro.RESOLUTIONS)
