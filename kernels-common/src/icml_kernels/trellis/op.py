"""Public trellis decode ops: input checks, dispatch and ``torch.library`` registration."""

from __future__ import annotations

from typing import Any

import torch

from icml_kernels._dispatch import select_impl
from icml_kernels.fwht.reference import check_finite_tensor, warn_if_overflowed
from icml_kernels.trellis.format import TrellisFormat, check_code
from icml_kernels.trellis.reference import decode_reference, gemv_reference
from icml_kernels.validation import check_finite_float, check_tensor

X_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
KERNEL_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
NO_MULBAL = (1, 0, 8)  # the ops' (a, b, m) for the codes that take none


def check_trellis(code: str, L: int, K: int, V: int, T: int) -> TrellisFormat:
    """Validate a packable trellis and a code name for it (raises ValueError/TypeError naming the argument)."""
    fmt = TrellisFormat(L, K, V, T)
    fmt.check_packable()
    check_code(code, V)
    return fmt


def check_params(
    fmt: TrellisFormat, code: str, alpha: Any, beta: Any, mulbal: Any, table: Any, device: torch.device
) -> tuple[float, float, int, int, int, torch.Tensor | None]:
    """The code's parameters as the ops' trailing arguments ``(alpha, beta, a, b, m, table)``, the table as
    float32 on ``device``."""
    alpha, beta = check_finite_float(alpha, "alpha"), check_finite_float(beta, "beta")
    if table is not None and not check_tensor(table, "table").is_floating_point():
        raise TypeError(f"table must be a floating torch.Tensor, got {table.dtype}")
    triple = fmt.check_code(code, mulbal=mulbal, table_shape=None if table is None else table.shape)
    if table is not None:
        check_finite_tensor(table, "table")  # skipped while torch.compile traces (a data-dependent branch)
        table = table.to(device=device, dtype=torch.float32)
    return (alpha, beta, *(triple or NO_MULBAL), table)


def _params(code: str, alpha: float, beta: float, a: int, b: int, m: int, table: torch.Tensor | None) -> dict:
    """The keyword arguments of the reference and the kernels from the ops' trailing arguments."""
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
    params = _params(code, alpha, beta, a, b, m, table)
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
    params = _params(code, alpha, beta, a, b, m, table)
    reason = None if x.dtype in KERNEL_X_DTYPES else f"the kernel does not take x of dtype {x.dtype}"
    if select_impl("trellis_gemv", x.device, kernel_reason=reason) == "triton":
        from icml_kernels.trellis.triton_trellis import gemv_triton

        return gemv_triton(x, packed, code, L, K, V, T, **params)
    return gemv_reference(x, packed, code, L, K, V, T, **params).to(x.dtype)


@trellis_gemv_op.register_fake
def _gemv_fake(x, packed, code, L, K, V, T, alpha, beta, a, b, m, table):
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


def _gemv_setup_context(ctx, inputs, output) -> None:
    x, packed, *args, table = inputs
    ctx.save_for_backward(packed, table)
    ctx.args, ctx.x_dtype = tuple(args), x.dtype


def _gemv_backward(ctx, grad: torch.Tensor):
    """The gradient for ``x``: ``grad @ W_hat`` (float32, float64 for a float64 ``x``, as the forward
    accumulates), ``W_hat`` decoded by :func:`trellis_decode_op`; the packed words and the code's parameters
    take none."""
    packed, table = ctx.saved_tensors
    if ctx.needs_input_grad[-1]:
        raise ValueError("trellis_gemv has no gradient for table: decode it with a differentiable torch path")
    w = trellis_decode_op(packed, *ctx.args, table).reshape(packed.shape[0], -1)  # (m, n)
    compute = torch.float64 if ctx.x_dtype == torch.float64 else torch.float32
    return ((grad.to(compute) @ w.to(compute)).to(ctx.x_dtype),) + (None,) * 12


# a gradient for x: a quantized layer's fused one-row path (ProteusLinear on CUDA) under input saliency or
# attribution backpropagates through it
trellis_gemv_op.register_autograd(_gemv_backward, setup_context=_gemv_setup_context)


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
            :class:`icml_kernels.trellis.TrellisFormat`, whose ``pack`` writes it).
        code (str): ``1mad``, ``3inst``, ``mulbal`` (computed, ``V = 1``), ``hyb`` (``V = 2``) or ``lut``.
        L, K, V, T (int): state bits (8..16), bits per weight (1..4), weights per state (1, 2), tile length.
        alpha, beta (float): the affine map applied to the raw code value.
        mulbal (tuple, Optional): ``(a, b, m)`` for ``mulbal``.
        table (torch.Tensor, Optional): ``(2^Q, 2)`` micro-table for ``hyb``, ``(2^L, V)`` for ``lut``.

    Returns:
        float32 weights ``(..., T)``; Triton kernel on CUDA, the torch reference on CPU. Warns
        (RuntimeWarning) when ``alpha``/``beta`` are so large that a weight overflows float32 (a check that
        reads the result: a host sync on a GPU; :func:`trellis_decode_op` checks nothing).
    """
    fmt = check_trellis(code, L, K, V, T)
    fmt.check_packed(packed)
    params = check_params(fmt, code, alpha, beta, mulbal, table, packed.device)
    out = trellis_decode_op(packed, code, L, K, V, T, *params)
    return warn_if_overflowed(out, "trellis_decode: alpha * code + beta")


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
    float32 (float64 for a float64 ``x``, which runs the torch reference). Differentiable in ``x``. ``x`` must
    be finite (read, like the result, which warns when it overflows: a host sync on a GPU;
    :func:`trellis_gemv_op` checks nothing). Other arguments as :func:`trellis_decode`."""
    fmt = check_trellis(code, L, K, V, T)
    fmt.check_packed(packed, dims=3)
    params = check_params(fmt, code, alpha, beta, mulbal, table, packed.device)
    check_tensor(x, "x", X_DTYPES)
    n = packed.shape[1] * T
    if x.dim() == 0 or x.shape[-1] != n:
        raise ValueError(f"x must have n = (n/T) * T = {n} in its last dimension, got shape {tuple(x.shape)}")
    if x.device != packed.device:
        raise ValueError(f"x and packed must be on one device, got {x.device} and {packed.device}")
    check_finite_tensor(x, "x")
    out = trellis_gemv_op(x, packed, code, L, K, V, T, *params)
    return warn_if_overflowed(out, "trellis_gemv: x @ W_hat.T (W_hat = alpha * code + beta)")
