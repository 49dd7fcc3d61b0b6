"""Round-to-nearest (RTN) quantization: the baseline every weight quantizer is compared with.

Asymmetric min-max per group (the ``--w_asym`` RTN of GPTQ, Frantar et al., 2023, and of QTIP's tables):
each run of ``group_size`` consecutive weights along the input dimension (the last one, as in
``nn.Linear.weight`` of shape ``(out, in)``) gets the uniform grid ``offset + scale * {0, ..., 2^bits - 1}``
with ``offset = min``, ``scale = (max - min) / (2^bits - 1)``, and every weight is rounded to the nearest
grid point, so the error is at most ``scale / 2``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from icml_compress.validation import check_float_tensor, check_int


class RTNQuantized(NamedTuple):
    """Result of :func:`rtn_quantize`; ``dequantized == offset + scale * codes`` group by group."""

    dequantized: torch.Tensor  # (..., in) same shape and dtype as the weight
    codes: torch.Tensor  # (..., in) uint8 in 0..2^bits - 1
    scale: torch.Tensor  # (..., in / group_size) grid step per group
    offset: torch.Tensor  # (..., in / group_size) group minimum, the grid's first point


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else is computed in float32 (half precision rounds too coarsely)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def rtn_quantize(weight: torch.Tensor, bits: int, group_size: int) -> RTNQuantized:
    """Asymmetric min-max round-to-nearest quantization per group along the last dimension.

    Args:
        weight (torch.Tensor): floating tensor ``(..., in)``, e.g. a linear layer's ``(out, in)`` weight.
        bits (int): bits per weight, 1..8 (``2^bits`` grid points per group).
        group_size (int): weights sharing one scale and offset; must divide ``in``.

    Returns:
        :class:`RTNQuantized` with the dequantized tensor, the codes, and per-group scales and offsets.
        A constant group gets ``scale = 0`` and is reproduced exactly.
    """
    check_float_tensor(weight, "weight")
    check_int(bits, "bits", 1, 8)
    check_int(group_size, "group_size", 1)
    size = weight.shape[-1]
    if size % group_size:
        raise ValueError(f"group_size must divide weight.shape[-1] = {size}, got {group_size}")
    top = 2**bits - 1
    w = weight.to(compute_dtype(weight)).reshape(
        *weight.shape[:-1], size // group_size, group_size
    )  # (..., G, g)
    lo = w.amin(dim=-1, keepdim=True)  # (..., G, 1)
    hi = w.amax(dim=-1, keepdim=True)  # (..., G, 1)
    codes, scale = _codes(w, lo, hi, top)
    dequantized = lo + codes * scale
    over = torch.isinf(hi - lo)  # (..., G, 1) groups whose range max - min overflows the compute dtype
    if bool(over.any()):
        # weights near the dtype's largest value (e.g. bfloat16 near ±3.4e38): halving every weight is exact
        # (but for subnormals, far below a step this large), so such a group's grid is found on w / 2 (the
        # same codes) and scaled back; its dequantized weights lie in [min, max] (clamped: a last rounding
        # step past the largest float would overflow). Only those groups: the others keep their bits
        half_codes, half_scale = _codes(w / 2, lo / 2, hi / 2, top)
        half = torch.minimum(torch.maximum((lo / 2 + half_codes * half_scale) * 2, lo), hi)
        half_scale = half_scale * 2
        if bool(torch.isinf(half_scale[over]).any()):
            raise ValueError(
                f"weight's range in a group (max - min) exceeds {w.dtype}'s largest value "
                f"{torch.finfo(w.dtype).max:.4g}, so the {bits}-bit grid step (max - min) / {top} is not "
                "representable: use more bits or smaller weights"
            )
        codes = torch.where(over, half_codes, codes)
        scale = torch.where(over, half_scale, scale)
        dequantized = torch.where(over, half, dequantized)
    return RTNQuantized(
        dequantized=dequantized.reshape(weight.shape).to(weight.dtype),
        codes=codes.to(torch.uint8).reshape(weight.shape),
        scale=scale.squeeze(-1),
        offset=lo.squeeze(-1),
    )


def _codes(
    w: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, top: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes ``(..., G, g)`` and grid step ``(..., G, 1)`` of the groups ``w`` with minima ``lo``, maxima ``hi``."""
    scale = (hi - lo) / top  # (..., G, 1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # constant group: every code is 0
    return torch.clamp(torch.round((w - lo) / safe), 0, top), scale  # (..., G, g)
