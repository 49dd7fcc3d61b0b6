"""Load a :func:`~icml_compress.quantize.save_quantized` directory with transformers' ``from_pretrained``.

The save's ``config.json`` carries a ``quantization_config`` with ``quant_method = "icml-proteus"`` (written
by :func:`~icml_compress.quantize.model.hf_config`). :class:`ProteusQuantizationConfig` and
:class:`ProteusHfQuantizer` are registered under that name in transformers' own registry
(``transformers.quantizers.auto``) by :func:`register`, which ``import icml_compress`` arranges through
:mod:`.hf_registry`. Before the weights are loaded the quantizer replaces each ``nn.Linear`` named in the
config's ``layers`` by an empty :class:`ProteusLinear`/:class:`RTNLinear`, so the stored names (``packed``,
``su``, ``sv``, ``codes``, ``scale`` ...) are the model's own, and checks the checkpoint's header against
the model exactly as :func:`~icml_compress.quantize.load_quantized` checks the file: the result is the model
``load_quantized`` builds, bit for bit.

This module needs transformers (the ``hf`` extra); nothing else in icml-compress imports it eagerly.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers.quantizers.auto import (
    AUTO_QUANTIZATION_CONFIG_MAPPING,
    AUTO_QUANTIZER_MAPPING,
    register_quantization_config,
    register_quantizer,
)
from transformers.quantizers.base import HfQuantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from icml_compress.quantize.model import (
    FORMAT,
    HF_CONFIG_FILE,
    HF_QUANT_METHOD,
    QUANTIZED,
    SAFETENSORS_DTYPES,
    CorruptQuantizedModelError,
    check_dtype_name,
    check_layers,
    check_stored_tensors,
    replace_linears,
)

WHERE = f"{HF_CONFIG_FILE} quantization_config"
KEYS = ("quant_method", "format", "version", "dtype", "layers", "quantization")


class ProteusQuantizationConfig(QuantizationConfigMixin):
    """The ``quantization_config`` of a saved icml-compress model (``quant_method = "icml-proteus"``).

    Args:
        layers: ``{module name: metadata}`` of every quantized layer (``ProteusLinear.meta()`` /
            ``RTNLinear.meta()``), as in ``quantization.json``.
        dtype: the dtype the model was saved in (``float32``, ``float16`` or ``bfloat16``).
        quantization: the quantization record (``model.icml_quantization``: config, per-layer statistics).
        format, version: ``icml-compress-quantized``, 1.

    Raises :class:`~icml_compress.quantize.CorruptQuantizedModelError` (a ``ValueError``) naming
    ``config.json quantization_config`` and the field for anything else.
    """

    def __init__(
        self,
        layers: dict | None = None,
        dtype: str | None = None,
        quantization: dict | None = None,
        format: str = FORMAT,
        version: int = 1,
        quant_method: str = HF_QUANT_METHOD,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise CorruptQuantizedModelError(f"{WHERE} has unknown fields {sorted(unknown)}; expected {KEYS}")
        if quant_method != HF_QUANT_METHOD:
            raise CorruptQuantizedModelError(
                f"{WHERE}: quant_method must be {HF_QUANT_METHOD!r}, got {quant_method!r}"
            )
        for key, value in (("layers", layers), ("dtype", dtype)):
            if value is None:
                raise CorruptQuantizedModelError(f"{WHERE} lacks {key!r}")
        if format != FORMAT or version != 1:
            raise CorruptQuantizedModelError(
                f"{WHERE}: format must be {FORMAT!r} version 1, got {format!r} version {version!r}"
            )
        if not isinstance(layers, dict) or not layers:
            raise CorruptQuantizedModelError(
                f"{WHERE}: layers must be a non-empty JSON object (module name -> metadata), got {layers!r:.80}"
            )
        if not isinstance(dtype, str):
            raise CorruptQuantizedModelError(f"{WHERE}: dtype must be a string, got {type(dtype).__name__}")
        check_dtype_name(dtype, WHERE)
        check_layers(layers, WHERE)
        if quantization is not None and not isinstance(quantization, dict):
            raise CorruptQuantizedModelError(
                f"{WHERE}: quantization must be a JSON object or null, got {type(quantization).__name__}"
            )
        self.quant_method = quant_method
        self.format, self.version, self.dtype = format, version, dtype
        self.layers, self.quantization = layers, quantization

    def to_dict(self) -> dict[str, Any]:
        return {key: copy.deepcopy(getattr(self, key)) for key in KEYS}


class ProteusHfQuantizer(HfQuantizer):
    """Loads a pre-quantized icml-compress model in ``from_pretrained`` (it does not quantize: use
    :func:`~icml_compress.quantize.quantize_model`).

    ``dtype``: ``"auto"`` (the default) or the dtype the model was saved in; any other is refused with a
    ``ValueError``: the float layers (embeddings, norms, ``lm_head``) are part of the saved model and the
    logits must equal ``load_quantized``'s (quantize the model in the dtype it should run in instead).
    """

    requires_calibration = True  # only pre-quantized checkpoints
    quantization_config: ProteusQuantizationConfig

    def update_dtype(self, dtype: torch.dtype) -> torch.dtype:
        saved = check_dtype_name(self.quantization_config.dtype, WHERE)
        if dtype is not None and dtype != saved:
            raise ValueError(
                f"dtype={dtype} differs from the dtype this quantized model was saved in ({saved}); load it "
                f"with dtype='auto' (the default) or dtype={saved} (quantize the float model in the dtype it "
                f"should run in)"
            )
        return saved

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
        replace_linears(model, self.quantization_config.layers, WHERE)
        if checkpoint_files:
            check_checkpoint(model, checkpoint_files)
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        # the loader wraps every stored float tensor in a Parameter that requires grad; the quantized
        # modules' side vectors are frozen (a ProteusLinear takes its distillation path while they are not)
        for mod in model.modules():
            if isinstance(mod, QUANTIZED):
                for p in mod.parameters(recurse=False):
                    p.requires_grad_(False)
        model.icml_quantization = copy.deepcopy(self.quantization_config.quantization or {})
        return model

    def is_serializable(self) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return False


def check_checkpoint(model: nn.Module, files: list[str]) -> None:
    """The safetensors ``files`` (one, or the shards of one checkpoint; headers only, no tensor read) hold
    exactly the tensors of ``model`` (its quantized layers already in place): :func:`check_stored_tensors`,
    with the model's tied weights (``all_tied_weights_keys``, or one shared Parameter) stored once."""
    stored: dict[str, tuple[tuple[int, ...], Any]] = {}
    for file in files:
        if not str(file).endswith(".safetensors"):
            raise CorruptQuantizedModelError(f"{file}: an icml-proteus model is stored as safetensors")
        try:
            with safe_open(str(file), framework="pt") as fh:
                for name in fh.keys():
                    s = fh.get_slice(name)
                    dtype = SAFETENSORS_DTYPES.get(s.get_dtype(), s.get_dtype())
                    stored[name] = (tuple(s.get_shape()), dtype)
        except (SafetensorError, OSError) as exc:
            raise CorruptQuantizedModelError(
                f"{file} is not a readable safetensors file (truncated or corrupted?): {exc}"
            ) from exc
    state = model.state_dict(keep_vars=True)
    expected = {n: (tuple(t.shape), t.dtype) for n, t in state.items()}
    shared: dict[str, Any] = {n: id(t) for n, t in state.items()}  # a tied Parameter is one object
    for target, source in getattr(model, "all_tied_weights_keys", {}).items():
        if target in shared and source in shared:
            shared[target] = shared[source]
    where = files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more shards)"
    check_stored_tensors(expected, stored, shared, where, WHERE)


def register() -> None:
    """Register :class:`ProteusQuantizationConfig` and :class:`ProteusHfQuantizer` under ``icml-proteus`` in
    transformers' registry. Registering again (a second import, a reloaded module) replaces the entry."""
    for mapping, decorator, cls in (
        (AUTO_QUANTIZATION_CONFIG_MAPPING, register_quantization_config, ProteusQuantizationConfig),
        (AUTO_QUANTIZER_MAPPING, register_quantizer, ProteusHfQuantizer),
    ):
        mapping.pop(HF_QUANT_METHOD, None)  # register_* refuse a name already taken
        decorator(HF_QUANT_METHOD)(cls)
