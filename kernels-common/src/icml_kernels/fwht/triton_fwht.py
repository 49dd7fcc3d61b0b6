"""Triton kernel of the fast Walsh–Hadamard transform along the last dimension.

Each program holds ``BLOCK_M`` rows of length ``N`` in registers and runs ``log2 N`` butterfly stages.
A stage pairs neighbouring elements (the lowest index bit), writes ``(a + b, a - b)`` and rotates the
index bits right by one with a permute, so the next stage again pairs neighbours; after ``log2 N``
stages every bit was transformed once and the rotation has come full circle. Rows longer than
``MAX_ROW`` are split as ``H_{AB} = H_A ⊗ H_B`` into two passes with a transpose between them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_ROW = 1 << 14  # longest row one program holds; longer rows take the two-pass path
TARGET_BLOCK = 4096  # elements per program for short rows (several rows per program)


@triton.jit
def fwht_fwd_kernel(x_ptr, y_ptr, n_rows, scale, N: tl.constexpr, LOG_N: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)  # [BLOCK_M]
    cols = tl.arange(0, N)  # [N]
    offs = rows[:, None] * N + cols[None, :]  # [BLOCK_M, N]
    mask = (rows < n_rows)[:, None]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # [BLOCK_M, N]
    for _ in tl.static_range(LOG_N):
        a, b = tl.split(tl.reshape(x, (BLOCK_M, N // 2, 2)))  # [BLOCK_M, N/2] each
        x = tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 2, 1)), (BLOCK_M, N))
    tl.store(y_ptr + offs, (x * scale).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2d: torch.Tensor, scale: float) -> torch.Tensor:
    n_rows, n = x2d.shape
    y = torch.empty_like(x2d)
    if n_rows == 0:
        return y
    block_m = max(1, min(TARGET_BLOCK // n, triton.next_power_of_2(n_rows)))
    elements = block_m * n
    num_warps = 4 if elements <= 2048 else 8 if elements <= 8192 else 16
    grid = (triton.cdiv(n_rows, block_m),)
    fwht_fwd_kernel[grid](
        x2d, y, n_rows, scale, N=n, LOG_N=n.bit_length() - 1, BLOCK_M=block_m, num_warps=num_warps
    )
    return y


def fwht_triton(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * x @ H_n`` along the last dimension (float16, bfloat16 or float32; n a power of two)."""
    n = x.shape[-1]
    x2d = x.reshape(-1, n).contiguous()  # (rows, n)
    if n <= MAX_ROW:
        return _launch(x2d, scale).view(x.shape)
    b = MAX_ROW
    a = n // b
    inner = _launch(x2d.view(-1, b), 1.0).view(-1, a, b)  # H_B along the fast index
    outer = fwht_triton(inner.transpose(1, 2).reshape(-1, a), scale)  # H_A along the slow index
    return outer.view(-1, b, a).transpose(1, 2).reshape(x.shape)
