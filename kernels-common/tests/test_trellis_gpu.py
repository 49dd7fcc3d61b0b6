"""GPU tier: the compiled trellis kernels on CUDA against the reference (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

from icml_kernels import trellis_decode, trellis_gemv
from icml_kernels.testing import rel_rms_error
from icml_kernels.trellis import decode_reference
from icml_kernels.trellis.testing import example_params

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CASES = [
    ("1mad", 16, 2, 1),
    ("3inst", 16, 2, 1),
    ("mulbal", 16, 2, 1),
    ("mulbal", 10, 3, 1),
    ("hyb", 16, 2, 2),
    ("lut", 12, 2, 1),
]


@pytest.mark.parametrize("code, L, K, V", CASES)
def test_cuda_decode_and_gemv(code, L, K, V, monkeypatch):
    monkeypatch.delenv("ICML_KERNELS_IMPL", raising=False)
    T = 256
    params = example_params(code, L, V)
    packed = torch.randint(-(1 << 31), 1 << 31, (300, 8, K * T // 32), dtype=torch.int64).to(torch.int32)
    ref = decode_reference(packed, code, L, K, V, T, **params)
    cuda_params = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
    out = trellis_decode(packed.cuda(), code, L, K, V, T, **cuda_params).cpu()
    assert rel_rms_error(out, ref) < 1e-6  # the GPU may fuse the affine multiply-add
    x = torch.randn(1, 8 * T)
    y = trellis_gemv(x.cuda().half(), packed.cuda(), code, L, K, V, T, **cuda_params)
    assert y.dtype == torch.float16
    assert rel_rms_error(y.float().cpu(), x.half().float() @ ref.reshape(300, -1).T) < 2e-3
