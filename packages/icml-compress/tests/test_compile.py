"""``torch.compile(model, fullgraph=True)`` of a quantized model (how gpt-fast and torchao users compile):
on the CPU the quantized modules are one registered op each, which keeps the eager cache of the decoded
weight (its keys read storage addresses and version counters: not traced), and give the eager logits;
with CUDA or an input that requires grad they decode inside the graph. Before, dynamo raised ``Unsupported: Data pointer
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
# Compiled vs eager logits, measured (torch 2.15, CPU, 1 thread): 0 under aot_eager (the compiled CPU
# forward calls the ops that run the eager product on the cached weight), at most 3.6e-7 under inductor
# (it compiles the rest of the model, norms and attention, with its own rounding; logits up to 1.4).
# Until 2026-12-07 the graph took the rotated path: 4.8e-7 under aot_eager. Tolerance 1e-5: a 20x margin.
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


def test_the_compiled_cpu_forward_is_one_cached_op_and_gives_the_eager_logits_exactly(one_torch_thread):
    """Off CUDA the compiled graph calls the cached-weight ops (the eager strategy: decode once), not the
    decoder: before, the graph decoded every Proteus weight on every call (trellis_decode/trellis_gemv in
    the graph; one run, CPU: 9.4 ms against 0.83 ms eager per one-token step of this model under
    aot_eager, 8.5 ms with inductor; now 1.1 and 0.42 ms) and its logits were 2.4e-7 off eager's."""
    torch._dynamo.reset()
    model = quantized()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    proteus = next(m for m in model.modules() if isinstance(m, ProteusLinear))
    proteus.clear_cache()
    for x in (X, X[:1, :1]):
        assert torch.equal(logits(compiled, x), logits(model, x))  # the same kernels on the same weight
    entry = proteus._cache
    assert entry is not None  # filled by the compiled call, the eager one hit it
    assert "proteus_cached_linear" in graphs[0] and "rtn_cached_linear" in graphs[0]
    assert "trellis" not in "".join(graphs)
    logits(compiled, X[:1, :1])
    assert proteus._cache[2] is entry[2]  # a hit: nothing decoded again
    # an input that requires grad keeps the traced product (the ops have no backward): input gradients
    # measured 8.6e-8 apart (gradients up to 0.27; the rotated path rounds differently), ATOL a 100x margin
    v = torch.randn(3, proteus.in_features, generator=torch.Generator().manual_seed(0), requires_grad=True)
    grads = []
    for f in (proteus, torch.compile(proteus, fullgraph=True, backend="aot_eager")):
        v.grad = None
        f(v).square().sum().backward()
        grads.append(v.grad)
    torch.testing.assert_close(grads[1], grads[0], atol=ATOL, rtol=0)
    # the ops' registrations (schema, fake kernel, no alias of an input or of the cached weight)
    from icml_compress.quantize.linear import proteus_cached_linear, rtn_cached_linear

    p, head = proteus, model.lm_head
    args = (p.packed, p.alpha, p.beta, p.su, p.sv, p.table, p.code, p.L, p.K, p.V, p.T, *p.mulbal)
    torch.library.opcheck(proteus_cached_linear, (torch.randn(2, 3, p.in_features), *args))
    args = (head.codes, head.scale, head.offset, head.bits, head.group_size)
    torch.library.opcheck(rtn_cached_linear, (torch.randn(2, head.in_features), *args))
