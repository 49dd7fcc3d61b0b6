"""Public trellis decode ops: input checks, dispatch and ``torch.library`` registration."""

from __future__ import annotations

import math

import torch

from icml_kernels._dispatch import select_impl
from icml_kernels.trellis.reference import (
    CODES,
    COMPUTED_CODES,
    decode_reference,
    gemv_reference,
    hyb_table_bits,
)

X_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
KERNEL_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _int(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")
    return value


def check_trellis(code: str, L: int, K: int, V: int, T: int) -> None:
    """Validate a trellis shape and code name (raises ValueError/TypeError naming the argument)."""
    if code not in CODES:
        raise ValueError(f"code must be one of {CODES}, got {code!r}")
    _int(L, "L", 8, 16)
    _int(K, "K", 1, 4)
    _int(V, "V", 1, 2)
    _int(T, "T", 1, 1 << 16)
    if K * V >= L:
        raise ValueError(f"K*V must be smaller than L, got K={K}, V={V}, L={L}")
    if T % V or (K * T) % 32:
        raise ValueError(
            f"T must be a multiple of V and K*T a multiple of 32 (whole words per tile), got T={T}"
        )
    if code in COMPUTED_CODES and V != 1:
        raise ValueError(f"code {code!r} gives one value per state: V must be 1, got {V}")
    if code == "hyb" and V != 2:
        raise ValueError(f"code 'hyb' gives a 2-vector per state: V must be 2, got {V}")


def check_params(code: str, L: int, V: int, alpha, beta, mulbal, table) -> dict:
    """The code's parameters as keyword arguments of the reference and the kernels."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TypeError(f"{name} must be a finite float, got {value!r}")
    params: dict = {"alpha": float(alpha), "beta": float(beta)}
    if code == "mulbal":
        if not isinstance(mulbal, (tuple, list)) or len(mulbal) != 3:
            raise TypeError(f"mulbal must be a tuple (a, b, m) for code 'mulbal', got {mulbal!r}")
        a, b, m = mulbal
        _int(a, "mulbal a", 1, (1 << 32) - 1)
        _int(b, "mulbal b", 0, (1 << 32) - 1)
        _int(m, "mulbal m", 1, 8)
        params["mulbal"] = (a, b, m)
    elif mulbal is not None:
        raise ValueError(f"mulbal parameters apply only to code 'mulbal', not {code!r}")
    if code in ("hyb", "lut"):
        rows, cols = (1 << hyb_table_bits(L), 2) if code == "hyb" else (1 << L, V)
        if not isinstance(table, torch.Tensor) or not table.is_floating_point():
            raise TypeError(f"code {code!r} needs a floating table tensor of shape ({rows}, {cols})")
        if tuple(table.shape) != (rows, cols):
            raise ValueError(
                f"table must have shape ({rows}, {cols}) for code {code!r}, got {tuple(table.shape)}"
            )
        if not torch.isfinite(table).all():
            raise ValueError("table must be finite")
        params["table"] = table
    elif table is not None:
        raise ValueError(f"code {code!r} is computed and takes no table")
    return params


def _check_packed(packed, K: int, T: int, dims: int | None = None) -> None:
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
        raise TypeError(
            f"packed must be an int32 torch.Tensor, got {getattr(packed, 'dtype', type(packed).__name__)}"
        )
    words = K * T // 32
    if packed.dim() == 0 or packed.shape[-1] != words:
        raise ValueError(
            f"packed must hold K*T/32 = {words} words per tile in its last dimension, "
            f"got shape {tuple(packed.shape)}"
        )
    if dims is not None and packed.dim() != dims:
        raise ValueError(f"packed must have shape (m, n/T, {words}), got {tuple(packed.shape)}")


def _split(params: dict) -> tuple:
    a, b, m = params.get("mulbal", (1, 0, 8))
    return params["alpha"], params["beta"], a, b, m, params.get("table")


def _join(code: str, alpha: float, beta: float, a: int, b: int, m: int, table) -> dict:
    params: dict = {"alpha": alpha, "beta": beta}
    if code == "mulbal":
        params["mulbal"] = (a, b, m)
    if table is not None:
        params["table"] = table
    return params


@torch.library.custom_op("icml_kernels::trellis_decode", mutates_args=(), device_types=("cpu", "cuda"))
def trellis_decode_op(
    packed: torch.Tensor,
    code: str,
    L: int,
    K: int,
    V: int,
    T: int,
    alpha: float,
    beta: float,
    a: int,
    b: int,
    m: int,
    table: torch.Tensor | None,
) -> torch.Tensor:
    """``torch.ops.icml_kernels.trellis_decode``: weights ``(..., T)`` of packed tiles ``(..., K*T/32)``."""
    params = _join(code, alpha, beta, a, b, m, table)
    if select_impl("trellis_decode", packed.device) == "triton":
        from icml_kernels.trellis.triton_trellis import decode_triton

        return decode_triton(packed, code, L, K, V, T, **params)
    return decode_reference(packed, code, L, K, V, T, **params)


@trellis_decode_op.register_fake
def _decode_fake(packed, code, L, K, V, T, alpha, beta, a, b, m, table):
    return packed.new_empty((*packed.shape[:-1], T), dtype=torch.float32)


@torch.library.custom_op("icml_kernels::trellis_gemv", mutates_args=(), device_types=("cpu", "cuda"))
def trellis_gemv_op(
    x: torch.Tensor,
    packed: torch.Tensor,
    code: str,
    L: int,
    K: int,
    V: int,
    T: int,
    alpha: float,
    beta: float,
    a: int,
    b: int,
    m: int,
    table: torch.Tensor | None,
) -> torch.Tensor:
    """``torch.ops.icml_kernels.trellis_gemv``: ``x @ W_hat.T`` straight from packed row tiles."""
    params = _join(code, alpha, beta, a, b, m, table)
    reason = None if x.dtype in KERNEL_X_DTYPES else f"the kernel does not take x of dtype {x.dtype}"
    if select_impl("trellis_gemv", x.device, kernel_reason=reason) == "triton":
        from icml_kernels.trellis.triton_trellis import gemv_triton

        return gemv_triton(x, packed, code, L, K, V, T, **params)
    return gemv_reference(x, packed, code, L, K, V, T, **params).to(x.dtype)


@trellis_gemv_op.register_fake
def _gemv_fake(x, packed, code, L, K, V, T, alpha, beta, a, b, m, table):
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


def trellis_decode(
    packed: torch.Tensor,
    code: str,
    L: int,
    K: int = 2,
    V: int = 1,
    T: int = 256,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    mulbal: tuple[int, int, int] | None = None,
    table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode packed bitshift-trellis tiles to weights.

    Args:
        packed (torch.Tensor): int32 words ``(..., K*T/32)``, one tail-biting tile per row (the format of
            :mod:`icml_kernels.trellis.reference`, written by ``icml_compress.trellis.BitshiftTrellis.pack``).
        code (str): ``1mad``, ``3inst``, ``mulbal`` (computed, ``V = 1``), ``hyb`` (``V = 2``) or ``lut``.
        L, K, V, T (int): state bits (8..16), bits per weight (1..4), weights per state (1, 2), tile length.
        alpha, beta (float): the affine map applied to the raw code value.
        mulbal (tuple, Optional): ``(a, b, m)`` for ``mulbal``.
        table (torch.Tensor, Optional): ``(2^Q, 2)`` micro-table for ``hyb``, ``(2^L, V)`` for ``lut``.

    Returns:
        float32 weights ``(..., T)``; Triton kernel on CUDA, the torch reference on CPU.
    """
    check_trellis(code, L, K, V, T)
    _check_packed(packed, K, T)
    params = check_params(code, L, V, alpha, beta, mulbal, table)
    if params.get("table") is not None:
        params["table"] = params["table"].to(device=packed.device, dtype=torch.float32)
    return trellis_decode_op(packed, code, L, K, V, T, *_split(params))


def trellis_gemv(
    x: torch.Tensor,
    packed: torch.Tensor,
    code: str,
    L: int,
    K: int = 2,
    V: int = 1,
    T: int = 256,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    mulbal: tuple[int, int, int] | None = None,
    table: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ W_hat.T`` for ``x (..., n)`` and a weight ``W_hat (m, n)`` stored as packed row tiles
    ``(m, n/T, K*T/32)`` (tile ``(i, j)`` holds ``W_hat[i, j*T:(j+1)*T]``), without materializing ``W_hat``
    on CUDA (the fused kernel decodes in registers). Result ``(..., m)`` in ``x.dtype``, accumulated in
    float32. Other arguments as :func:`trellis_decode`."""
    check_trellis(code, L, K, V, T)
    _check_packed(packed, K, T, dims=3)
    params = check_params(code, L, V, alpha, beta, mulbal, table)
    if not isinstance(x, torch.Tensor) or x.dtype not in X_DTYPES:
        raise TypeError(f"x must be a floating torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    n = packed.shape[1] * T
    if x.dim() == 0 or x.shape[-1] != n:
        raise ValueError(f"x must have n = (n/T) * T = {n} in its last dimension, got shape {tuple(x.shape)}")
    if x.device != packed.device:
        raise ValueError(f"x and packed must be on one device, got {x.device} and {packed.device}")
    if params.get("table") is not None:
        params["table"] = params["table"].to(device=packed.device, dtype=torch.float32)
    return trellis_gemv_op(x, packed, code, L, K, V, T, *_split(params))
