"""Rotation-invariant watermarking of 360° panoramas: the spherical-harmonics layer.

- :func:`equirect_grid`, :func:`quadrature_weights`, :func:`real_sph_harm`: the equirectangular pixel-centre
  grid, its exact Fejér quadrature and the real orthonormal spherical harmonics (no Condon–Shortley phase).
- :func:`sht` / :func:`isht`: ERP image ↔ coefficients ``a[l² + l + m]``, exact for band-limited fields
  when ``H > 2·lmax``.
- :func:`random_rotation`, :func:`wigner_D`, :func:`rotate_coefficients`, :func:`rotate_image`: uniform
  rotations, real Wigner-D matrices (``f(R⁻¹x) ↦ D(R) a``) and the pixel-domain spherical sampler.
- :func:`power_spectrum`, :func:`coupling_tensor`, :func:`bispectrum`, :func:`bispectrum_gradient`: the
  second- and third-order rotation invariants (the bispectrum carries the sign of the field).

All in numpy float64; the conventions are documented in :mod:`icml_generative.watermark.sphere`.
"""

from icml_generative.watermark.sphere import (
    MAX_HEIGHT,
    MAX_LMAX,
    bispectrum,
    bispectrum_gradient,
    coupling_tensor,
    equirect_grid,
    isht,
    power_spectrum,
    quadrature_weights,
    random_rotation,
    real_sph_harm,
    rotate_coefficients,
    rotate_image,
    sht,
    wigner_D,
)

__all__ = [
    "MAX_HEIGHT",
    "MAX_LMAX",
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
