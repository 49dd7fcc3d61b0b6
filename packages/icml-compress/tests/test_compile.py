"""``torch.compile(model, fullgraph=True)`` of a quantized model (how gpt-fast and torchao users compile):
the quantized modules decode their weight inside the graph (no cache, whose keys read storage addresses
and version counters) and give the eager logits. Before, dynamo raised ``Unsupported: Data pointer
comparison`` with ``fullgraph=True`` and broke the graph once per quantized Linear without it (18 breaks
on the two-block tiny Llama quantized with Proteus, 16 with RTN)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from icml_compress.quantize import (
    ProteusLinear,
    QuantConfig,
    RTNLinear,
    load_quantized,
    quantize_model,
    save_quantized,
)
from icml_compress.quantize.model import quantize_linear_rtn

FAST = {"L": 8, "T": 32, "n_calibration": 2, "seq_len": 32, "n_candidates": 2, "select_rows": 8}
X = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(3))
# Compiled vs eager logits, measured (torch 2.15, CPU, 1 thread): max |diff| 4.8e-7 (aot_eager) and 3.6e-7
# (inductor) for Proteus (the compiled forward takes the rotated path, the eager CPU one the cached dense
# weight: the same product up to float rounding; logits up to 1.3 in size), 0 for RTN in float32.
# Tolerance 1e-5: a 20x margin.
ATOL = 1e-5


def quantized(rtn_head: bool = True):
    """A one-block tiny Llama with Proteus (compensated) blocks and an RTN ``lm_head`` (both quantized
    modules; ``rtn_head=False``: the float tied head, as ``quantize_model`` leaves it)."""
    from icml_tools.assets import tiny_llama

    ids = torch.randint(0, 256, (512,), generator=torch.Generator().manual_seed(0))
    model = quantize_model(
        tiny_llama(0, layers=1), QuantConfig(compensation=True, **FAST), ids, progress=False
    )
    if rtn_head:
        model.lm_head = quantize_linear_rtn(model.lm_head, QuantConfig(method="rtn", group_size=32))
    return model


def logits(model, x=X) -> torch.Tensor:
    with torch.no_grad():
        return model(x).logits


def test_a_quantized_model_compiles_fullgraph_and_gives_the_eager_logits(one_torch_thread):
    torch._dynamo.reset()
    model = quantized()
    before = logits(model)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for x in (X, X[:1, :1]):  # prompt and one decoding step (ProteusLinear: trellis_gemv on one row)
        torch.testing.assert_close(logits(compiled, x), logits(model, x), atol=ATOL, rtol=0)
    # the compiled graph reads the modules' tensors: an in-place change is followed, nothing stale
    proteus = next(m for m in model.modules() if isinstance(m, ProteusLinear))
    assert isinstance(model.lm_head, RTNLinear)
    scaled = (proteus.sv, model.lm_head.scale)
    with torch.no_grad():
        for t in scaled:
            t.mul_(2)
    try:
        torch.testing.assert_close(logits(compiled), logits(model), atol=ATOL, rtol=0)
        assert not torch.allclose(logits(model), before)
    finally:
        with torch.no_grad():
            for t in scaled:
                t.div_(2)
    assert torch.equal(logits(model), before)  # the eager caches followed the change back


@pytest.mark.slow  # inductor on the CPU: 18 s measured with a warm inductor cache, more when cold
def test_a_loaded_model_compiles_fullgraph_with_inductor(one_torch_thread, tmp_path):
    from transformers import AutoModelForCausalLM

    torch._dynamo.reset()
    path = save_quantized(quantized(rtn_head=False), tmp_path / "q")
    for model in (load_quantized(path), AutoModelForCausalLM.from_pretrained(path)):
        compiled = torch.compile(model, fullgraph=True)
        for x in (X, X[:1, :1]):
            torch.testing.assert_close(logits(compiled, x), logits(model, x), atol=ATOL, rtol=0)
