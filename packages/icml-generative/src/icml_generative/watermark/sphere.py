"""Spherical harmonics on equirectangular panoramas, in numpy float64 with exact quadrature: the transform
(SHT) and its inverse, rotations of coefficients (real Wigner-D) and of images (a spherical sampler), and
the rotation invariants the spherical watermark reads (power spectrum, bispectrum with real coupling tensors).

Conventions
-----------
- **Image**: an equirectangular (ERP) array of shape ``(H, W)`` or ``(H, W, C)`` with ``W = 2H``.
  **Pixel centres**: row ``i`` sits at colatitude ``θ_i = (i + ½)π/H`` (row 0 next to the north pole,
  ``z`` up), column ``j`` at longitude ``φ_j = (j + ½)·2π/W``; the point is
  ``(sin θ cos φ, sin θ sin φ, cos θ)``. No pixel lies on a pole or on the seam.
- **Basis**: real orthonormal spherical harmonics (``∫ Y_lm Y_l'm' dΩ = δ``), ``m = -l..l``:
  ``Y_l0 = P̄_l^0(cos θ)``, ``Y_lm = √2 P̄_l^m(cos θ) cos(mφ)`` for ``m > 0`` and
  ``Y_lm = √2 P̄_l^|m|(cos θ) sin(|m|φ)`` for ``m < 0``, with ``P̄_l^m = N_lm P_l^m`` the normalized
  associated Legendre functions **without the Condon–Shortley phase** ``(-1)^m``: every ``Y_lm`` with
  ``m ≥ 0`` is positive near the ``+x`` axis side, e.g. ``Y_1(-1, 0, 1) = √(3/4π)·(y, z, x)`` and
  ``Y_22 = ¼√(15/π)(x² - y²)``. ``P̄`` comes from the standard stable three-term recurrence in ``l`` on
  normalized values (no factorials, float64-stable well beyond ``l = 64``; ``MAX_LMAX`` bounds the size).
- **Coefficients**: ``a[l² + l + m]``, so degree ``l`` is the block ``a[l*l:(l+1)*(l+1)]`` and a transform to
  ``lmax`` has ``(lmax+1)²`` rows; shape ``((lmax+1)²,)`` or ``((lmax+1)², C)``, a column per channel.
- **Rotations**: ``R`` is a 3×3 rotation matrix acting on points; rotating a field means
  ``f_R(x) = f(R⁻¹x)``. :func:`wigner_D` gives, per degree, the orthogonal ``D^l(R)`` with
  ``a_l(f_R) = D^l(R) a_l(f)``, so ``D(R1 R2) = D(R1) D(R2)``. Rotation by ``α`` about ``z`` maps the
  ``(cos, sin)`` pair of order ``m`` by ``[[cos mα, -sin mα], [sin mα, cos mα]]`` (rows ``m``, ``-m``).

Quadrature and exactness
------------------------
Sums over the grid use Fejér's first rule in ``cos θ`` on the pixel-centre colatitudes (the Chebyshev
nodes, exact for polynomials in ``cos θ`` of degree ``≤ H - 1``, degree ``H`` too when ``H`` is odd)
times the trapezoid rule ``2π/W`` in longitude (exact for ``e^{ikφ}``, ``|k| < W``). So
``Σ_ij w_i g(θ_i, φ_j) = ∫ g dΩ`` **exactly for every g band-limited to degree < H** (the ``m = 0`` part of
``g`` is a polynomial of degree ``≤ L`` in ``cos θ``; the other parts sum to zero). The integrands of the
SHT of a field band-limited to ``lmax``, and of the Gram matrix, have degree ``2·lmax``: the SHT is exact
iff ``H > 2·lmax`` (``H ≥ 2·lmax + 1``), which :func:`sht` enforces; at ``H = 2·lmax`` the Gram matrix
is no longer the identity (both tested). Synthesis (:func:`isht`) evaluates the series at the pixel
centres and is exact at any height.

Documented accuracy (float64, measured by ``tests/test_watermark_sphere.py``, which asserts 1e-13): a
random field band-limited to ``l = 16`` (unit-variance coefficients) synthesized by :func:`isht` and
analysed by :func:`sht` returns its coefficients within a max abs error of 5.8e-15 at 64×128 and 3.3e-15
at 128×256; the quadrature Gram matrix to ``lmax = 16`` equals the identity within 5e-14; over 100 random
rotations of the coefficients by ``D(R)`` the bispectrum changes by at most 7e-15 relative (the power
spectrum 2e-15). :func:`wigner_D` takes ~10 ms at ``lmax = 16`` and ~5 s at ``lmax = 64`` (the quadrature
evaluates ``(lmax+1)²`` harmonics at ``~8·lmax²`` rotated points).

Pixel-domain rotation (the sampler)
-----------------------------------
:func:`rotate_image` computes ``out(x) = in(R⁻¹x)`` at every output pixel centre by inverse sampling:
``R⁻¹x = Rᵀx`` is converted to fractional pixel coordinates ``u = θ'H/π - ½``, ``v = φ'W/2π - ½`` and
interpolated **bilinearly between pixel centres**, circularly in longitude (column ``W`` is column ``0``).
Across a pole the neighbouring row is the first (last) row seen from the other side: the virtual row
``-1`` (``H``) is row ``0`` (``H - 1``) shifted by half a turn (``H`` columns, pixel centres onto pixel
centres since ``W = 2H``), so the sampler is continuous over the poles with no clamping. At ``R = I``
every pixel centre maps onto itself (identity up to float rounding; not TRIAD's "legacy" sampler, which
is a half turn in longitude). Its error on a band-limited field is that of bilinear interpolation,
``O(h²)``: the relative RMS error against the exact ``isht(rotate_coefficients(...))`` of a random field
band-limited to ``l = 8`` was 3.5e-2 at 32×64, 8.8e-3 at 64×128 and 2.2e-3 at 128×256 (tested to shrink
≥ 3× per doubling, below 4e-3 at 128×256); fields with energy up to ``l = 16`` fare worse (1.1e-1, 3.0e-2
and 7.6e-3 at the same three sizes).

Invariants
----------
:func:`power_spectrum` ``P_l = Σ_m a_lm²`` (and the cross-channel ``Σ_m a_lm,c a_lm,c'``): invariant
and even in ``f``. :func:`coupling_tensor` ``C^{l1 l2 l3}`` is the real Gaunt integral
``∫ Y_l1m1 Y_l2m2 Y_l3m3 dΩ`` (computed by exact quadrature) scaled to Frobenius norm 1: the one rotation-
invariant tensor of the three degrees (a real Wigner-3j tensor), which exists with this parity for
``|l1 - l2| ≤ l3 ≤ l1 + l2`` and ``l1 + l2 + l3`` even; its sign is that of the Gaunt integral (a positive
multiple of it), so ``bispectrum`` of ``(f, g, h)`` is ``∫ f_l1 g_l2 h_l3 dΩ / ‖G‖`` with ``f_l`` the
degree-``l`` part of ``f``. :func:`bispectrum` ``b = Σ C_{m1m2m3} a_{l1m1} a'_{l2m2} a''_{l3m3}`` is
invariant and odd in ``f`` (sign-carrying), within and across channels.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from icml_generative.validation import check_int

MAX_LMAX = 128  # the largest degree any function here accepts (tables of (lmax+1)² rows stay small)
MAX_HEIGHT = 8192  # the tallest ERP grid (8192 x 16384 pixels)
ROTATION_TOL = 1e-6  # how far from orthogonal (max |RᵀR - I|) a rotation matrix may be

__all__ = [
    "bispectrum",
    "bispectrum_gradient",
    "coupling_tensor",
    "equirect_grid",
    "isht",
    "power_spectrum",
    "quadrature_weights",
    "random_rotation",
    "real_sph_harm",
    "rotate_coefficients",
    "rotate_image",
    "sht",
    "wigner_D",
]


# ---- validation ---------------------------------------------------------------------------------------------


def _as_real_array(value: Any, name: str, ndims: Sequence[int] | None = None) -> np.ndarray:
    """``value`` as a finite, non-empty float64 array with ``ndim`` in ``ndims`` (any if None)."""
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be an array of real numbers, got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except Exception:  # ragged sequences, tensors that need grad, ...
        raise TypeError(f"{name} must be an array of real numbers, got {type(value).__name__}") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers (integer or floating point), got dtype {arr.dtype}")
    if ndims is not None and arr.ndim not in ndims:
        want = " or ".join(str(n) for n in ndims)
        raise ValueError(f"{name} must have {want} dimensions, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _as_image(image: Any, name: str = "image") -> tuple[np.ndarray, bool]:
    """An ERP image as ``(H, 2H, C)`` float64 and whether it had a channel axis."""
    arr = _as_real_array(image, name, (2, 3))
    height, width = arr.shape[:2]
    if width != 2 * height:
        raise ValueError(f"{name} must be an equirectangular image of shape (H, 2H[, C]), got {arr.shape}")
    if height > MAX_HEIGHT:
        raise ValueError(f"{name} must be at most {MAX_HEIGHT} rows tall, got {arr.shape}")
    return (arr if arr.ndim == 3 else arr[:, :, None]), arr.ndim == 3


def _as_coeffs(coeffs: Any, name: str = "coeffs") -> tuple[np.ndarray, int, bool]:
    """Coefficients as ``((lmax+1)², C)`` float64, their ``lmax`` and whether they had a channel axis."""
    arr = _as_real_array(coeffs, name, (1, 2))
    n = arr.shape[0]
    lmax = math.isqrt(n) - 1
    if (lmax + 1) ** 2 != n:
        raise ValueError(f"{name} must have (lmax+1)² rows (1, 4, 9, 16, ...), got shape {arr.shape}")
    if lmax > MAX_LMAX:
        raise ValueError(f"{name} must have degrees up to at most {MAX_LMAX}, got lmax = {lmax}")
    return (arr if arr.ndim == 2 else arr[:, None]), lmax, arr.ndim == 2


def _check_rotation(R: Any, name: str = "R") -> np.ndarray:
    """A 3×3 rotation matrix (orthogonal within ``ROTATION_TOL``, determinant +1), projected onto SO(3)."""
    arr = _as_real_array(R, name, (2,))
    if arr.shape != (3, 3):
        raise ValueError(f"{name} must be a 3x3 rotation matrix, got shape {arr.shape}")
    if np.abs(arr.T @ arr - np.eye(3)).max() > ROTATION_TOL or np.linalg.det(arr) <= 0:
        raise ValueError(
            f"{name} must be a rotation matrix (orthogonal within {ROTATION_TOL:g}, determinant +1)"
        )
    u, _, vt = np.linalg.svd(arr)
    return u @ vt  # the nearest rotation: exactly orthogonal to rounding


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _warn_if_overflow(result: np.ndarray, what: str) -> np.ndarray:
    if not np.isfinite(result).all():
        warnings.warn(f"{what}: the result overflows float64", RuntimeWarning, stacklevel=3)
    return result


def _scale_of(arr: np.ndarray) -> np.float64:
    """The largest magnitude (1 for an all-zero array): the functions here work on ``arr / scale``, so
    only a result that really exceeds float64 overflows (to inf, with a warning), never an intermediate."""
    return np.float64(np.abs(arr).max() or 1.0)


# ---- grid, quadrature, basis ----------------------------------------------------------------------------------


def equirect_grid(height: int) -> tuple[np.ndarray, np.ndarray]:
    """The pixel-centre coordinates of an ``(height, 2·height)`` ERP grid: ``theta`` ``(H,)`` with
    ``θ_i = (i + ½)π/H`` (colatitude, 0 at the north pole) and ``phi`` ``(2H,)`` with
    ``φ_j = (j + ½)·2π/W`` (longitude). Broadcast as ``theta[:, None], phi[None, :]`` for the full grid."""
    height = check_int(height, "height", 1, MAX_HEIGHT)
    theta = (np.arange(height) + 0.5) * (np.pi / height)
    phi = (np.arange(2 * height) + 0.5) * (np.pi / height)
    return theta, phi


@functools.lru_cache(maxsize=64)
def _fejer_weights(height: int) -> np.ndarray:
    """Fejér's first rule on the ``height`` Chebyshev nodes ``cos θ_i``, ``θ_i = (i + ½)π/H`` (sum 2)."""
    theta = (np.arange(height) + 0.5) * (np.pi / height)
    series = np.zeros(height)
    for j in range(1, height // 2 + 1):
        series += np.cos(2 * j * theta) / (4 * j * j - 1)
    weights = (2.0 / height) * (1.0 - 2.0 * series)
    weights.flags.writeable = False
    return weights


def quadrature_weights(height: int) -> np.ndarray:
    """Per-row weights ``(H,)`` of the grid quadrature: Fejér's first rule in ``cos θ`` times ``2π/W``, so
    that ``Σ_ij w_i g(θ_i, φ_j) = ∫ g dΩ`` exactly for ``g`` band-limited to degree ``< H`` (they sum to
    ``4π / W``, i.e. ``4π`` over the grid)."""
    height = check_int(height, "height", 1, MAX_HEIGHT)
    return _fejer_weights(height) * (np.pi / height)


def _legendre(lmax: int, cos_t: np.ndarray, sin_t: np.ndarray) -> np.ndarray:
    """``P̄[l, m] = N_lm P_l^m(cos θ)``, orthonormal on the sphere once times ``√2 cos/sin`` (``m > 0``),
    no Condon–Shortley phase; zero for ``m > l``. Shape ``(lmax+1, lmax+1, *cos_t.shape)``.

    The standard stable recurrence on normalized values: the sectoral ``P̄_m^m = √((2m+1)/2m) sin θ P̄_{m-1}^{m-1}``,
    then ``P̄_{m+1}^m = √(2m+3) cos θ P̄_m^m`` and
    ``P̄_l^m = a_lm (cos θ P̄_{l-1}^m - b_lm P̄_{l-2}^m)``, ``a = √((4l²-1)/(l²-m²))``,
    ``b = √(((l-1)²-m²)/(4(l-1)²-1))``. ``sin θ`` keeps its sign, so the result is a polynomial in the
    point ``(sin θ cos φ, sin θ sin φ, cos θ)`` for any real ``θ``.
    """
    p = np.zeros((lmax + 1, lmax + 1, *cos_t.shape))
    p[0, 0] = 1.0 / math.sqrt(4.0 * math.pi)
    for m in range(1, lmax + 1):
        p[m, m] = math.sqrt((2 * m + 1) / (2 * m)) * sin_t * p[m - 1, m - 1]
    for m in range(lmax):
        p[m + 1, m] = math.sqrt(2 * m + 3) * cos_t * p[m, m]
    trailing = (1,) * cos_t.ndim
    for l in range(2, lmax + 1):  # noqa: E741 - the degree is called l everywhere in this field
        order = np.arange(l - 1, dtype=np.float64)  # every m <= l - 2 at once
        a = np.sqrt((4.0 * l * l - 1.0) / (l * l - order**2)).reshape(-1, *trailing)
        b = np.sqrt(((l - 1.0) ** 2 - order**2) / (4.0 * (l - 1.0) ** 2 - 1.0)).reshape(-1, *trailing)
        p[l, : l - 1] = a * (cos_t * p[l - 1, : l - 1] - b * p[l - 2, : l - 1])
    return p


@functools.lru_cache(maxsize=8)
def _orders(lmax: int) -> tuple[np.ndarray, np.ndarray]:
    """The degree and order of each coefficient row: ``l[k], m[k]`` for ``k = l² + l + m``."""
    ls = np.concatenate([np.full(2 * l + 1, l) for l in range(lmax + 1)])  # noqa: E741
    ms = np.concatenate([np.arange(-l, l + 1) for l in range(lmax + 1)])  # noqa: E741
    ls.flags.writeable = False
    ms.flags.writeable = False
    return ls, ms


def _trig(lmax: int, phi: np.ndarray) -> np.ndarray:
    """``Φ[m + lmax] = sin(|m|φ)`` (m < 0), ``1`` (m = 0), ``cos(mφ)`` (m > 0); shape ``(2lmax+1, *phi.shape)``."""
    ms = np.arange(-lmax, lmax + 1).reshape(-1, *(1,) * phi.ndim)
    angle = np.abs(ms) * phi
    return np.where(ms > 0, np.cos(angle), np.where(ms < 0, np.sin(angle), 1.0))


def _theta_factor(lmax: int, theta: np.ndarray) -> np.ndarray:
    """``Λ[k] = (√2 if m ≠ 0 else 1) P̄_l^|m|(cos θ)`` per coefficient row ``k``: ``(n, *theta.shape)``."""
    ls, ms = _orders(lmax)
    p = _legendre(lmax, np.cos(theta), np.sin(theta))
    scale = np.where(ms == 0, 1.0, math.sqrt(2.0)).reshape(-1, *(1,) * theta.ndim)
    return scale * p[ls, np.abs(ms)]


@functools.lru_cache(maxsize=16)
def _grid_factors(lmax: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The separable basis on the ERP grid, ``Y[k](θ_i, φ_j) = Λ[k, i] Φ[m_k + lmax, j]``, and the weights."""
    theta, phi = equirect_grid(height)
    lam = _theta_factor(lmax, theta)  # (n, H)
    trig = _trig(lmax, phi)  # (2lmax+1, W)
    weights = quadrature_weights(height)  # (H,)
    for arr in (lam, trig, weights):
        arr.flags.writeable = False
    return lam, trig, weights


def _sph_harm(lmax: int, theta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Unchecked :func:`real_sph_harm` on arrays of one shape."""
    _, ms = _orders(lmax)
    return _theta_factor(lmax, theta) * _trig(lmax, phi)[ms + lmax]


def real_sph_harm(lmax: int, theta: Any, phi: Any) -> np.ndarray:
    """The real orthonormal spherical harmonics ``Y_lm(θ, φ)`` for ``l ≤ lmax`` at the points ``(theta,
    phi)`` (broadcast together, any shape), as ``((lmax+1)², *shape)`` with row ``l² + l + m``.

    Conventions in the module docstring (no Condon–Shortley phase). ``theta`` is the colatitude, ``phi``
    the longitude, both in radians.
    """
    lmax = check_int(lmax, "lmax", 0, MAX_LMAX)
    theta_arr = _as_real_array(theta, "theta")
    phi_arr = _as_real_array(phi, "phi")
    try:
        theta_b, phi_b = np.broadcast_arrays(theta_arr, phi_arr)
    except ValueError:
        raise ValueError(
            f"theta and phi must broadcast together, got shapes {theta_arr.shape} and {phi_arr.shape}"
        ) from None
    return _sph_harm(lmax, theta_b, phi_b)


# ---- transforms -------------------------------------------------------------------------------------------------


def sht(image: Any, lmax: int) -> np.ndarray:
    """The real spherical-harmonic coefficients to degree ``lmax`` of an ERP ``image`` ``(H, 2H[, C])``:
    ``a_lm = Σ_ij w_i Y_lm(θ_i, φ_j) f_ij``, shape ``((lmax+1)²,)`` or ``((lmax+1)², C)``.

    Exact (to rounding) for images that are band-limited to ``lmax``; requires ``H > 2·lmax`` (the Fejér
    quadrature's exactness condition, module docstring); other images are projected by the same sum.
    """
    img, channels = _as_image(image)
    height = img.shape[0]
    lmax = check_int(
        lmax,
        "lmax",
        0,
        min(MAX_LMAX, (height - 1) // 2),
        why=f" (an exact transform of a {height}-row image needs rows > 2·lmax)",
    )
    lam, trig, weights = _grid_factors(lmax, height)
    _, ms = _orders(lmax)
    scale = _scale_of(img)
    # longitude first: g[i, m, c] = w_i Σ_j Φ_m(φ_j) f_ijc / scale
    g = (trig @ (img / scale)) * weights[:, None, None]  # (H, 2lmax+1, C)
    coeffs = np.empty((len(ms), img.shape[2]))
    for m in range(-lmax, lmax + 1):
        rows = ms == m
        coeffs[rows] = lam[rows] @ g[:, m + lmax, :]
    with np.errstate(over="ignore"):
        coeffs *= scale
    return _warn_if_overflow(coeffs if channels else coeffs[:, 0], "sht")


def isht(coeffs: Any, height: int) -> np.ndarray:
    """The ERP image ``(height, 2·height[, C])`` of the band-limited field ``Σ a_lm Y_lm`` at the pixel
    centres (exact evaluation at any height; analyse it back with :func:`sht` when ``height > 2·lmax``)."""
    a, lmax, channels = _as_coeffs(coeffs)
    height = check_int(height, "height", 1, MAX_HEIGHT)
    lam, trig, _ = _grid_factors(lmax, height)
    _, ms = _orders(lmax)
    scale = _scale_of(a)
    b = np.empty((height, 2 * lmax + 1, a.shape[1]))  # b[i, m, c] = Σ_l Λ_lm(θ_i) a_lmc
    for m in range(-lmax, lmax + 1):
        rows = ms == m
        b[:, m + lmax, :] = lam[rows].T @ (a[rows] / scale)
    with np.errstate(over="ignore"):
        image = np.swapaxes(np.swapaxes(b, 1, 2) @ trig, 1, 2) * scale  # (H, W, C)
    return _warn_if_overflow(image if channels else image[:, :, 0], "isht")


# ---- rotations --------------------------------------------------------------------------------------------------


def random_rotation(rng: Any) -> np.ndarray:
    """A rotation matrix ``(3, 3)`` drawn uniformly (Haar measure) on SO(3): a normalized 4-D Gaussian is
    a uniform unit quaternion. ``rng``: a ``numpy.random.Generator`` or an integer seed ``>= 0``."""
    if isinstance(rng, np.random.Generator):
        gen = rng
    else:
        gen = np.random.default_rng(check_int(rng, "rng", 0, why=" (a seed) or a numpy.random.Generator"))
    q = np.zeros(4)
    while not np.linalg.norm(q) > 1e-12:  # a zero draw has probability 0; redraw rather than divide by it
        q = gen.standard_normal(4)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _to_angles(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Colatitude and longitude of points ``(..., 3)`` (``atan2`` forms: accurate near the poles too)."""
    x, y, z = points[..., 0], points[..., 1], points[..., 2]
    return np.arctan2(np.hypot(x, y), z), np.arctan2(y, x)


def _grid_points(height: int) -> np.ndarray:
    """The unit vectors of the pixel centres, ``(H, 2H, 3)``."""
    theta, phi = equirect_grid(height)
    st, ct = np.sin(theta)[:, None], np.cos(theta)[:, None]
    return np.stack(np.broadcast_arrays(st * np.cos(phi), st * np.sin(phi), ct), axis=-1)


def _wigner_D(lmax: int, rot: np.ndarray) -> list[np.ndarray]:
    """Unchecked :func:`wigner_D`: ``D^l_{mm'} = Σ_ij w_i Y_lm(x_ij) Y_lm'(Rᵀx_ij)`` on the smallest exact
    grid (``H = 2·lmax + 1``), rows of the grid in chunks so memory stays ~100 MB at ``lmax = 128``."""
    height = 2 * lmax + 1
    lam, trig, weights = _grid_factors(lmax, height)
    theta_r, phi_r = _to_angles(_grid_points(height) @ rot)  # (H, W): the points R⁻¹x = Rᵀx
    n = (lmax + 1) ** 2
    # t[k', i, m] = Σ_j Y_k'(Rᵀx_ij) Φ_m(φ_j)
    t = np.empty((n, height, 2 * lmax + 1))
    chunk = max(1, 2_000_000 // (n * 2 * height))
    for start in range(0, height, chunk):
        rows = slice(start, start + chunk)
        t[:, rows] = _sph_harm(lmax, theta_r[rows], phi_r[rows]) @ trig.T
    lam_w = lam * weights  # (n, H)
    blocks = []
    for l in range(lmax + 1):  # noqa: E741
        k = slice(l * l, (l + 1) * (l + 1))
        orders = np.arange(-l, l + 1) + lmax
        # D[m, m'] = Σ_i Λ_lm(θ_i) w_i t[(l, m'), i, m]
        blocks.append(np.einsum("ai,bia->ab", lam_w[k], t[k][:, :, orders]))
    return blocks


def wigner_D(lmax: int, R: Any) -> list[np.ndarray]:
    """The real Wigner-D matrices ``[D^0(R), ..., D^lmax(R)]``, ``D^l`` of shape ``(2l+1, 2l+1)``, in this
    module's real basis: the coefficients of the rotated field ``f(R⁻¹x)`` are ``D^l(R) a_l``.

    Computed by exact quadrature, ``D^l_{mm'} = ∫ Y_lm(x) Y_lm'(R⁻¹x) dΩ`` on a ``(2lmax+1)``-row grid;
    orthogonal and a homomorphism (``D(R1 R2) = D(R1) D(R2)``) to rounding. ``R`` must be orthogonal within
    ``ROTATION_TOL`` with determinant +1 (it is projected onto the nearest rotation first).
    """
    lmax = check_int(lmax, "lmax", 0, MAX_LMAX)
    return _wigner_D(lmax, _check_rotation(R))


def rotate_coefficients(coeffs: Any, R: Any) -> np.ndarray:
    """The coefficients of the rotated field ``f(R⁻¹x)``: ``D^l(R) a_l`` per degree (same shape)."""
    a, lmax, channels = _as_coeffs(coeffs)
    rot = _check_rotation(R)
    scale = _scale_of(a)
    out = np.empty_like(a)
    for l, d in enumerate(_wigner_D(lmax, rot)):  # noqa: E741
        k = slice(l * l, (l + 1) * (l + 1))
        out[k] = d @ (a[k] / scale)
    with np.errstate(over="ignore"):
        out *= scale
    return _warn_if_overflow(out if channels else out[:, 0], "rotate_coefficients")


def rotate_image(image: Any, R: Any) -> np.ndarray:
    """The ERP image of the rotated field, ``out(x) = image(R⁻¹x)`` at every pixel centre, by bilinear
    interpolation between pixel centres, circular in longitude and continuous across the poles (the
    sampler in the module docstring). Same shape as ``image``."""
    img, channels = _as_image(image)
    rot = _check_rotation(R)
    height, width = img.shape[:2]
    theta_r, phi_r = _to_angles(_grid_points(height) @ rot)  # (H, W): where each output pixel samples
    u = theta_r * (height / np.pi) - 0.5  # fractional row, in [-½, H - ½]
    v = phi_r * (width / (2 * np.pi)) - 0.5  # fractional column, any real (wrapped below)
    i0 = np.clip(np.floor(u), -1, height - 1).astype(np.int64)
    fu = (u - i0)[..., None]
    j_floor = np.floor(v)
    fv = (v - j_floor)[..., None]
    j0 = j_floor.astype(np.int64) % width
    j1 = (j0 + 1) % width
    # rows -1 and H: the first and last rows seen across the pole (a half turn, H columns, away)
    padded = np.concatenate([np.roll(img[:1], height, axis=1), img, np.roll(img[-1:], height, axis=1)])
    top, bottom = i0 + 1, i0 + 2  # row indices into padded
    out = (1 - fu) * ((1 - fv) * padded[top, j0] + fv * padded[top, j1]) + fu * (
        (1 - fv) * padded[bottom, j0] + fv * padded[bottom, j1]
    )
    return _warn_if_overflow(out if channels else out[:, :, 0], "rotate_image")


# ---- invariants -------------------------------------------------------------------------------------------------


def power_spectrum(coeffs: Any, cross: bool = False) -> np.ndarray:
    """The power spectrum ``P_l = Σ_m a_lm²`` per degree: ``(lmax+1,)`` or, with channels, ``(lmax+1, C)``.

    ``cross=True`` (channels only) gives every channel pair, ``P_l[c, c'] = Σ_m a_lm,c a_lm,c'``, shape
    ``(lmax+1, C, C)`` (its diagonal is the plain spectrum); rotation-invariant as well, since ``D^l`` is
    orthogonal. Even in the field (``f → -f`` keeps it).
    """
    a, lmax, channels = _as_coeffs(coeffs)
    cross = _check_bool(cross, "cross")
    if cross and not channels:
        raise ValueError("cross=True needs coefficients with a channel axis ((lmax+1)², C)")
    ls, _ = _orders(lmax)
    scale = _scale_of(a)
    x = a / scale
    with np.errstate(over="ignore"):
        if cross:
            out = np.zeros((lmax + 1, a.shape[1], a.shape[1]))
            np.add.at(out, ls, x[:, :, None] * x[:, None, :])
        else:
            out = np.zeros((lmax + 1, a.shape[1]))
            np.add.at(out, ls, x * x)
        out *= scale * scale
    return _warn_if_overflow(out if channels else out[:, 0], "power_spectrum")


def _triangle_even(l1: int, l2: int, l3: int) -> bool:
    return abs(l1 - l2) <= l3 <= l1 + l2 and (l1 + l2 + l3) % 2 == 0


@functools.lru_cache(maxsize=256)
def _coupling(l1: int, l2: int, l3: int) -> np.ndarray:
    """The normalized real Gaunt tensor (checked arguments): ``∫ Y Y Y`` by separable exact quadrature."""
    top = max(l1, l2, l3)
    height = l1 + l2 + l3 + 1  # the integrand has degree l1 + l2 + l3 < H: exact
    lam, trig, weights = _grid_factors(top, height)
    blocks = []
    for l in (l1, l2, l3):  # noqa: E741
        orders = np.arange(-l, l + 1)
        blocks.append((lam[l * l : (l + 1) * (l + 1)], trig[orders + top]))
    (lam1, trig1), (lam2, trig2), (lam3, trig3) = blocks
    # Y_lm(θ, φ) = Λ_lm(θ) Φ_m(φ): the grid sum of a product of three factorizes into a θ sum times a φ sum
    theta_part = np.einsum("ai,bi,ci->abc", lam1 * weights, lam2, lam3, optimize=True)
    phi_part = np.einsum("aj,bj,cj->abc", trig1, trig2, trig3, optimize=True)
    gaunt = theta_part * phi_part
    tensor = gaunt / np.linalg.norm(gaunt)
    tensor.flags.writeable = False
    return tensor


def coupling_tensor(l1: int, l2: int, l3: int) -> np.ndarray:
    """The real rotation-invariant coupling tensor ``C^{l1 l2 l3}`` ``(2l1+1, 2l2+1, 2l3+1)``, Frobenius
    norm 1: the real Gaunt integral ``∫ Y_l1m1 Y_l2m2 Y_l3m3 dΩ`` normalized (a positive multiple of it,
    which fixes the sign). Exists for ``|l1 - l2| ≤ l3 ≤ l1 + l2`` with ``l1 + l2 + l3`` even; other
    triples raise ``ValueError``. Cached; the array returned is read-only (copy it to modify)."""
    degrees = tuple(check_int(v, name, 0, MAX_LMAX) for v, name in ((l1, "l1"), (l2, "l2"), (l3, "l3")))
    if not _triangle_even(*degrees):
        raise ValueError(
            "(l1, l2, l3) must satisfy the triangle condition |l1 - l2| <= l3 <= l1 + l2 with l1 + l2 + l3 "
            f"even (no parity-even invariant tensor exists otherwise), got {degrees}"
        )
    return _coupling(*degrees)


def _int_triples(value: Any, name: str, what: str) -> list[tuple[int, int, int]]:
    """A non-empty sequence of integer triples (``what`` names their entries in the message)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of {what} triples, got {value!r}")
    try:
        items = [tuple(t) for t in value]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {what} triples, got {value!r}") from None
    if not items or any(
        len(t) != 3 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in t)
        for t in items
    ):
        raise ValueError(f"{name} must be a non-empty sequence of integer triples {what}, got {value!r}")
    return [(int(a), int(b), int(c)) for a, b, c in items]


def _check_triples(triples: Any, lmax: int) -> list[tuple[int, int, int]]:
    out = _int_triples(triples, "triples", "(l1, l2, l3)")
    for t in out:
        if min(t) < 0 or max(t) > lmax:
            raise ValueError(f"triples must hold degrees in [0, {lmax}] (the lmax of coeffs), got {t}")
        if not _triangle_even(*t):
            raise ValueError(
                f"triples must satisfy |l1 - l2| <= l3 <= l1 + l2 with l1 + l2 + l3 even, got {t}"
            )
    return out


def _check_channels(channels: Any, n_channels: int) -> list[tuple[int, int, int]]:
    if channels is None:
        return list(itertools.combinations_with_replacement(range(n_channels), 3))
    out = _int_triples(channels, "channels", "(c1, c2, c3)")
    for c in out:
        if min(c) < 0 or max(c) >= n_channels:
            raise ValueError(
                f"channels must hold channel indices in [0, {n_channels - 1}] (the channels of coeffs), got {c}"
            )
    return out


def _blocks(a: np.ndarray, triple: tuple[int, int, int]) -> list[np.ndarray]:
    return [a[l * l : (l + 1) * (l + 1)] for l in triple]  # noqa: E741


def _invariant_inputs(coeffs: Any, triples: Any, channels: Any):
    """The checked arguments of :func:`bispectrum` and its gradient: the coefficients ``(n, C)`` divided by
    their scale, that scale, the degree and channel triples, and whether ``coeffs`` had a channel axis."""
    a, lmax, channels_axis = _as_coeffs(coeffs)
    degree_triples = _check_triples(triples, lmax)
    channel_triples = _check_channels(channels, a.shape[1])
    scale = _scale_of(a)
    return a / scale, scale, degree_triples, channel_triples, channels_axis


def bispectrum(coeffs: Any, triples: Any, channels: Any = None) -> np.ndarray:
    """The bispectrum ``b = Σ C^{l1l2l3}_{m1m2m3} a_{l1m1,c1} a_{l2m2,c2} a_{l3m3,c3}`` for each degree triple
    in ``triples`` and channel triple in ``channels``; shape ``(len(triples) · len(channels),)``, ordered
    triple-major (``index = t · len(channels) + k``).

    ``coeffs``: ``((lmax+1)²,)`` (one channel: ``channels`` defaults to ``[(0, 0, 0)]``) or ``((lmax+1)², C)``
    (default: every ``c1 <= c2 <= c3``, ``itertools.combinations_with_replacement``; pass the ordered
    triples you want otherwise, e.g. ``itertools.product(range(C), repeat=3)``: with distinct degrees,
    ``(0, 1, 0)`` and ``(1, 0, 0)`` are different invariants). Each triple needs the triangle condition
    and an even sum (:func:`coupling_tensor`). Rotation-invariant and odd in the field.
    """
    x, scale, degree_triples, channel_triples, _ = _invariant_inputs(coeffs, triples, channels)
    c1, c2, c3 = (np.array(c) for c in zip(*channel_triples, strict=True))
    out = np.empty((len(degree_triples), len(channel_triples)))
    for t, triple in enumerate(degree_triples):
        f, g, h = _blocks(x, triple)
        full = np.einsum("abc,ax,by,cz->xyz", _coupling(*triple), f, g, h, optimize=True)  # (C, C, C)
        out[t] = full[c1, c2, c3]
    with np.errstate(over="ignore"):
        out *= scale * scale * scale
    return _warn_if_overflow(out.reshape(-1), "bispectrum")


def bispectrum_gradient(coeffs: Any, triples: Any, channels: Any = None) -> np.ndarray:
    """The gradient of each :func:`bispectrum` entry with respect to ``coeffs``: shape
    ``(n_invariants, *coeffs.shape)``, same order and arguments as :func:`bispectrum`. Each invariant is a
    homogeneous cubic, so ``Σ coeffs · gradient = 3 · bispectrum`` (Euler)."""
    x, scale, degree_triples, channel_triples, channels_axis = _invariant_inputs(coeffs, triples, channels)
    c1, c2, c3 = (np.array(c) for c in zip(*channel_triples, strict=True))
    n_combos = len(channel_triples)
    grad = np.zeros((len(degree_triples), n_combos, *x.shape))
    combos = np.arange(n_combos)
    for t, (l1, l2, l3) in enumerate(degree_triples):
        f, g, h = _blocks(x, (l1, l2, l3))
        cg = _coupling(l1, l2, l3)
        # ∂b/∂f[a, c1] = Σ C[a,b,c] g[b, c2] h[c, c3], and likewise for g and h
        d1 = np.einsum("abc,bk,ck->ka", cg, g[:, c2], h[:, c3])  # (n_combos, 2l1+1)
        d2 = np.einsum("abc,ak,ck->kb", cg, f[:, c1], h[:, c3])
        d3 = np.einsum("abc,ak,bk->kc", cg, f[:, c1], g[:, c2])
        for l, d, c in ((l1, d1, c1), (l2, d2, c2), (l3, d3, c3)):  # noqa: E741
            grad[t, combos, l * l : (l + 1) * (l + 1), c] += d
    with np.errstate(over="ignore"):
        grad *= scale * scale
    grad = grad.reshape(-1, *x.shape)
    return _warn_if_overflow(grad if channels_axis else grad[..., 0], "bispectrum_gradient")
