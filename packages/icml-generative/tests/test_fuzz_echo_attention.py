"""The bad-input contract (GUIDE "Bad input") for icml_generative.echo_attention: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
The processor and training APIs run on a tiny diffusers Wan transformer (as in test_echo_attention.py).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_generative.echo_attention as echo_module
from icml_generative.echo_attention import (
    EchoCalibrator,
    EchoPolicy,
    EchoWanAttnProcessor,
    VideoLayout,
    anchor_frames,
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
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()

LAYOUT = VideoLayout(4, 4)  # N = 16: anchors 0, 2 and targets 1, 3 at anchor_stride 2
TEXT = VideoLayout(3, 4, text_tokens=2)  # N = 14, key groups 4 (3 frames and the text)
WAN_LAYOUT = VideoLayout(4, 16)  # latents (1, 3, 4, 8, 8) with patch (1, 2, 2)
SMALL_INTS = st.one_of(  # hostile step counts without long valid runs (slow, not bad input)
    st.sampled_from([None, "x", object(), 0, -1, 1, 2, True, 2.0, 0.5, math.nan, 2**63, 1_000_001]),
    st.integers(-5, 3),
)
OTHER_LAYOUTS = st.sampled_from(
    [None, (4, 4), VideoLayout(4, 5), VideoLayout(2, 8), VideoLayout(1, 16), VideoLayout(3, 4, text_tokens=4)]
)


def qkv(layout: VideoLayout, b: int = 1, h: int = 2, d: int = 4, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, layout.num_tokens, d, generator=g) for _ in range(3))


Q, K, V = qkv(LAYOUT)
TQ, TK, TV = qkv(TEXT, seed=1)
QKV_RELATED = {"q": ["k", "v"], "k": ["q", "v"], "v": ["q", "k"]}
WITH_LAYOUT = {
    "q": ["k", "v", "layout"],
    "k": ["q", "v", "layout"],
    "v": ["q", "k", "layout"],
    "layout": ["q", "k", "v"],
}


def shaped(t: torch.Tensor, shape: tuple[int, ...] | None = None) -> bool:
    """A tensor of ``shape`` (fuzz_call itself refuses NaN or inf from finite input without a warning)."""
    return isinstance(t, torch.Tensor) and (shape is None or tuple(t.shape) == shape)


# tiny torch ops on a shared 2-core machine: intra-op threads only add synchronization
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- the layout and the operators ---------------------------------------------------------------------------
@FUZZ.covers(VideoLayout)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_video_layout(data):
    def consistent(layout):
        return layout.num_tokens == layout.text_tokens + layout.frames * layout.tokens_per_frame

    fuzz_call(data, VideoLayout, {"frames": 3, "tokens_per_frame": 4, "text_tokens": 2}, check=consistent)
    fuzz_call(
        data,
        VideoLayout.from_tokens,
        {"num_tokens": 14, "frames": 3, "text_tokens": 2},
        check=consistent,
        related={
            "num_tokens": ["frames", "text_tokens"],
            "frames": ["num_tokens"],
            "text_tokens": ["num_tokens"],
        },
    )
    fuzz_call(
        data, TEXT.check_qkv, {"q": TQ, "k": TK, "v": TV}, check=lambda t: len(t) == 3, related=QKV_RELATED
    )


@FUZZ.covers(dense_attention)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_dense_attention(data):
    fuzz_call(  # cross-attention shapes are accepted: k, v (B, H, Nk, ·)
        data,
        dense_attention,
        {"q": Q, "k": K, "v": V},
        check=lambda out: shaped(out) and out.shape[:3] == Q.shape[:3],
        related=QKV_RELATED,
    )


@FUZZ.covers(pooled_block_scores)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_pooled_block_scores(data):
    def check(p):
        return shaped(p) and p.shape[:2] == (1, 2) and torch.allclose(p.sum(-1), torch.ones(()))

    fuzz_call(data, pooled_block_scores, {"q": Q, "k": K, "block_size": 4}, check=check, related=QKV_RELATED)


def valid_index(index: torch.Tensor) -> bool:
    return (
        index.dtype == torch.int64
        and index.ndim == 4
        and bool((index >= -1).all())
        and bool((index >= 0).any())
    )


@FUZZ.covers(select_key_blocks)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_select_key_blocks(data):
    valid = {"q": TQ, "k": TK, "layout": TEXT, "block_size": 4, "neighbor_frames": 0}
    strategies = {"layout": OTHER_LAYOUTS}
    fuzz_call(
        data,
        select_key_blocks,
        {**valid, "density": 0.5, "top_p": None},
        check=valid_index,
        related={**WITH_LAYOUT, "density": ["top_p"], "top_p": ["density"]},
        strategies=strategies,
    )
    fuzz_call(
        data,
        select_key_blocks,
        {**valid, "density": None, "top_p": 0.7},
        check=valid_index,
        related={**WITH_LAYOUT, "density": ["top_p"], "top_p": ["density"]},
        strategies=strategies,
    )


@FUZZ.covers(sparse_attention)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sparse_attention(data):
    fuzz_call(
        data,
        sparse_attention,
        {
            "q": TQ,
            "k": TK,
            "v": TV,
            "layout": TEXT,
            "block_size": 4,
            "density": 0.5,
            "top_p": None,
            "neighbor_frames": 1,
        },
        check=lambda r: shaped(r[0], tuple(TQ.shape)) and valid_index(r[1]),
        related={**WITH_LAYOUT, "density": ["top_p"], "top_p": ["density"]},
        strategies={"layout": OTHER_LAYOUTS},
    )


@FUZZ.covers(anchor_frames)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_anchor_frames(data):
    fuzz_call(
        data,
        anchor_frames,
        {"frames": 5, "anchor_stride": 2},
        check=lambda anchors: anchors[0] == 0 and all(isinstance(a, int) and a >= 0 for a in anchors),
    )


@FUZZ.covers(anchor_partials, group_means)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_anchor_partials_and_group_means(data):
    def check(u):  # (B, H, R, G, S, D)
        return shaped(u) and u.shape[:2] == (1, 2) and u.shape[3:] == (4, 4, 4)

    fuzz_call(
        data,
        anchor_partials,
        {"q": TQ, "k": TK, "v": TV, "layout": TEXT, "anchors": [0, 2]},
        check=check,
        related={**WITH_LAYOUT, "layout": ["q", "k", "v", "anchors"]},
        strategies={"layout": OTHER_LAYOUTS},
    )
    fuzz_call(
        data,
        group_means,
        {"v": TV, "layout": TEXT},
        check=lambda m: shaped(m) and m.ndim == 4 and m.shape[:3] == (1, 2, 4),
        related={"v": ["layout"], "layout": ["v"]},
        strategies={"layout": OTHER_LAYOUTS},
    )


@FUZZ.covers(echo_attention)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_echo_attention(data):
    g = torch.Generator().manual_seed(2)
    fuzz_call(
        data,
        echo_attention,
        {
            "q": Q,
            "k": K,
            "v": V,
            "layout": LAYOUT,
            "anchor_stride": 2,
            "variants": ["same_key", "same_offset"],
            "a": 1 + 0.1 * torch.randn(2, 2, 4, generator=g),  # (H, Q, G)
            "b": 0.1 * torch.randn(2, 2, 4, generator=g),
        },
        check=lambda out: shaped(out, tuple(Q.shape)),
        related={
            **{n: [*r, "a", "b"] for n, r in WITH_LAYOUT.items()},
            "q": [
                "k",
                "v",
                "a",
                "b",
                "variants",
            ],  # another head count breaks the agreement with a, b, variants
            "anchor_stride": ["a", "b"],  # another stride changes the non-anchor frames Q
        },
        strategies={"layout": OTHER_LAYOUTS},
    )


@FUZZ.covers(frame_block_similarity)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_frame_block_similarity(data):
    fuzz_call(
        data,
        frame_block_similarity,
        {"q": TQ, "k": TK, "layout": TEXT, "anchor_stride": 2, "variant": "same_offset"},
        check=lambda s: s.shape == (2,) and bool(((s >= -1e-6) & (s <= 1 + 1e-6)).all()),
        related=WITH_LAYOUT,
        strategies={"layout": OTHER_LAYOUTS},
    )


@FUZZ.covers(attention_flops)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_attention_flops(data):
    valid = {"layout": TEXT, "head_dim": 4, "density": 0.5, "anchor_stride": 2, "block_size": 4}
    for route in ("dense", "sparse", "echo"):
        fuzz_call(
            data,
            attention_flops,
            {"route": route, **valid},
            check=lambda f: isinstance(f, float) and math.isfinite(f) and f > 0,
        )


# -- calibration and the policy -----------------------------------------------------------------------------
@FUZZ.covers(EchoCalibrator)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_echo_calibrator(data):
    def calibrate(layout, num_heads, anchor_stride, ridge, q, k, v):
        cal = EchoCalibrator(layout, num_heads, anchor_stride, ridge)
        cal.update(q, k, v)
        return cal.solve()

    def check(fit):
        v, h = fit["a"].shape[:2]
        return (
            v == 2
            and fit["b"].shape == fit["a"].shape
            and fit["residual"].shape == (2, h)
            and bool(((fit["residual"] >= 0) & (fit["residual"] <= 1 + 1e-6)).all())
            and fit["best"].shape == (h,)
        )

    fuzz_call(
        data,
        calibrate,
        {"layout": TEXT, "num_heads": 2, "anchor_stride": 2, "ridge": 1e-6, "q": TQ, "k": TK, "v": TV},
        check=check,
        related={
            **WITH_LAYOUT,
            "layout": ["q", "k", "v", "anchor_stride"],
            "q": ["k", "v", "num_heads"],
            "num_heads": ["q"],
        },
        strategies={"layout": OTHER_LAYOUTS},
    )
    cal = EchoCalibrator(TEXT, 2, 2)
    fuzz_call(
        data,
        cal.design,
        {"q": TQ, "k": TK, "v": TV, "variant": 1},
        check=lambda xy: shaped(xy[0]) and shaped(xy[1]) and xy[0].shape[:4] == xy[1].shape,
        related=QKV_RELATED,
    )


def policy(**kwargs) -> EchoPolicy:
    return EchoPolicy(2, 2, 4, LAYOUT, **{"block_size": 4, "neighbor_frames": 0, **kwargs})


@FUZZ.covers(EchoPolicy)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_echo_policy_runs_attention(data):
    def build_and_attend(
        num_layers, num_heads, head_dim, layout, anchor_stride, block_size, density, route, layer, q
    ):
        p = EchoPolicy(
            num_layers,
            num_heads,
            head_dim,
            layout,
            anchor_stride=anchor_stride,
            block_size=block_size,
            density=density,
            route=route,
        )
        return p.attention(layer, q, K, V)

    fuzz_call(
        data,
        build_and_attend,
        {
            "num_layers": 2,
            "num_heads": 2,
            "head_dim": 4,
            "layout": LAYOUT,
            "anchor_stride": 2,
            "block_size": 4,
            "density": 0.5,
            "route": "echo",
            "layer": 1,
            "q": Q,
        },
        check=lambda out: shaped(out, tuple(Q.shape)),
        related={
            "num_heads": ["q"],
            "head_dim": ["q"],
            "num_layers": ["layer"],
            "layout": ["q", "k", "v", "anchor_stride"],
            "q": ["k", "v"],
        },
        strategies={"layout": OTHER_LAYOUTS},
    )
    mixed = policy()
    mixed.set_routes([["echo", "sparse"], ["dense", "echo"]])
    fuzz_call(
        data,
        mixed.attention,
        {"layer": 0, "q": Q, "k": K, "v": V},
        check=lambda out: shaped(out, tuple(Q.shape)),
        related=QKV_RELATED,
    )


@FUZZ.covers(EchoPolicy)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_echo_policy_routes_and_flops(data):
    p = policy()

    def set_routes(routes):
        p.set_routes(routes)
        return p.routes

    in_range = lambda r: r.shape == (2, 2) and bool(((r >= 0) & (r <= 2)).all())  # noqa: E731
    fuzz_call(data, set_routes, {"routes": [["echo", "sparse"], ["dense", "echo"]]}, check=in_range)
    fuzz_call(data, set_routes, {"routes": torch.tensor([[2, 1], [0, 2]])}, check=in_range)
    p.set_routes([["sparse", "sparse"], ["echo", "dense"]])
    fuzz_call(data, p.fit_density, {"budget": 0.9}, check=lambda f: 0 < f <= 1)
    fuzz_call(data, p.sparse_kept_fraction, {"density": 0.5}, check=lambda f: 0 < f <= 1)
    fuzz_call(
        data,
        p.route_flops,
        {"route": "sparse", "kept": 0.5},
        check=lambda f: isinstance(f, float) and math.isfinite(f) and f > 0,
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("echo_policy")
    saved = policy(density=0.75)
    saved.set_routes([["echo", "sparse"], ["dense", "echo"]])
    with torch.no_grad():
        saved.a.add_(0.1 * torch.randn(saved.a.shape, generator=torch.Generator().manual_seed(3)))
    saved.save(root / "saved")
    (root / "file.txt").write_text("not a policy")
    (root / "other").mkdir()
    (root / "other" / "notes.txt").write_text("keep me")
    damaged = root / "damaged"
    saved.save(damaged)
    (damaged / "config.json").write_text("{not json")
    truncated = root / "truncated"
    saved.save(truncated)
    (truncated / "policy.safetensors").write_bytes(b"\x08\x00\x00")
    return root, saved


@FUZZ.covers(EchoPolicy)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_echo_policy_save_and_load(data, folders):
    root, saved = folders

    def round_trips(loaded):
        return loaded.config() == saved.config() and all(
            torch.equal(a, b)
            for a, b in zip(loaded.state_dict().values(), saved.state_dict().values(), strict=True)
        )

    bad = [None, 3, b"x", object(), "", "   ", str(root / "file.txt"), root / "other"]
    fuzz_call(
        data,
        lambda path: EchoPolicy.load(saved.save(path)),
        {"path": str(root / "again")},
        check=round_trips,
        strategies={"path": st.sampled_from(bad)},
    )
    fuzz_call(
        data,
        EchoPolicy.load,
        {"path": root / "saved"},
        check=round_trips,
        strategies={"path": st.sampled_from([*bad, root / "missing", root / "damaged", root / "truncated"])},
    )
    assert (root / "file.txt").read_text() == "not a policy"  # a refused save leaves what was there
    assert (root / "other" / "notes.txt").read_text() == "keep me"


# -- diffusers ----------------------------------------------------------------------------------------------
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


def wan_inputs(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(1, 3, 4, 8, 8, generator=g),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": torch.randn(1, 1, 8, generator=g),
    }


def wan_policy(**kwargs) -> EchoPolicy:
    return EchoPolicy(2, 2, 8, WAN_LAYOUT, **{"block_size": 8, "neighbor_frames": 0, **kwargs})


@pytest.fixture(scope="module")
def wan():
    return tiny_wan()


@pytest.fixture(scope="module")
def routed():
    """A tiny Wan with a policy (echo and sparse heads) applied for the training stages."""
    model, p = tiny_wan(), wan_policy()
    p.set_routes([["echo", "sparse"], ["dense", "echo"]])
    apply_echo_attention(model, p)
    return model, p


OTHER_MODULES = [None, "x", object(), torch.nn.Linear(2, 2), torch.nn.Module()]


@FUZZ.covers(apply_echo_attention, remove_echo_attention)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_apply_and_remove(data, wan):
    inputs = wan_inputs()
    p = wan_policy()
    p.set_routes([["echo", "sparse"], ["sparse", "echo"]])

    def apply_run_remove(transformer, policy):
        apply_echo_attention(transformer, policy)
        try:
            with torch.no_grad():
                return transformer(**inputs, return_dict=False)[0]
        finally:
            remove_echo_attention(transformer)

    fuzz_call(
        data,
        apply_run_remove,
        {"transformer": wan, "policy": p},
        check=lambda out: shaped(out, (1, 3, 4, 8, 8)),
        related={"policy": ["hidden_states"]},  # a policy for another video size refuses the call
        strategies={
            "transformer": st.sampled_from(OTHER_MODULES),
            "policy": st.sampled_from(
                [
                    None,
                    "x",
                    wan_policy().a,
                    EchoPolicy(3, 2, 8, WAN_LAYOUT),  # another layer count
                    EchoPolicy(2, 2, 4, WAN_LAYOUT),  # another head width
                    EchoPolicy(2, 2, 8, VideoLayout(2, 16)),  # another video size: refused at call time
                    EchoPolicy(2, 2, 8, VideoLayout(4, 32)),
                ]
            ),
        },
    )
    fuzz_call(
        data,
        remove_echo_attention,
        {"transformer": wan},
        check=lambda t: t is wan or isinstance(t, torch.nn.Module),
        strategies={"transformer": st.sampled_from(OTHER_MODULES)},
    )


@FUZZ.covers(video_layout_of)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_video_layout_of(data, wan):
    fuzz_call(
        data,
        video_layout_of,
        {"transformer": wan, "hidden_states_shape": (1, 3, 4, 8, 8)},
        check=lambda layout: isinstance(layout, VideoLayout) and layout.num_tokens >= 1,
        strategies={"transformer": st.sampled_from(OTHER_MODULES)},
    )


@FUZZ.covers(EchoWanAttnProcessor)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_echo_wan_attn_processor(data, wan):
    attn = wan.blocks[0].attn1
    hidden = torch.randn(1, WAN_LAYOUT.num_tokens, 16, generator=torch.Generator().manual_seed(4))
    p = wan_policy()
    p.set_routes([["echo", "sparse"], ["sparse", "echo"]])

    def process(policy, layer, hidden_states):
        with torch.no_grad():
            return EchoWanAttnProcessor(policy, layer)(attn, hidden_states)

    fuzz_call(
        data,
        process,
        {"policy": p, "layer": 1, "hidden_states": hidden},
        check=lambda out: shaped(out, tuple(hidden.shape)),
        related={"hidden_states": ["q", "k", "v"]},  # huge hidden states overflow the q, k, v projections
    )


# -- the training stages ------------------------------------------------------------------------------------
@FUZZ.covers(capture_attention_inputs, fit_echo_calibration)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_capture_and_calibrate(data, routed):
    model, p = routed
    inputs = wan_inputs()

    def check_captured(captured):
        return len(captured) == 2 and all(
            len(layer) == 1 and all(t.shape == (1, 2, 64, 8) for t in layer[0]) for layer in captured
        )

    captured = fuzz_call(
        data,
        capture_attention_inputs,
        {"policy": p, "run": lambda: model(**inputs)},
        check=check_captured,
        related={"policy": ["run"]},  # another policy is not the one the run calls
        strategies={"policy": st.sampled_from([None, "x", model, wan_policy()])},
    )
    if not isinstance(captured, list):
        captured = capture_attention_inputs(p, lambda: model(**inputs))
    fuzz_call(
        data,
        fit_echo_calibration,
        {"policy": p, "captured": captured, "ridge": 1e-6},
        check=lambda fit: fit["residual"].shape == (2, 2, 2) and len(fit["variants"]) == 2,
        related={"captured": ["q", "k", "v"]},
        strategies={
            "policy": st.sampled_from(
                [None, "x", EchoPolicy(2, 2, 8, VideoLayout(2, 32)), EchoPolicy(3, 2, 8, WAN_LAYOUT)]
            )
        },
    )


@FUZZ.covers(train_router, finalize_routes)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_train_router_and_finalize(data, routed):
    model, p = routed
    fuzz_call(
        data,
        train_router,
        {
            "transformer": model,
            "policy": p,
            "batches": [wan_inputs()],
            "budget": 0.6,
            "steps": 2,
            "lr": 0.05,
            "penalty": 10.0,
            "tau": 1.0,
            "seed": 0,
        },
        check=lambda log: len(log) >= 1 and all(math.isfinite(r["loss"]) for r in log),
        related={"transformer": ["policy"], "policy": ["transformer"]},
        strategies={
            "steps": SMALL_INTS,
            "transformer": st.sampled_from(OTHER_MODULES),
            "policy": st.sampled_from([None, "x", wan_policy()]),
        },
    )
    fresh = wan_policy()
    with torch.no_grad():
        fresh.router_logits.copy_(torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(5)))
    fuzz_call(
        data,
        finalize_routes,
        {"policy": fresh, "budget": 0.6},
        check=lambda r: 0 < r["fraction"] <= 1 and 0 < r["density"] <= 1 and r["moved"] >= 0,
        strategies={"policy": st.sampled_from([None, "x", model, fresh.router_logits])},
    )


@FUZZ.covers(finetune_echo)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_finetune_echo(data, routed):
    model, p = routed
    fuzz_call(
        data,
        finetune_echo,
        {"transformer": model, "policy": p, "batches": [wan_inputs()], "steps": 2, "lr": 1e-3},
        check=lambda losses: len(losses) >= 1 and all(math.isfinite(x) for x in losses),
        related={"transformer": ["policy"], "policy": ["transformer"]},
        strategies={
            "steps": SMALL_INTS,
            "transformer": st.sampled_from(OTHER_MODULES),
            "policy": st.sampled_from([None, "x", wan_policy()]),
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(echo_module)
