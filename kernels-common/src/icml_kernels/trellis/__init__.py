"""Decoding packed bitshift-trellis tiles (QTIP / Proteus): alone and fused into a batch-1 product."""

from icml_kernels.trellis.op import trellis_decode, trellis_decode_op, trellis_gemv, trellis_gemv_op
from icml_kernels.trellis.reference import (
    CODES,
    COMPUTED_CODES,
    code_values,
    decode_reference,
    gemv_reference,
    hyb_table_bits,
    unpack_states,
)

__all__ = [
    "CODES",
    "COMPUTED_CODES",
    "code_values",
    "decode_reference",
    "gemv_reference",
    "hyb_table_bits",
    "trellis_decode",
    "trellis_decode_op",
    "trellis_gemv",
    "trellis_gemv_op",
    "unpack_states",
]
