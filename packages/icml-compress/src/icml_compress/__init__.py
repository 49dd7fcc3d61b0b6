"""icml-compress: model compression from ICML 2026: 2-bit trellis quantization (Proteus), expert pruning, parameter sharing, merging."""

from importlib.metadata import version as _version

from icml_compress import baselines, cgc, proteus, quantize, ragep, trellis
from icml_compress.baselines import *  # noqa: F403  (each subpackage's public API, listed in its __all__)
from icml_compress.cgc import *  # noqa: F403
from icml_compress.proteus import *  # noqa: F403
from icml_compress.quantize import *  # noqa: F403
from icml_compress.ragep import *  # noqa: F403
from icml_compress.trellis import *  # noqa: F403

__version__ = _version("icml-compress")
__all__ = [
    *baselines.__all__,
    *cgc.__all__,
    *proteus.__all__,
    *quantize.__all__,
    *ragep.__all__,
    *trellis.__all__,
]
