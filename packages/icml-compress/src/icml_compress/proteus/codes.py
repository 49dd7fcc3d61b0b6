"""Trellis codes: the function state -> value (``V = 1``) or 2-vector (``V = 2``) the decoder evaluates.

Every code is ``alpha * raw(state) + beta``, with ``raw`` the code's integer or float function (defined
once, in :mod:`icml_kernels.trellis.reference`, where the decode kernels are tested against it; the code
names, which of them use a table and the ``V`` each gives are the kernels' format,
:mod:`icml_kernels.trellis.format`) and the
affine pair chosen so that the ``2^L`` state values have mean 0 and variance 1 (over all states and
coordinates). For ``mulbal`` that pair is Proteus' per-layer affine Gaussianizer; for the others it is
the normalization the issue asks for ("all normalized to unit variance").

- ``lut``: a random N(0, 1) table of ``2^L`` entries (``V`` values each), the lookup baseline.
- ``1mad``, ``3inst``: QTIP's computed codes (``V = 1``).
- ``hyb``: QTIP's hybrid code (``V = 2``): a ``(2^Q, 2)`` micro-table found by k-means on 2-D Gaussian
  samples, indexed by a hash of the state, with a sign bit. This is the micro-LUT Proteus removes.
- ``mulbal``: the Proteus generator, ``(a, b, m)`` from the vetted pool (:mod:`icml_compress.proteus.pool`),
  ``V = 1``. Our design; see :func:`icml_kernels.trellis.reference.mulbal_raw` and the docs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from icml_compress.validation import check_finite_float, check_instance, check_int, check_tensor
from icml_kernels.trellis.format import (
    CODES,
    HYB_MAX_BITS,
    L_RANGE,
    V_RANGE,
    check_code,
    check_code_params,
    check_mulbal,
    hyb_table_bits,
    table_shape_of,
)
from icml_kernels.trellis.reference import code_values

CODE_NAMES = CODES  # the kernels' tuple: ("1mad", "3inst", "mulbal", "hyb", "lut")
HYB_KMEANS_SAMPLES = 1 << 14
HYB_KMEANS_ITERS = 20
LUT_SEED_OFFSET = 1_000_003  # the lut table's generator is seeded apart from the source's


@dataclass(frozen=True)
class MulBal:
    """MUL-BAL parameters: odd multiplier ``a`` and increment ``b`` (32-bit), field width ``m`` (1..8)."""

    a: int
    b: int
    m: int

    def __post_init__(self) -> None:
        check_mulbal(self.triple)
        if self.a % 2 == 0:
            raise ValueError(f"a must be odd (a bijection of the states mod 2^32), got {self.a}")

    @property
    def triple(self) -> tuple[int, int, int]:
        """``(a, b, m)``, the form the kernels take."""
        return self.a, self.b, self.m


@dataclass(frozen=True, eq=False)
class TrellisCode:
    """A code ready to decode: name, ``L``, ``V``, the affine pair and its parameters or table."""

    name: str
    L: int
    V: int
    alpha: float
    beta: float
    mulbal: MulBal | None = None
    table: torch.Tensor | None = field(default=None, repr=False)  # hyb (2^Q, 2) or lut (2^L, V), float32

    def __post_init__(self) -> None:
        check_int(self.L, "L", *L_RANGE)
        check_int(self.V, "V", *V_RANGE)
        check_code(self.name, self.V)
        check_finite_float(self.alpha, "alpha")
        check_finite_float(self.beta, "beta")
        if self.mulbal is not None:
            check_instance(self.mulbal, "mulbal", MulBal)
        if self.table is not None:
            check_tensor(self.table, "table")
            if not self.table.is_floating_point():
                raise TypeError(f"table must have a floating dtype, got {self.table.dtype}")
            if not bool(torch.isfinite(self.table).all()):
                raise ValueError("table must be finite, got NaN or infinite entries")
        check_code_params(
            self.name,
            self.L,
            self.V,
            mulbal=None if self.mulbal is None else self.mulbal.triple,
            table_shape=None if self.table is None else self.table.shape,
        )

    def raw_params(self) -> dict:
        """Keyword arguments of :func:`icml_kernels.trellis.reference.code_values` (and the kernels)."""
        params: dict = {"alpha": self.alpha, "beta": self.beta}
        if self.mulbal is not None:
            params["mulbal"] = self.mulbal.triple
        if self.table is not None:
            params["table"] = self.table
        return params

    def decode(self, states: torch.Tensor) -> torch.Tensor:
        """float32 values ``(..., V)`` of integer states ``(...)``, on their device."""
        params = self.raw_params()
        if self.table is not None:  # made on the CPU: moved to the states' device
            params["table"] = self.table.to(states.device)
        return code_values(states, self.name, self.L, self.V, **params)

    def values(self) -> torch.Tensor:
        """The value of every state, ``(2^L, V)`` float32 (what the Viterbi encoder needs)."""
        return self.decode(torch.arange(1 << self.L))


def make_code(name: str, L: int, V: int = 1, *, mulbal: MulBal | None = None, seed: int = 0) -> TrellisCode:
    """Build a code normalized to mean 0 and variance 1 over its ``2^L`` states.

    Args:
        name (str): one of ``lut``, ``1mad``, ``3inst``, ``hyb``, ``mulbal``.
        L (int): state bits, 8..16.
        V (int): values per state, 1 or 2 (``1mad``/``3inst``/``mulbal``: 1; ``hyb``: 2; ``lut``: either).
        mulbal (MulBal, Optional): parameters for ``mulbal``; default the first member of the vetted pool.
        seed (int): seeds the random ``lut`` table and the ``hyb`` k-means.
    """
    check_int(L, "L", *L_RANGE)
    check_int(V, "V", *V_RANGE)
    check_code(name, V)
    check_int(seed, "seed", 0)
    if mulbal is not None:
        check_instance(mulbal, "mulbal", MulBal)
    if name == "mulbal" and mulbal is None:
        from icml_compress.proteus.pool import MULBAL_POOL

        mulbal = MULBAL_POOL[0]
    check_code_params(
        name, L, V, mulbal=None if mulbal is None else mulbal.triple, table_shape=table_shape_of(name, L, V)
    )  # the table is made here, of that shape
    table = None
    if name == "lut":
        gen = torch.Generator().manual_seed(seed + LUT_SEED_OFFSET)
        table = torch.randn(1 << L, V, generator=gen)
    elif name == "hyb":
        table = hyb_table(hyb_table_bits(L), seed).clone()
    unit = TrellisCode(name, L, V, 1.0, 0.0, mulbal, table)
    raw = unit.values().double()  # (2^L, V)
    std = raw.std(unbiased=False).item()
    if std == 0:
        raise ValueError(f"code {name!r} with {mulbal} is constant over the 2^{L} states")
    alpha = 1.0 / std
    return TrellisCode(name, L, V, alpha, -raw.mean().item() * alpha, mulbal, table)


def hyb_table(bits: int, seed: int = 0) -> torch.Tensor:
    """QTIP-style micro-table: ``2^bits`` k-means centres of 2-D standard Gaussian samples, ``(2^bits, 2)``;
    ``bits`` in 1..9 (QTIP's table has 2^9 entries), ``seed`` 0 or more. Cached: do not modify the result
    in place (clone it)."""
    check_int(bits, "bits", 1, HYB_MAX_BITS)
    check_int(seed, "seed", 0)
    return _hyb_table(bits, seed)


@functools.lru_cache(maxsize=8)
def _hyb_table(bits: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    data = torch.randn(HYB_KMEANS_SAMPLES, 2, generator=gen, dtype=torch.float64)
    centres = data[torch.randperm(HYB_KMEANS_SAMPLES, generator=gen)[: 1 << bits]].clone()
    for _ in range(HYB_KMEANS_ITERS):
        nearest = torch.cdist(data, centres).argmin(-1)
        sums = torch.zeros_like(centres).index_add_(0, nearest, data)
        counts = torch.bincount(nearest, minlength=centres.shape[0]).unsqueeze(-1)
        centres = torch.where(counts > 0, sums / counts.clamp_min(1), centres)
    return centres.float()
