"""Register the ``icml-proteus`` transformers quantizer (:mod:`.hf_quantizer`) when ``import icml_compress``
runs, without importing transformers then.

Importing transformers' quantizer registry costs seconds, and icml-compress installs without transformers.
:func:`register_on_import` therefore registers at once when the registry (``transformers.quantizers.auto``)
is already imported, and otherwise adds a finder to ``sys.meta_path`` that registers right after
transformers imports it (``from_pretrained`` does, through ``transformers.modeling_utils``). Without
transformers installed the finder never fires: nothing happens.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

REGISTRY = "transformers.quantizers.auto"


def register_hf_quantizer() -> None:
    """Register the ``icml-proteus`` quantizer and quantization config with transformers now (idempotent), so
    that ``AutoModelForCausalLM.from_pretrained`` loads a :func:`~icml_compress.quantize.save_quantized`
    directory. ``import icml_compress`` arranges this already; raises ImportError without transformers."""
    try:
        from icml_compress.quantize.hf_quantizer import register
    except ImportError as exc:
        if importlib.util.find_spec("transformers") is not None:
            raise  # transformers is there: the failure is ours or its, not a missing extra
        raise ImportError(
            "loading with from_pretrained needs transformers: pip install 'icml-compress[hf]'"
        ) from exc
    register()


class _Loader(importlib.abc.Loader):
    """Runs the registry module's own loader, then registers."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        try:
            register_hf_quantizer()
        except Exception as exc:
            warnings.warn(
                f"icml-compress could not register its transformers quantizer ({type(exc).__name__}: {exc}); "
                "from_pretrained will not load icml-proteus checkpoints (load_quantized still does)",
                RuntimeWarning,
                stacklevel=2,
            )


class RegisterOnImport(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that answers only for transformers' quantizer registry: it finds the module
    with the other finders and wraps its loader so that :func:`register_hf_quantizer` runs once the module
    has executed. It removes itself on first use."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:  # the finders that would have found it
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def register_on_import() -> None:
    """Register now if transformers' quantizer registry is imported, else once it is (see the module
    docstring); a second call adds no second finder."""
    if REGISTRY in sys.modules:
        register_hf_quantizer()
    elif not any(type(f).__name__ == RegisterOnImport.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, RegisterOnImport())
