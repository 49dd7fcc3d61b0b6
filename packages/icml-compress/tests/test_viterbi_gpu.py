"""GPU tier: the Viterbi on CUDA returns the CPU's paths, bit for bit, and ``QuantConfig(device="cuda")``
quantizes a model there (skipped without CUDA)."""

from __future__ import annotations

import itertools

import pytest
import torch

from icml_compress.proteus.codes import make_code
from icml_compress.quantize.config import QuantConfig
from icml_compress.quantize.model import quantize_model
from icml_compress.trellis import BitshiftTrellis, quantize_tiles

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CODES = [("1mad", 1), ("3inst", 1), ("mulbal", 1), ("hyb", 2), ("lut", 1), ("lut", 2)]


@pytest.mark.parametrize(("code", "L", "tail_biting"), itertools.product(CODES, [8, 10, 12], [True, False]))
def test_cuda_paths_equal_the_cpu_paths(code, L, tail_biting):
    name, V = code
    trellis = BitshiftTrellis(L, 2, V, 64)
    values = make_code(name, L, V).values()
    gen = torch.Generator().manual_seed(L)
    for x in (torch.randn(300, 64, generator=gen), ((torch.randn(40, 64, generator=gen) * 2).round() / 2)):
        cpu = quantize_tiles(x, values, trellis, tail_biting=tail_biting, workers=1)
        cuda = quantize_tiles(x.cuda(), values, trellis, tail_biting=tail_biting)
        assert cuda.device.type == "cuda"
        assert torch.equal(cuda.cpu(), cpu)
        if tail_biting:
            assert torch.equal(trellis.pack(cuda).cpu(), trellis.pack(cpu))


def test_several_codes_and_float64_on_cuda():
    trellis = BitshiftTrellis(10, 2, 1, 64)
    values = torch.stack([make_code("mulbal", 10).values(), make_code("1mad", 10).values()])
    x = torch.randn(2, 50, 64, generator=torch.Generator().manual_seed(1))
    for dtype in (torch.float32, torch.float64):
        cpu = quantize_tiles(x, values, trellis, dtype=dtype, workers=1)
        assert torch.equal(quantize_tiles(x.cuda(), values, trellis, dtype=dtype).cpu(), cpu)


def test_quantize_model_on_cuda_matches_the_cpu_closely():
    """Rotations, LDL, candidates, LDLQ and Viterbi on CUDA: float64 products there may round differently
    from the CPU's, so a near-tie can go another way; the layers' proxy errors must agree closely."""
    from icml_tools.assets import tiny_llama

    ids = torch.randint(0, 256, (1024,), generator=torch.Generator().manual_seed(0))
    fast = {"L": 8, "T": 32, "n_calibration": 4, "seq_len": 32, "n_candidates": 2, "select_rows": 8}
    cpu = quantize_model(tiny_llama(0), QuantConfig(**fast), ids, progress=False)
    gpu = quantize_model(tiny_llama(0), QuantConfig(device="cuda", **fast), ids, progress=False)
    a, b = (m.icml_quantization["layers"] for m in (cpu, gpu))
    for name in a:
        assert b[name]["proxy"] == pytest.approx(a[name]["proxy"], rel=0.02)
    words = [(p == q).float().mean().item() for p, q in zip(cpu.buffers(), gpu.buffers(), strict=True)]
    print("share of equal packed words per buffer", words)
    out = gpu.generate(ids[None, :5], max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 8)
