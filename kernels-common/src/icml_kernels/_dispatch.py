"""Choosing an implementation of an op: the Triton kernel or the pure-torch reference.

The contract (modelled on Liger-Kernel's backend registry):

- ``ICML_KERNELS_IMPL`` unset or ``auto``: Triton for CUDA tensors when Triton imports, the reference
  otherwise (a CPU tensor, no Triton, an unsupported dtype). Falling back is silent: it is the normal path
  on a laptop.
- ``ICML_KERNELS_IMPL=torch``: always the reference.
- ``ICML_KERNELS_IMPL=triton``: always the kernel. A request that cannot be met raises
  :class:`KernelUnavailableError` instead of quietly running something else. CPU tensors are accepted
  only under the Triton interpreter (``TRITON_INTERPRET=1``), which is how kernels are tested on CPU.
"""

from __future__ import annotations

import functools
import os

import torch

ENV_VAR = "ICML_KERNELS_IMPL"
IMPLS = ("torch", "triton")


class KernelUnavailableError(RuntimeError):
    """An implementation was requested explicitly and cannot run here."""


def requested_impl() -> str | None:
    """The implementation named by ``ICML_KERNELS_IMPL``, or None for automatic choice."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in IMPLS:
        raise ValueError(f"{ENV_VAR} must be one of 'torch', 'triton' or 'auto', got {value!r}")
    return value


def triton_interpret() -> bool:
    """True when Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def triton_import_error() -> str | None:
    """None when Triton imports, else the reason it does not."""
    try:
        import triton
        import triton.language  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        return f"{type(exc).__name__}: {exc}"
    return None


def select_impl(op: str, device: torch.device, *, kernel_reason: str | None = None) -> str:
    """Return ``"triton"`` or ``"torch"`` for running ``op`` on ``device``.

    ``kernel_reason`` is the op's own reason the kernel cannot take this input (for example an
    unsupported dtype), or None when it can.
    """
    if not isinstance(op, str) or not op:
        raise TypeError(f"op must be a non-empty str (the op's name), got {op!r}")
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device, got {type(device).__name__}")
    if kernel_reason is not None and not isinstance(kernel_reason, str):
        raise TypeError(f"kernel_reason must be a str or None, got {type(kernel_reason).__name__}")
    wanted = requested_impl()
    if wanted == "torch":
        return "torch"
    reason = kernel_reason or triton_import_error()
    if reason is None and device.type != "cuda" and not triton_interpret():
        reason = f"the tensor is on {device.type!r}; Triton kernels need CUDA (or TRITON_INTERPRET=1)"
    if reason is None:
        return "triton"
    if wanted == "triton":
        raise KernelUnavailableError(f"{ENV_VAR}=triton was requested for {op}, but {reason}")
    return "torch"
