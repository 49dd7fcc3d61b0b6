"""Proteus part 2 on tiny random Llama models: calibration, incoherence, LDLQ, quantized modules,
quantize_model / save / load, compensation, distillation, bad input, the CLI."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from icml_compress.baselines.rtn import rtn_quantize
from icml_compress.quantize import (
    ProteusLinear,
    QuantConfig,
    apply_compensation,
    bytes_per_token,
    evaluate,
    load_quantized,
    model_hessians,
    packed_hash,
    quantize_model,
    save_quantized,
)
from icml_compress.quantize.calibration import collect_hessians, make_sequences, regularize
from icml_compress.quantize.incoherence import (
    rotate,
    rotate_weight,
    unrotate,
    unrotate_weight,
)
from icml_compress.quantize.ldlq import block_ldl, ldlq, proxy_error
from icml_compress.quantize.model import find_linears, quantize_linear_trellis

FAST = {"L": 8, "T": 32, "n_calibration": 4, "seq_len": 32, "n_candidates": 2, "select_rows": 8}


def tiny(seed=0, **kw):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed, **kw)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (1024,), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def proteus_model(ids):
    torch.set_num_threads(1)
    return quantize_model(tiny(), QuantConfig(compensation=True, **FAST), ids, progress=False)


# --- incoherence -------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [64, 576, 96])
def test_rotation_is_orthogonal_and_incoherent(n):
    R = rotate(torch.eye(n, dtype=torch.float64))  # rows: R e_i = column i of R -> this is R^T
    torch.testing.assert_close(R @ R.T, torch.eye(n, dtype=torch.float64), atol=1e-12, rtol=0)
    # a Hadamard has max |entry| = 1/sqrt(n); the DCT (x) Hadamard factor is within sqrt(2) of it
    assert R.abs().max().item() <= math.sqrt(2.0 / n) + 1e-12
    x = torch.randn(3, n, dtype=torch.float64)
    torch.testing.assert_close(unrotate(rotate(x)), x)


def test_rotated_weight_computes_the_same_layer():
    g = torch.Generator().manual_seed(1)
    W = torch.randn(48, 576, generator=g, dtype=torch.float64)
    su = torch.randint(0, 2, (576,), generator=g).double() * 2 - 1
    sv = torch.randint(0, 2, (48,), generator=g).double() * 2 - 1
    Wr = rotate_weight(W, su, sv)
    x = torch.randn(5, 576, generator=g, dtype=torch.float64)
    y = sv * unrotate(rotate(x * su) @ Wr.T)
    torch.testing.assert_close(y, x @ W.T)
    torch.testing.assert_close(unrotate_weight(Wr, su, sv), W)


# --- calibration -------------------------------------------------------------------------------------
def test_hessians_equal_brute_force_and_are_shared(ids):
    model = tiny()
    linears = find_linears(model, QuantConfig())
    seqs = make_sequences(ids, 3, 16)
    H = collect_hessians(model, linears, seqs)
    captured = []
    q = linears["model.layers.1.mlp.down_proj"]
    h = q.register_forward_pre_hook(lambda m, a: captured.append(a[0].reshape(-1, a[0].shape[-1]).double()))
    with torch.no_grad():
        for s in seqs:
            model(s.unsqueeze(0))
    h.remove()
    X = torch.cat(captured)
    torch.testing.assert_close(H["model.layers.1.mlp.down_proj"], X.T @ X / X.shape[0])
    assert H["model.layers.0.self_attn.q_proj"] is H["model.layers.0.self_attn.v_proj"]
    assert not torch.equal(H["model.layers.0.self_attn.q_proj"], H["model.layers.0.self_attn.o_proj"])


def test_non_pd_hessian_is_repaired_with_a_warning():
    H = torch.diag(torch.tensor([1.0, 1.0, -0.5]))
    with pytest.warns(RuntimeWarning, match="not positive definite"):
        Hd = regularize(H, 0.01)
    assert torch.linalg.eigvalsh(Hd).min() > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        regularize(torch.eye(3), 0.01)


@pytest.mark.parametrize("s", [1e-14, 1e-20, 1e-40, 1e-100])
def test_damping_is_relative_for_tiny_hessians(s, one_torch_thread):
    # H of inputs with RMS below 1e-6 (mean diagonal < 1e-12): the damping was clamped to 0.01 * 1e-12, so
    # it outweighed H and the result depended on H's scale. Before the fix, H * 1e-14 gave a 1mad layer
    # (64 inputs, L=8, T=32) other codes than H, proxy error 0.0882 against 0.0644 (1e-20: 0.0876); now
    # the same codes for every scale down to 1e-280 (checked), regularize(s H) = s regularize(H)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(400, 64, generator=g, dtype=torch.float64) * torch.logspace(
        0, -2, 64, dtype=torch.float64
    )
    H = X.T @ X / 400
    # measured: relative difference 1.5e-16 or less; rtol 1e-12
    torch.testing.assert_close(regularize(H * s, 0.01) / s, regularize(H, 0.01), rtol=1e-12, atol=0)
    lin = nn.Linear(64, 16, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(16, 64, generator=g))
    cfg = QuantConfig(method="trellis", code="1mad", L=8, T=32)
    ref, st_ref = quantize_linear_trellis(lin, H, cfg, "layer")
    mod, st = quantize_linear_trellis(lin, H * s, cfg, "layer")
    assert torch.equal(mod.packed, ref.packed)
    assert st["proxy"] == pytest.approx(st_ref["proxy"], rel=1e-12)
    # compensation's output scales divided by a floor of 1e-30: sv collapsed to ~0 (relative error 1.0)
    # at H * 1e-40 and 1e-100; now equal to the unscaled ones (measured: difference 0.0 down to 1e-280)
    comp = QuantConfig(method="trellis", code="1mad", L=8, T=32, compensation=True)
    ref, _ = quantize_linear_trellis(lin, H, comp, "layer")
    mod, _ = quantize_linear_trellis(lin, H * s, comp, "layer")
    assert torch.equal(mod.packed, ref.packed)
    torch.testing.assert_close(mod.sv, ref.sv, rtol=1e-12, atol=0)
    torch.testing.assert_close(mod.su, ref.su, rtol=1e-12, atol=0)


# --- LDLQ --------------------------------------------------------------------------------------------
def test_block_ldl_and_ldlq_beat_plain_rounding():
    g = torch.Generator().manual_seed(2)
    A = torch.randn(64, 256, generator=g, dtype=torch.float64)
    H = A @ A.T / 256 + 0.5 * torch.ones(64, 64, dtype=torch.float64)  # correlated inputs
    M = block_ldl(H, 16)
    assert torch.allclose(M.tril(-1), torch.zeros_like(M)) and torch.allclose(
        M.diagonal(), torch.ones(64, dtype=M.dtype)
    )
    Minv = torch.linalg.inv(M)
    D = Minv @ H @ Minv.T
    mask = torch.block_diag(*[torch.ones(16, 16, dtype=torch.bool)] * 4)
    assert D[~mask].abs().max() < 1e-9 * D.abs().max()
    W = torch.randn(32, 64, generator=g, dtype=torch.float64)

    def rnd(t):
        return torch.round(t * 2) / 2, None

    Q, _ = ldlq(W, M, 16, rnd)
    assert proxy_error(W, Q, H) < 0.8 * proxy_error(W, rnd(W)[0], H)
    exact, _ = ldlq(W, M, 16, lambda t: (t, None))
    torch.testing.assert_close(exact, W, atol=1e-6, rtol=0)


# --- modules, quantize_model, save/load ------------------------------------------------------------
def test_proteus_model_roundtrip_generate_and_bytes(proteus_model, tmp_path):
    model = proteus_model
    mods = [m for m in model.modules() if isinstance(m, ProteusLinear)]
    assert len(mods) == 14 and all(m.code == "mulbal" and m.candidate in (0, 1) for m in mods)
    assert isinstance(model.lm_head, nn.Linear)  # skipped by default
    x = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model(x).logits
    # the module applies its dequantized weight, on the inference path and on the rotated path of
    # distillation (the one trellis_gemv takes on CUDA); the cached weight follows changes of sv
    m0 = mods[0]
    v = torch.randn(4, m0.in_features)
    dense = v @ m0.dequantized_weight().T
    torch.testing.assert_close(m0(v), dense)
    m0.alpha.requires_grad_(True)
    try:
        torch.testing.assert_close(m0(v).detach(), dense, atol=1e-5, rtol=1e-4)
    finally:
        m0.alpha.requires_grad_(False)
        m0.__dict__.pop("_raw", None)
    with torch.no_grad():
        m0.sv.mul_(2)
        torch.testing.assert_close(m0(v), 2 * dense)
        m0.sv.div_(2)
    save_quantized(model, tmp_path / "q")
    again = load_quantized(tmp_path / "q")
    with torch.no_grad():
        assert torch.equal(again(x).logits, out)
    assert packed_hash(again) == packed_hash(model)
    gen = again.generate(x[:1, :5], max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert gen.shape == (1, 9)
    b = bytes_per_token(model)
    expected = sum(m.packed.numel() * 4 + 4 * (m.in_features + m.out_features) + 8 for m in mods)
    assert b["quantized_bytes"] == expected and b["table_bytes"] == 0
    assert b["float16_bytes"] == 2 * sum(m.in_features * m.out_features for m in mods)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_proteus_linear_on_cuda_matches_the_cpu_and_keeps_no_decoded_weight(proteus_model):
    import copy

    mod = copy.deepcopy(next(m for m in proteus_model.modules() if isinstance(m, ProteusLinear)))
    v = torch.randn(3, mod.in_features, generator=torch.Generator().manual_seed(5))
    ref = mod(v)  # the CPU's dense product
    mod.clear_cache()
    mod = mod.to("cuda")
    vc = v.cuda()
    with torch.no_grad():
        mod(vc), mod(vc[:1])  # warm-up: Triton compiles, the rotation's DCT factor moves to the GPU once
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # a forward pass never waits for the GPU (no float(alpha))
        try:
            rows = mod(vc)  # trellis_decode + matmul
            one = mod(vc[:1])  # fused trellis_gemv
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.testing.assert_close(rows.cpu(), ref, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(one.cpu(), ref[:1], atol=1e-4, rtol=1e-3)
    assert mod._cache is None


def test_proteus_linear_reads_no_value_back_and_its_cache_follows_every_change(proteus_model, monkeypatch):
    import copy

    mod = copy.deepcopy(next(m for m in proteus_model.modules() if isinstance(m, ProteusLinear)))
    mod.clear_cache()
    v = torch.randn(3, mod.in_features, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        before = mod(v)
    ref_weight = mod.dequantized_weight().clone()

    def host_read(*args, **kwargs):
        raise AssertionError("a tensor value was read back to the host")

    with monkeypatch.context() as patch, torch.no_grad():
        for name in ("__float__", "item", "tolist"):
            patch.setattr(torch.Tensor, name, host_read)
        mod.clear_cache()
        torch.testing.assert_close(mod(v), before, atol=0, rtol=0)
        torch.testing.assert_close(
            mod.rotated_weight(), mod.raw_weight() * mod.alpha + mod.beta, atol=0, rtol=0
        )
        mod.alpha.mul_(2)  # in place: the version counter moves
        assert not torch.equal(mod.dequantized_weight(), ref_weight)
        mod.alpha.div_(2)
        torch.testing.assert_close(mod.dequantized_weight(), ref_weight)
        mod.beta = nn.Parameter(mod.beta + 1, requires_grad=False)  # replaced: a new tensor
        assert not torch.equal(mod.dequantized_weight(), ref_weight)


BASE = {
    "in_features": 64,
    "out_features": 8,
    "code": "mulbal",
    "L": 10,
    "K": 2,
    "V": 1,
    "T": 32,
    "mulbal": (3, 0, 8),
}


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"code": "nope", "L": 99}, ValueError, r"L must be in 8\.\.16"),
        ({"code": "nope"}, ValueError, "code must be one of"),
        ({"K": 5}, ValueError, r"K must be in 1\.\.4"),
        ({"L": 10.0}, TypeError, "L must be an int"),
        ({"V": 2}, ValueError, "V must be 1"),
        ({"T": 40}, ValueError, r"K\*T must be a multiple of 32"),
        ({"T": 64, "in_features": 96}, ValueError, "T=64 must divide in_features=96"),
        ({"mulbal": None}, TypeError, r"mulbal must be a tuple \(a, b, m\)"),
        ({"mulbal": (3, 0, 9)}, ValueError, r"mulbal m must be in 1\.\.8"),
        ({"code": "1mad"}, ValueError, "only apply to code 'mulbal'"),
        ({"code": "1mad", "mulbal": None, "table_shape": (1024, 1)}, ValueError, "takes no table"),
        ({"code": "lut", "mulbal": None}, TypeError, r"table of shape \(1024, 1\); table_shape is None"),
        (
            {"code": "hyb", "V": 2, "mulbal": None, "table_shape": (64, 2)},
            ValueError,
            r"table_shape must have shape \(256, 2\)",
        ),
        ({"out_features": 0}, ValueError, "out_features must be 1 or more"),
        ({"bias": 1}, TypeError, "bias must be a bool"),
        ({"candidate": -1}, ValueError, "candidate must be 0 or more"),
    ],
)
def test_proteus_linear_checks_its_arguments_when_built(change, error, match):
    with pytest.raises(error, match=match):
        ProteusLinear(**{**BASE, **change})


def test_proteus_linear_builds_every_code():
    for change in (
        {},
        {"code": "1mad", "mulbal": None},
        {"code": "lut", "V": 2, "mulbal": None, "table_shape": (1024, 2)},
        {"code": "hyb", "V": 2, "mulbal": None, "table_shape": (256, 2)},
    ):
        mod = ProteusLinear(**{**BASE, **change})
        assert ProteusLinear.from_meta(mod.meta()).meta() == mod.meta()
        assert mod(torch.randn(2, 64)).shape == (2, 8)


def test_failed_save_keeps_the_previous_copy(proteus_model, tmp_path, monkeypatch):
    save_quantized(proteus_model, tmp_path / "q")
    before = (tmp_path / "q" / "model.safetensors").read_bytes()
    import icml_compress.quantize.model as qm

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(qm.json, "dumps", boom)
    with pytest.raises(OSError, match="disk full"):
        save_quantized(proteus_model, tmp_path / "q")
    assert (tmp_path / "q" / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q"]  # no temporary left behind
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("mine")
    with pytest.raises(ValueError, match="not overwriting"):
        save_quantized(proteus_model, tmp_path / "other")


def test_proxy_ordering_and_compensation(proteus_model, ids):
    """Trellis LDLQ beats RTN on the Hessian proxy; compensation never increases it; hyb has a table."""
    ref = tiny()
    stats = proteus_model.icml_quantization["layers"]
    seqs = make_sequences(ids, 4, 32)
    lin = find_linears(ref, QuantConfig())
    H = collect_hessians(ref, lin, seqs)
    for name, st in stats.items():
        assert st["proxy_compensated"] <= st["proxy"] * (1 + 1e-9) + 1e-12
        W = lin[name].weight.detach().double()
        Hr = regularize(H[name], 0.01)
        rtn = proxy_error(W, rtn_quantize(W, 2, 32).dequantized.double(), Hr)
        assert st["proxy_compensated"] < rtn
    plain = quantize_model(tiny(), QuantConfig(**FAST), ids, progress=False)
    assert packed_hash(plain) == packed_hash(proteus_model)  # compensation leaves the indices alone
    x = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        before = plain(x).logits
        apply_compensation(plain, tiny(), ids, QuantConfig(compensation=True, **FAST))  # afterwards == during
        torch.testing.assert_close(plain(x).logits, proteus_model(x).logits)
        assert not torch.allclose(before, plain(x).logits)
    hyb = quantize_model(tiny(), QuantConfig(method="trellis", code="hyb", **FAST), ids, progress=False)
    assert bytes_per_token(hyb)["quantized_bytes"] > bytes_per_token(proteus_model)["quantized_bytes"]
    assert bytes_per_token(hyb)["table_bytes"] > 0


def test_fixed_code_baseline_gets_the_same_compensation_and_distillation(ids):
    """``method="trellis"`` takes compensation and distillation as Proteus does (the fair baseline of the
    combined pair): packed words unchanged, compensation equal to ``apply_compensation`` afterwards and never
    raising the proxy, distillation lowering KL on its sequences; RTN refuses both, naming them."""
    base = {**FAST, "method": "trellis", "code": "1mad"}
    plain = quantize_model(tiny(), QuantConfig(**base), ids, progress=False)
    comp = quantize_model(tiny(), QuantConfig(compensation=True, **base), ids, progress=False)
    both = quantize_model(
        tiny(), QuantConfig(compensation=True, distill_steps=8, distill_lr=5e-3, **base), ids, progress=False
    )
    assert QuantConfig(compensation=True, distill_steps=8, **base).label == "trellis-1mad+comp+distill"
    assert packed_hash(plain) == packed_hash(comp) == packed_hash(both)
    for st in comp.icml_quantization["layers"].values():
        assert st["proxy_compensated"] <= st["proxy"] * (1 + 1e-9) + 1e-12
    x = torch.randint(0, 256, (1, 16))
    seqs = make_sequences(ids, 4, 32)  # the distillation sequences
    with torch.no_grad():
        apply_compensation(plain, tiny(), ids, QuantConfig(compensation=True, **base))
        torch.testing.assert_close(plain(x).logits, comp(x).logits)
        assert (
            evaluate(both, seqs, reference=tiny())["kl"] < 0.95 * evaluate(comp, seqs, reference=tiny())["kl"]
        )
    for kw in ({"compensation": True}, {"distill_steps": 2}):
        with pytest.raises(ValueError, match="compensation and distill_steps apply to the trellis methods"):
            QuantConfig(method="rtn", **kw)


@pytest.mark.parametrize("outlier, bits", [(-7e4, 4), (2.2e5, 2), (7e4, 1)])
def test_rtn_refuses_weights_beyond_float16_scales(ids, outlier, bits, one_torch_thread):
    # RTNLinear stores float16 offsets and steps: one weight of -7e4 (a float32 model) made the group's
    # offset -inf, 2.2e5 at 2 bits a step of 7.3e4 -> inf (7e4 at 1 bit too), and before the fix the
    # quantized model's logits were all non-finite without a word; now a ValueError names the layer
    model = tiny()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = outlier
    cfg = QuantConfig(method="rtn", bits=bits, group_size=64, seq_len=32)
    with pytest.raises(ValueError, match=r"layers\.0\.mlp\.down_proj.*float16.*65504"):
        quantize_model(model, cfg, ids, progress=False)
    with torch.no_grad():  # just inside float16's range: quantized, finite logits
        model.model.layers[0].mlp.down_proj.weight[0, 0] = -6e4 if outlier < 0 else 6e4 * (2**bits - 1) / 2
    q = quantize_model(model, cfg, ids, progress=False)
    with torch.no_grad():
        assert torch.isfinite(q(ids[None, :8]).logits).all()


def test_rtn_method_and_distillation_keep_indices(ids, tmp_path):
    rtn = quantize_model(
        tiny(), QuantConfig(method="rtn", group_size=32, **{"seq_len": 32}), ids, progress=False
    )
    save_quantized(rtn, tmp_path / "r")
    x = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        assert torch.equal(load_quantized(tmp_path / "r")(x).logits, rtn(x).logits)
    assert bytes_per_token(rtn)["bits_per_weight"] == pytest.approx(2 + 32 / 32)  # 2 bits + 2 fp16 per 32
    cfg = QuantConfig(method="proteus", compensation=True, **{**FAST, "n_candidates": 1})
    plain = quantize_model(tiny(), cfg, ids, progress=False)
    model = quantize_model(tiny(), replace(cfg, distill_steps=8, distill_lr=5e-3), ids, progress=False)
    d = model.icml_quantization["distill"]
    assert d["hash_before"] == d["hash_after"] == packed_hash(model) == packed_hash(plain)
    seqs = make_sequences(ids, 4, 32)  # the distillation sequences
    with torch.no_grad():
        kl_plain = evaluate(plain, seqs, reference=tiny())["kl"]
        kl_distilled = evaluate(model, seqs, reference=tiny())["kl"]
    assert kl_distilled < 0.95 * kl_plain
    assert all(
        not p.requires_grad for m in model.modules() if isinstance(m, ProteusLinear) for p in m.parameters()
    )


def _chat_tokenizer():
    """A byte-level BPE tokenizer (vocab 260 + an end token) with a minimal chat template."""
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(
        ["hello world"],
        tokenizers.trainers.BpeTrainer(
            vocab_size=260, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>")
    out.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return out


def test_chat_questions_and_interleave():
    from pydoc_data.topics import topics

    from icml_compress.quantize.distill import chat_questions, interleave

    qs = chat_questions(4)
    first = sorted(topics)[0].replace("-", " ")
    assert len(qs) == 4 and qs[0] == f"What is {first} in Python?" and qs[1].startswith("Explain ")
    with pytest.raises(ValueError, match="pydoc_data topics"):
        chat_questions(len(topics) + 1)
    a, b = torch.arange(6).view(3, 2), -torch.arange(1, 3).view(1, 2)
    assert interleave(a, b).tolist() == [[0, 1], [-1, -2], [2, 3], [4, 5]]


def test_distillation_with_chat_transcripts(ids):
    from icml_compress.quantize.distill import chat_prompt_ids, chat_questions, chat_transcripts

    tok = _chat_tokenizer()
    teacher = tiny(vocab=512)
    prompt = chat_prompt_ids(tok, "What is assert in Python?")
    chat = chat_transcripts(teacher, tok, chat_questions(3), max_new_tokens=5)
    assert chat.numel() >= 3 * (prompt.shape[1] - 5)  # three prompts (topic names differ) plus answers
    # batched (left-padded, masked) generation equals one question at a time, and stops at end-of-sequence
    one_by_one = [chat_transcripts(teacher, tok, [q], max_new_tokens=5) for q in chat_questions(3)]
    assert torch.equal(chat_transcripts(teacher, tok, chat_questions(3), 5, batch_size=2), chat)
    assert torch.equal(torch.cat(one_by_one), chat)
    eos = tok.eos_token_id
    teacher.generation_config.eos_token_id = eos
    with torch.no_grad():  # make end-of-sequence the greedy answer of every prompt: transcripts end there
        teacher.lm_head.bias = nn.Parameter(torch.zeros(512).index_fill_(0, torch.tensor([eos]), 1e4))
    ended = chat_transcripts(teacher, tok, chat_questions(2), max_new_tokens=5)
    first, second = (chat_prompt_ids(tok, q)[0].tolist() for q in chat_questions(2))
    assert ended.tolist() == [*first, eos, *second, eos]
    for bad in (0, 1.5, True):
        with pytest.raises((TypeError, ValueError), match="batch_size"):
            chat_transcripts(teacher, tok, chat_questions(1), batch_size=bad)
    cfg = QuantConfig(
        method="proteus",
        compensation=True,
        distill_steps=4,
        distill_lr=5e-3,
        **{**FAST, "n_candidates": 1, "seq_len": 16},
    )
    plain = quantize_model(tiny(vocab=512), cfg, ids % 260, progress=False)
    model = quantize_model(
        tiny(vocab=512), replace(cfg, distill_chat=3), ids % 260, tokenizer=tok, progress=False
    )
    d = model.icml_quantization["distill"]
    assert d["hash_before"] == d["hash_after"] == packed_hash(plain)
    assert model.icml_quantization["config"]["distill_chat"] == 3
    assert "distill_chat" not in cfg.to_dict()  # configs without chat keep their digest (cache keys)
    assert QuantConfig.from_dict(replace(cfg, distill_chat=3).to_dict()).distill_chat == 3


# --- bad input ----------------------------------------------------------------------------------------
def test_bad_input(ids):
    with pytest.raises(ValueError, match=r"no nn\.Linear layers"):
        quantize_model(nn.Sequential(nn.Embedding(10, 4)), QuantConfig(), ids)
    with pytest.raises(ValueError, match=r"no nn\.Linear layers"):
        quantize_model(tiny(), QuantConfig(skip=("proj", "lm_head")), ids)
    with pytest.raises(ValueError, match="shorter than one sequence"):
        quantize_model(tiny(), QuantConfig(seq_len=64), ids[:63])
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        quantize_model(tiny().double(), QuantConfig(), ids)
    with pytest.raises(ValueError, match="tokenizer"):
        quantize_model(tiny(), QuantConfig(), "some text")
    with pytest.raises(ValueError, match="method"):
        QuantConfig(method="gptq")
    for bits in (3, 5, 6, 7):  # refused up front, not by RTNLinear after calibration
        with pytest.raises(ValueError, match="bits must be 1, 2, 4 or 8"):
            QuantConfig(method="rtn", bits=bits)
    assert [QuantConfig(method="rtn", bits=b).bits for b in (1, 2, 4, 8)] == [1, 2, 4, 8]
    with pytest.raises(ValueError, match="mulbal"):
        QuantConfig(method="proteus", code="1mad")
    with pytest.raises(ValueError, match="T=48"):
        quantize_model(tiny(), QuantConfig(T=48, **{k: v for k, v in FAST.items() if k != "T"}), ids)
    with pytest.raises(ValueError, match="icml_quantization"):
        save_quantized(tiny(), "/tmp/never-written")
    with pytest.raises(ValueError, match="distill_chat needs distill_steps"):
        QuantConfig(distill_chat=4)
    with pytest.raises(ValueError, match="chat template"):  # checked before any layer is quantized
        quantize_model(tiny(), QuantConfig(distill_steps=2, distill_chat=4, **FAST), ids)


def test_layer_streaming_calibrates_one_group_at_a_time_and_changes_nothing(ids, monkeypatch):
    import icml_compress.quantize.model as qm
    from icml_compress.quantize import packed_hash

    config = QuantConfig(**FAST)
    whole = quantize_model(tiny(layers=3), config, ids, progress=False)
    groups = []
    real = qm.collect_hessians

    def spy(model, linears, sequences, **kw):
        groups.append({qm.block_index(n) for n in linears})
        return real(model, linears, sequences, **kw)

    monkeypatch.setattr(qm, "collect_hessians", spy)
    monkeypatch.setattr(qm, "HESSIAN_BYTES", 1)  # every block is a group of its own
    streamed = quantize_model(tiny(layers=3), config, ids, progress=False)
    assert groups == [{0}, {1}, {2}]
    assert packed_hash(streamed) == packed_hash(whole)  # the Hessians come from the float model either way
    assert streamed.icml_quantization["layers"] == {
        n: {**st, "seconds": streamed.icml_quantization["layers"][n]["seconds"]}
        for n, st in whole.icml_quantization["layers"].items()
    }


def test_a_model_quantized_in_steps_records_every_layer_as_one_pass_does(ids, tmp_path, one_torch_thread):
    # quantize_model(..., max_blocks=1), then max_blocks=2 in memory, save, load_quantized and finish with
    # max_blocks=None: the record of the saved result equals the one-pass record but for the seconds (before
    # the fix it held the last pass's 7 layers of 21, so plot_layer_errors drew a third of the model)
    from icml_compress.quantize.plot import layer_errors

    config = QuantConfig(**FAST)
    H = model_hessians(tiny(layers=3), config, ids, progress=False)  # the float model's: the same words
    one = quantize_model(tiny(layers=3), config, ids, progress=False, hessians=H)
    steps = quantize_model(tiny(layers=3), replace(config, max_blocks=1), ids, progress=False, hessians=H)
    first = steps.icml_quantization["seconds"]
    quantize_model(steps, replace(config, max_blocks=2), ids, progress=False, hessians=H)
    assert len(steps.icml_quantization["layers"]) == 14
    save_quantized(steps, tmp_path / "steps")
    resumed = quantize_model(load_quantized(tmp_path / "steps"), config, ids, progress=False, hessians=H)
    save_quantized(resumed, tmp_path / "steps")
    save_quantized(one, tmp_path / "one")
    a, b = (load_quantized(tmp_path / d) for d in ("steps", "one"))
    assert packed_hash(a) == packed_hash(b)
    records = []
    for m in (a, b):
        record = json.loads(json.dumps(m.icml_quantization))
        seconds = record.pop("seconds")
        for st in record["layers"].values():
            st.pop("seconds")
        records.append((record, seconds))
    assert records[0][0] == records[1][0]
    assert list(records[0][0]["layers"]) == list(records[1][0]["layers"])  # model order
    assert records[0][1] > first  # the seconds of every pass
    assert layer_errors(a) == layer_errors(b)
    assert len(layer_errors(a)["layers"]) == 21


def test_a_step_with_another_config_keeps_the_earlier_layers_config(ids, one_torch_thread):
    two = QuantConfig(method="rtn", bits=2, max_blocks=1)
    model = quantize_model(tiny(layers=2), two, ids, progress=False)
    quantize_model(model, replace(two, bits=4, max_blocks=None), ids, progress=False)
    record = model.icml_quantization
    assert record["config"]["bits"] == 4 and len(record["layers"]) == 14
    for name, st in record["layers"].items():  # block 0's layers were quantized with 2 bits
        assert st == ({"config": two.to_dict()} if ".0." in name else {})


def test_hessians_computed_once_serve_every_config_and_change_nothing(ids, monkeypatch):
    import icml_compress.quantize.model as qm

    proteus, mad = QuantConfig(**FAST), QuantConfig(method="trellis", code="1mad", **FAST)
    H = model_hessians(tiny(layers=2), proteus, ids, progress=False)
    assert set(H) == set(find_linears(tiny(layers=2), proteus))
    assert H["model.layers.0.self_attn.q_proj"] is H["model.layers.0.self_attn.k_proj"]  # one input, one H
    calibrated = {c.label: quantize_model(tiny(layers=2), c, ids, progress=False) for c in (proteus, mad)}

    def no_calibration(*args, **kwargs):
        raise AssertionError("calibrated although the Hessians were given")

    monkeypatch.setattr(qm, "collect_hessians", no_calibration)
    for c in (proteus, mad):
        given = quantize_model(tiny(layers=2), c, ids, progress=False, hessians=H)
        assert packed_hash(given) == packed_hash(calibrated[c.label])
        seconds = {n: st.pop("seconds") for n, st in given.icml_quantization["layers"].items()}
        assert len(seconds) == 14
        assert given.icml_quantization["layers"] == {
            n: {k: v for k, v in st.items() if k != "seconds"}
            for n, st in calibrated[c.label].icml_quantization["layers"].items()
        }
    x = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        apply_compensation(
            calibrated["proteus"], tiny(layers=2), ids, QuantConfig(compensation=True, **FAST), hessians=H
        )
        monkeypatch.undo()
        again = quantize_model(tiny(layers=2), proteus, ids, progress=False)
        apply_compensation(again, tiny(layers=2), ids, QuantConfig(compensation=True, **FAST), progress=False)
        assert torch.equal(calibrated["proteus"](x).logits, again(x).logits)
    assert len(H) == 14  # the caller's dict is left whole
    short = {n: h for n, h in H.items() if "down_proj" not in n}
    with pytest.raises(ValueError, match=r"hessians has no entry for layer model\.layers\.0\.mlp\.down_proj"):
        quantize_model(tiny(layers=2), proteus, ids, hessians=short)
    bad = {**H, "model.layers.1.mlp.down_proj": torch.eye(64)}
    with pytest.raises(
        ValueError, match=r"hessians\['model\.layers\.1\.mlp\.down_proj'\] must be a floating \(128, 128\)"
    ):
        apply_compensation(again, tiny(layers=2), ids, proteus, hessians=bad)
    with pytest.raises(TypeError, match="hessians must be a dict"):
        quantize_model(tiny(layers=2), proteus, ids, hessians=list(H.values()))


def _flags(model: nn.Module) -> dict[str, bool]:
    return {n: m.training for n, m in model.named_modules()}


def test_quantize_model_keeps_training_flags(ids):
    """New layers take the replaced layer's training flag; distillation gives back every submodule's own."""
    cfg = QuantConfig(method="trellis", code="1mad", **{**FAST, "n_calibration": 2})
    model = tiny(layers=1)  # eval mode
    quantize_model(model, cfg, ids, progress=False)
    assert not any(_flags(model).values())  # 7 new layers were in train mode

    model = tiny(layers=1).train()
    model.model.embed_tokens.eval()  # a user's frozen part
    before = _flags(model)
    quantize_model(model, replace(cfg, distill_steps=2), ids, progress=False)
    assert _flags(model) == before and before["model.embed_tokens"] is False


def test_quantize_model_distills_under_no_grad(ids):
    """Distillation trains under the caller's ``torch.no_grad()``, with the same result as without it."""
    distilled = QuantConfig(method="trellis", code="1mad", distill_steps=2, **{**FAST, "n_calibration": 2})
    plain = quantize_model(tiny(layers=1), distilled, ids, progress=False)
    with torch.no_grad():
        under = quantize_model(tiny(layers=1), distilled, ids, progress=False)
    assert under.icml_quantization["distill"] == plain.icml_quantization["distill"]
    for (n, a), b in zip(under.state_dict().items(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b), n


def test_a_failed_distillation_leaves_the_float_layers(ids, monkeypatch):
    import icml_compress.quantize.model as qm

    def failing(*args, **kwargs):
        raise RuntimeError("distillation failed")

    monkeypatch.setattr(qm, "distill", failing)
    model = tiny(layers=1)
    layers = dict(model.named_modules())
    with pytest.raises(RuntimeError, match="distillation failed"):
        quantize_model(
            model, QuantConfig(distill_steps=2, **{**FAST, "n_calibration": 2}), ids, progress=False
        )
    after = dict(model.named_modules())
    assert after.keys() == layers.keys() and all(after[n] is m for n, m in layers.items())
    assert not hasattr(model, "icml_quantization")


def test_a_failed_compensation_changes_no_layer(ids):
    """A bad Hessian of the last layer raises before any layer is left compensated: every su/sv is as it
    was, and the retry with good Hessians equals one compensation of a fresh copy."""
    cfg = QuantConfig(method="trellis", code="1mad", **{**FAST, "n_calibration": 2})
    comp = replace(cfg, compensation=True)
    q = quantize_model(tiny(layers=1), cfg, ids, progress=False)
    once = quantize_model(tiny(layers=1), cfg, ids, progress=False)
    H = dict(model_hessians(tiny(layers=1), comp, ids, progress=False))
    last = "model.layers.0.mlp.down_proj"
    bad = {**H, last: H[last].clone()}
    bad[last][0, 0] = float("nan")
    scales = {n: (m.su.clone(), m.sv.clone()) for n, m in q.named_modules() if isinstance(m, ProteusLinear)}
    assert len(scales) == 7
    with pytest.raises(ValueError, match=r"H of model\.layers\.0\.mlp\.down_proj must be finite"):
        apply_compensation(q, tiny(layers=1), ids, comp, progress=False, hessians=bad)
    for n, m in q.named_modules():
        if isinstance(m, ProteusLinear):
            assert torch.equal(m.su, scales[n][0]) and torch.equal(m.sv, scales[n][1]), n
    assert apply_compensation(q, tiny(layers=1), ids, comp, progress=False, hessians=H) == apply_compensation(
        once, tiny(layers=1), ids, comp, progress=False, hessians=H
    )
    for (n, a), b in zip(q.state_dict().items(), once.state_dict().values(), strict=True):
        assert torch.equal(a, b), n


def test_calibration_groups_hold_whole_blocks_within_the_budget():
    from icml_compress.quantize.model import block_index, calibration_groups

    linears = find_linears(tiny(layers=4), QuantConfig())
    block = sum(8 * lin.in_features**2 for n, lin in linears.items() if block_index(n) == 0)
    assert calibration_groups(linears, None) == [linears]
    for budget, blocks in (
        (1, [[0], [1], [2], [3]]),
        (block, [[0], [1], [2], [3]]),
        (2 * block, [[0, 1], [2, 3]]),
    ):
        groups = calibration_groups(linears, budget)
        assert [sorted({block_index(n) for n in g}) for g in groups] == blocks
        assert [n for g in groups for n in g] == list(linears)  # every layer once, in the model's order


def test_quantization_device_is_checked(ids):
    with pytest.raises(ValueError, match="device"):
        QuantConfig(device="nonsense")
    with pytest.raises(TypeError, match="device"):
        QuantConfig(device=0)  # type: ignore[arg-type]
    assert "device" not in QuantConfig().to_dict()  # configs from before the field keep their digest
    assert QuantConfig.from_dict(QuantConfig(device="cpu").to_dict()).device == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"config\.device='cuda'"):
            quantize_model(tiny(), QuantConfig(device="cuda", **FAST), ids, progress=False)


# --- CLI ----------------------------------------------------------------------------------------------
def test_cli_quantize_and_evaluate_a_local_model(tmp_path, capsys):
    from icml_compress.cli import main

    src = tmp_path / "float"
    tiny(vocab=512).save_pretrained(src)
    _chat_tokenizer().save_pretrained(src)
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    out = tmp_path / "q"
    main(
        [
            "quantize",
            "--model",
            str(src),
            "--method",
            "trellis",
            "--code",
            "1mad",
            "--L",
            "8",
            "--T",
            "32",
            "--n-calibration",
            "2",
            "--seq-len",
            "32",
            "--calibration",
            str(text),
            "--out",
            str(out),
        ]
    )
    assert json.loads(capsys.readouterr().out)["method"] == "trellis-1mad"
    main(["evaluate", str(out), "--text", str(text), "--n-seq", "2", "--seq-len", "32"])
    res = json.loads(capsys.readouterr().out)
    assert 0 < res["kl"] < 1 and res["ppl"] > 1 and res["bits_per_weight"] > 2
    with pytest.raises(SystemExit) as exit_info:  # checked before any work, reported in one line
        main(
            [
                "quantize",
                "--model",
                str(src),
                "--method",
                "proteus",
                "--code",
                "hyb",
                "--calibration",
                str(text),
                "--out",
                str(out),
            ]
        )
    assert exit_info.value.code == 2 and "invalid options" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["quantize", "--model", str(tmp_path / "missing"), "--calibration", str(text), "--out", str(out)]
        )
    assert exit_info.value.code == 2 and "local Hugging Face model directory" in capsys.readouterr().err
