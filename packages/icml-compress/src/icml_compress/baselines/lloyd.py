"""Lloyd–Max scalar quantization (Lloyd, 1957/1982; Max, 1960): the MSE-optimal non-uniform grid.

Each Lloyd iteration assigns every value to its nearest level and moves each level to the mean of its
values. Neither step can raise the mean squared error, so started from the RTN grid the result is never
worse than RTN. For a unit Gaussian the optimal 4-level (2-bit) quantizer has MSE 0.1175 (Max, 1960,
Table I), the reference a 2-bit scalar quantizer of Gaussian-like weights is compared with.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch

from icml_compress.baselines.rtn import compute_dtype
from icml_compress.validation import check_float_tensor, check_int

GAUSSIAN_LLOYD_MAX_MSE = 0.1175  # 4 levels, N(0, 1) (Max, 1960); levels ±0.4528, ±1.510


class LloydMaxResult(NamedTuple):
    """Result of :func:`lloyd_max`."""

    levels: torch.Tensor  # (..., levels) the final grid of each row, sorted
    dequantized: torch.Tensor  # (..., m) each value replaced by its nearest level
    mse: torch.Tensor  # (iters + 1, ...) mean squared error of each row before and after each iteration


def lloyd_max(
    x: torch.Tensor, levels: int = 4, iters: int = 20, init: torch.Tensor | None = None
) -> LloydMaxResult:
    """Fit ``levels`` reconstruction levels to each row of ``x`` by Lloyd iterations.

    Args:
        x (torch.Tensor): floating tensor ``(..., m)``; each row (e.g. one quantization group) gets its
            own grid.
        levels (int): number of reconstruction levels (``2^bits``), 1..256.
        iters (int): Lloyd iterations, 0 or more.
        init (torch.Tensor, Optional): starting grid ``(..., levels)``. Default: the row's min-max uniform
            grid, the one :func:`rtn_quantize` uses, so ``mse[0]`` is the RTN error.

    Returns:
        :class:`LloydMaxResult`. ``mse`` is non-increasing along its first dimension (a level whose cell
        is empty keeps its place). Warns (RuntimeWarning) when ``mse`` overflows (values near the largest
        float of the compute dtype).

    A row whose sums or differences could overflow the compute dtype (its largest magnitude, of ``x`` or
    ``init``, times ``max(2, m)`` at or above about half its largest float, e.g. bfloat16 weights near
    ±3.4e38) is fitted on ``x / 2^k``, the smallest such power of two, and its levels scaled back: scaling by a
    power of two is exact, so the levels are those of ``x`` (clamped to the finite range), but for values
    below ``2^k`` times the smallest normal float, which lose bits. Other rows are computed unscaled.
    """
    check_float_tensor(x, "x")
    check_int(levels, "levels", 1, 256)
    check_int(iters, "iters", 0)
    values = x.to(compute_dtype(x))  # (..., m)
    if init is not None:
        check_float_tensor(init, "init")
        if init.shape != (*x.shape[:-1], levels):
            expected = (*x.shape[:-1], levels)
            raise ValueError(f"init must have shape {expected} (x's rows by levels), got {tuple(init.shape)}")
        init = init.to(dtype=values.dtype, device=values.device)
    # rows near the largest float: fitted on values / 2^k (exact), so no sum or difference overflows
    exponent = _overflow_exponent(values, init)  # (..., 1) k, 0 for rows that cannot overflow
    scaled = bool((exponent > 0).any())
    if scaled:
        down = torch.pow(2.0, -exponent.double()).to(values.dtype)  # (..., 1) 2^-k, exact
        values = values * down
        if init is not None:
            init = init * down
    if init is None:
        lo = values.amin(-1, keepdim=True)  # (..., 1)
        step = (values.amax(-1, keepdim=True) - lo) / max(levels - 1, 1)  # (..., 1) as in rtn_quantize
        grid = lo + step * torch.arange(levels, dtype=values.dtype, device=values.device)  # (..., levels)
    else:
        grid = init
    nearest, mse = _assign(values, grid)
    history = [mse]
    for _ in range(iters):
        onehot = torch.nn.functional.one_hot(nearest, levels).to(values.dtype)  # (..., m, levels)
        counts = onehot.sum(-2)  # (..., levels)
        sums = (onehot * values.unsqueeze(-1)).sum(-2)  # (..., levels)
        grid = torch.where(counts > 0, sums / counts.clamp_min(1), grid)
        nearest, mse = _assign(values, grid)
        history.append(mse)
    mse = torch.stack(history)  # (iters + 1, ...)
    if scaled:  # back to x's scale: exact but for an overflow past the largest float (a rounded mean)
        up = torch.pow(2.0, exponent.double()).to(values.dtype)  # (..., 1) 2^k
        top = torch.finfo(values.dtype).max
        grid = (grid * up).clamp(-top, top)
        mse = mse * up.squeeze(-1) * up.squeeze(-1)  # 4^k in two exact steps
    dequantized = torch.gather(grid, -1, nearest)  # (..., m)
    if not bool(torch.isfinite(mse).all()):
        warnings.warn(
            f"lloyd_max: the mean squared error of x overflowed {values.dtype} (x's values are too large to "
            "square); mse holds infinite entries",
            RuntimeWarning,
            stacklevel=2,
        )
    return LloydMaxResult(
        levels=grid.sort(-1).values.to(x.dtype), dequantized=dequantized.to(x.dtype), mse=mse
    )


def _overflow_exponent(values: torch.Tensor, init: torch.Tensor | None) -> torch.Tensor:
    """Per row ``(..., 1)`` the smallest ``k >= 0`` with ``B max(2, m) / 2^k <= 2^(emax - 1)``, ``B`` the row's
    largest magnitude (of ``values`` and ``init``) and ``2^emax`` the dtype's overflow threshold: then no level
    difference (at most ``2B``) nor sum of ``m`` values overflows."""
    bound = values.abs().amax(-1, keepdim=True)  # (..., 1)
    if init is not None:
        bound = torch.maximum(bound, init.abs().amax(-1, keepdim=True))
    e_bound = torch.frexp(bound).exponent.to(torch.int64)  # bound < 2^e_bound
    e_count = max(1, (values.shape[-1] - 1).bit_length())  # max(2, m) <= 2^e_count
    e_max = math.frexp(torch.finfo(values.dtype).max)[1]  # the largest float is below 2^e_max
    return (e_bound + e_count - (e_max - 1)).clamp_min(0)


def _assign(values: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the nearest level for every value ``(..., m)`` and each row's mean squared error ``(...)``."""
    distance = (values.unsqueeze(-1) - grid.unsqueeze(-2)).abs()  # (..., m, levels)
    nearest = distance.argmin(-1)  # (..., m)
    error = values - torch.gather(grid, -1, nearest)
    return nearest, error.pow(2).mean(-1)
