"""A fuzz test per public API of icml_agents.latent (issue 49), checked with :mod:`icml_tools.fuzz` against the
bad-input contract of GUIDE "Bad input"."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from icml_agents import latent
from icml_agents.latent import (
    CollapseDiagnostics,
    ConfidenceSwitch,
    ContextPredictionFusion,
    HiddenThought,
    LatentGeneration,
    LatentLM,
    LatentOutput,
    LatentTokens,
    SoftThought,
    build_sequence,
    collapse_diagnostics,
    effective_rank,
    generate,
    latent_forward,
    left_pad,
    select_latent_steps,
    soft_embedding,
    token_confidences,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile

FUZZ = Coverage()
FUZZ.exempt(LatentOutput, "the record latent_forward returns (fuzzed through latent_forward)")
FUZZ.exempt(LatentGeneration, "the record generate returns (fuzzed through generate)")
FUZZ.exempt(CollapseDiagnostics, "the record collapse_diagnostics returns (fuzzed through it)")

V, D, BOT, EOT, LAT, EOS = 24, 32, 21, 22, 23, 1


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=D,
        intermediate_size=2 * D,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg).eval()


MODEL = tiny_llama()
torch.manual_seed(1)
HIDDEN = torch.randn(3, D)  # (B, D)
LOGITS = torch.randn(3, V)  # (B, V)
WEIGHT = MODEL.get_input_embeddings().weight.detach().clone()  # (V, D)
TOKENS = LatentTokens(bot=BOT, eot=EOT, latent=LAT)
NOT_MODELS = st.sampled_from([None, "llama", nn.Linear, nn.Linear(2, 2), LlamaForCausalLM])
NOT_PROMPTS = st.sampled_from([None, "abc", [], [[]], [[-1]], [[1.5]], [["a"]], [None], 3, [[True]], [[V]]])


def scores(d: CollapseDiagnostics) -> tuple:
    return d.mean_cosine, d.effective_rank, d.norm_ratio


def finite_rows(out) -> bool:
    """A thought: one finite input embedding per row."""
    return out.ndim == 2 and bool(torch.isfinite(out).all())


# ---- thoughts -------------------------------------------------------------------------------------------------


@FUZZ.covers(soft_embedding)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_soft_embedding(data):
    k = data.draw(st.integers(1, V))
    v, i = LOGITS.topk(k)
    direct = (torch.softmax(v, -1)[..., None] * WEIGHT[i]).sum(1)
    torch.testing.assert_close(soft_embedding(LOGITS, WEIGHT, top_k=k), direct)
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.float16]))
    fuzz_call(
        data,
        soft_embedding,
        {"logits": LOGITS.to(dtype), "embedding_weight": WEIGHT.to(dtype), "top_k": 4, "temperature": 0.7},
        check=finite_rows,
        related={"logits": ["embedding_weight"], "embedding_weight": ["logits"]},
    )


def thought_inputs(data, thought, check=finite_rows):
    """Fuzz one call ``thought(hidden, logits, embedding_weight)`` of a thought builder."""
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.float16]))
    return fuzz_call(
        data,
        thought,
        {"hidden": HIDDEN.to(dtype), "logits": LOGITS.to(dtype), "embedding_weight": WEIGHT.to(dtype)},
        check=check,
        related={
            "hidden": ["logits", "embedding_weight"],
            "logits": ["hidden", "embedding_weight"],
            "embedding_weight": ["hidden", "logits"],
        },
    )


@FUZZ.covers(HiddenThought)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_hidden_thought(data):
    assert torch.equal(HiddenThought()(HIDDEN, LOGITS, WEIGHT), HIDDEN)  # fed back as it is
    thought_inputs(data, HiddenThought())


@FUZZ.covers(SoftThought)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_soft_thought(data):
    def build_and_call(top_k, temperature):
        return SoftThought(top_k=top_k, temperature=temperature)(HIDDEN, LOGITS, WEIGHT)

    fuzz_call(data, build_and_call, {"top_k": 3, "temperature": 1.0}, check=finite_rows)
    thought_inputs(data, SoftThought(top_k=2, temperature=0.5))


@FUZZ.covers(ContextPredictionFusion)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_context_prediction_fusion(data):
    def build_and_call(hidden_size, top_k, temperature, gate, alpha_init, alpha):
        fusion = ContextPredictionFusion(
            hidden_size, top_k=top_k, temperature=temperature, gate=gate, alpha_init=alpha_init
        )
        return fusion(HIDDEN, LOGITS, WEIGHT, alpha=alpha)

    fuzz_call(
        data,
        build_and_call,
        {"hidden_size": D, "top_k": 4, "temperature": 1.0, "gate": "mlp", "alpha_init": 0.3, "alpha": None},
        check=finite_rows,
        strategies={"alpha": st.sampled_from([-0.1, 1.5, math.nan, math.inf, "0.5", True, [0.5]])},
        related={"hidden_size": ["hidden"]},
    )
    torch.manual_seed(0)
    thought_inputs(
        data, ContextPredictionFusion(D, top_k=4, gate=data.draw(st.sampled_from(["scalar", "mlp"])))
    )


# ---- curriculum -----------------------------------------------------------------------------------------------


@FUZZ.covers(LatentTokens)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_latent_tokens(data):
    fuzz_call(
        data,
        LatentTokens,
        {"bot": BOT, "eot": EOT, "latent": LAT},
        check=lambda t: len({t.bot, t.eot, t.latent}) == 3,
        related={"bot": ["eot", "latent"], "eot": ["bot", "latent"], "latent": ["bot", "eot"]},
    )


@FUZZ.covers(build_sequence)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_build_sequence(data):
    steps = data.draw(st.lists(st.lists(st.integers(2, 20), min_size=1, max_size=3), max_size=4))
    chosen = data.draw(st.sets(st.integers(0, max(len(steps) - 1, 0)))) if steps else set()
    c = data.draw(st.integers(1, 3))
    ids, labels = build_sequence(
        [3, 4], steps, [5, EOS], tokens=TOKENS, latent_steps=chosen, thoughts_per_step=c
    )
    assert len(ids) == len(labels) and ids[:2] == [3, 4] and ids[-2:] == [5, EOS]
    assert ids.count(LAT) == c * len(chosen) and all(
        l_ == -100 for l_, t in zip(labels, ids, strict=True) if t == LAT
    )
    fuzz_call(
        data,
        build_sequence,
        {
            "question": [3, 4],
            "steps": [[5, 6], [7], [8, 9]],
            "answer": [10, EOS],
            "tokens": TOKENS,
            "latent_steps": (0, 2),
            "thoughts_per_step": 2,
            "labels": "switch",
        },
        check=lambda out: (
            len(out[0]) == len(out[1]) and all(lab in (-100, t) for t, lab in zip(*out, strict=True))
        ),
        related={"steps": ["latent_steps"]},
    )


@FUZZ.covers(select_latent_steps)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_select_latent_steps(data):
    conf = data.draw(st.lists(st.floats(0, 1), max_size=6))
    k = data.draw(st.integers(0, 6))
    assert select_latent_steps(conf, k=k) == sorted(sorted(range(len(conf)), key=lambda i: (conf[i], i))[:k])
    fuzz_call(
        data,
        select_latent_steps,
        {"confidences": [0.9, 0.2, 0.5, 0.2], "threshold": 0.6, "k": 2},
        check=lambda out: out == sorted(out) and set(out) <= {1, 2, 3},
        strategies={
            "confidences": st.sampled_from([None, "x", 0.5, [math.nan], [1.5], [-0.1], ["0.5"], [None]])
        },
    )


@FUZZ.covers(token_confidences)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_token_confidences(data):
    fuzz_call(
        data,
        token_confidences,
        {"model": MODEL, "sequences": [[3, 4, 5], [6, 7]], "pad_token_id": 0},
        check=lambda out: [len(c) for c in out] == [2, 1] and all(0 <= p <= 1 for c in out for p in c),
        strategies={"model": NOT_MODELS, "sequences": NOT_PROMPTS},
    )


# ---- diagnostics ----------------------------------------------------------------------------------------------


@FUZZ.covers(effective_rank)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_effective_rank(data):
    vectors = HIDDEN.to(data.draw(st.sampled_from([torch.float32, torch.float64])))
    scale = 10.0 ** data.draw(
        st.sampled_from([-300, -30, 0, 30, 300] if vectors.dtype == torch.float64 else [0])
    )
    assert math.isclose(effective_rank(vectors * scale), effective_rank(HIDDEN), rel_tol=1e-5)  # scale-free
    fuzz_call(
        data,
        effective_rank,
        {"vectors": vectors},
        check=lambda r: 1 - 1e-9 <= r <= min(HIDDEN.shape) + 1e-9,
    )


@FUZZ.covers(collapse_diagnostics)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_collapse_diagnostics(data):
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    latents, weight = HIDDEN.to(dtype), WEIGHT.to(dtype)
    scale = 10.0 ** data.draw(st.sampled_from([-300, -30, 0, 30, 300] if dtype == torch.float64 else [0]))
    ref, scaled = collapse_diagnostics(HIDDEN, WEIGHT), collapse_diagnostics(latents * scale, weight * scale)
    for a, b in zip(scores(ref), scores(scaled), strict=True):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)  # all three are scale-free
    fuzz_call(
        data,
        collapse_diagnostics,
        {"latents": latents, "embedding_weight": weight},
        check=lambda d: d.n == 3 and -1 <= d.mean_cosine <= 1 and (d.norm_ratio is None or d.norm_ratio > 0),
        related={"latents": ["embedding_weight"], "embedding_weight": ["latents"]},
    )


# ---- loops ----------------------------------------------------------------------------------------------------


@FUZZ.covers(left_pad)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_left_pad(data):
    seqs = data.draw(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=4), min_size=1, max_size=3))
    ids, mask = left_pad(seqs, pad_token_id=7)
    assert [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)] == seqs
    fuzz_call(
        data,
        left_pad,
        {"sequences": [[3, 4, 5], [6]], "pad_token_id": 0, "device": "cpu"},
        check=lambda out: (
            [r[m.bool()].tolist() for r, m in zip(*out, strict=True)] == [[3, 4, 5], [6]]
            and out[1].tolist() == [[1, 1, 1], [0, 0, 1]]
        ),
        strategies={
            "sequences": NOT_PROMPTS.filter(lambda v: v != [[V]]),  # left_pad knows no vocabulary
            "device": st.sampled_from([None, torch.device("cpu"), object(), "x", 3.5, "cpu"]),
        },
    )


@FUZZ.covers(LatentLM)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_latent_lm(data):
    def build_and_embed(model, ids):
        lm = LatentLM(model)
        return lm.vocab_size, ids, lm.embed(ids)

    ids = torch.tensor([[3, 4], [5, 6]])
    out = fuzz_call(
        data,
        build_and_embed,
        {"model": MODEL, "ids": ids},
        check=lambda out: out[0] == V and out[2].shape == (*out[1].shape, D),
        strategies={
            "model": NOT_MODELS,
            "ids": hostile(ids)
            | st.sampled_from([ids[:0], ids[:, :1], ids.reshape(-1), ids[None], ids.int(), ids - 4, ids + V]),
        },
    )
    if not isinstance(out, Exception) and out[1] is ids:
        lm = LatentLM(LatentLM(MODEL))
        mask, pos = torch.ones(2, 2, dtype=torch.long), torch.arange(2).expand(2, 2)
        logits, hidden, cache = lm.step(out[2], mask, pos)
        assert logits.shape == (2, 2, V) and hidden.shape == (2, 2, D) and cache is not None


def slot_batch():
    ids = torch.tensor([[3, 4, BOT, LAT, LAT, EOT, 5], [0, 6, BOT, LAT, EOT, 7, 8]])
    mask = torch.ones_like(ids)
    mask[1, 0] = 0
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


@FUZZ.covers(latent_forward)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_latent_forward(data):
    ids, mask, labels = slot_batch()
    fuzz_call(
        data,
        latent_forward,
        {
            "model": MODEL,
            "input_ids": ids,
            "attention_mask": mask,
            "latent_token_id": LAT,
            "thought": HiddenThought(),
            "labels": labels,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "use_cache": True,
        },
        check=lambda out: (
            out.logits.shape == (2, 7, V)
            and out.latents.shape[1:] == (D,)
            and out.passes <= 3
            and (out.loss is None or bool(torch.isfinite(out.loss)))
        ),
        strategies={
            "model": NOT_MODELS,
            "labels": hostile(labels) | st.sampled_from([labels + V, labels - 1, labels.float()]),
        },
        related={
            "input_ids": ["attention_mask", "labels", "position_ids"],
            "latent_token_id": ["input_ids"],
        },
    )


@FUZZ.covers(ConfidenceSwitch)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_confidence_switch(data):
    sw = fuzz_call(
        data,
        ConfidenceSwitch,
        {
            "enter_below": 0.4,
            "exit_above": 0.6,
            "max_latent": 4,
            "min_latent": 1,
            "start_latent": False,
            "min_explicit": 1,
        },
        check=lambda sw: not sw.enter(1.0) and sw.exit(0.0, sw.max_latent),
        related={"max_latent": ["min_latent"]},
    )
    if isinstance(sw, ConfidenceSwitch):
        fuzz_call(
            data,
            lambda confidence, run, written: (sw.enter(confidence, written), sw.exit(confidence, run)),
            {"confidence": 0.5, "run": 2, "written": 3},
            check=lambda out: all(isinstance(b, bool) for b in out),
            strategies={
                "confidence": st.floats() | st.integers() | st.sampled_from(["x", None, True]),
                "run": st.integers() | st.floats() | st.sampled_from(["x", None]),
                "written": st.none() | st.integers() | st.floats() | st.sampled_from(["x"]),
            },
        )


def generated(g: LatentGeneration) -> bool:
    """Two prompts, at most 4 positions each; the latents fed are the thoughts plus the prompts' slots."""
    return (
        len(g.trace) == 2
        and all(n <= 4 for n in g.n_positions)
        and g.latents.shape[0] >= sum(g.n_latent)
        and g.latents.shape[1:] == (D,)
    )


@FUZZ.covers(generate)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_generate(data):
    fuzz_call(
        data,
        generate,
        {
            "model": MODEL,
            "prompts": [[3, 4, 5], [6, BOT, LAT, LAT, EOT, 7]],
            "thought": ContextPredictionFusion(D, top_k=3),
            "switch": ConfidenceSwitch(enter_below=0.2, exit_above=0.1, max_latent=2),
            "max_new_tokens": 4,
            "eos_token_id": EOS,
            "latent_token_id": LAT,
            "bot_token_id": BOT,
            "eot_token_id": EOT,
            "special_token_ids": (2,),
            "pad_token_id": 0,
        },
        check=generated,
        strategies={
            "model": NOT_MODELS,
            "prompts": NOT_PROMPTS | st.sampled_from([([3, 4], [5])]),
            "special_token_ids": st.sampled_from(
                [(), [V], [-1], ["x"], [None], [1.5], "x", range(3), None, 3, object()]
            ),
            "latent_token_id": hostile(LAT)
            | st.just(6),  # 6 opens the longest prompt: a slot with nothing before
            "max_new_tokens": st.sampled_from([0, -1, True, 2**63, 0.5, math.nan, None, "4", 1, 3]),
        },
        related={
            "thought": ["switch"],
            "switch": ["thought"],
            "latent_token_id": ["thought"],
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(latent)
