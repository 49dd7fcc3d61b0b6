"""Incoherence processing: random signs and a Hadamard-type rotation on both sides of a weight.

``W_r = R_out diag(s_out) W diag(s_in) R_in^T`` with random sign vectors ``s`` and orthogonal ``R``;
the layer computes ``W x = s_out * R_out^T (W_r (R_in (s_in * x)))``. The Hessian follows the inputs:
``H_r = R_in diag(s_in) H diag(s_in) R_in^T``.

Non-power-of-two sizes. A dimension ``n = m * 2^k`` with ``m`` odd (SmolLM2: 576 = 9 * 64,
1536 = 3 * 512) is rotated by ``R = D_m (x) H_{2^k}``: the normalized Sylvester-Hadamard transform of
size ``2^k`` (the FWHT op of kernels-common, ``k log k`` additions) on the last axis of ``x`` viewed as
``(m, 2^k)``, then the orthonormal DCT-II matrix ``D_m`` (``m x m``, entries at most ``sqrt(2/m)``) on the
first axis. ``R`` is orthogonal, so nothing is padded and the packed size is unchanged; the extra cost
is ``m`` multiply-adds per element (9 for 576, 3 for 1536) on top of the FWHT. A Hadamard matrix of
order 9 or 3 does not exist; QTIP instead uses Hadamard matrices of order 12, 20, 28 ... times ``2^k``,
which would need ``n`` divisible by 12 (1536 is, 576 = 12 * 48 is not with a power-of-two ``48``), or
padding, which costs ``(n_pad - n) / n`` more packed bits (576 -> 1024: +78%). The DCT factor is our
choice; its incoherence (max entry ``sqrt(2/m) / 2^(k/2)`` instead of ``1 / sqrt(n)``) is within
``sqrt(2)`` of a true Hadamard's.
"""

from __future__ import annotations

import functools
import math

import torch

from icml_compress.validation import check_int
from icml_kernels.fwht import fwht_op  # the registered op: no data read (no host sync in forward)


def split_size(n: int) -> tuple[int, int]:
    """``(m, p)`` with ``n = m * p``, ``m`` odd and ``p`` a power of two."""
    check_int(n, "n", 1)
    p = n & -n
    return n // p, p


@functools.lru_cache(maxsize=16)
def dct_matrix(m: int) -> torch.Tensor:
    """The orthonormal DCT-II matrix ``(m, m)`` (float64): row ``i`` is frequency ``i``."""
    i = torch.arange(m, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(m, dtype=torch.float64).unsqueeze(0)
    d = torch.cos(math.pi * (2 * j + 1) * i / (2 * m)) * math.sqrt(2.0 / m)
    d[0] /= math.sqrt(2.0)
    return d


@functools.lru_cache(maxsize=32)
def dct_on(m: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """:func:`dct_matrix` in ``dtype`` on ``device``, kept there: a call on CUDA copies nothing to the device
    (a copy from host memory would wait for it)."""
    return dct_matrix(m).to(dtype=dtype, device=device)


def rotate(x: torch.Tensor) -> torch.Tensor:
    """``R x`` for each vector along the last dimension (``x @ R^T``), ``R = D_m (x) H_p / sqrt(p)``."""
    n = x.shape[-1]
    m, p = split_size(n)
    y = fwht_op(x.reshape(*x.shape[:-1], m, p).contiguous(), 1.0 / math.sqrt(p))  # (..., m, p)
    if m > 1:
        y = torch.matmul(dct_on(m, y.dtype, y.device), y)  # D_m on the m axis
    return y.reshape(x.shape)


def unrotate(y: torch.Tensor) -> torch.Tensor:
    """``R^T y`` along the last dimension (``y @ R``): the inverse of :func:`rotate`."""
    n = y.shape[-1]
    m, p = split_size(n)
    z = y.reshape(*y.shape[:-1], m, p)
    if m > 1:
        z = torch.matmul(dct_on(m, z.dtype, z.device).T, z)
    return fwht_op(z.contiguous(), 1.0 / math.sqrt(p)).reshape(y.shape)


def random_signs(n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` independent +-1 (float32)."""
    return torch.randint(0, 2, (n,), generator=generator).float() * 2 - 1


def rotate_weight(W: torch.Tensor, s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
    """``R_out diag(s_out) W diag(s_in) R_in^T`` for ``W (out, in)``."""
    A = rotate(W * s_out[:, None] * s_in[None, :])  # rows: w -> R_in w
    return rotate(A.T.contiguous()).T.contiguous()  # columns: R_out A


def unrotate_weight(Wr: torch.Tensor, s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`rotate_weight`: ``diag(s_out) R_out^T W_r R_in diag(s_in)``."""
    A = unrotate(Wr)  # rows: w -> R_in^T w
    return unrotate(A.T.contiguous()).T * s_out[:, None] * s_in[None, :]


def rotate_hessian(H: torch.Tensor, s_in: torch.Tensor) -> torch.Tensor:
    """``R_in diag(s_in) H diag(s_in) R_in^T``."""
    A = H * s_in[:, None] * s_in[None, :]
    return rotate(rotate(A).T.contiguous()).T.contiguous()
