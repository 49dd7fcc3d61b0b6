"""Baseline quantizers: round-to-nearest (RTN) and Lloyd–Max scalar quantization.

The references the coming compression systems (Proteus' 2-bit trellis-coded quantization first) are
measured against.
"""

from icml_compress.baselines.lloyd import GAUSSIAN_LLOYD_MAX_MSE, LloydMaxResult, lloyd_max
from icml_compress.baselines.rtn import RTNQuantized, rtn_quantize

__all__ = ["GAUSSIAN_LLOYD_MAX_MSE", "LloydMaxResult", "RTNQuantized", "lloyd_max", "rtn_quantize"]
