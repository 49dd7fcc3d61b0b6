"""Trellis quantization of an i.i.d. N(0, 1) source: the MSE benchmark of the codes.

References at rate ``K`` bits per sample: the distortion-rate bound ``D(K) = 2^(-2K)`` and the
``2^K``-level Lloyd–Max scalar quantizer (Max, 1960).
"""

from __future__ import annotations

import torch

from icml_compress.proteus.codes import CODE_NAMES, TrellisCode, make_code
from icml_compress.trellis import BitshiftTrellis, quantize_tiles
from icml_compress.validation import check_bool, check_instance, check_int
from icml_kernels.trellis.format import K_RANGE

TILE = 256
# MSE of the optimal 2^K-level scalar quantizer of N(0, 1) (Max, 1960, Table I)
LLOYD_MAX_MSE = {1: 0.3634, 2: 0.1175, 3: 0.03454, 4: 0.009497}


def distortion_rate_bound(K: int) -> float:
    """Shannon's distortion-rate function of a unit Gaussian at ``K`` bits per sample: ``2^(-2K)``."""
    check_int(K, "K", *K_RANGE)
    return 2.0 ** (-2 * K)


def resolve_code(code: str, L: int, V: int, seed: int) -> TrellisCode:
    """A code by name: ``lut``, ``1mad``, ``3inst``, ``hyb``, ``mulbal`` (the first pool member) or
    ``mulbal-<i>`` (pool member ``i``)."""
    check_instance(code, "code", str)
    if code.startswith("mulbal-"):
        from icml_compress.proteus.pool import MULBAL_POOL

        index = code.removeprefix("mulbal-")
        if not index.isdigit() or int(index) >= len(MULBAL_POOL):
            raise ValueError(
                f"code {code!r}: the mulbal pool has members mulbal-0 .. mulbal-{len(MULBAL_POOL) - 1}"
            )
        return make_code("mulbal", L, V, mulbal=MULBAL_POOL[int(index)], seed=seed)
    if code not in CODE_NAMES:
        raise ValueError(f"code must be one of {CODE_NAMES} or 'mulbal-<i>', got {code!r}")
    return make_code(code, L, V, seed=seed)


def gaussian_mse(
    code: str, L: int, K: int = 2, V: int = 1, n_tiles: int = 64, seed: int = 0, tail_biting: bool = True
) -> float:
    """MSE of trellis-quantizing ``n_tiles`` i.i.d. N(0, 1) tiles of 256 weights with ``code``: the mean of
    :func:`gaussian_tile_mse` (same arguments)."""
    return gaussian_tile_mse(code, L, K, V, n_tiles, seed, tail_biting).mean().item()


def gaussian_tile_mse(
    code: str, L: int, K: int = 2, V: int = 1, n_tiles: int = 64, seed: int = 0, tail_biting: bool = True
) -> torch.Tensor:
    """The MSE of each of ``n_tiles`` i.i.d. N(0, 1) tiles of 256 weights trellis-quantized with ``code``,
    a float32 tensor ``(n_tiles,)`` (for paired comparisons of codes on the same tiles and intervals).

    The source is drawn from ``torch.Generator().manual_seed(seed)``; the ``lut`` table and the ``hyb``
    k-means from generators seeded apart from it. With ``tail_biting`` (default) each tile is packed into
    exactly ``K*256`` bits and the MSE is measured on the weights decoded from the packed words;
    otherwise on the unconstrained Viterbi optimum (a free-start stream, ``L - K*V`` bits longer).
    """
    trellis = BitshiftTrellis(L, K, V, TILE)  # checks L, K, V
    check_int(n_tiles, "n_tiles", 1)
    check_int(seed, "seed", 0)
    check_bool(tail_biting, "tail_biting")
    c = resolve_code(code, L, V, seed)
    x = torch.randn(n_tiles, TILE, generator=torch.Generator().manual_seed(seed))  # (tiles, T)
    states = quantize_tiles(x, c.values(), trellis, tail_biting=tail_biting)  # (tiles, T/V)
    if tail_biting:
        states = trellis.unpack(trellis.pack(states))
    x_hat = c.decode(states).reshape(n_tiles, TILE)
    return (x_hat - x).pow(2).mean(1)
