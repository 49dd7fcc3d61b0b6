"""Lloyd–Max scalar quantization (Lloyd, 1957/1982; Max, 1960): the MSE-optimal non-uniform grid.

Each Lloyd iteration assigns every value to its nearest level and moves each level to the mean of its
values. Neither step can raise the mean squared error, so started from the RTN grid the result is never
worse than RTN. For a unit Gaussian the optimal 4-level (2-bit) quantizer has MSE 0.1175 (Max, 1960,
Table I), the reference a 2-bit scalar quantizer of Gaussian-like weights is compared with.
"""

from __future__ import annotations

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
    """
    check_float_tensor(x, "x")
    check_int(levels, "levels", 1, 256)
    check_int(iters, "iters", 0)
    values = x.to(compute_dtype(x))  # (..., m)
    if init is None:
        lo = values.amin(-1, keepdim=True)  # (..., 1)
        step = (values.amax(-1, keepdim=True) - lo) / max(levels - 1, 1)  # (..., 1) as in rtn_quantize
        grid = lo + step * torch.arange(levels, dtype=values.dtype, device=values.device)  # (..., levels)
    else:
        check_float_tensor(init, "init")
        if init.shape != (*x.shape[:-1], levels):
            expected = (*x.shape[:-1], levels)
            raise ValueError(f"init must have shape {expected} (x's rows by levels), got {tuple(init.shape)}")
        grid = init.to(dtype=values.dtype, device=values.device)
    nearest, mse = _assign(values, grid)
    history = [mse]
    for _ in range(iters):
        onehot = torch.nn.functional.one_hot(nearest, levels).to(values.dtype)  # (..., m, levels)
        counts = onehot.sum(-2)  # (..., levels)
        sums = (onehot * values.unsqueeze(-1)).sum(-2)  # (..., levels)
        grid = torch.where(counts > 0, sums / counts.clamp_min(1), grid)
        nearest, mse = _assign(values, grid)
        history.append(mse)
    dequantized = torch.gather(grid, -1, nearest)  # (..., m)
    mse = torch.stack(history)
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


def _assign(values: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the nearest level for every value ``(..., m)`` and each row's mean squared error ``(...)``."""
    distance = (values.unsqueeze(-1) - grid.unsqueeze(-2)).abs()  # (..., m, levels)
    nearest = distance.argmin(-1)  # (..., m)
    error = values - torch.gather(grid, -1, nearest)
    return nearest, error.pow(2).mean(-1)
