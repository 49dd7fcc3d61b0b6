"""The bitshift trellis and Viterbi quantization (the encoder of QTIP and Proteus).

:class:`BitshiftTrellis` holds the parameters (``L``, ``K``, ``V``, ``T``), the state transitions, the
free-start and tail-biting bitstreams and the packing into 32-bit words; :func:`viterbi` finds optimal
paths for a batch of sequences; :func:`quantize_tiles` quantizes tiles with tail-biting.
"""

from icml_compress.trellis.bitshift import BitshiftTrellis
from icml_compress.trellis.viterbi import default_chunk, quantize_tiles, viterbi

__all__ = ["BitshiftTrellis", "default_chunk", "quantize_tiles", "viterbi"]
