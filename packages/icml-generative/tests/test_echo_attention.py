"""EchoAttention (issue 41, "Must hold"): operators against explicit computations, the Echo calibration
against ``torch.linalg.lstsq``, the routing policy inside a tiny diffusers Wan transformer and WanPipeline,
the training stages, save / load and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_generative.echo_attention import (
    ROUTES,
    EchoCalibrator,
    EchoPolicy,
    VideoLayout,
    anchor_partials,
    apply_echo_attention,
    attention_flops,
    capture_attention_inputs,
    dense_attention,
    echo_attention,
    finalize_routes,
    finetune_echo,
    fit_echo_calibration,
    frame_block_similarity,
    group_means,
    pooled_block_scores,
    remove_echo_attention,
    select_key_blocks,
    sparse_attention,
    train_router,
    video_layout_of,
)
from icml_generative.echo_attention.ops import kept_fraction

LAYOUT = VideoLayout(4, 16)


def qkv(layout: VideoLayout = LAYOUT, b: int = 2, h: int = 3, d: int = 8, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, layout.num_tokens, d, generator=g, dtype=dtype) for _ in range(3))


def copy_anchor_queries(q: torch.Tensor, layout: VideoLayout, stride: int) -> torch.Tensor:
    """Every frame's queries replaced by those of its anchor (the nearest anchor at or before it)."""
    q = q.clone()
    s, t = layout.tokens_per_frame, layout.text_tokens
    for f in range(layout.frames):
        r = (f // stride) * stride
        q[:, :, t + f * s : t + (f + 1) * s] = q[:, :, t + r * s : t + (r + 1) * s]
    return q


def explicit_attention(q, k, v, allowed: torch.Tensor) -> torch.Tensor:
    """softmax over the allowed keys only, ``allowed`` (B, H, N, N) bool."""
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


# -- the sparse operator -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [LAYOUT, VideoLayout(3, 10, text_tokens=5)])
def test_sparse_with_every_key_block_equals_dense(layout):
    q, k, v = qkv(layout)
    for kwargs in ({"density": 1.0}, {"top_p": 1.0}):
        out, index = sparse_attention(q, k, v, layout, block_size=4, **kwargs)
        torch.testing.assert_close(out, dense_attention(q, k, v), rtol=1e-10, atol=1e-10)
        assert kept_fraction(index, layout, 4) == 1.0


def test_sparse_equals_masked_softmax_over_the_selected_blocks():
    layout = VideoLayout(4, 16, text_tokens=8)
    q, k, v = qkv(layout)
    bs = 8
    index = select_key_blocks(q, k, layout, block_size=bs, density=0.4, neighbor_frames=0)
    nb = math.ceil(layout.num_tokens / bs)
    blocks = torch.zeros(*index.shape[:-1], nb + 1, dtype=torch.bool).scatter_(-1, index % (nb + 1), True)[
        ..., :nb
    ]
    allowed = blocks.repeat_interleave(bs, -2).repeat_interleave(bs, -1)
    out, _ = sparse_attention(q, k, v, layout, block_size=bs, density=0.4, neighbor_frames=0)
    torch.testing.assert_close(out, explicit_attention(q, k, v, allowed))


def test_selection_keeps_own_and_neighbouring_frames_and_text():
    layout = VideoLayout(6, 8, text_tokens=8)  # blocks of 8: one text block, then one block per frame
    q, k, _ = qkv(layout)
    index = select_key_blocks(q, k, layout, block_size=8, density=1e-3, neighbor_frames=1)
    for qb in range(7):
        kept = set(index[0, 0, qb][index[0, 0, qb] >= 0].tolist())
        if qb == 0:  # text queries attend to everything
            assert kept == set(range(7))
        else:
            f = qb - 1
            assert kept == {0} | {1 + g for g in range(max(f - 1, 0), min(f + 2, 6))}


def test_top_k_count_and_top_p_mass():
    q, k, _ = qkv()
    scores = pooled_block_scores(q, k, 8)  # 8 blocks
    index = select_key_blocks(q, k, LAYOUT, block_size=8, density=0.5, neighbor_frames=0)
    assert ((index >= 0).sum(-1) == 4).all()
    index = select_key_blocks(q, k, LAYOUT, block_size=8, top_p=0.7, neighbor_frames=0)
    mass = torch.where(index >= 0, scores.gather(-1, index.clamp(min=0)), 0.0).sum(-1)
    assert (mass >= 0.7 - 1e-9).all()
    # the fewest: dropping the last non-forced block would fall short (when it is not forced)
    count = (index >= 0).sum(-1)
    last = scores.gather(-1, (index.gather(-1, (count - 1)[..., None]))).squeeze(-1)
    assert ((mass - last < 0.7) | (count <= 2)).all()


@settings(max_examples=25, deadline=None)
@given(
    frames=st.integers(2, 5),
    tokens=st.integers(1, 9),
    text=st.integers(0, 6),
    block=st.integers(1, 12),
    density=st.floats(0.01, 1.0),
    neighbours=st.integers(0, 2),
)
def test_fuzz_selection_is_valid_and_sparse_is_a_convex_combination(
    frames, tokens, text, block, density, neighbours
):
    layout = VideoLayout(frames, tokens, text)
    q, k, v = qkv(layout, b=1, h=2, d=4)
    out, index = sparse_attention(
        q, k, v, layout, block_size=block, density=density, neighbor_frames=neighbours
    )
    nb = math.ceil(layout.num_tokens / block)
    assert index.dtype == torch.int64 and index.min() >= -1 and index.max() < nb
    for row in index.reshape(-1, index.shape[-1]):
        kept = row[row >= 0].tolist()
        assert len(kept) == len(set(kept)) and kept
    assert torch.isfinite(out).all()
    assert (out <= v.max(2, keepdim=True).values + 1e-9).all() and (
        out >= v.min(2, keepdim=True).values - 1e-9
    ).all()
    assert 0 < kept_fraction(index, layout, block) <= 1


# -- the Echo operator --------------------------------------------------------------------------------------
@pytest.mark.parametrize("stride", [2, 3])
@pytest.mark.parametrize("text", [0, 6])
def test_echo_is_exact_on_frames_copying_their_anchor(stride, text):
    layout = VideoLayout(5, 12, text_tokens=text)
    q, k, v = qkv(layout, dtype=torch.float32)
    q = copy_anchor_queries(q, layout, stride)
    out = echo_attention(q, k, v, layout, anchor_stride=stride)
    assert (out - dense_attention(q, k, v)).abs().max() <= 1e-5


def test_anchor_partials_sum_to_the_anchor_output_and_split_by_key_group():
    layout = VideoLayout(4, 6, text_tokens=3)
    q, k, v = qkv(layout)
    u = anchor_partials(q, k, v, layout, [0, 2])
    dense = dense_attention(q, k, v)
    for ri, r in enumerate([0, 2]):
        rows = slice(3 + r * 6, 3 + (r + 1) * 6)
        torch.testing.assert_close(u[:, :, ri].sum(2), dense[:, :, rows])
        scores = (q[:, :, rows] @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1)
        for j in range(4):
            cols = slice(3 + j * 6, 3 + (j + 1) * 6)
            torch.testing.assert_close(u[:, :, ri, j], scores[..., cols] @ v[:, :, cols])
        torch.testing.assert_close(u[:, :, ri, 4], scores[..., :3] @ v[:, :, :3])  # the text group
    torch.testing.assert_close(group_means(v, layout)[:, :, 1], v[:, :, 9:15].mean(2))


def test_echo_equals_its_formula_for_both_variants():
    layout = VideoLayout(4, 5)
    q, k, v = qkv(layout, h=2)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 2, 4, generator=g, dtype=torch.float64)
    b = torch.randn(2, 2, 4, generator=g, dtype=torch.float64)
    out = echo_attention(q, k, v, layout, anchor_stride=2, variants=["same_key", "same_offset"], a=a, b=b)
    u = anchor_partials(q, k, v, layout, [0, 2])
    vbar = group_means(v, layout)
    for h, shift in ((0, False), (1, True)):
        for qi, i in enumerate([1, 3]):
            r = i - 1
            expected = sum(
                a[h, qi, j] * u[:, h, r // 2, min(max(j + r - i, 0), 3) if shift else j]
                + b[h, qi, j] * vbar[:, h, j][:, None]
                for j in range(4)
            )
            torch.testing.assert_close(out[:, h, i * 5 : (i + 1) * 5], expected)
    torch.testing.assert_close(out[:, :, :5], dense_attention(q, k, v)[:, :, :5])  # the anchor is exact


def test_calibration_equals_lstsq_on_the_stacked_design():
    layout = VideoLayout(4, 6, text_tokens=2)
    cal = EchoCalibrator(layout, num_heads=3, anchor_stride=2)
    batches = [qkv(layout, seed=s) for s in range(2)]
    for q, k, v in batches:
        cal.update(q, k, v)
    fit = cal.solve()
    for variant in range(2):
        designs = [cal.design(q, k, v, variant) for q, k, v in batches]
        for h in range(3):
            for qi in range(2):
                x = torch.cat([d[0][:, h, qi].reshape(-1, d[0].shape[-1]) for d in designs])
                y = torch.cat([d[1][:, h, qi].reshape(-1) for d in designs])
                ref = torch.linalg.lstsq(x, y[:, None]).solution[:, 0]
                got = torch.cat([fit["a"][variant, h, qi], fit["b"][variant, h, qi]]).double()
                torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
                res = (x @ ref - y).norm()
                assert res <= y.norm()


def test_calibration_recovers_the_copy_on_copied_frames():
    layout = VideoLayout(4, 8)
    q, k, v = qkv(layout)
    q = copy_anchor_queries(q, layout, 2)
    cal = EchoCalibrator(layout, 3, 2)
    cal.update(q, k, v)
    fit = cal.solve()
    assert (fit["residual"][0] < 1e-6).all() and (fit["best"] == 0).all()
    torch.testing.assert_close(fit["a"][0], torch.ones_like(fit["a"][0]), atol=1e-4, rtol=0)


def test_frame_block_similarity():
    layout = VideoLayout(4, 5)
    q, k, _ = qkv(layout)
    copied = copy_anchor_queries(q, layout, 2)
    torch.testing.assert_close(frame_block_similarity(copied, k, layout), torch.ones(3, dtype=torch.float64))
    sim = frame_block_similarity(q, k, layout, variant="same_offset")
    p = (q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1)
    blocks = p.unflatten(2, (4, 5)).unflatten(-1, (4, 5))  # (B, H, F, S, F, S)
    expected = []
    for i in (1, 3):
        mine = blocks[:, :, i]
        theirs = blocks[:, :, i - 1][:, :, :, [max(j - 1, 0) for j in range(4)]]
        expected.append(torch.nn.functional.cosine_similarity(mine.flatten(2), theirs.flatten(2), dim=-1))
    torch.testing.assert_close(sim, torch.stack(expected).mean((0, 1)))


def test_flops():
    layout = VideoLayout(8, 64)
    n, d = layout.num_tokens, 16
    assert attention_flops("dense", layout, d) == 4 * n * n * d
    echo = attention_flops("echo", layout, d, anchor_stride=4)
    assert echo == 4 * 2 * 64 * n * d + 4 * 6 * 64 * 8 * d + n * d
    policy = EchoPolicy(1, 2, d, layout, block_size=16, neighbor_frames=0, density=0.25, route="sparse")
    q, k, v = qkv(layout, b=1, h=2, d=d)
    _, index = sparse_attention(q, k, v, layout, block_size=16, density=0.25, neighbor_frames=0)
    assert (
        policy.sparse_kept_fraction()
        == pytest.approx(kept_fraction(index, layout, 16))
        == pytest.approx(0.25)
    )
    assert policy.flops()["fraction"] == pytest.approx(
        attention_flops("sparse", layout, d, density=0.25, block_size=16) / (4 * n * n * d)
    )
    for budget in (0.2, 0.4, 0.6, 1.0):
        assert policy.fit_density(budget) <= budget
    with pytest.raises(ValueError, match="budget"):
        policy.fit_density(0.1)  # the own frame alone is 1/8 of the keys


# -- the policy inside diffusers ----------------------------------------------------------------------------
def tiny_wan():
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=3,
        out_channels=3,
        text_dim=8,
        freq_dim=16,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
    ).eval()


def wan_inputs(frames: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(2, 3, frames, 8, 8, generator=g),
        "timestep": torch.tensor([500.0, 300.0]),
        "encoder_hidden_states": torch.randn(2, 1, 8, generator=g),
    }


@pytest.fixture
def wan():
    return tiny_wan()


def policy_for(wan, **kwargs) -> EchoPolicy:
    return EchoPolicy(2, 2, 8, VideoLayout(4, 16), block_size=8, **kwargs)


def test_all_dense_routes_reproduce_the_model_exactly(wan):
    inputs = wan_inputs()
    with torch.no_grad():
        reference = wan(**inputs, return_dict=False)[0]
        apply_echo_attention(wan, policy_for(wan))
        routed = wan(**inputs, return_dict=False)[0]
        remove_echo_attention(wan)
        removed = wan(**inputs, return_dict=False)[0]
    assert torch.equal(routed, reference) and torch.equal(removed, reference)
    assert video_layout_of(wan, tuple(inputs["hidden_states"].shape)) == VideoLayout(4, 16)


@pytest.mark.usefixtures("one_torch_thread")
def test_layerwise_casting_is_checked_against_its_compute_dtype(wan):
    # diffusers' enable_layerwise_casting stores the weights in float8 and computes in bfloat16: the old check
    # compared hidden_states with the float8 storage dtype and refused every call
    wan = wan.to(torch.bfloat16)
    wan.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    inputs = {k: v if k == "timestep" else v.to(torch.bfloat16) for k, v in wan_inputs().items()}
    with torch.no_grad():
        reference = wan(**inputs, return_dict=False)[0]
        apply_echo_attention(wan, policy_for(wan))
        routed = wan(**inputs, return_dict=False)[0]
        attn = wan.blocks[0].attn1
        assert attn.to_out[0].weight.dtype == torch.float8_e4m3fn
        with pytest.raises(TypeError, match=r"hidden_states must have the model's dtype torch\.bfloat16"):
            attn.processor(attn, torch.randn(2, 64, 16))
    assert routed.dtype == torch.bfloat16 and torch.equal(routed, reference)  # all-dense routes: exact


def test_routes_change_the_output_and_cross_attention_stays_dense(wan):
    inputs = wan_inputs()
    policy = policy_for(wan, density=0.25, neighbor_frames=0)
    apply_echo_attention(wan, policy)
    assert all(type(b.attn2.processor).__name__ == "WanAttnProcessor" for b in wan.blocks)
    with torch.no_grad():
        dense = wan(**inputs, return_dict=False)[0]
        outs = {}
        for route in ROUTES[1:]:
            policy.set_routes([[route] * 2] * 2)
            outs[route] = wan(**inputs, return_dict=False)[0]
    for out in outs.values():
        assert torch.isfinite(out).all() and not torch.equal(out, dense)
        assert (out - dense).pow(2).mean() < dense.var()  # an approximation, not noise


def test_works_inside_a_diffusers_wan_pipeline(wan):
    pytest.importorskip("transformers")
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    pipe = WanPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=None,
        transformer=wan,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
    )
    pipe.set_progress_bar_config(disable=True)
    cond = torch.randn(1, 1, 8, generator=torch.Generator().manual_seed(3))
    calls = []

    def generate():  # 64x64 pixels and 13 frames -> latents (1, 3, 4, 8, 8): 4 frames of 16 tokens
        return pipe(
            prompt_embeds=cond,
            negative_prompt_embeds=torch.zeros_like(cond),
            height=64,
            width=64,
            num_frames=13,
            num_inference_steps=3,
            guidance_scale=4.0,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
        ).frames

    reference = generate()
    policy = policy_for(wan, density=0.5, neighbor_frames=0)
    policy.set_routes([["echo", "sparse"], ["sparse", "echo"]])
    original = policy.attention
    policy.attention = lambda *a: calls.append(a[0]) or original(*a)  # type: ignore[method-assign]
    apply_echo_attention(wan, policy)
    try:
        routed = generate()
    finally:
        remove_echo_attention(wan)
    assert calls.count(0) == calls.count(1) == 6  # 3 steps x (cond, uncond) per layer
    assert not torch.equal(routed, reference) and torch.isfinite(routed).all()
    assert torch.equal(generate(), reference)


# -- training stages, persistence ---------------------------------------------------------------------------
def test_three_stages_fit_the_budget_and_leave_the_model_unchanged(wan):
    policy = policy_for(wan, neighbor_frames=0, anchor_stride=2)
    apply_echo_attention(wan, policy)
    before = {k: v.clone() for k, v in wan.state_dict().items()}
    batches = [wan_inputs(seed=s) for s in range(2)]
    captured = capture_attention_inputs(policy, lambda: [wan(**b) for b in batches])
    assert [len(c) for c in captured] == [2, 2] and captured[0][0][0].shape == (2, 2, 64, 8)
    fit = fit_echo_calibration(policy, captured)
    assert fit["residual"].shape == (2, 2, 2) and (fit["residual"] <= 1).all()
    policy.routes.fill_(1)
    policy.fit_density(0.6)
    log = train_router(wan, policy, batches, 0.6, steps=4, penalty=5.0)
    assert len(log) == 4 and all(math.isfinite(r["loss"]) for r in log)
    assert policy.router_logits.grad is not None
    result = finalize_routes(policy, 0.6)
    assert result["fraction"] <= 0.6 and policy.flops()["fraction"] == result["fraction"]
    policy.routes[0, 0] = ROUTES.index("echo")
    policy.fit_density(0.6)
    a_before = policy.a.detach().clone()
    losses = finetune_echo(wan, policy, batches, steps=3, lr=1e-2)
    assert len(losses) == 3 and not torch.equal(policy.a.detach(), a_before)
    for k, v in wan.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.requires_grad for p in wan.parameters())  # restored after the stages


def test_failed_fit_density_and_finalize_routes_leave_the_policy_unchanged():
    # both used to raise after rewriting the density (to 1/8, the smallest) and finalize_routes the routes
    policy = EchoPolicy(2, 2, 8, VideoLayout(4, 16), block_size=8, density=0.375)
    policy.set_routes([["echo", "sparse"], ["dense", "echo"]])
    routes = policy.routes.clone()
    with torch.no_grad():
        policy.router_logits[..., 0] = 1.0  # the router prefers dense everywhere
    with pytest.raises(ValueError, match=r"budget=0\.0001 cannot be met"):
        policy.fit_density(1e-4)
    assert policy.density == 0.375 and torch.equal(policy.routes, routes)
    with pytest.raises(ValueError, match=r"budget=0\.0001 cannot be met"):
        finalize_routes(policy, 1e-4)  # every head moved off dense, still over the budget
    assert policy.density == 0.375 and torch.equal(policy.routes, routes)
    result = finalize_routes(policy, 0.9)  # a reachable budget still rewrites both
    assert result["fraction"] <= 0.9 and policy.density == result["density"]
    assert not torch.equal(policy.routes, routes)


def test_capture_attention_inputs_keeps_nothing_when_run_raises(wan):
    policy = policy_for(wan)
    apply_echo_attention(wan, policy)
    inputs = wan_inputs()

    def run():
        wan(**inputs)
        raise RuntimeError("run failed")

    with pytest.raises(RuntimeError, match="run failed"):
        capture_attention_inputs(policy, run)
    assert policy.mode == "route" and policy.captured == [[], []]  # the captured tensors were left behind
    captured = capture_attention_inputs(policy, lambda: wan(**inputs))
    assert [len(c) for c in captured] == [1, 1] and policy.captured == [[], []]


def test_train_router_on_a_fake_cuda_device(wan, fake_cuda, monkeypatch):
    # the root conftest's faked CUDA: the Gumbel noise and the route costs were built on the CPU
    policy = policy_for(wan, anchor_stride=2, neighbor_frames=0)
    policy.operator = lambda route, layer, heads, q, k, v: F.scaled_dot_product_attention(q, k, v)  # the
    # real operators read index values, which fake tensors do not hold
    with fake_cuda():
        wan, policy = wan.to("cuda"), policy.to("cuda")
        apply_echo_attention(wan, policy)
        batches = [{k: v[:1].to("cuda") for k, v in wan_inputs().items()}]
        # autograd needs a real CUDA device for fake CUDA tensors: the forward passes' devices are checked
        monkeypatch.setattr(torch.Tensor, "backward", lambda *args, **kwargs: None)
        log = train_router(wan, policy, batches, 0.5, steps=2)
        assert len(log) == 2 and policy.router_logits.device.type == "cuda"


def test_save_load_round_trip_and_failed_save_keeps_the_old(tmp_path, wan, monkeypatch):
    policy = policy_for(wan, neighbor_frames=0, density=0.375)
    policy.set_routes([["echo", "sparse"], ["dense", "echo"]])
    policy.variants[0, 0] = 1
    with torch.no_grad():
        policy.a.add_(torch.randn_like(policy.a) * 0.1)
    path = policy.save(tmp_path / "policy")
    loaded = EchoPolicy.load(path)
    q, k, v = qkv(VideoLayout(4, 16), h=2, dtype=torch.float32)
    for layer in range(2):
        assert torch.equal(loaded.attention(layer, q, k, v), policy.attention(layer, q, k, v))

    def boom(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr("safetensors.torch.save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        EchoPolicy(2, 2, 8, VideoLayout(4, 16)).save(path)
    assert torch.equal(EchoPolicy.load(path).a, policy.a.detach())
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]


# -- bad input ----------------------------------------------------------------------------------------------
def test_bad_input_raises_naming_the_argument(wan):
    with pytest.raises(ValueError, match="divide into frames"):
        VideoLayout.from_tokens(65, frames=4)
    q, k, v = qkv(VideoLayout(4, 16))
    with pytest.raises(ValueError, match="divide into frames of tokens_per_frame"):
        echo_attention(q, k, v, VideoLayout(5, 13))
    with pytest.raises(ValueError, match="density"):
        select_key_blocks(q, k, LAYOUT, density=0.0)
    with pytest.raises(ValueError, match="top_p"):
        select_key_blocks(q, k, LAYOUT, top_p=1.5)
    with pytest.raises(ValueError, match="exactly one of density and top_p"):
        select_key_blocks(q, k, LAYOUT)
    with pytest.raises(ValueError, match="q, k and v must have the same shape"):
        sparse_attention(q, k[:, :1], v, LAYOUT, density=0.5)
    with pytest.raises(ValueError, match="variants"):
        echo_attention(q, k, v, LAYOUT, variants=["same_key"])
    with pytest.raises(ValueError, match="variants\\[0\\]"):
        echo_attention(q, k, v, LAYOUT, variants=["sideways"] * 3)
    with pytest.raises(TypeError, match="q must be a floating-point"):
        echo_attention(q.long(), k, v, LAYOUT)
    policy = policy_for(wan)
    for budget in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="budget"):
            policy.fit_density(budget)
        with pytest.raises(ValueError, match="budget"):
            finalize_routes(policy, budget)
        with pytest.raises(ValueError, match="budget"):
            train_router(wan, policy, [wan_inputs()], budget)
    with pytest.raises(ValueError, match="routes"):
        policy.set_routes([["fast"] * 2] * 2)
    with pytest.raises(ValueError, match="anchor_stride"):
        EchoPolicy(2, 2, 8, VideoLayout(4, 16), anchor_stride=1)
    with pytest.raises(ValueError, match="policy is for"):
        apply_echo_attention(wan, EchoPolicy(3, 2, 8, VideoLayout(4, 16)))
    with pytest.raises(TypeError, match="WanTransformer3DModel"):
        apply_echo_attention(torch.nn.Linear(2, 2), policy)
    apply_echo_attention(wan, policy)
    with pytest.raises(ValueError, match="make 2 frames of 16 tokens"):
        wan(**wan_inputs(frames=2))
    remove_echo_attention(wan)
    with pytest.raises(ValueError, match="path must be a folder"):
        EchoPolicy.load("/nonexistent/echo")
