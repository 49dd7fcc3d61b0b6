"""Device checks on a faked CUDA device (the workspace's ``fake_cuda`` fixture): the public calls take
CPU inputs (token ids, overlaps, grids, tables) next to a model or tensors on CUDA and keep their work and
outputs on the model's / input's device. Fake tensors hold no values: only devices and shapes are checked
here; the values are those of the CPU tests."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from torch._subclasses.fake_tensor import DynamicOutputShapeException

from icml_compress.baselines import lloyd_max
from icml_compress.cgc import ShareConfig, collect_statistics, fit_shared_basis
from icml_compress.proteus import make_code, overlap_stats
from icml_compress.quantize import (
    ProteusLinear,
    QuantConfig,
    RTNLinear,
    apply_compensation,
    evaluate,
    quantize_model,
)
from icml_compress.quantize.evaluate import reference_logprobs
from icml_compress.trellis import BitshiftTrellis, viterbi

# tensors_key (the cache keys of the quantized modules) reads the fake tensors' data pointers
pytestmark = pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor:UserWarning")

CONFIG = QuantConfig(method="proteus", L=8, T=32, n_calibration=2, seq_len=32, n_candidates=2, max_blocks=1)


def tiny(seed=0):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed)


def token_ids(n=256, seed=0):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def quantized(one_torch_thread):
    """A Proteus-quantized tiny Llama (first block) and its float reference, on the CPU."""
    return quantize_model(tiny(), CONFIG, token_ids(), progress=False), tiny()


def on_cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


# --- calibration and evaluation with CPU token ids -------------------------------------------------------
def test_collect_statistics_moves_the_ids_to_the_model(fake_cuda, one_torch_thread):
    model = tiny()
    config = ShareConfig(ratio=0.2, n_calibration=2, seq_len=16)
    with fake_cuda(scalar=0.0):  # 0: no id out of range (check_token_ids counts them)
        stats = collect_statistics(model.to("cuda"), token_ids(), config=config, progress=False)
        assert stats and all(on_cuda(H) and H.shape[0] == H.shape[1] for H in stats.values())


def test_apply_compensation_calibrates_on_the_reference_device(fake_cuda, one_torch_thread, quantized):
    model, reference = (copy.deepcopy(m) for m in quantized)
    with fake_cuda(scalar=0.0):
        model, reference = model.to("cuda"), reference.to("cuda")
        out = apply_compensation(model, reference, token_ids(), CONFIG, progress=False)
        assert out
        assert all(on_cuda(m.su) and on_cuda(m.sv) for m in model.modules() if isinstance(m, ProteusLinear))


def test_apply_compensation_solves_on_the_hessians_device(fake_cuda, one_torch_thread, quantized):
    model, reference = (copy.deepcopy(m) for m in quantized)
    names = [n for n, m in model.named_modules() if isinstance(m, ProteusLinear)]
    with fake_cuda(scalar=0.0):
        model, reference = model.to("cuda"), reference.to("cuda")
        hessians = {
            n: torch.eye(model.get_submodule(n).in_features, dtype=torch.float64, device="cuda")
            for n in names
        }
        out = apply_compensation(model, reference, token_ids(), CONFIG, progress=False, hessians=hessians)
        assert sorted(out) == sorted(names)
        assert all(on_cuda(model.get_submodule(n).su) for n in names)


def test_evaluate_moves_sequences_and_reference_logprobs_to_the_model(fake_cuda, one_torch_thread, quantized):
    model, reference = (copy.deepcopy(m) for m in quantized)
    sequences = token_ids(64, seed=1).view(2, 32)
    with fake_cuda(scalar=0.0):
        model, reference = model.to("cuda"), reference.to("cuda")
        result = evaluate(model, sequences, reference=reference)
        assert result["tokens"] == sequences.numel() and len(result["kl_per_sequence"]) == 2
        lp = reference_logprobs(reference, sequences)
        assert on_cuda(lp) and lp.shape[:2] == sequences.shape


def test_evaluate_moves_cpu_reference_logprobs_to_the_model(fake_cuda, one_torch_thread, quantized):
    model = copy.deepcopy(quantized[0])
    sequences = token_ids(64, seed=1).view(2, 32)
    reference_lp = torch.full((*sequences.shape, 256), -5.5, dtype=torch.float16)  # kept on the CPU
    with fake_cuda(truth=False, scalar=0.0):  # False: no NaN or positive log-probability
        result = evaluate(model.to("cuda"), sequences, reference_lp=reference_lp)
        assert len(result["kl_per_sequence"]) == 2


# --- quantized modules moved or filled on CUDA -----------------------------------------------------------
def test_proteus_linear_forward_after_a_cpu_training_forward_and_a_move(
    fake_cuda, one_torch_thread, quantized
):
    lin = copy.deepcopy(next(m for m in quantized[0].modules() if isinstance(m, ProteusLinear)))
    lin.sv.requires_grad_(True)  # the distillation path: the decoded weight is cached on the module
    lin(torch.randn(1, lin.in_features))
    with fake_cuda():
        lin = lin.to("cuda")
        y = lin(torch.randn(2, lin.in_features, device="cuda"))
        assert on_cuda(y) and y.shape == (2, lin.out_features)


def test_rtn_linear_set_codes_on_cuda(fake_cuda, one_torch_thread):
    mod = RTNLinear(64, 8, bits=2, group_size=32)
    with fake_cuda():
        mod = mod.to("cuda")
        mod.set_codes(torch.randint(0, 4, (8, 64), device="cuda"))
        assert on_cuda(mod.codes) and mod.codes.shape == (8, 16)
        assert on_cuda(mod(torch.randn(2, 64, device="cuda")))


# --- CGC, trellis, Proteus codes, baselines --------------------------------------------------------------
def test_fit_shared_basis_refit_on_cuda(fake_cuda, one_torch_thread):
    with fake_cuda(scalar=0.0):  # 0: the Cholesky factorization reports success
        weights = [torch.randn(12, 24, dtype=torch.float64, device="cuda") for _ in range(2)]
        hessians = [torch.eye(24, dtype=torch.float64, device="cuda") for _ in range(2)]
        fit = fit_shared_basis(weights, hessians, 6, refit=True)
        assert on_cuda(fit.basis) and fit.basis.shape == (24, 6)
        assert all(on_cuda(c) and c.shape == (6, 12) for c in fit.coeffs)


def test_viterbi_moves_cpu_overlaps_to_x(fake_cuda, one_torch_thread):
    trellis = BitshiftTrellis(8, 2, 1, 32)
    values = make_code("1mad", 8).values()  # CPU, moved to x's device as documented
    start = torch.randint(0, 64, (4,), generator=torch.Generator().manual_seed(0))
    with fake_cuda():
        x = torch.randn(4, 32, device="cuda")
        states = viterbi(x, values, trellis, start_overlap=start, end_overlap=start, workers=1)
        assert on_cuda(states) and states.shape == (4, 32)


@pytest.mark.parametrize(("name", "V"), [("hyb", 2), ("lut", 1), ("lut", 2)])
def test_table_codes_decode_on_the_states_device(fake_cuda, one_torch_thread, name, V):
    code = make_code(name, 10, V)  # its table is made on the CPU
    with fake_cuda():
        values = code.decode(torch.randint(0, 1 << 10, (4, 256), device="cuda"))
        assert on_cuda(values) and values.shape == (4, 256, V)


def test_overlap_stats_on_cuda_values(fake_cuda, one_torch_thread):
    """Fake tensors stop at ``torch.unique`` (an output size that depends on the data), after the lines
    that build the quadrature points and rank cells: a device mismatch there would raise first."""
    with fake_cuda():
        values = torch.randn(1 << 10, dtype=torch.float64, device="cuda")
        with pytest.raises(DynamicOutputShapeException):
            overlap_stats(values, 10)


def test_lloyd_max_moves_a_cpu_init_to_x(fake_cuda, one_torch_thread):
    init = torch.linspace(-1, 1, 4).repeat(3, 1)
    with fake_cuda():
        result = lloyd_max(torch.randn(3, 64, device="cuda"), levels=4, iters=2, init=init)
        assert on_cuda(result.levels) and result.levels.shape == (3, 4)
        assert on_cuda(result.dequantized) and result.dequantized.shape == (3, 64)
