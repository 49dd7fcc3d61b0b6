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

The watermark and its baselines:

- :func:`embed` / :func:`extract`: bits carried by the signs of key-selected bispectral invariants
  (:mod:`icml_generative.watermark.bispectral`): blind, and any rotation of the panorama decodes the same.
- :func:`embed_power_spectrum` / :func:`extract_power_spectrum`: the second-order baseline (cannot carry
  signs); :func:`dct_embed` / :func:`dct_extract`: the planar block-DCT baseline (not rotation-invariant).
- :func:`gaussian_noise`, :func:`jpeg_like`: the attacks of the reproduction; :func:`psnr`.
"""

from icml_generative.watermark._common import psnr
from icml_generative.watermark.attacks import gaussian_noise, jpeg_like
from icml_generative.watermark.bispectral import (
    DEFAULT_DEGREES,
    embed,
    embed_power_spectrum,
    extract,
    extract_power_spectrum,
    invariant_catalogue,
    key_invariants,
)
from icml_generative.watermark.planar import dct_embed, dct_extract
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
    "DEFAULT_DEGREES",
    "MAX_HEIGHT",
    "MAX_LMAX",
    "bispectrum",
    "bispectrum_gradient",
    "coupling_tensor",
    "dct_embed",
    "dct_extract",
    "embed",
    "embed_power_spectrum",
    "equirect_grid",
    "extract",
    "extract_power_spectrum",
    "gaussian_noise",
    "invariant_catalogue",
    "isht",
    "jpeg_like",
    "key_invariants",
    "power_spectrum",
    "psnr",
    "quadrature_weights",
    "random_rotation",
    "real_sph_harm",
    "rotate_coefficients",
    "rotate_image",
    "sht",
    "wigner_D",
]
