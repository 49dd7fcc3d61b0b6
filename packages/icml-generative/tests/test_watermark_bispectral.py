"""The bispectral watermark and its power-spectrum baseline (issue 31): every bit decodes without attack
and under rotation, a wrong key reads chance, the sign flips with the field, the power spectrum cannot
carry signs, the PSNR floor holds, bad input and fuzzing."""

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_generative.watermark import (
    bispectral,
    bispectrum,
    embed,
    embed_power_spectrum,
    extract,
    extract_power_spectrum,
    invariant_catalogue,
    key_invariants,
    psnr,
    random_rotation,
    rotate_image,
    sht,
)
from icml_tools.fuzz import Coverage, fuzz_call, rejects

FUZZ = Coverage()
DEGREES = (12, 14, 16)  # fit a 64 x 128 panorama (exact transform to degree 31)
N_BITS = 16


def smooth_panorama(height: int = 64, seed: int = 0) -> np.ndarray:
    """A smooth RGB panorama with some texture, values inside [0.1, 0.9]."""
    rng = np.random.default_rng(seed)
    theta = (np.arange(height) + 0.5) * np.pi / height
    phi = (np.arange(2 * height) + 0.5) * np.pi / height
    t, p = np.meshgrid(theta, phi, indexing="ij")
    channels = [
        0.5 + 0.25 * np.sin(t) * np.cos(k * p + rng.uniform(0, 6)) + 0.1 * np.cos(3 * t + k)
        for k in (1, 2, 3)
    ]
    image = np.stack(channels, axis=-1) + 0.05 * rng.random((height, 2 * height, 3))
    return np.clip(image, 0.1, 0.9)


def binomial_band(n: int, alpha: float) -> tuple[int, int]:
    """The central ``1 - alpha`` band of Binomial(n, 1/2): the smallest k with P(X <= k) > alpha/2, and n minus it."""
    cdf, k = 0.0, -1
    while cdf <= alpha / 2:
        k += 1
        cdf += math.comb(n, k) / 2**n
    return k, n - k


@pytest.fixture(scope="module")
def marked():
    image = smooth_panorama()
    bits = np.random.default_rng(1).integers(0, 2, N_BITS)
    return image, bits, embed(image, bits, "key-1", degrees=DEGREES)


def test_catalogue_counts_each_distinct_invariant_once():
    for degrees, channels in (((2, 4, 6), 1), ((20, 22, 24), 3), ((3, 4, 5), 2)):
        catalogue = invariant_catalogue(degrees, channels)
        assert len(set(catalogue)) == len(catalogue)
        # independent count: multisets of (degree, channel) slots with an even, triangle degree triple
        expected = {
            tuple(sorted(slots))
            for slots in itertools.product(itertools.product(degrees, range(channels)), repeat=3)
            if sum(d for d, _ in slots) % 2 == 0
            and max(d for d, _ in slots) <= sum(d for d, _ in slots) - max(d for d, _ in slots)
        }
        assert len(catalogue) == len(expected)
        for (l1, l2, l3), _ in catalogue:
            assert l1 <= l2 <= l3 <= l1 + l2 and (l1 + l2 + l3) % 2 == 0
    assert len(invariant_catalogue()) == 165


def test_every_bit_decodes_without_attack_and_under_rotation(marked):
    image, bits, out = marked
    assert out.shape == image.shape and out.min() >= 0 and out.max() <= 1
    assert psnr(image, out) >= 38.0 - 1e-9
    assert (extract(out, "key-1", N_BITS, degrees=DEGREES) == bits).all()
    for seed in range(3):
        turned = rotate_image(out, random_rotation(seed))
        assert (extract(turned, "key-1", N_BITS, degrees=DEGREES) == bits).all()


def test_the_decoded_bits_are_the_signs_of_the_bispectrum(marked):
    """extract agrees with the independent bispectrum of sphere.py on the key's invariants."""
    _, bits, out = marked
    invariants, signs = key_invariants("key-1", N_BITS, DEGREES)
    a = sht(out, max(DEGREES))
    values = np.array([bispectrum(a, [triple], [channels])[0] for triple, channels in invariants])
    assert ((signs * values > 0).astype(int) == bits).all()


def test_a_wrong_key_reads_chance(marked):
    _, bits, out = marked
    hits = sum(int((extract(out, f"other-{k}", N_BITS, degrees=DEGREES) == bits).sum()) for k in range(12))
    n = 12 * N_BITS
    low, high = binomial_band(n, 0.001)  # a 99.9 % band around 0.5
    assert low <= hits <= high


def test_the_bits_flip_with_the_field(marked):
    """1 - f has the bispectrum of -f at every degree >= 1: every bit flips (the sign is carried)."""
    _, bits, out = marked
    assert (extract(1.0 - out, "key-1", N_BITS, degrees=DEGREES) == 1 - bits).all()


def test_psnr_floor_holds_for_each_budget():
    image = smooth_panorama(seed=3)
    bits = np.ones(8, dtype=int)
    for floor in (34.0, 42.0):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # every bit decodes at both budgets
            out = embed(image, bits, 5, psnr_db=floor, degrees=DEGREES)
        assert psnr(image, out) >= floor - 1e-9


def test_an_impossible_budget_warns_and_keeps_the_floor():
    image = smooth_panorama(seed=4)
    bits = np.random.default_rng(4).integers(0, 2, 40)
    with pytest.warns(RuntimeWarning, match="bits do not decode"):
        out = embed(image, bits, "k", psnr_db=70.0, degrees=DEGREES, iterations=20)
    assert psnr(image, out) >= 70.0 - 1e-9


def test_the_power_spectrum_cannot_carry_signs():
    """P >= 0: the baseline reads the key's sign pattern whatever the image, and embedding cannot change it."""
    image = smooth_panorama(seed=5)
    bits = np.random.default_rng(5).integers(0, 2, 24)
    with pytest.warns(RuntimeWarning, match="bits do not decode"):
        out = embed_power_spectrum(image, bits, "k", degrees=bispectral.POWER_DEGREES, iterations=30)
    pattern = extract_power_spectrum(image, "k", 24)
    for candidate in (out, 1.0 - out, smooth_panorama(seed=6)):
        assert (extract_power_spectrum(candidate, "k", 24) == pattern).all()
    assert 0 < (pattern == bits).sum() < 24
    assert psnr(image, out) >= 38.0 - 1e-9


def test_grayscale_in_grayscale_out():
    image = smooth_panorama(seed=7)[:, :, 0]
    bits = np.array([1, 0, 1, 1, 0, 0, 1, 0])
    out = embed(image, bits, b"raw-key", degrees=DEGREES)
    assert out.shape == image.shape
    assert (extract(out, b"raw-key", 8, degrees=DEGREES) == bits).all()
    assert len(invariant_catalogue(DEGREES, 1)) >= 8


def test_psnr_closed_form():
    a = np.zeros((4, 8))
    assert psnr(a, a) == math.inf
    assert psnr(a, a + 0.1) == pytest.approx(20.0)


def test_bad_input_names_the_argument():
    image = smooth_panorama(32)
    bits = [1, 0, 1]
    for bad in (np.zeros((32, 32, 3)), np.zeros((32, 65)), np.zeros(64), np.zeros((2, 32, 64, 3))):
        assert isinstance(rejects(embed, bad, bits, 1, degrees=(4, 6), name="image"), ValueError)
        assert isinstance(rejects(extract, bad, 1, 3, degrees=(4, 6), name="image"), ValueError)
    for bad in (image + 1.0, image - 1.0, np.where(image > 0.5, np.nan, image)):
        rejects(embed, bad, bits, 1, degrees=(4, 6), name="image")
    n_max = len(invariant_catalogue((4, 6), 3))
    err = rejects(extract, image, 1, n_max + 1, degrees=(4, 6), name="n_bits")
    assert str(n_max) in str(err)
    rejects(embed, image, [1] * (n_max + 1), 1, degrees=(4, 6), name="n_bits")
    rejects(extract, image, 1, 3, degrees=(4, 16), name="degrees")  # 16 needs more than 32 rows
    rejects(extract, image, 1, 3, degrees=(), name="degrees")
    rejects(extract, image, 1, 3, degrees=(0, 2), name="degrees")
    rejects(extract, image, 1, 3, degrees=(2.5, 4), name="degrees")
    rejects(extract, image, 1, 3, degrees=4, name="degrees")
    rejects(extract, image, 1, 0, degrees=(4, 6), name="n_bits")
    for bad_bits in ([], [0, 2], [[0, 1]], "01", [0.5]):
        rejects(embed, image, bad_bits, 1, degrees=(4, 6), name="bits")
    for bad_key in (1.5, None, True, [1]):
        rejects(embed, image, bits, bad_key, degrees=(4, 6), name="key")
        rejects(extract, image, bad_key, 3, degrees=(4, 6), name="key")
    for bad in (0.0, 1.0, -0.1, math.nan):
        rejects(embed, image, bits, 1, bad, degrees=(4, 6), name="strength")
    rejects(embed, image, bits, 1, psnr_db=0.0, degrees=(4, 6), name="psnr_db")
    rejects(embed, image, bits, 1, iterations=0, degrees=(4, 6), name="iterations")
    rejects(psnr, np.zeros((2, 4)), np.zeros((2, 5)), name="reference")
    rejects(invariant_catalogue, (2, 4), 0, name="n_channels")


# ---- fuzz -----------------------------------------------------------------------------------------------------------

IMAGE = smooth_panorama(16, seed=9)  # exact to degree 7
SMALL = {"degrees": (2, 4), "iterations": 5}
INTS = st.sampled_from([0, -1, 1, 3, 10**6, 2.0, None, "3", True, math.nan])


def in_unit_range(out):
    return out.shape == IMAGE.shape and np.isfinite(out).all() and out.min() >= 0 and out.max() <= 1


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@FUZZ.covers(embed, embed_power_spectrum)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzz_embed(data):
    fn = data.draw(st.sampled_from([embed, embed_power_spectrum]))
    fuzz_call(
        data,
        fn,
        {"image": IMAGE, "bits": [1, 0, 1], "key": "k", "strength": 0.2, "psnr_db": 38.0, **SMALL},
        check=in_unit_range,
        strategies={"iterations": INTS},
        related={"image": ["degrees"], "degrees": ["image", "n_bits"], "bits": ["n_bits"]},
    )


@FUZZ.covers(extract, extract_power_spectrum)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_extract(data):
    fn = data.draw(st.sampled_from([extract, extract_power_spectrum]))
    fuzz_call(
        data,
        fn,
        {"image": IMAGE, "key": 3, "n_bits": 4, "degrees": (2, 4)},
        check=lambda out: out.ndim == 1 and np.isin(out, (0, 1)).all(),
        strategies={"n_bits": INTS},
        related={"image": ["degrees"], "degrees": ["image", "n_bits"]},
    )


@FUZZ.covers(key_invariants)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzz_key_invariants(data):
    fuzz_call(
        data,
        key_invariants,
        {"key": "k", "n_bits": 5, "degrees": (2, 4), "n_channels": 2},
        check=lambda r: len(r[0]) == len(r[1]) and set(np.abs(r[1])) == {1.0},
        strategies={"n_bits": INTS, "n_channels": INTS},
        related={"n_bits": ["degrees", "n_channels"], "degrees": ["n_bits"], "n_channels": ["n_bits"]},
    )


@FUZZ.covers(invariant_catalogue)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzz_invariant_catalogue(data):
    fuzz_call(
        data,
        invariant_catalogue,
        {"degrees": (2, 4), "n_channels": 2},
        check=lambda c: len(c) > 0,
        strategies={"n_channels": INTS},
    )


@FUZZ.covers(psnr)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzz_psnr(data):
    fuzz_call(
        data,
        psnr,
        {"reference": IMAGE, "image": np.clip(IMAGE + 0.01, 0, 1)},
        check=lambda v: isinstance(v, float) and not math.isnan(v),
        related={"reference": ["image"], "image": ["reference"]},
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(bispectral)
