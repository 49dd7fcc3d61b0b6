"""The bitshift trellis and Viterbi quantization (the encoder of QTIP and Proteus).

:class:`BitshiftTrellis` extends the kernels' packed format :class:`icml_kernels.trellis.TrellisFormat`
(the parameters ``L``, ``K``, ``V``, ``T`` and their ranges, tail-biting paths, ``pack``/``unpack``) with the
state transitions and the free-start and tail-biting bitstreams; :func:`viterbi` finds optimal
paths for a batch of sequences; :func:`quantize_tiles` quantizes tiles with tail-biting;
:func:`parallel_viterbi` hands the caller's cores to the Viterbi's worker processes.
"""

from icml_compress.trellis.bitshift import BitshiftTrellis
from icml_compress.trellis.viterbi import default_chunk, parallel_viterbi, quantize_tiles, viterbi

__all__ = ["BitshiftTrellis", "default_chunk", "parallel_viterbi", "quantize_tiles", "viterbi"]
