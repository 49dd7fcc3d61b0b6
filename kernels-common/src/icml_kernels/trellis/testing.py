"""Inputs for testing and benchmarking the trellis kernels: random packed tiles and code parameters."""

from __future__ import annotations

import torch

from icml_kernels.trellis.format import hyb_table_bits


def random_packed(*shape: int, seed: int = 0) -> torch.Tensor:
    """Random int32 words of ``shape``: every cyclic bitstream is a valid tail-biting tile."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-(1 << 31), 1 << 31, shape, generator=gen, dtype=torch.int64).to(torch.int32)


def example_params(code: str, L: int, V: int, seed: int = 0) -> dict:
    """Keyword arguments of ``trellis_decode`` for ``code`` (a fixed mulbal triple, random tables)."""
    gen = torch.Generator().manual_seed(seed)
    if code == "mulbal":
        return {"mulbal": (2654435761, 12345, 7), "alpha": 0.02, "beta": 0.1}
    if code == "hyb":
        return {"table": torch.randn(1 << hyb_table_bits(L), 2, generator=gen), "alpha": 1.5, "beta": 0.0}
    if code == "lut":
        return {"table": torch.randn(1 << L, V, generator=gen), "alpha": 1.0, "beta": 0.0}
    return {"alpha": 0.01, "beta": -0.2}
