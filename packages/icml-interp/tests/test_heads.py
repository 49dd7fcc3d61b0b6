"""icml_interp.heads: every score against an explicit loop, planted patterns with known scores, and the
model-level functions against the model's own eager attention."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from icml_interp.heads import (
    SCORE_NAMES,
    HeadScores,
    attention_entropy,
    attention_patterns,
    copy_score,
    duplicate_token_score,
    head_scores,
    induction_score,
    mean_ablation_hooks,
    pattern_matching_score,
    previous_token_score,
    relative_position_score,
    repeated_sequence_induction_score,
    zero_ablation_hooks,
)
from icml_interp.hooks import HookedModel
from icml_tools.assets import tiny_llama

# ------------------------------------------------------------------ references: plain loops


def mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def loop_previous(p, qmask):
    B, H, Q, _ = p.shape
    return [
        mean_or_nan([p[b, h, i, i - 1] for b in range(B) for i in range(1, Q) if qmask[b, i]])
        for h in range(H)
    ]


def loop_duplicate(p, tokens, qmask, exclude_current):
    B, H, Q, _ = p.shape
    out = []
    for h in range(H):
        vals = []
        for b in range(B):
            for i in range(Q):
                earlier = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
                if not qmask[b, i] or not earlier:
                    continue
                mass = sum(p[b, h, i, j] for j in earlier)
                if exclude_current:
                    rest = sum(p[b, h, i, k] for k in range(Q) if k != i)
                    mass = mass / rest if rest > 0 else 0.0
                vals.append(mass)
        out.append(mean_or_nan(vals))
    return out


def loop_induction(p, tokens, qmask):
    B, H, Q, _ = p.shape
    out = []
    for h in range(H):
        vals = []
        for b in range(B):
            for i in range(Q):
                targets = {j + 1 for j in range(i) if tokens[b, j] == tokens[b, i]}
                if qmask[b, i] and targets:
                    vals.append(sum(p[b, h, i, k] for k in targets))
        out.append(mean_or_nan(vals))
    return out


def loop_pattern_matching(p, alignment, qmask):
    B, H, Q, _ = p.shape
    return [
        mean_or_nan(
            [
                p[b, h, i, alignment[b, i]]
                for b in range(B)
                for i in range(Q)
                if qmask[b, i] and alignment[b, i] >= 0
            ]
        )
        for h in range(H)
    ]


def loop_relative(p, qmask, kmask):
    B, H, Q, _ = p.shape
    stds, modes = [], []
    for h in range(H):
        offsets = []
        for b in range(B):
            for i in range(Q):
                keys = [k for k in range(Q) if kmask[b, k]]
                if qmask[b, i] and sum(p[b, h, i, k] for k in keys) > 0:
                    best = max(keys, key=lambda k: (p[b, h, i, k], -k))  # ties: the first key
                    offsets.append(best - i)
        stds.append(float(np.std(offsets)))
        counts = Counter(offsets)
        top = max(counts.values())
        modes.append((min(o for o, c in counts.items() if c == top), top / len(offsets)))
    return stds, modes


def loop_entropy(p, qmask, kmask, causal, normalize=True):
    B, H, Q, _ = p.shape
    out = []
    for h in range(H):
        vals = []
        for b in range(B):
            for i in range(Q):
                keys = [k for k in range(Q) if kmask[b, k] and (not causal or k <= i)]
                mass = sum(p[b, h, i, k] for k in keys)
                if not qmask[b, i] or len(keys) < 2 or mass <= 0:
                    continue
                e = -sum(
                    (p[b, h, i, k] / mass) * math.log(p[b, h, i, k] / mass) for k in keys if p[b, h, i, k] > 0
                )
                vals.append(e / math.log(len(keys)) if normalize else e)
        out.append(mean_or_nan(vals))
    return out


# ------------------------------------------------------------------ hand-built patterns


def dirichlet_pattern(batch=2, heads=3, seq=9, causal=True, seed=0, zeros=False) -> torch.Tensor:
    """Random attention rows (Dirichlet over the allowed keys), in float64."""
    g = np.random.default_rng(seed)
    p = np.zeros((batch, heads, seq, seq))
    for b in range(batch):
        for h in range(heads):
            for i in range(seq):
                n = i + 1 if causal else seq
                p[b, h, i, :n] = g.dirichlet(np.full(n, 0.5))
    if zeros:  # exact zeros inside the rows (entropy's 0 log 0, argmax ties)
        p[:, :, 3, :2] = 0
        p[:, :, 3] /= p[:, :, 3].sum(-1, keepdims=True)
    return torch.tensor(p)


def random_mask(shape, seed, p_true=0.75) -> torch.Tensor:
    return torch.tensor(np.random.default_rng(seed).random(shape) < p_true)


def close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual.double(), torch.tensor(expected, dtype=torch.float64), equal_nan=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_scores_equal_the_loops(seed):
    p = dirichlet_pattern(seed=seed, zeros=seed == 1)
    tokens = torch.tensor(np.random.default_rng(seed).integers(0, 3, (2, 9)))
    qmask = random_mask((2, 9), seed)
    full = torch.ones(2, 9, dtype=torch.bool)
    for mask in (full, qmask):
        close(previous_token_score(p, query_mask=mask), loop_previous(p, mask))
        close(induction_score(p, tokens, query_mask=mask), loop_induction(p, tokens, mask))
        for exclude in (True, False):
            close(
                duplicate_token_score(p, tokens, query_mask=mask, exclude_current_token=exclude),
                loop_duplicate(p, tokens, mask, exclude),
            )
    assert not torch.equal(previous_token_score(p), previous_token_score(p, query_mask=qmask))  # masks bite


@pytest.mark.parametrize("seed", [0, 1])
def test_position_scores_equal_the_loops(seed):
    for causal in (True, False):
        p = dirichlet_pattern(seed=seed, causal=causal, zeros=True)
        qmask, kmask = random_mask((2, 9), seed + 10), random_mask((2, 9), seed + 20)
        align = torch.tensor(np.random.default_rng(seed).integers(-1, 9, (2, 9)))
        close(pattern_matching_score(p, align, query_mask=qmask), loop_pattern_matching(p, align, qmask))
        for q, k in ((None, None), (qmask, kmask)):
            qm = torch.ones(2, 9, dtype=torch.bool) if q is None else q
            km = torch.ones(2, 9, dtype=torch.bool) if k is None else k
            rp = relative_position_score(p, query_mask=q, key_mask=k)
            stds, modes = loop_relative(p, qm, km)
            close(rp.std, stds)
            close(rp.mode, [m for m, _ in modes])
            close(rp.mode_fraction, [f for _, f in modes])
            for normalize in (True, False):
                got = attention_entropy(p, query_mask=q, key_mask=k, normalize=normalize)
                close(got, loop_entropy(p, qm, km, causal, normalize))
            # an explicit causal flag on a causal pattern changes nothing; on a bidirectional one it cuts keys
            close(
                attention_entropy(p, key_mask=k, causal=True),
                loop_entropy(p, torch.ones(2, 9, dtype=torch.bool), km, True),
            )


def test_planted_previous_token_and_induction_heads():
    T, bos = 8, 0
    r = torch.randperm(255, generator=torch.Generator().manual_seed(0))[:T] + 1  # distinct, never BOS
    tokens = torch.cat([torch.tensor([bos]), r, r])[None]  # [BOS, r, r], 17 positions
    n = tokens.shape[1]
    prev = torch.zeros(n, n)
    prev[0, 0] = 1
    prev[torch.arange(1, n), torch.arange(n - 1)] = 1
    induct = torch.zeros(n, n)
    induct[: T + 1, 0] = 1  # first copy: the BOS sink
    second = torch.arange(T + 1, n)
    induct[second, second - T + 1] = 1
    pattern = torch.stack([prev, induct])[None]  # (1, 2 heads, n, n)
    close(previous_token_score(pattern), [1.0, 1 / (n - 1)])  # query 1's BOS sink is its previous token
    close(induction_score(pattern, tokens), [0.0, 1.0])
    close(repeated_sequence_induction_score(pattern, T), [0.0, 1.0])
    close(repeated_sequence_induction_score(pattern[:, :, 1:, 1:], T, offset=0), [0.0, 1.0])  # no BOS
    # the duplicate-token head of the same sequence attends to i - T
    dup = torch.zeros(n, n)
    dup[: T + 1, 0] = 1
    dup[second, second - T] = 1
    close(duplicate_token_score(dup[None], tokens), [1.0])
    close(induction_score(dup[None], tokens), [0.0])
    # trailing tokens (an EOS) are ignored by the repeated-sequence score
    eos = torch.zeros(1, 2, n + 1, n + 1)
    eos[..., :n, :n] = pattern
    eos[..., n, n] = 1
    close(repeated_sequence_induction_score(eos, T), [0.0, 1.0])


def test_duplicate_token_score_of_a_head_that_mostly_attends_to_itself():
    # all off-diagonal mass on earlier copies: exactly 1; the mass was sum - diagonal, which cancels in float32
    seq, tokens = 128, torch.arange(128) % 16
    dup = (tokens[:, None] == tokens[None, :]) & torch.ones(seq, seq).tril(-1).bool()
    for self_logit in (8.0, 12.0, 14.0):
        eye = torch.eye(seq)
        logits = torch.where(dup | eye.bool(), 0.0, -torch.inf) + eye * self_logit
        p = torch.softmax(logits, -1)[None, None]  # float32
        score = duplicate_token_score(p, tokens[None]).item()
        assert 0.0 <= score <= 1.0 and score == pytest.approx(1.0, abs=1e-6), self_logit


def test_planted_relative_position_entropy_and_pattern_matching():
    n = 10
    shift = torch.full((n, n), 1 / n)
    shift[torch.arange(n - 3)] = 0
    shift[torch.arange(n - 3), torch.arange(3, n)] = 1  # offset +3 where it exists
    qmask = torch.arange(n) < n - 3
    rp = relative_position_score(shift[None], query_mask=qmask)
    close(rp.std, [0.0])
    close(rp.mode, [3.0])
    close(rp.mode_fraction, [1.0])
    assert float(relative_position_score(shift[None]).std) > 1  # the uniform rows, counted, spread it
    causal_uniform = torch.ones(n, n).tril()
    causal_uniform /= causal_uniform.sum(-1, keepdim=True)
    full_uniform = torch.full((n, n), 1 / n)
    close(attention_entropy(torch.stack([causal_uniform, causal_uniform])), [1.0, 1.0])
    close(attention_entropy(full_uniform[None]), [1.0])
    close(attention_entropy(full_uniform[None], causal=True), [1.0])  # rows restricted to k <= i: uniform
    close(attention_entropy(full_uniform[None], normalize=False), [math.log(n)])
    close(attention_entropy(prev_token_pattern(n)[None]), [0.0])
    # a repeat: positions 1..4 and 5..8 align with each other, 0 and 9 have no partner
    align = torch.tensor([-1, 5, 6, 7, 8, 1, 2, 3, 4, -1])
    matched = torch.full((n, n), 1 / n)
    matched[align >= 0] = 0
    matched[torch.nonzero(align >= 0)[:, 0], align[align >= 0]] = 1
    close(pattern_matching_score(matched[None], align), [1.0])
    close(pattern_matching_score(full_uniform[None], align), [1 / n])


def prev_token_pattern(n: int) -> torch.Tensor:
    p = torch.zeros(n, n)
    p[0, 0] = 1
    p[torch.arange(1, n), torch.arange(n - 1)] = 1
    return p


def test_three_dimensional_pattern_is_a_batch_of_one_and_masks_broadcast():
    p = dirichlet_pattern(batch=1, seed=3)
    tokens = torch.tensor(np.random.default_rng(3).integers(0, 3, 9))
    mask = torch.arange(9) % 2 == 0
    assert torch.equal(induction_score(p[0], tokens), induction_score(p, tokens[None]))
    assert torch.equal(
        previous_token_score(p, query_mask=mask.long()), previous_token_score(p, query_mask=mask[None])
    )
    two = torch.cat([p, p])
    close(previous_token_score(two, query_mask=mask), loop_previous(two, mask.expand(2, 9)))


def test_half_precision_patterns_score_like_float32():
    p = dirichlet_pattern(seed=4).float()
    for dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(
            previous_token_score(p.to(dtype)), previous_token_score(p), atol=1e-2, rtol=0
        )


def test_no_counted_query_warns_and_gives_nan():
    p = dirichlet_pattern(seed=5)
    distinct = torch.arange(9).expand(2, 9)
    with pytest.warns(RuntimeWarning, match="no query counts"):
        assert induction_score(p, distinct).isnan().all()
    with pytest.warns(RuntimeWarning, match="no query counts"):
        assert previous_token_score(p, query_mask=torch.zeros(9, dtype=torch.bool)).isnan().all()


# ------------------------------------------------------------------ bad input


def test_bad_patterns_raise_naming_the_argument():
    good = dirichlet_pattern(seed=6).float()
    tokens = torch.zeros(2, 9, dtype=torch.long)
    bad = {
        "negative": good - 0.2,
        "rows above 1": good * 2,
        "nan": good.masked_fill(torch.rand_like(good) < 0.1, math.nan),
        "not square": good[..., :5],
        "2-d": good[0, 0],
        "5-d": good[None],
    }
    for value in bad.values():  # the pattern is checked first, whatever the other arguments
        with pytest.raises(ValueError, match="pattern"):
            previous_token_score(value)
        with pytest.raises(ValueError, match="pattern"):
            induction_score(value, tokens)
    for value in (good.long(), good > 0, good.numpy()):
        with pytest.raises(TypeError, match="pattern"):
            attention_entropy(value)


def test_bad_tokens_masks_and_alignments_raise_naming_the_argument():
    p = dirichlet_pattern(seed=7)
    tokens = torch.zeros(2, 9, dtype=torch.long)
    with pytest.raises(ValueError, match="tokens"):
        induction_score(p, tokens[:, :5])
    with pytest.raises(ValueError, match="tokens"):
        duplicate_token_score(p, tokens[:1])
    with pytest.raises(TypeError, match="tokens"):
        induction_score(p, tokens.float())
    with pytest.raises(ValueError, match="alignment"):
        pattern_matching_score(p, torch.full((2, 9), 9))
    with pytest.raises(ValueError, match="alignment"):
        pattern_matching_score(p, torch.full((2, 9), -2))
    with pytest.raises(ValueError, match="query_mask"):
        previous_token_score(p, query_mask=torch.ones(2, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_mask"):
        attention_entropy(p, key_mask=torch.full((2, 9), 2))
    with pytest.raises(TypeError, match="key_mask"):
        relative_position_score(p, key_mask=torch.ones(2, 9))
    with pytest.raises(TypeError, match="exclude_current_token"):
        duplicate_token_score(p, tokens, exclude_current_token=1)
    with pytest.raises(TypeError, match="causal"):
        attention_entropy(p, causal="yes")
    with pytest.raises(ValueError, match="half_length"):
        repeated_sequence_induction_score(p, 0)
    with pytest.raises(ValueError, match="half_length"):
        repeated_sequence_induction_score(p, 5)  # 1 + 2 * 5 > 9 positions


# ------------------------------------------------------------------ on a model


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=0, layers=2)  # grouped-query attention: 4 heads, 2 kv heads


def eager_attentions(model, ids, attention_mask=None) -> list[torch.Tensor]:
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=attention_mask, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(before)
    return list(out.attentions)


def repeat_batch(seed=0, T=6, batch=2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(1, 256, (batch, T), generator=g)
    return torch.cat([torch.zeros(batch, 1, dtype=torch.long), r, r], 1)


def test_attention_patterns_are_the_eager_attentions(llama):
    ids = repeat_batch()
    stacked = attention_patterns(llama, ids)
    assert stacked.shape == (2, 2, 4, 13, 13)
    for layer, att in enumerate(eager_attentions(llama, ids)):
        torch.testing.assert_close(stacked[layer], att)
    torch.testing.assert_close(attention_patterns(HookedModel(llama), ids, layers=[-1])[0], stacked[1])


@pytest.mark.parametrize("padded", [False, True])
def test_head_scores_equal_the_pattern_scores_of_eager_attention(llama, padded):
    ids = repeat_batch(seed=1)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, -3:] = 0  # right padding
    align = torch.full_like(ids, -1)
    align[:, 1:7], align[:, 7:] = torch.arange(7, 13), torch.arange(1, 7)
    found = head_scores(llama, ids, alignment=align, attention_mask=mask if padded else None)
    real = mask.bool()
    tokens = ids.masked_fill(~real, -1)
    extra = {"relative_position_mode", "relative_position_mode_fraction"}
    assert set(found.scores) == {n for n in SCORE_NAMES if n != "copy"} | extra
    for layer, att in enumerate(eager_attentions(llama, ids, mask if padded else None)):
        row = {
            "previous_token": previous_token_score(att, query_mask=real),
            "duplicate_token": duplicate_token_score(att, tokens, query_mask=real),
            "induction": induction_score(att, tokens, query_mask=real),
            "pattern_matching": pattern_matching_score(att, align, query_mask=real),
            "relative_position": relative_position_score(att, query_mask=real, key_mask=real).std,
            "relative_position_mode": relative_position_score(att, query_mask=real, key_mask=real).mode,
            "entropy": attention_entropy(att, query_mask=real, key_mask=real),
        }
        for name, value in row.items():
            torch.testing.assert_close(found[name][layer], value.float(), msg=name)
    assert found.layers == (0, 1)
    rows = found.to_rows()
    assert len(rows) == 8 and rows[5]["layer"] == 1 and rows[5]["head"] == 1
    assert rows[5]["induction"] == pytest.approx(float(found["induction"][1, 1]))
    top = found.top("induction", k=3)
    values = found["induction"].flatten()
    assert [v for _, _, v in top] == pytest.approx(sorted(values.tolist(), reverse=True)[:3])
    layer, head, value = found.top("entropy", k=1, largest=False)[0]
    assert value == pytest.approx(float(found["entropy"].min())) and found["entropy"][layer, head] == value


def test_head_scores_options(llama):
    ids = repeat_batch(seed=2)
    some = head_scores(llama, ids, layers=[1], scores=["induction", "copy"])
    assert set(some.scores) == {"induction", "copy"} and some.layers == (1,)
    assert some["induction"].shape == some["copy"].shape == (1, 4)
    torch.testing.assert_close(some["copy"], copy_score(llama, ids, layers=[1]))
    drop_bos = torch.arange(ids.shape[1]) > 0
    masked = head_scores(llama, ids, query_mask=drop_bos, scores=["previous_token"])
    att = eager_attentions(llama, ids)[0]
    torch.testing.assert_close(masked["previous_token"][0], previous_token_score(att, query_mask=drop_bos))
    with pytest.raises(ValueError, match="alignment"):
        head_scores(llama, ids, scores=["pattern_matching"])
    with pytest.raises(ValueError, match="scores"):
        head_scores(llama, ids, scores=["inductoin"])
    with pytest.raises(ValueError, match="layers"):
        head_scores(llama, ids, layers=[2])
    with pytest.raises(ValueError, match="name"):
        some.top("entropy")


def explicit_copy_scores(model, ids, o_proj_of, norm, unembed, layers, heads, queries, post_norm_of=None):
    """The copy score by hand: each head's output from the output projection itself (other heads zeroed,
    the bias removed), then the block's own post-attention norm module where ``post_norm_of`` gives one,
    final norm, unembedding, softmax, minus the mean, ReLU, ratio."""
    zs, atts = {}, eager_attentions(model, ids)
    handles = [
        o_proj_of(layer).register_forward_pre_hook(
            lambda m, a, layer=layer: zs.__setitem__(layer, a[0].detach())
        )
        for layer in layers
    ]
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    out = torch.zeros(len(layers), heads)
    with torch.no_grad():
        for li, layer in enumerate(layers):
            o_proj, z = o_proj_of(layer), zs[layer]  # z: (batch, seq, heads * d_head)
            d = z.shape[-1] // heads
            for h in range(heads):
                vals = []
                for b, i in queries:
                    only = torch.zeros_like(z[b, i])
                    only[h * d : (h + 1) * d] = z[b, i, h * d : (h + 1) * d]
                    head_out = o_proj(only[None])[0] - o_proj(torch.zeros_like(only)[None])[0]
                    if post_norm_of is not None:
                        head_out = post_norm_of(layer)(head_out[None])[0]
                    probs = torch.softmax(unembed(norm(head_out)), -1)
                    p = torch.relu(probs - probs.mean())
                    source = int(atts[layer][b, h, i].argmax())
                    present = sorted(set(ids[b].tolist()))
                    denominator = float(p[present].sum())
                    vals.append(float(p[ids[b, source]]) / denominator if denominator > 0 else 0.0)
                out[li, h] = float(np.mean(vals))
    return out


def test_copy_score_equals_an_explicit_computation(llama, zoo):
    ids = repeat_batch(seed=3, T=4)
    queries = [(b, i) for b in range(2) for i in range(ids.shape[1])]
    inner = llama.model
    want = explicit_copy_scores(
        llama, ids, lambda L: inner.layers[L].self_attn.o_proj, inner.norm, llama.lm_head, [0, 1], 4, queries
    )
    got = copy_score(llama, ids)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert got.min() >= 0 and got.max() <= 1 and got.std() > 0
    last = copy_score(llama, ids, positions=[-1], layers=[0])
    want_last = explicit_copy_scores(
        llama,
        ids,
        lambda L: inner.layers[L].self_attn.o_proj,
        inner.norm,
        llama.lm_head,
        [0],
        4,
        [(0, 8), (1, 8)],
    )
    torch.testing.assert_close(last, want_last, atol=1e-5, rtol=1e-4)
    gpt2 = zoo.gpt2(0, layers=1)  # Conv1D output projection, LayerNorm
    t = gpt2.transformer
    want_gpt2 = explicit_copy_scores(
        gpt2, ids, lambda L: t.h[L].attn.c_proj, t.ln_f, gpt2.lm_head, [0], 4, queries
    )
    torch.testing.assert_close(copy_score(gpt2, ids), want_gpt2, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "olmo2"])
def test_copy_score_applies_the_post_attention_norm(zoo, family):
    """Gemma 2 / 3 and OLMo 2 norm the attention output before adding it to the stream: the head's output
    reaches the logits through that norm's weight (Gemma's 1 + weight; the conftest models' norm weights are
    random), which changes the tokens it promotes. The reference runs the head's output alone through the
    block's own norm module; the library's per-token RMS of the whole attention output instead differs by a
    positive factor, which the final norm removes here."""
    model = getattr(zoo, family)(0)
    ids = repeat_batch(seed=3, T=4)
    queries = [(b, i) for b in range(2) for i in range(ids.shape[1])]
    inner, softcap = model.model, getattr(model.config, "final_logit_softcapping", None)

    def unembed(x):
        logits = model.lm_head(x)
        return logits if softcap is None else torch.tanh(logits / softcap) * softcap

    want = explicit_copy_scores(
        model,
        ids,
        lambda L: inner.layers[L].self_attn.o_proj,
        inner.norm,
        unembed,
        [0, 1],
        4,
        queries,
        post_norm_of=lambda L: inner.layers[L].post_attention_layernorm,
    )
    got = copy_score(model, ids)
    # measured max |got - want|: 4.1e-8 (gemma2), 9.1e-8 (gemma3), 2.5e-7 (olmo2); a float64 reference gives
    # 1.2e-7, 1.1e-7, 2.9e-7. Without the norm's weight (the old score): 0.11, 0.17, 0.097; with its weight
    # but not its RMS: 1.3e-2 on OLMo 2 (head outputs of RMS 1.3e-4 drown in the final norm's eps of 1e-5)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
    assert got.std() > 0.02  # measured 0.065-0.15: the heads differ


def test_copy_score_positions_and_padding(llama):
    ids = repeat_batch(seed=4, T=4)
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    chosen[:, -1] = True
    torch.testing.assert_close(copy_score(llama, ids, positions=chosen), copy_score(llama, ids, positions=-1))
    with pytest.raises(ValueError, match="positions"):
        copy_score(llama, ids, positions=[9])
    with pytest.raises(TypeError, match="positions"):
        copy_score(llama, ids, positions=chosen.long())
    with pytest.raises(ValueError, match="attention_mask"):
        copy_score(llama, ids, attention_mask=torch.zeros_like(ids))
    # an output module that is no RMSNorm (a user's map) is refused rather than scored as if it were absent
    odd = HookedModel(llama, spec=replace(HookedModel(llama).spec, attn_out="mlp"))
    with pytest.raises(TypeError, match="RMSNorm of the attention output"):
        copy_score(odd, ids)


def test_ablation_hooks(llama):
    hooked = HookedModel(llama)
    ids, reference = repeat_batch(seed=5), repeat_batch(seed=6, batch=3)
    clean, clean_cache = hooked.run_with_cache(ids, ["blocks.0.attn.hook_z"])
    assert mean_ablation_hooks(llama, [], reference) == []
    assert torch.equal(
        hooked.run_with_hooks(ids, fwd_hooks=mean_ablation_hooks(hooked, [], reference)), clean
    )
    hooks = mean_ablation_hooks(hooked, [(0, 1), (1, 3)], reference)
    assert [name for name, _ in hooks] == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    logits, cache = hooked.run_with_cache(ids, ["blocks.0.attn.hook_z"], fwd_hooks=hooks)
    assert (logits - clean).abs().max() > 1e-4
    _, ref_cache = hooked.run_with_cache(reference, ["blocks.0.attn.hook_z"])
    z, z_clean = cache["z", 0], clean_cache["z", 0]
    mean = ref_cache["z", 0][:, :, 1].mean((0, 1))
    torch.testing.assert_close(z[:, :, 1], mean.expand_as(z[:, :, 1]))
    assert torch.equal(z[:, :, [0, 2, 3]], z_clean[:, :, [0, 2, 3]])
    # the mean over the real positions only
    pad = torch.ones_like(reference)
    pad[0, 5:] = 0
    masked = mean_ablation_hooks(hooked, [(0, 1)], reference, attention_mask=pad)
    _, cache = hooked.run_with_cache(ids, ["blocks.0.attn.hook_z"], fwd_hooks=masked)
    torch.testing.assert_close(cache["z", 0][0, 0, 1], ref_cache["z", 0][:, :, 1][pad.bool()].mean(0))
    zeroed = zero_ablation_hooks([(0, 2)])
    logits, cache = hooked.run_with_cache(ids, ["blocks.0.attn.hook_z"], fwd_hooks=zeroed)
    assert (
        torch.equal(cache["z", 0][:, :, 2], torch.zeros_like(z[:, :, 2]))
        and (logits - clean).abs().max() > 1e-4
    )
    assert zero_ablation_hooks([]) == []


def _ablation_means(model, ids) -> list[torch.Tensor]:
    """The values mean_ablation_hooks writes, read by applying each hook to zeros."""
    hooks = mean_ablation_hooks(model, [(0, 1), (1, 2)], ids)
    return [fn(torch.zeros(1, 1, 4, 16), None) for _, fn in hooks]


HEAD_ANALYSES = {
    "attention_patterns": lambda m, ids: attention_patterns(m, ids),
    "copy_score": lambda m, ids: copy_score(m, ids),
    "head_scores": lambda m, ids: (
        head_scores(m, ids, scores=[n for n in SCORE_NAMES if n != "pattern_matching"]).scores
    ),
    "mean_ablation_hooks": _ablation_means,
}


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("what", list(HEAD_ANALYSES))
def test_a_model_in_training_mode_gives_the_eval_mode_head_analyses(zoo, modes, arch, what):
    # the pass ran in the model's mode: with dropout 0.1 in training mode the patterns of layer 1 were off the
    # eval-mode ones by up to 0.0088 (GPT-2) / 0.0073 (Qwen2, attention dropout), the copy scores by 0.12 /
    # 0.079 and the ablation means by 0.031 / 0.041. Now the model runs in eval mode (bit-identical) and every
    # submodule's mode comes back, also when the pass raises.
    ids = repeat_batch(seed=7)
    want, got = modes.train_vs_eval(getattr(zoo, arch)(), lambda m: HEAD_ANALYSES[what](m, ids))
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_ablation_bad_heads_raise_naming_heads(llama):
    ids = repeat_batch()
    for heads in ([(0, 4)], [(2, 0)], [(0, -1)]):
        with pytest.raises(ValueError, match="heads"):
            mean_ablation_hooks(llama, heads, ids)
    for heads in ([[0, 1]], "0,1", [(0, 1.0)]):
        with pytest.raises(TypeError, match="heads"):
            mean_ablation_hooks(llama, heads, ids)
        with pytest.raises(TypeError, match="heads"):
            zero_ablation_hooks(heads)
    with pytest.raises(ValueError, match="heads"):
        zero_ablation_hooks([(0, -1)])
    with pytest.raises(ValueError, match="heads"):  # the model's size is known only when the hook runs
        HookedModel(llama).run_with_hooks(ids, fwd_hooks=zero_ablation_hooks([(0, 7)]))


def test_head_scores_dataclass_is_a_plain_container():
    hs = HeadScores(scores={"induction": torch.tensor([[0.1, math.nan], [0.7, 0.3]])}, layers=(2, 5))
    assert hs.top("induction", k=5) == [
        (5, 0, pytest.approx(0.7)),
        (5, 1, pytest.approx(0.3)),
        (2, 0, pytest.approx(0.1)),
    ]
    with pytest.raises(ValueError, match="k"):
        hs.top("induction", k=0)
