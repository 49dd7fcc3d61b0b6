"""Decoding packed bitshift-trellis tiles (QTIP / Proteus): alone and fused into a batch-1 product.

The packed format (``L``, ``K``, ``V``, ``T``, the code names, the words of a tile and their bit order) is
described once, by :class:`TrellisFormat` (:mod:`icml_kernels.trellis.format`), beside the kernels that
read it; ``icml_compress.trellis.BitshiftTrellis`` extends it for the quantizer.
"""

from icml_kernels.trellis.format import (
    CODE_V,
    CODES,
    COMPUTED_CODES,
    TABLE_CODES,
    TrellisFormat,
    check_code,
    check_code_params,
    hyb_table_bits,
    table_shape_of,
    unpack_states,
)
from icml_kernels.trellis.op import trellis_decode, trellis_decode_op, trellis_gemv, trellis_gemv_op
from icml_kernels.trellis.reference import code_values, decode_reference, gemv_reference

__all__ = [
    "CODES",
    "CODE_V",
    "COMPUTED_CODES",
    "TABLE_CODES",
    "TrellisFormat",
    "check_code",
    "check_code_params",
    "code_values",
    "decode_reference",
    "gemv_reference",
    "hyb_table_bits",
    "table_shape_of",
    "trellis_decode",
    "trellis_decode_op",
    "trellis_gemv",
    "trellis_gemv_op",
    "unpack_states",
]
