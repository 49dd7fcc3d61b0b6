"""Proteus, part 1: lookup-free codes for 2-bit trellis-coded quantization and their Gaussian benchmark.

The codes of the bitshift trellis (:mod:`icml_compress.trellis`): the ``lut`` baseline, QTIP's ``1mad``,
``3inst`` and ``hyb``, and Proteus' ``mulbal`` generator (integer multiply, mask, balanced sum of bit
fields, then a per-layer affine Gaussianizer; our design, the paper text was not available) with its
vetted candidate pool. :func:`gaussian_mse` measures a code on an i.i.d. N(0, 1) source
(:func:`gaussian_tile_mse`: per tile, for paired comparisons).
"""

from icml_compress.proteus.codes import CODE_NAMES, MulBal, TrellisCode, hyb_table, make_code
from icml_compress.proteus.gaussian import (
    LLOYD_MAX_MSE,
    distortion_rate_bound,
    gaussian_mse,
    gaussian_tile_mse,
)
from icml_compress.proteus.pool import MULBAL_POOL
from icml_compress.proteus.vetting import overlap_stats, reference_stats, vet, vet_all

__all__ = [
    "CODE_NAMES",
    "LLOYD_MAX_MSE",
    "MULBAL_POOL",
    "MulBal",
    "TrellisCode",
    "distortion_rate_bound",
    "gaussian_mse",
    "gaussian_tile_mse",
    "hyb_table",
    "make_code",
    "overlap_stats",
    "reference_stats",
    "vet",
    "vet_all",
]
