"""Tests of icml_agents.latent (issue 49): Coconut's loop against a transcription of the released forward, the
KV cache against recomputation, batching, the limits of Soft-Thinking and the fusion gate, the switch's
thresholds, the curriculum data and the collapse diagnostics."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from icml_agents.latent import (
    ConfidenceSwitch,
    ContextPredictionFusion,
    HiddenThought,
    LatentTokens,
    SoftThought,
    build_sequence,
    collapse_diagnostics,
    effective_rank,
    generate,
    latent_forward,
    select_latent_steps,
    soft_embedding,
    token_confidences,
)

V, BOT, EOT, LAT, EOS = 24, 21, 22, 23, 1


def tiny_llama(tied: bool = False, seed: int = 0, hidden: int = 32) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=128, bos_token_id=0, eos_token_id=EOS
    )
    return GPT2LMHeadModel(cfg).eval()


def coconut_reference_forward(
    base_causallm, embedding, latent_token_id, input_ids, attention_mask, labels, position_ids
):
    """A line-by-line transcription of ``Coconut.forward`` in facebookresearch/coconut's ``coconut.py``. The
    one change is the cache API: the released code slices tuples ``k[:, :, :start]`` of the legacy cache;
    transformers 5 takes a ``DynamicCache``, so the slice is a ``crop`` of a copy."""
    logits = []
    latent_indices = (input_ids == latent_token_id).nonzero()
    latent_lists = [
        [idx[1].item() for idx in latent_indices if idx[0] == i] for i in range(input_ids.shape[0])
    ]
    max_n_latents = max([len(lst) for lst in latent_lists])
    next_compute_range = (0, input_ids.shape[1])
    inputs_embeds = embedding(input_ids)
    if max_n_latents > 0:
        next_compute_range = (0, latent_indices[:, 1].min().item())
    kv_cache = None

    def sliced(cache, end):
        copy = DynamicCache()
        for layer, lay in enumerate(cache.layers):
            copy.update(lay.keys[:, :, :end, :], lay.values[:, :, :end, :], layer)
        return copy

    for pass_idx in range(max_n_latents):
        if kv_cache is None:
            outputs = base_causallm(
                inputs_embeds=inputs_embeds[:, next_compute_range[0] : next_compute_range[1], :],
                attention_mask=attention_mask[:, next_compute_range[0] : next_compute_range[1]],
                position_ids=position_ids[:, next_compute_range[0] : next_compute_range[1]],
                output_hidden_states=True,
                use_cache=True,
            )
            hidden_states_offset = 0
        else:
            past_key_values = sliced(kv_cache, next_compute_range[0])
            outputs = base_causallm(
                inputs_embeds=inputs_embeds[:, next_compute_range[0] : next_compute_range[1], :],
                attention_mask=attention_mask[:, : next_compute_range[1]],
                position_ids=position_ids[:, next_compute_range[0] : next_compute_range[1]],
                cache=past_key_values,
                output_hidden_states=True,
                use_cache=True,
            )
            hidden_states_offset = next_compute_range[0]
        logits.append(outputs.logits)
        next_compute_range = (
            next_compute_range[1],
            (input_ids.shape[1] if pass_idx + 1 >= max_n_latents else next_compute_range[1] + 1),
        )
        hidden_states = outputs.hidden_states[-1]
        kv_cache = outputs.cache
        filling_indices = [
            (instance_idx, mask_list[pass_idx])
            for instance_idx, mask_list in enumerate(latent_lists)
            if len(mask_list) > pass_idx
        ]
        tensor_list = [
            [inputs_embeds[batch_idx, pos, :] for pos in range(inputs_embeds.shape[1])]
            for batch_idx in range(inputs_embeds.shape[0])
        ]
        for idx_pair in filling_indices:
            batch_idx, token_idx = idx_pair
            tensor_list[batch_idx][token_idx] = hidden_states[
                batch_idx, token_idx - 1 - hidden_states_offset, :
            ]
        inputs_embeds = torch.stack(
            [torch.stack(tensor_list[batch_idx]) for batch_idx in range(inputs_embeds.shape[0])]
        )
    outputs = base_causallm(
        inputs_embeds=inputs_embeds[:, next_compute_range[0] : next_compute_range[1], :],
        attention_mask=attention_mask[:, : next_compute_range[1]],
        position_ids=position_ids[:, next_compute_range[0] : next_compute_range[1]],
        cache=(sliced(kv_cache, next_compute_range[0]) if kv_cache else None),
        output_hidden_states=True,
    )
    logits.append(outputs.logits)
    logits = torch.cat(logits, dim=-2)
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    loss = nn.CrossEntropyLoss()(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
    return loss, inputs_embeds, logits


def coconut_batch():
    """Two rows with their latent spans aligned (as Coconut's collator aligns them), the second left-padded."""
    q1, q2 = [3, 4, 5, 6], [7, 8, 9]
    span = [BOT, LAT, LAT, LAT, EOT]
    rows = [q1 + span + [10, 11, 2, EOS], [0, *q2, *span, 12, 2, EOS, 0]]
    ids = torch.tensor(rows)
    mask = torch.ones_like(ids)
    mask[1, 0] = 0
    mask[1, -1] = 0
    labels = ids.clone()
    labels[:, :9] = -100
    labels[mask == 0] = -100
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, labels, pos


@pytest.mark.parametrize("tied", [False, True])
def test_coconut_loop_equals_the_released_forward(tied):
    model = tiny_llama(tied=tied)
    ids, mask, labels, pos = coconut_batch()
    with torch.no_grad():
        ref_loss, ref_embeds, ref_logits = coconut_reference_forward(
            model, model.get_input_embeddings(), LAT, ids, mask, labels, pos
        )
        out = latent_forward(
            model, ids, mask, latent_token_id=LAT, thought=HiddenThought(), labels=labels, position_ids=pos
        )
    assert out.passes == 4  # one per latent column, then the rest (Coconut's max_n_latents + 1)
    torch.testing.assert_close(out.logits, ref_logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.inputs_embeds, ref_embeds, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.loss, ref_loss, atol=1e-6, rtol=0)
    assert out.latents.shape == (6, 32)


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2])
@pytest.mark.parametrize("thought", [HiddenThought(), SoftThought(top_k=4), "fusion"])
def test_kv_cache_reuse_equals_recomputation(make, thought):
    model = make()
    if thought == "fusion":
        thought = ContextPredictionFusion(32, top_k=4, gate="mlp")
    ids, mask, labels, pos = coconut_batch()
    ids[0, 10] = LAT  # a second, unaligned latent column in one row only
    with torch.no_grad():
        a = latent_forward(model, ids, mask, latent_token_id=LAT, thought=thought, labels=labels)
        b = latent_forward(
            model, ids, mask, latent_token_id=LAT, thought=thought, labels=labels, use_cache=False
        )
        full = model(inputs_embeds=a.inputs_embeds, attention_mask=mask, position_ids=pos).logits
    assert a.passes == b.passes == 5
    assert (a.logits - b.logits).abs().max() <= 1e-5
    assert (a.inputs_embeds - b.inputs_embeds).abs().max() <= 1e-5
    valid = mask.bool()
    assert (a.logits - full)[valid].abs().max() <= 1e-5  # one forward over the filled embeddings agrees


class NoCache(nn.Module):
    """A model whose forward takes no cache argument: generation recomputes every step from scratch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def forward(self, inputs_embeds, attention_mask, position_ids, output_hidden_states=True):
        return self.model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
            use_cache=False,
        )


def switch_kwargs(**kw):
    base = dict(
        thought=ContextPredictionFusion(32, top_k=3),
        switch=ConfidenceSwitch(enter_below=0.12, exit_above=0.08, max_latent=3),
        eos_token_id=EOS,
        bot_token_id=BOT,
        eot_token_id=EOT,
        latent_token_id=LAT,
        max_new_tokens=14,
    )
    return {**base, **kw}


def test_generation_with_cache_equals_recomputation_and_batch_equals_singles():
    model = tiny_llama(seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(30)  # peaked predictions, so that both modes occur
    kwargs = switch_kwargs(switch=ConfidenceSwitch(enter_below=0.5, exit_above=0.1, max_latent=3))
    prompts = [[3, 4, 5, 6], [7, 8], [9, 3, BOT, LAT, LAT, EOT, 5]]
    cached = generate(model, prompts, **kwargs)
    plain = generate(NoCache(model), prompts, **kwargs)
    assert cached.trace == plain.trace
    assert (cached.latents - plain.latents).abs().max() <= 1e-5
    assert cached.n_latent[0] > 0 and any(
        t not in (BOT, EOT, LAT) for t in cached.tokens[0]
    )  # both modes ran
    singles = [generate(model, [p], **kwargs) for p in prompts]
    assert cached.trace == [s.trace[0] for s in singles]
    assert cached.n_latent == [s.n_latent[0] for s in singles]
    assert cached.n_positions == [len(t) for t in cached.trace]


@pytest.mark.parametrize("tied", [False, True])
def test_loops_run_on_tied_and_untied_models(tied):
    model = tiny_llama(tied=tied)
    assert (model.get_input_embeddings().weight is model.get_output_embeddings().weight) == tied
    for kwargs in (
        switch_kwargs(),
        switch_kwargs(thought=HiddenThought()),
        switch_kwargs(thought=SoftThought(top_k=2), switch=ConfidenceSwitch(None, 0.5, 4, start_latent=True)),
    ):
        out = generate(model, [[3, 4], [5, 6, 7]], **kwargs)
        assert len(out.trace) == 2 and all(0 < n <= 14 for n in out.n_positions)
        assert out.latents.shape[0] == sum(out.n_latent)


def test_soft_thinking_with_top1_weights_is_greedy_decoding():
    model = tiny_llama(seed=7)
    prompts, steps = [[3, 4, 5], [6, 7]], 6
    STOP = 0  # an end token this model does not write within the steps
    greedy = generate(model, prompts, eos_token_id=STOP, max_new_tokens=steps)
    soft = generate(
        model,
        prompts,
        thought=SoftThought(top_k=1),
        switch=ConfidenceSwitch(enter_below=None, exit_above=None, max_latent=100, start_latent=True),
        eos_token_id=STOP,
        max_new_tokens=steps,
    )
    assert soft.n_latent == [steps, steps] and soft.tokens == [[], []]
    fed = soft.latents.view(steps, 2, 32)  # generation order: step-major
    emb = model.get_input_embeddings().weight
    for row in range(2):
        n = len(greedy.tokens[row])
        assert n >= 3
        # each concept token is the embedding of the token greedy decoding writes at that step
        torch.testing.assert_close(fed[:n, row], emb[greedy.tokens[row]], atol=1e-6, rtol=0)


def test_soft_embedding_limits():
    torch.manual_seed(0)
    logits, weight = torch.randn(4, 10), torch.randn(10, 6)
    torch.testing.assert_close(soft_embedding(logits, weight, top_k=1), weight[logits.argmax(-1)])
    full = torch.softmax(logits, -1) @ weight
    torch.testing.assert_close(soft_embedding(logits, weight), full)
    torch.testing.assert_close(soft_embedding(logits, weight, top_k=10), full)
    k3 = soft_embedding(logits, weight, top_k=3)
    v, i = logits.topk(3)
    torch.testing.assert_close(k3, (torch.softmax(v, -1)[..., None] * weight[i]).sum(1))


@pytest.mark.parametrize("gate", ["scalar", "mlp"])
def test_fusion_gate_limits(gate):
    torch.manual_seed(1)
    fusion = ContextPredictionFusion(6, top_k=3, gate=gate)
    hidden, logits, weight = 5 * torch.randn(4, 6), torch.randn(4, 10), 0.1 * torch.randn(10, 6)
    ctx = fusion(hidden, logits, weight, alpha=1.0)
    u = fusion.proj(fusion.norm(hidden))
    expected = u / u.norm(dim=-1, keepdim=True) * weight.norm(dim=-1).mean()
    torch.testing.assert_close(ctx, expected)
    torch.testing.assert_close(
        fusion(hidden, logits, weight, alpha=0.0), soft_embedding(logits, weight, top_k=3)
    )
    a = fusion.alpha(hidden)
    torch.testing.assert_close(a, torch.full((4, 1), 0.5))  # alpha_init
    torch.testing.assert_close(
        fusion(hidden, logits, weight), 0.5 * ctx + 0.5 * fusion(hidden, logits, weight, alpha=0.0)
    )
    assert torch.allclose(ctx.norm(dim=-1), weight.norm(dim=-1).mean().expand(4))  # the untied scale fixed


def test_fusion_save_and_load_gives_identical_outputs():
    torch.manual_seed(2)
    fusion = ContextPredictionFusion(6, top_k=3, gate="mlp")
    with torch.no_grad():
        for p in fusion.parameters():
            p.add_(0.1 * torch.randn_like(p))
    buf = io.BytesIO()
    torch.save(fusion.state_dict(), buf)
    buf.seek(0)
    other = ContextPredictionFusion(6, top_k=3, gate="mlp")
    other.load_state_dict(torch.load(buf))
    h, z, w = torch.randn(3, 6), torch.randn(3, 10), torch.randn(10, 6)
    assert torch.equal(fusion(h, z, w), other(h, z, w))


def test_fusion_trains_through_the_latent_loop():
    model = tiny_llama()
    fusion = ContextPredictionFusion(32, top_k=4)
    ids, mask, labels, _ = coconut_batch()
    out = latent_forward(model, ids, mask, latent_token_id=LAT, thought=fusion, labels=labels)
    out.loss.backward()
    assert fusion.gate_logit.grad is not None and fusion.gate_logit.grad.abs() > 0
    assert fusion.proj.weight.grad.abs().sum() > 0
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("gate", ["scalar", "mlp"])
def test_fusion_in_half_precision_matches_float32(dtype, gate):
    """A fusion cast to half precision runs (it crashed on mixed dtypes) and gives the float32 fusion's
    thought of the same rounded weights and inputs, within the half dtype's precision."""
    torch.manual_seed(3)
    fusion = ContextPredictionFusion(32, top_k=8, gate=gate)
    with torch.no_grad():
        for p in fusion.parameters():
            p.add_(0.1 * torch.randn_like(p))
    half = fusion.to(dtype)
    ref = ContextPredictionFusion(32, top_k=8, gate=gate)
    ref.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    h, z, w = (t.to(dtype) for t in (3 * torch.randn(4, 32), torch.randn(4, 24), torch.randn(24, 32)))
    out = half(h, z, w)
    want = ref(h.float(), z.float(), w.float())
    eps = torch.finfo(dtype).eps
    assert out.dtype == dtype and half.alpha(h).dtype == torch.float32
    torch.testing.assert_close(
        out.float(), want, rtol=2 * eps, atol=2 * eps * float(want.detach().abs().max())
    )
    out.float().square().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == dtype for p in half.parameters() if p.requires_grad)
    # in the latent loop of a half-precision model, beside the float32 fusion
    model = tiny_llama().to(dtype)
    ids, mask, labels, _ = coconut_batch()
    loss = latent_forward(model, ids, mask, latent_token_id=LAT, thought=half, labels=labels).loss
    loss32 = latent_forward(model, ids, mask, latent_token_id=LAT, thought=ref, labels=labels).loss
    assert bool(torch.isfinite(loss)) and float(loss) == pytest.approx(float(loss32), rel=8 * eps)


class Scripted(nn.Module):
    """A model whose next-token distribution at generated position t puts probability ``conf[t]`` on token
    ``TOP`` (spread evenly over the rest), whatever it is fed; ``EOT`` gets ``exit_conf[t]``."""

    TOP = 5

    def __init__(self, conf, exit_conf, prompt_len):
        super().__init__()
        self.conf, self.exit_conf, self.prompt_len = conf, exit_conf, prompt_len
        self.emb = nn.Embedding(V, 4)

    def get_input_embeddings(self):
        return self.emb

    def forward(self, inputs_embeds, attention_mask, position_ids, output_hidden_states=True):
        from types import SimpleNamespace

        t = position_ids - self.prompt_len + 1  # generated position predicted from here
        t = t.clamp(0, len(self.conf) - 1)
        conf = torch.tensor(self.conf)[t]
        ex = torch.tensor(self.exit_conf)[t]
        rest = (1 - conf - ex) / (V - 3)  # TOP, EOT and EOS excluded from the rest
        probs = rest[..., None].expand(*t.shape, V).clone()
        probs[..., self.TOP] = conf
        probs[..., EOT] = ex
        probs[..., EOS] = 0.0
        logits = torch.log(probs.clamp_min(1e-30))
        return SimpleNamespace(logits=logits, hidden_states=(inputs_embeds,))


def expected_trace(conf, exit_conf, sw: ConfidenceSwitch, n):
    """The switch rule, written out: the trace of n generated positions."""
    trace, latent, run, written = [], sw.start_latent, 0, None
    for t in range(n):
        ordinary = max(conf[t], (1 - conf[t] - exit_conf[t]) / (V - 3))
        if latent:
            if sw.exit(exit_conf[t], run):
                latent, run, written = False, 0, 0
                trace.append(EOT)
            else:
                run += 1
                trace.append(LAT)
        elif (
            sw.enter_below is not None
            and ordinary < sw.enter_below
            and (written is None or written >= sw.min_explicit)
        ):
            latent, run = True, 0
            trace.append(BOT)
        else:
            trace.append(Scripted.TOP)
            written = None if written is None else written + 1
    return trace


@settings(max_examples=40, deadline=None)
@given(
    conf=st.lists(st.floats(0.05, 0.9), min_size=12, max_size=12),
    exit_frac=st.lists(st.floats(0.0, 0.95), min_size=12, max_size=12),
    enter=st.floats(0.01, 0.99),
    leave=st.floats(0.01, 0.99),
    max_latent=st.integers(1, 5),
    min_latent=st.integers(0, 1),
    start=st.booleans(),
    min_explicit=st.integers(0, 3),
)
def test_switch_follows_its_thresholds_exactly(
    conf, exit_frac, enter, leave, max_latent, min_latent, start, min_explicit
):
    exit_conf = [f * (1 - c) for c, f in zip(conf, exit_frac, strict=False)]
    # the model delivers its probabilities through a float32 log and softmax, a few ulps off: a tie with a
    # threshold is undecidable (conf = enter = 0.5 came back as 0.49999997 and entered latent mode)
    ordinary = [max(c, (1 - c - e) / (V - 3)) for c, e in zip(conf, exit_conf, strict=True)]
    assume(all(abs(p - enter) > 1e-5 for p in ordinary) and all(abs(e - leave) > 1e-5 for e in exit_conf))
    sw = ConfidenceSwitch(enter, leave, max_latent, min(min_latent, max_latent), start, min_explicit)
    model = Scripted(conf, exit_conf, prompt_len=2)
    out = generate(
        model,
        [[3, 4]],
        thought=HiddenThought(),
        switch=sw,
        eos_token_id=EOS,
        bot_token_id=BOT,
        eot_token_id=EOT,
        latent_token_id=LAT,
        max_new_tokens=12,
    )
    assert out.trace[0] == expected_trace(conf, exit_conf, sw, 12)
    assert out.n_latent[0] == out.trace[0].count(LAT) == out.latents.shape[0]


@given(
    confidence=st.floats(0, 1),
    run=st.integers(0, 10),
    enter=st.floats(0.01, 0.99),
    leave=st.floats(0.01, 0.99),
)
def test_switch_decisions(confidence, run, enter, leave):
    sw = ConfidenceSwitch(enter, leave, max_latent=5, min_latent=2, min_explicit=2)
    assert sw.enter(confidence) == (confidence < enter)
    assert sw.enter(confidence, written=run) == (confidence < enter and run >= 2)
    assert sw.exit(confidence, run) == (run >= 5 or (run >= 2 and confidence >= leave))


def test_build_sequence_spans_and_labels():
    tok = LatentTokens(bot=BOT, eot=EOT, latent=LAT)
    q, steps, ans = [3, 4], [[5, 6], [7], [8, 9]], [10, EOS]
    ids, lab = build_sequence(q, steps, ans, tokens=tok, latent_steps=[0, 1], thoughts_per_step=2)
    assert ids == [3, 4, BOT, LAT, LAT, LAT, LAT, EOT, 8, 9, 10, EOS]
    assert lab == [-100] * 8 + [8, 9, 10, EOS]
    ids, lab = build_sequence(q, steps, ans, tokens=tok, latent_steps=[0, 2], labels="switch")
    assert ids == [3, 4, BOT, LAT, EOT, 7, BOT, LAT, EOT, 10, EOS]
    assert lab == [-100, -100, *ids[2:]]
    assert build_sequence(q, steps, ans, tokens=tok)[0] == [3, 4, 5, 6, 7, 8, 9, 10, EOS]


def test_select_latent_steps():
    conf = [0.9, 0.2, 0.5, 0.2, 0.99]
    assert select_latent_steps(conf, k=2) == [1, 3]
    assert select_latent_steps(conf, threshold=0.6) == [1, 2, 3]
    assert select_latent_steps(conf, threshold=0.6, k=1) == [1]
    assert select_latent_steps(conf, k=0) == []


def test_token_confidences_match_a_forward():
    model = tiny_llama(seed=4)
    seqs = [[3, 4, 5, 6], [7, 8]]
    conf = token_confidences(model, seqs)
    for s, c in zip(seqs, conf, strict=False):
        logits = model(input_ids=torch.tensor([s])).logits[0, :-1]
        want = torch.softmax(logits, -1)[torch.arange(len(s) - 1), torch.tensor(s[1:])]
        assert len(c) == len(s) - 1
        np.testing.assert_allclose(c, want.detach().numpy(), atol=1e-5)


def test_collapse_diagnostics():
    same = torch.ones(5, 4)
    d = collapse_diagnostics(same, torch.ones(3, 4))
    assert d.mean_cosine == pytest.approx(1.0) and d.effective_rank == pytest.approx(1.0, abs=1e-9)
    assert d.norm_ratio == pytest.approx(1.0) and d.n == 5
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    d = collapse_diagnostics(q.float())
    assert d.effective_rank == pytest.approx(6.0, abs=1e-5) and d.mean_cosine == pytest.approx(0.0, abs=1e-6)
    assert d.norm_ratio is None
    assert effective_rank(3 * q[:2].float()) == pytest.approx(2.0, abs=1e-5)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="enter_below"):
        ConfidenceSwitch(enter_below=1.0)
    with pytest.raises(ValueError, match="exit_above"):
        ConfidenceSwitch(exit_above=0.0)
    with pytest.raises(ValueError, match="exit_above"):
        ConfidenceSwitch(exit_above=float("nan"))
    with pytest.raises(ValueError, match="max_latent"):
        ConfidenceSwitch(max_latent=0)
    with pytest.raises(ValueError, match="top_k"):
        SoftThought(top_k=0)
    with pytest.raises(ValueError, match="top_k"):
        ContextPredictionFusion(8, top_k=0)
    with pytest.raises(ValueError, match="gate"):
        ContextPredictionFusion(8, gate="linear")
    with pytest.raises(ValueError, match="alpha"):
        ContextPredictionFusion(8)(torch.randn(1, 8), torch.randn(1, 3), torch.randn(3, 8), alpha=1.5)
    with pytest.raises(ValueError, match="k"):
        select_latent_steps([0.5], k=-1)
    with pytest.raises(ValueError, match="threshold"):
        select_latent_steps([0.5], threshold=1.0)
    with pytest.raises(ValueError, match="thought"):
        generate(tiny_llama(), [[3]], switch=ConfidenceSwitch(), eos_token_id=EOS)
    with pytest.raises(ValueError, match="opening a row"):
        latent_forward(tiny_llama(), torch.tensor([[LAT, 3]]), latent_token_id=LAT, thought=HiddenThought())
    with pytest.raises(ValueError, match="latent_token_id"):
        latent_forward(tiny_llama(), torch.tensor([[3, 4]]), latent_token_id=V, thought=HiddenThought())
    with pytest.raises(ValueError, match="prompts"):
        generate(tiny_llama(), [[3, V + 1]], eos_token_id=EOS)
    ids, mask, labels, _ = coconut_batch()
    with pytest.raises(ValueError, match="thought must return shape"):
        latent_forward(tiny_llama(), ids, mask, latent_token_id=LAT, thought=lambda h, z, e: h[:, :1])
    with pytest.raises(ValueError, match="attention_mask"):
        latent_forward(tiny_llama(), ids, 2 * mask, latent_token_id=LAT, thought=HiddenThought())
    with pytest.raises(TypeError, match="labels"):
        latent_forward(
            tiny_llama(), ids, mask, latent_token_id=LAT, thought=HiddenThought(), labels=labels.float()
        )
    with pytest.raises(ValueError, match="prompts"):  # a slot opening a prompt has nothing before it
        generate(tiny_llama(), [[LAT, 3]], thought=HiddenThought(), latent_token_id=LAT, eos_token_id=EOS)


@pytest.mark.slow
def test_loops_on_smollm2():
    from icml_tools.assets import smollm2

    model, tokenizer = smollm2()
    model.eval()
    eos = tokenizer.eos_token_id
    prompts = [tokenizer.encode("2 + 3 ="), tokenizer.encode("The capital of France is")]
    greedy = generate(model, prompts, eos_token_id=eos, pad_token_id=eos, max_new_tokens=4)
    soft = generate(
        model,
        prompts,
        thought=SoftThought(top_k=1),
        switch=ConfidenceSwitch(None, None, 100, start_latent=True),
        eos_token_id=eos,
        pad_token_id=eos,
        max_new_tokens=4,
    )
    assert soft.n_latent == [4, 4]
    lat_id = tokenizer.encode("…")[0]
    ids = torch.tensor([prompts[1] + [lat_id, lat_id] + tokenizer.encode(" Paris")])
    a = latent_forward(
        model, ids, latent_token_id=lat_id, thought=ContextPredictionFusion(model.config.hidden_size)
    )
    b = latent_forward(
        model,
        ids,
        latent_token_id=lat_id,
        thought=ContextPredictionFusion(model.config.hidden_size),
        use_cache=False,
    )
    assert (a.logits - b.logits).abs().max() <= 1e-3
    assert len(greedy.tokens[1]) >= 1 and soft.latents.shape[0] == 8
