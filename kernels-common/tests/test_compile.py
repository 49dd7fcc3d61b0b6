"""torch.compile of the public ops with the arguments a user varies between calls: a float (``scale``,
``alpha``) or an int (``block_size``) that dynamo makes dynamic (``dynamic=True``, or the default from the
second value on), and the table codes of the trellis ops. One graph, the eager result. Runs everywhere."""

from __future__ import annotations

import math

import pytest
import torch

from icml_kernels import (
    block_sparse_attention,
    dense_block_index,
    fwht,
    fwht_reference,
    hadamard_matrix,
    trellis_decode,
    trellis_gemv,
)
from icml_kernels.trellis.testing import example_params, random_packed

GEN = torch.Generator().manual_seed(0)
X = torch.randn(4, 16, generator=GEN, dtype=torch.float64)
PACKED = random_packed(3, 2, 4)  # 1mad, L 12, K 2, T 64: 4 words per tile
Q, K, V = (torch.randn(1, 2, 40, 8, generator=GEN, dtype=torch.float64) for _ in range(3))
INDEX = dense_block_index(40, 16)


def sdpa(scale: float) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, scale=scale)


# (function of the float, its expected value): the explicit product, or eager where there is none
FLOAT_CASES = {
    "fwht": (lambda s: fwht(X, scale=s), lambda s: X @ hadamard_matrix(16) * s),
    "fwht_reference": (lambda s: fwht_reference(X, s), lambda s: X @ hadamard_matrix(16) * s),
    "trellis_decode": (
        lambda s: trellis_decode(PACKED, "1mad", 12, 2, 1, 64, alpha=s, beta=-s),
        lambda s: trellis_decode(PACKED, "1mad", 12, 2, 1, 64, alpha=s, beta=-s),
    ),
    "trellis_gemv": (
        lambda s: trellis_gemv(X.repeat(1, 8), PACKED, "1mad", 12, 2, 1, 64, alpha=s),
        lambda s: trellis_gemv(X.repeat(1, 8), PACKED, "1mad", 12, 2, 1, 64, alpha=s),
    ),
    "block_sparse_attention": (
        lambda s: block_sparse_attention(Q, K, V, INDEX, block_size=16, scale=s),
        sdpa,
    ),
}


@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")  # fwht_reference
@pytest.mark.parametrize("name", FLOAT_CASES)
def test_a_dynamic_float_argument_keeps_one_graph(name):
    # The finiteness check of scale/alpha/beta (validation.check_finite_float) called math.isfinite, which
    # dynamo cannot trace on a float it made dynamic: fullgraph raised "Unsupported: torch.* op returned
    # non-Tensor", the default compile broke the graph there. torch's own sdpa(scale=s) compiles whole.
    fn, expected = FLOAT_CASES[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager", fullgraph=True, dynamic=True)
    for s in (0.5, 0.25):
        # measured: 0 (trellis ops, fwht), 3.1e-15 (block_sparse_attention against float64 sdpa)
        torch.testing.assert_close(compiled(s), expected(s), rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager")  # non-finite values still raise, compiled or not
    compiled(0.5)
    compiled(0.25)  # the second value makes the float dynamic
    with pytest.raises(ValueError, match="must be a finite float"):
        compiled(math.inf)


@pytest.mark.parametrize("code, L, K, V, T", [("lut", 8, 2, 2, 16), ("hyb", 9, 2, 2, 32)])
def test_table_codes_compile_without_a_graph_break(code, L, K, V, T):
    # The table's finiteness check read the table while torch.compile traced: "Data-dependent branching"
    # under fullgraph, two graph breaks in the default compile. It is skipped while tracing, as the other
    # data checks are.
    params = example_params(code, L, V)
    packed = random_packed(3, 2, K * T // 32)
    x = torch.randn(2, 2 * T, generator=torch.Generator().manual_seed(1))
    for fn in (
        lambda p: trellis_decode(p, code, L, K, V, T, **params),
        lambda p: trellis_gemv(x, p, code, L, K, V, T, **params),
    ):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="eager", fullgraph=True)
        assert torch.equal(compiled(packed), fn(packed))  # measured: bit-identical


def test_block_sparse_attention_with_another_block_size_compiles():
    # A second block_size made the int dynamic: the registered op's fake refused the SymInt
    # ("TypeError: block_size must be an int, got s17" inside dynamo's TorchRuntimeError), so the default
    # compile crashed on the second block size.
    fn = torch.compile(
        lambda q, k, v, index, bs: block_sparse_attention(q, k, v, index, block_size=bs), backend="eager"
    )
    torch._dynamo.reset()
    for block_size in (16, 8, 32):
        out = fn(Q, K, V, dense_block_index(40, block_size), block_size)
        # dense: full attention; measured 2.7e-15 against float64 sdpa
        torch.testing.assert_close(out, sdpa(1 / math.sqrt(8)), rtol=1e-12, atol=1e-12)
