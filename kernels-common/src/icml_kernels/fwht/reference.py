"""Pure-torch fast Walsh–Hadamard transform: the ground truth the Triton kernel is tested against."""

from __future__ import annotations

import torch

from icml_kernels.validation import check_power_of_two


def fwht_reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * x @ H_n`` along the last dimension, with ``H_n`` the Sylvester–Hadamard matrix.

    ``n = x.shape[-1]`` must be a power of two. Half-precision inputs are transformed in float32 and the
    result is cast back, like the kernel does. Costs ``n log2 n`` additions per row.
    """
    n = x.shape[-1]
    compute = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    y = x.reshape(-1, n).to(compute)  # (rows, n)
    # Stage s transforms index bit s. Each stage pairs neighbours (the lowest bit) and writes the sums
    # before the differences, which rotates the index bits right by one: after log2(n) stages every bit
    # was transformed once and the order is back to the original (the Triton kernel does the same).
    for _ in range(n.bit_length() - 1):
        pairs = y.view(-1, n // 2, 2)  # (rows, n/2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        y = torch.stack((a + b, a - b), dim=1).view(-1, n)  # (rows, 2, n/2) -> (rows, n)
    return (y.reshape(x.shape) * scale).to(x.dtype)


def hadamard_matrix(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The unnormalized Sylvester–Hadamard matrix of size ``n`` (a power of two), built by Kronecker products."""
    check_power_of_two(n, "n")
    h = torch.ones(1, 1, dtype=dtype)
    base = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=dtype)
    while h.shape[0] < n:
        h = torch.kron(base, h)
    return h
