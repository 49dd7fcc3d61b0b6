"""Rotation-invariant panorama watermarking: bits carried by the signs of key-selected bispectral invariants.

A panorama's real spherical-harmonic coefficients turn by ``D(R)`` under a rotation ``R``; the
bispectrum ``b = Σ C a_{l1,c1} a_{l2,c2} a_{l3,c3}`` (:func:`~icml_generative.watermark.sphere.bispectrum`)
does not change, and it is odd in the field, so its **sign** can carry a bit that survives any rotation.
The power spectrum is even and cannot: :func:`embed_power_spectrum` is that baseline, the same machinery on
second-order invariants.

**Catalogue.** Every degree triple drawn from ``degrees`` with the triangle condition and an even sum,
times every assignment of the colour channels to its three slots, counted once when two slots share a
degree and channel set (swapping them gives the same number): :func:`invariant_catalogue`. A **key** (an
int, a str or bytes) draws which ``n_bits`` invariants carry the bits and a random sign ``s_k`` for each;
bit ``k`` reads 1 when ``s_k · b_k > 0``.

**Embedding** (our design, simpler than the paper's learned equivariant encoder; the paper's text was not
available to us, its code's settings are in the docs page): the coefficients of the chosen degrees move by
``δ`` so that each invariant, in units of the host's scale, ``β_k = b_k / (n_l1,c1 · n_l2,c2 · n_l3,c3)``,
reaches the margin ``strength`` on the side its bit asks for. ``n_l,c`` is the host's norm of degree ``l``
in channel ``c``, floored at half the mean over the chosen degrees and channels: fixed scales, so the
optimizer cannot meet a margin by shrinking a block to nothing and turning its direction for free (a
self-normalized margin did exactly that and lost bits under resampling). L-BFGS minimizes
``Σ_k relu(strength - t_k β_k)²`` over ``δ = u / sqrt(1 + E(u) / budget)``, a map of every ``u`` into the
perceptual budget: ``E`` is the residual's pixel energy ``δᵀ(Gram ⊗ I)δ`` (the Gram matrix of the
harmonics on the ERP pixels, so it is exactly the PSNR's squared error) and the budget the squared error
of ``psnr_db`` dB. The PSNR floor holds by construction, and clipping the result to ``[0, 1]`` can only
raise it. The residual is band-limited to the chosen degrees (by default 20, 22 and 24, where natural
panoramas hold little energy, so the budget can set signs): smooth, it survives resampling, additive noise
and coarse quantization.

**Extraction**: the SHT of the image (any rotation of it), the key's invariants, their signs. Blind: the
original image is not needed.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from icml_generative.validation import check_int, check_number
from icml_generative.watermark._common import as_bits, as_panorama, key_seed
from icml_generative.watermark.sphere import (
    coupling_tensor,
    equirect_grid,
    quadrature_weights,
    real_sph_harm,
    sht,
)

__all__ = [
    "DEFAULT_DEGREES",
    "POWER_DEGREES",
    "embed",
    "embed_power_spectrum",
    "extract",
    "extract_power_spectrum",
    "invariant_catalogue",
    "key_invariants",
]

DEFAULT_DEGREES = (20, 22, 24)  # the paper's code uses (6, 8, 14) at l_max 16; see the docs page
POWER_DEGREES = tuple(range(13, 25))  # 12 degrees x 3 channels = 36 second-order invariants
NORM_FLOOR = 0.5  # the scales n_l,c are floored at this fraction of their mean
RETRIES = 2  # rounds in which the bits that do not read back get twice their margin

Invariant = tuple[tuple[int, int, int], tuple[int, int, int]]  # ((l1, l2, l3), (c1, c2, c3))


def _check_degrees(degrees: Any, height: int | None = None) -> tuple[int, ...]:
    try:
        values = [d for d in degrees]
    except TypeError:
        raise TypeError(f"degrees must be a sequence of integers, got {degrees!r}") from None
    if not values or not all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in values):
        raise ValueError(f"degrees must be a non-empty sequence of integers >= 1, got {degrees!r}")
    out = tuple(sorted({int(d) for d in values}))
    if out[0] < 1 or out[-1] > 64:
        raise ValueError(f"degrees must lie in [1, 64], got {degrees!r}")
    if height is not None and 2 * out[-1] >= height:
        raise ValueError(
            f"degrees must stay below height / 2 for an exact transform: max degree {out[-1]} needs an image "
            f"taller than {2 * out[-1]} rows, got {height}"
        )
    return out


@functools.lru_cache(maxsize=16)
def _catalogue(degrees: tuple[int, ...], n_channels: int) -> tuple[Invariant, ...]:
    out: list[Invariant] = []
    for triple in itertools.combinations_with_replacement(degrees, 3):
        l1, l2, l3 = triple
        if (l1 + l2 + l3) % 2 or l3 > l1 + l2:
            continue
        seen = set()
        for c1, c2, c3 in itertools.product(range(n_channels), repeat=3):
            slots = tuple(sorted(zip(triple, (c1, c2, c3), strict=True)))
            if slots not in seen:
                seen.add(slots)
                out.append((triple, (c1, c2, c3)))
    return tuple(out)


def invariant_catalogue(degrees: Any = DEFAULT_DEGREES, n_channels: int = 3) -> tuple[Invariant, ...]:
    """Every ``((l1, l2, l3), (c1, c2, c3))`` with ``l1 <= l2 <= l3`` from ``degrees``, the triangle
    condition and an even ``l1 + l2 + l3``, channels counted once per multiset of ``(l, c)`` slots: the
    invariants a key draws from (``n_bits`` can be at most its length)."""
    return _catalogue(_check_degrees(degrees), check_int(n_channels, "n_channels", 1, 16))


def _selection(key: Any, n_bits: int, catalogue: tuple, what: str) -> tuple[list, np.ndarray]:
    """The key's ``n_bits`` entries of ``catalogue`` and a random sign for each."""
    if n_bits > len(catalogue):
        raise ValueError(f"n_bits must be at most {len(catalogue)}, the {what} available, got {n_bits}")
    rng = np.random.default_rng(key_seed(key))
    chosen = rng.permutation(len(catalogue))[:n_bits]
    return [catalogue[i] for i in chosen], rng.choice((-1.0, 1.0), size=n_bits)


def _bispectral(key: Any, n_bits: int, degrees: tuple[int, ...], channels: int) -> tuple[list, np.ndarray]:
    return _selection(
        key,
        n_bits,
        _catalogue(degrees, channels),
        f"invariants for degrees {degrees} and {channels} channel(s)",
    )


def key_invariants(
    key: Any, n_bits: int, degrees: Any = DEFAULT_DEGREES, n_channels: int = 3
) -> tuple[list[Invariant], np.ndarray]:
    """The invariants ``((l1, l2, l3), (c1, c2, c3))`` that ``key`` assigns to bits ``0 .. n_bits - 1`` and
    their signs ``s_k`` (bit ``k`` reads 1 when ``s_k · b_k > 0``): what :func:`embed` and :func:`extract`
    use, for auditing a key or reading the invariants with :func:`~icml_generative.watermark.bispectrum`."""
    degrees = _check_degrees(degrees)
    n_channels = check_int(n_channels, "n_channels", 1, 16)
    return _bispectral(key, check_int(n_bits, "n_bits", 1), degrees, n_channels)


def _powers(key: Any, n_bits: int, degrees: tuple[int, ...], channels: int) -> tuple[list, np.ndarray]:
    catalogue = tuple(itertools.product(degrees, range(channels)))
    return _selection(key, n_bits, catalogue, f"(degree, channel) powers for degrees {degrees}")


@functools.lru_cache(maxsize=64)
def _coupling_torch(l1: int, l2: int, l3: int) -> torch.Tensor:
    return torch.from_numpy(coupling_tensor(l1, l2, l3).copy())


Scales = dict[int, torch.Tensor]  # {l: (C,)}


def _triple_values(blocks: dict[int, torch.Tensor], invariants: list, scales: Scales) -> torch.Tensor:
    """``b_k / (n_l1,c1 n_l2,c2 n_l3,c3)`` from the degree blocks ``{l: (2l+1, C)}``, differentiable: one
    contraction per degree triple gives every channel assignment ``(C, C, C)`` at once."""
    full = {
        triple: torch.einsum("abc,ax,by,cz->xyz", _coupling_torch(*triple), *(blocks[d] for d in triple))
        for triple in {triple for triple, _ in invariants}
    }
    return torch.stack(
        [
            full[(l1, l2, l3)][c1, c2, c3] / (scales[l1][c1] * scales[l2][c2] * scales[l3][c3])
            for (l1, l2, l3), (c1, c2, c3) in invariants
        ]
    )


def _power_values(blocks: dict[int, torch.Tensor], invariants: list, scales: Scales) -> torch.Tensor:
    """``P_l,c / n_l,c²``, never negative."""
    return torch.stack([blocks[d][:, c].pow(2).sum() / scales[d][c] ** 2 for d, c in invariants])


def _block_coefficients(image: np.ndarray, degrees: tuple[int, ...]) -> dict[int, torch.Tensor]:
    coeffs = torch.from_numpy(sht(image, max(degrees)))
    return {d: coeffs[d * d : (d + 1) * (d + 1)] for d in degrees}


def _embed_in_band(
    img: np.ndarray,
    degrees: tuple[int, ...],
    values: Callable[[dict[int, torch.Tensor], list, Scales], torch.Tensor],
    invariants: list,
    targets: np.ndarray,
    strength: float,
    psnr_db: float,
    iterations: int,
    decoded: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Move the coefficients of ``degrees`` within the PSNR budget so that ``targets · values ≥ strength``
    (the module docstring); returns the clipped image. ``decoded(image)`` says which bits read back; a bit
    that does not gets twice its margin and the optimization continues from where it stopped, at most
    ``RETRIES`` times."""
    height, width, channels = img.shape
    rows = np.concatenate([np.arange(d * d, (d + 1) * (d + 1)) for d in degrees])
    theta, phi = equirect_grid(height)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    synth = torch.from_numpy(real_sph_harm(max(degrees), t, p).reshape(-1, height * width)[rows])  # (n, HW)
    pixels = torch.from_numpy(img.reshape(height * width, channels).copy())
    weights = torch.from_numpy(np.repeat(quadrature_weights(height), width))
    host = (synth * weights) @ pixels  # (n, C): the host's coefficients (the SHT)
    budget = 10.0 ** (-psnr_db / 10.0) * img.size  # the largest sum of squared pixel errors
    # the residual synth.T @ δ has pixel energy δ.T (gram ⊗ I_C) δ, δ flattened row-major as (n, C)
    metric = torch.kron((synth @ synth.T).contiguous(), torch.eye(channels, dtype=torch.float64))

    def split(coeffs: torch.Tensor) -> dict[int, torch.Tensor]:
        out, start = {}, 0
        for d in degrees:
            out[d] = coeffs[start : start + 2 * d + 1]
            start += 2 * d + 1
        return out

    norms = {d: block.norm(dim=0) for d, block in split(host).items()}
    mean = torch.cat(list(norms.values())).mean()
    if not mean > 0:  # a flat host: the scale of the budget itself (area-normalized coefficients)
        mean = torch.tensor(np.sqrt(4 * np.pi * 10.0 ** (-psnr_db / 10.0)), dtype=torch.float64)
    scales = {d: torch.clamp(n, min=NORM_FLOOR * mean) for d, n in norms.items()}
    signed = torch.as_tensor(targets, dtype=torch.float64)

    def change(u: torch.Tensor) -> torch.Tensor:  # every u maps inside the budget: energy < budget
        return u / torch.sqrt(1.0 + (u @ metric @ u) / budget)

    u = torch.zeros(len(rows) * channels, dtype=torch.float64, requires_grad=True)
    margins = torch.full((len(invariants),), float(strength), dtype=torch.float64)
    for attempt in range(RETRIES + 1):
        opt = torch.optim.LBFGS([u], max_iter=iterations, line_search_fn="strong_wolfe", tolerance_grad=1e-12)

        def closure(opt=opt, margins=margins) -> torch.Tensor:
            opt.zero_grad()
            beta = values(split(host + change(u).reshape(len(rows), channels)), invariants, scales)
            loss = torch.relu(margins - signed * beta).pow(2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        residual = (synth.T @ change(u.detach()).reshape(len(rows), channels)).numpy()
        out = np.clip(img + residual.reshape(img.shape), 0.0, 1.0)
        missed = torch.as_tensor(~decoded(out))
        if not missed.any() or attempt == RETRIES:
            return out
        margins = torch.where(missed, 2.0 * margins, margins)
    raise AssertionError("unreachable")  # pragma: no cover


def _check_embed_args(
    image: Any, bits: Any, strength: Any, psnr_db: Any, degrees: Any, iterations: Any
) -> tuple[np.ndarray, np.ndarray, float, float, tuple[int, ...], int]:
    img = as_panorama(image)
    return (
        img,
        as_bits(bits),
        check_number(strength, "strength", above=0.0, below=1.0),
        check_number(psnr_db, "psnr_db", above=0.0, maximum=200.0),
        _check_degrees(degrees, img.shape[0]),
        check_int(iterations, "iterations", 1, 10_000),
    )


def _warn_unless_decoded(decoded: np.ndarray, bits: np.ndarray, who: str) -> None:
    if not np.array_equal(decoded, bits):
        warnings.warn(
            f"{who}: {int((decoded != bits).sum())} of {len(bits)} bits do not decode from the watermarked image "
            "within the PSNR budget; lower n_bits or strength, or allow a lower psnr_db",
            RuntimeWarning,
            stacklevel=4,
        )


def _read(image: Any, key: Any, n_bits: Any, degrees: Any, select: Callable, values: Callable) -> np.ndarray:
    """The bits ``s_k · value_k > 0`` of the key's invariants (``select``) read by ``values``."""
    img = as_panorama(image)
    degrees = _check_degrees(degrees, img.shape[0])
    n_bits = check_int(n_bits, "n_bits", 1)
    invariants, signs = select(key, n_bits, degrees, img.shape[2])
    ones = {d: torch.ones(img.shape[2], dtype=torch.float64) for d in degrees}
    return (signs * values(_block_coefficients(img, degrees), invariants, ones).numpy() > 0).astype(np.int64)


def _write(
    image: Any, bits: Any, key: Any, settings: tuple, select: Callable, values: Callable, who: str
) -> np.ndarray:
    """Embed ``bits`` with the key's invariants (``select``, ``values``); ``settings`` = (strength, psnr_db,
    degrees, iterations). Warns (as ``who``) when a bit does not decode from the result."""
    img, bit_array, strength, psnr_db, degrees, iterations = _check_embed_args(image, bits, *settings)
    invariants, signs = select(key, len(bit_array), degrees, img.shape[2])
    targets = signs * (2.0 * bit_array - 1.0)

    def decoded(image: np.ndarray) -> np.ndarray:
        return _read(image, key, len(bit_array), degrees, select, values) == bit_array

    out = _embed_in_band(img, degrees, values, invariants, targets, strength, psnr_db, iterations, decoded)
    _warn_unless_decoded(_read(out, key, len(bit_array), degrees, select, values), bit_array, who)
    return out if np.ndim(image) == 3 else out[:, :, 0]


def extract(image: Any, key: Any, n_bits: int, *, degrees: Any = DEFAULT_DEGREES) -> np.ndarray:
    """The ``n_bits`` bits (0/1 int64 array) carried by ``image`` ``(H, 2H[, C])`` under ``key``: blind,
    and any rotation of the watermarked panorama decodes the same."""
    return _read(image, key, n_bits, degrees, _bispectral, _triple_values)


def embed(
    image: Any,
    bits: Any,
    key: Any,
    strength: float = 0.2,
    *,
    psnr_db: float = 38.0,
    degrees: Any = DEFAULT_DEGREES,
    iterations: int = 200,
) -> np.ndarray:
    """Watermark ``image`` ``(H, 2H[, C])``, values in ``[0, 1]``, with ``bits`` under ``key`` (the module
    docstring has the method).

    ``strength``: the margin each invariant should reach on its bit's side, in units of the host's scale
    (in ``(0, 1)``); ``psnr_db``: the perceptual budget, a floor on the PSNR of the result; ``degrees``: the
    harmonic degrees that carry the mark (all below ``H / 2``: the default needs ``H >= 49``);
    ``iterations``: L-BFGS iterations. Returns the watermarked image, same shape. Warns when a bit does not
    decode from the result (too many bits for the budget, or too small an image)."""
    settings = (strength, psnr_db, degrees, iterations)
    return _write(image, bits, key, settings, _bispectral, _triple_values, "embed")


def extract_power_spectrum(image: Any, key: Any, n_bits: int, *, degrees: Any = POWER_DEGREES) -> np.ndarray:
    """The power-spectrum baseline's bits: bit ``k`` reads 1 when ``s_k · P_l,c > 0`` for the key's
    ``(degree, channel)`` powers and signs. ``P_l,c >= 0`` for every image, so the bits read are the key's
    sign pattern whatever was embedded: second-order invariants cannot carry a sign."""
    return _read(image, key, n_bits, degrees, _powers, _power_values)


def embed_power_spectrum(
    image: Any,
    bits: Any,
    key: Any,
    strength: float = 0.2,
    *,
    psnr_db: float = 38.0,
    degrees: Any = POWER_DEGREES,
    iterations: int = 200,
) -> np.ndarray:
    """The second-order baseline of :func:`embed`: the same optimizer and budget with the power spectrum
    ``P_l,c = ‖a_l,c‖²`` of key-chosen ``(degree, channel)`` pairs in place of the bispectrum. A bit whose
    target sign is negative cannot be met (the optimizer can only shrink the block), so about half the
    bits fail: it warns, as :func:`embed` does, and returns the best image it found."""
    settings = (strength, psnr_db, degrees, iterations)
    return _write(image, bits, key, settings, _powers, _power_values, "embed_power_spectrum")
