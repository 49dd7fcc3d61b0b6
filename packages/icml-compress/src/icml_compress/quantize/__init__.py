"""Proteus, part 2: 2-bit quantization of Hugging Face causal LMs.

:func:`quantize_model` swaps the Linear layers for :class:`ProteusLinear` (trellis codes: Proteus'
``mulbal`` with per-layer pool choice, QTIP's ``1mad``/``3inst``/``hyb``) or :class:`RTNLinear`, after
calibration (:mod:`.calibration`; :func:`model_hessians` once for several configs), incoherence
processing (:mod:`.incoherence`) and block LDLQ (:mod:`.ldlq`); optional channel compensation
(:mod:`.compensate`) and few-shot distillation (:mod:`.distill`). :func:`save_quantized`/:func:`load_quantized` round-trip exactly (a missing, truncated
or inconsistent save raises :class:`CorruptQuantizedModelError`); :func:`evaluate` measures KL to the float
model and perplexity; :func:`bytes_per_token` the bytes a token reads; :func:`plot_layer_errors` the
per-layer proxy error. A saved directory also loads with transformers' ``from_pretrained``: importing this
package registers the ``icml-proteus`` quantizer (:mod:`.hf_quantizer`, :mod:`.hf_registry`) with
transformers when transformers is installed, without importing it.
"""

from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.distill import packed_hash
from icml_compress.quantize.evaluate import evaluate, split_corpus
from icml_compress.quantize.hf_registry import register_hf_quantizer, register_on_import
from icml_compress.quantize.linear import ProteusLinear, RTNLinear
from icml_compress.quantize.model import (
    CorruptQuantizedModelError,
    apply_compensation,
    bytes_per_token,
    load_quantized,
    model_hessians,
    quantize_model,
    save_quantized,
)
from icml_compress.quantize.plot import plot_layer_errors

__all__ = [
    "CorruptQuantizedModelError",
    "ProteusLinear",
    "QuantConfig",
    "RTNLinear",
    "apply_compensation",
    "bytes_per_token",
    "evaluate",
    "load_quantized",
    "model_hessians",
    "packed_hash",
    "plot_layer_errors",
    "quantize_model",
    "register_hf_quantizer",
    "save_quantized",
    "split_corpus",
]

register_on_import()
