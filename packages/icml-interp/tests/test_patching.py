import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_interp.hooks import HookedModel
from icml_interp.patching import (
    PatchingResult,
    activation_patching,
    answer_logprob,
    attribution_patching,
    cross_model_layer_patching,
    logit_diff,
    logit_margin,
    patch_hooks,
    path_patching,
    prefill_patch,
    run_with_patches,
)
from icml_tools.assets import tiny_llama


def pair(vocab=256, shape=(2, 6), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g), torch.randint(0, vocab, shape, generator=g)


@pytest.fixture(scope="module")
def hooked():
    return HookedModel(tiny_llama(seed=0, layers=3))


METRIC = logit_diff(3, 5)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_patching_everything_gives_the_corrupt_logits_and_nothing_the_clean(arch, zoo):
    model = HookedModel(tiny_llama(seed=0, layers=3) if arch == "llama" else zoo.gpt2())
    clean, corrupt = pair()
    clean_logits, corrupt_logits = model(clean), model(corrupt)
    _, cache = model.run_with_cache(corrupt)
    torch.testing.assert_close(run_with_patches(model, clean, cache), corrupt_logits, rtol=0, atol=1e-5)
    assert torch.equal(run_with_patches(model, clean, cache, []), clean_logits)
    assert torch.equal(run_with_patches(model, clean, cache, ["blocks.0.hook_resid_pre"]), corrupt_logits)
    # a cut through the last block at the last position: exactly the corrupt prediction there
    last = run_with_patches(
        model, clean, cache, [f"blocks.{model.n_layers - 1}.hook_resid_post"], positions=[-1]
    )
    assert torch.equal(last[:, -1], corrupt_logits[:, -1]) and torch.equal(last[:, :-1], clean_logits[:, :-1])


def test_scan_effects_are_normalized_and_batching_changes_nothing(hooked):
    clean, corrupt = pair(seed=1)
    result = activation_patching(
        hooked, clean, corrupt, METRIC, components=("resid_pre", "z", "mlp_out"), per_head=True, batch_size=5
    )
    assert result.clean == pytest.approx(float(METRIC(hooked(clean))))
    assert result.corrupt == pytest.approx(float(METRIC(hooked(corrupt))))
    n_rows = 3 * 6 + 3 * 6 * 4 + 3 * 6  # layers x positions (x heads)
    assert len(result.rows) == n_rows
    _, cache = hooked.run_with_cache(corrupt)
    names = {"resid_pre": "hook_resid_pre", "z": "attn.hook_z", "mlp_out": "hook_mlp_out"}
    for row in result.rows[::7]:
        logits = run_with_patches(
            hooked,
            clean,
            cache,
            [f"blocks.{row['layer']}.{names[row['component']]}"],
            positions=row["position"],
            heads=row["head"],
        )
        assert row["metric"] == pytest.approx(float(METRIC(logits)), abs=1e-5)
        assert row["effect"] == pytest.approx(
            (row["metric"] - result.clean) / (result.corrupt - result.clean)
        )
    whole = activation_patching(
        hooked, clean, corrupt, METRIC, components=("resid_pre",), layers=[0], per_position=False
    )
    assert whole.rows[0]["effect"] == pytest.approx(1.0)
    table, layers, positions = result.grid("resid_pre")
    assert table.shape == (3, 6) and layers == [0, 1, 2] and positions == list(range(6))
    # at the first layer only the positions whose tokens differ can matter, and the last position sees all
    assert np.all(np.isfinite(table))


def test_progress_bar_by_default_and_off_on_request(hooked, capsys):
    clean, corrupt = pair(seed=2)
    shown = activation_patching(hooked, clean, corrupt, METRIC, components=("resid_pre",))
    assert "activation patching" in capsys.readouterr().err
    quiet = activation_patching(hooked, clean, corrupt, METRIC, components=("resid_pre",), progress=False)
    assert "activation patching" not in capsys.readouterr().err
    assert shown.grid("resid_pre")[0].tolist() == quiet.grid("resid_pre")[0].tolist()


def test_heatmap_is_written(hooked, tmp_path):
    pytest.importorskip("matplotlib")
    clean, corrupt = pair(seed=2)
    result = activation_patching(hooked, clean, corrupt, METRIC, components=("resid_pre",))
    result.heatmap("resid_pre", path=tmp_path / "scan.png")
    assert (tmp_path / "scan.png").stat().st_size > 1000


def test_heatmap_leaves_the_matplotlib_backend_alone(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    result = PatchingResult("activation patching", 0.0, 1.0)
    result.add(0.5, component="resid_pre", layer=0, position=0)
    result.add(0.2, component="resid_pre", layer=1, position=0)
    previous = plt.get_backend()
    plt.switch_backend("pdf")  # a caller's backend other than Agg
    try:
        fig = result.heatmap("resid_pre", path=tmp_path / "scan.png")
        assert plt.get_backend() == "pdf" and plt.get_fignums() == []
    finally:
        plt.switch_backend(previous)
    assert len(fig.axes) == 2 and (tmp_path / "scan.png").stat().st_size > 1000


def test_path_patching_recovers_the_planted_two_hop_circuit(zoo):
    model = HookedModel(zoo.two_hop())
    clean, corrupt = pair(vocab=64, shape=(4, 8), seed=1)
    metric = logit_diff(3, 5)
    total = activation_patching(
        model, clean, corrupt, metric, components=("z",), per_position=False, per_head=True
    )
    by_head = {(r["layer"], r["head"]): r["metric"] - total.clean for r in total.rows}
    sender_effect = by_head[zoo.sender]
    assert abs(sender_effect) > 0.5 * abs(total.corrupt - total.clean)  # the sender matters
    to_receiver = path_patching(model, clean, corrupt, metric, receivers=[zoo.receiver])
    paths = {(r["layer"], r["head"]): r["metric"] - to_receiver.clean for r in to_receiver.rows}
    assert set(paths) == {(0, h) for h in range(4)}
    assert paths[zoo.sender] == pytest.approx(sender_effect, rel=0.02)  # all of it flows through the receiver
    assert max(abs(v) for k, v in paths.items() if k != zoo.sender) < 0.05 * abs(sender_effect)
    direct = path_patching(model, clean, corrupt, metric, receivers="resid_final", senders=[zoo.sender])
    assert abs(direct.rows[0]["metric"] - direct.clean) < 0.01 * abs(sender_effect)  # no direct path
    others = [(layer, h) for layer in (1, 2) for h in range(4) if (layer, h) != zoo.receiver]
    via_others = path_patching(model, clean, corrupt, metric, receivers=others, senders=[zoo.sender])
    assert abs(via_others.rows[0]["metric"] - via_others.clean) < 0.01 * abs(sender_effect)
    # naive activation patching of the receiver sees the sender's effect too: path patching separates them
    assert abs(by_head[zoo.receiver]) > 0.5 * abs(sender_effect)


def test_attribution_patching_tracks_activation_patching(hooked):
    clean, corrupt = pair(seed=3)
    exact = activation_patching(hooked, clean, corrupt, METRIC, components=("resid_pre", "mlp_out"))
    approx = attribution_patching(hooked, clean, corrupt, METRIC, components=("resid_pre", "mlp_out"))
    assert [(r["component"], r["layer"], r["position"]) for r in exact.rows] == [
        (r["component"], r["layer"], r["position"]) for r in approx.rows
    ]
    a = np.array([r["effect"] for r in exact.rows])
    b = np.array([r["effect"] for r in approx.rows])
    assert np.corrcoef(a, b)[0, 1] > 0.6  # measured 0.77: a first-order estimate of large token swaps
    with pytest.raises(ValueError, match="resid_mid"):
        attribution_patching(hooked, clean, corrupt, METRIC, components=("resid_mid",))


def test_cross_model_layer_patching_finds_the_changed_mlp():
    model_a = tiny_llama(seed=0, layers=3)
    model_b = copy.deepcopy(model_a)
    with torch.no_grad():
        model_b.model.layers[1].mlp.down_proj.weight.mul_(3.0)
    x, _ = pair(seed=4)
    result = cross_model_layer_patching(model_a, model_b, x, METRIC)
    effects = {(r["component"], r["layer"]): r["effect"] for r in result.rows}
    assert effects["mlp_out", 1] == pytest.approx(1.0, abs=1e-4)  # B's MLP output alone makes A into B
    assert effects["mlp_out", 0] == 0 and effects["attn_out", 0] == 0 and effects["attn_out", 1] == 0
    assert effects["mlp_out", 2] != 0  # downstream blocks see B's change too (and may overshoot it)


SCANS = {
    "activation": lambda m, c, x: activation_patching(
        m, c, x, METRIC, per_head=True, components=("z", "mlp_out")
    ),
    "attribution": lambda m, c, x: attribution_patching(
        m, c, x, METRIC, components=("resid_pre", "z", "mlp_out")
    ),
    "path": lambda m, c, x: path_patching(m, c, x, METRIC),
    "cross_model": lambda m, c, x: cross_model_layer_patching(m, CROSS_B[m.config.model_type], c, METRIC),
}
CROSS_B: dict = {}  # model_b of the cross-model scan, per architecture


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("scan", list(SCANS))
def test_scans_of_a_model_in_training_mode_equal_the_eval_mode_scans(arch, scan, zoo, modes):
    # the scans compared passes of whatever mode the model was in: with dropout 0.1 (GPT-2's default) every
    # pass drew its own mask (rows off the eval-mode scan by up to 0.081 (attribution) .. 0.11 (activation) on
    # GPT-2, 0.025 .. 0.037 on Qwen2 with attention dropout 0.1), and attribution patching raised "One of the
    # differentiated Tensors does not require grad" under reentrant gradient checkpointing. Now they run the
    # model in eval mode (bit-identical rows) and give back every submodule's mode, also when a pass raises.
    torch.manual_seed(0)
    CROSS_B.setdefault(arch, getattr(zoo, arch)(seed=1))
    clean, corrupt = pair(seed=7)
    want, got = modes.train_vs_eval(getattr(zoo, arch)(), lambda m: SCANS[scan](m, clean, corrupt))
    assert (got.clean, got.corrupt, got.rows) == (want.clean, want.corrupt, want.rows)
    assert len(got.rows) > 0


def test_prefill_patch_applies_once_during_generation():
    model_a, model_b = tiny_llama(seed=0, layers=2), tiny_llama(seed=1, layers=2)
    x, _ = pair(seed=5, shape=(1, 5))
    hooked_b = HookedModel(model_b)
    _, cache = hooked_b.run_with_cache(x, ["blocks.1.hook_resid_post"])
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    seen = []
    with prefill_patch(model_a, cache, ["blocks.1.hook_resid_post"]) as hooked_a:
        with hooked_a.hooks([("blocks.1.hook_resid_post", lambda a, h: seen.append(a.clone()))]):
            out = model_a.generate(x, **kwargs)
    assert torch.equal(seen[0], cache["blocks.1.hook_resid_post"])  # the prefill was patched ...
    assert out[0, 5] == HookedModel(model_a).lens(cache["blocks.1.hook_resid_post"])[0, -1].argmax()
    assert all(s.shape[1] == 1 for s in seen[1:])  # ... and decoding steps ran unpatched


def test_bad_patching_input_raises(hooked):
    clean, corrupt = pair(seed=6)
    _, cache = hooked.run_with_cache(corrupt[:, :4])
    with pytest.raises(ValueError, match="shape-mismatched patch"):
        run_with_patches(hooked, clean, cache, ["blocks.0.hook_resid_pre"])
    with pytest.raises(ValueError, match="same shape"):
        activation_patching(hooked, clean, corrupt[:, :4], METRIC)
    with pytest.raises(ValueError, match="close matches"):
        activation_patching(hooked, clean, corrupt, METRIC, components=("resid_psot",))
    with pytest.raises(ValueError, match="does not patch hook_pattern"):
        activation_patching(hooked, clean, corrupt, METRIC, components=("pattern",))
    with pytest.raises(ValueError, match="undefined"):
        activation_patching(hooked, clean, clean, METRIC)
    with pytest.raises(ValueError, match="upstream"):
        path_patching(hooked, clean, corrupt, METRIC, receivers=[(1, 0)], senders=[(2, 0)])
    with pytest.raises(ValueError, match="outside"):
        path_patching(hooked, clean, corrupt, METRIC, receivers=[(1, 9)])
    with pytest.raises(ValueError, match="heads= applies"):
        run_with_patches(
            hooked, clean, hooked.run_with_cache(corrupt)[1], ["blocks.0.hook_resid_pre"], heads=[0]
        )


def test_heads_index_the_key_value_heads_of_k_and_v_on_a_grouped_query_model(hooked):
    assert (hooked.n_heads, hooked.n_kv_heads) == (4, 2)
    clean, corrupt = pair(seed=2)
    _, cache = hooked.run_with_cache(corrupt)
    k, q = "blocks.0.attn.hook_k", "blocks.0.attn.hook_q"
    # head -1 of k is its last key/value head (1), not query head 3
    assert torch.equal(
        run_with_patches(hooked, clean, cache, [k], heads=[-1]),
        run_with_patches(hooked, clean, cache, [k], heads=[1]),
    )
    with pytest.raises(
        ValueError, match=r"heads \(the key/value heads of k and v: 2\) must be ints in \[-2, 2\)"
    ):
        run_with_patches(hooked, clean, cache, [k], heads=[3])
    with pytest.raises(ValueError, match="negative head is ambiguous"):
        run_with_patches(hooked, clean, cache, [q, k], heads=[-1])
    run_with_patches(hooked, clean, cache, [q], heads=[3])  # query heads: all 4
    # patch_hooks alone (no model to check against) names heads too, not a bare IndexError
    with pytest.raises(ValueError, match=r"heads must be < 2, the heads of 'blocks.0.attn.hook_k'"):
        hooked.run_with_hooks(clean, patch_hooks(cache, [k], heads=[3]))


# ---------------------------------------------------------------------------------------------- issue 22, item 8a
def _count_forward_passes(hooked):
    calls = []
    handle = hooked.model.register_forward_pre_hook(lambda *_: calls.append(1))
    return calls, handle


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        (
            lambda: logit_diff(256, 5),
            r"correct must be token ids in \[0, 256\) \(the model's vocabulary\), got 256$",
        ),
        (lambda: logit_diff(3, [5, 10**6]), r"wrong must be token ids in \[0, 256\)"),
        (lambda: answer_logprob(300), r"target must be token ids in \[0, 256\)"),
        (
            lambda: logit_diff([1, 2, 3], 5),
            r"correct must hold one token id or one per prompt \(2 prompts\), got 3",
        ),
        (
            lambda: logit_diff(3, 5, position=6),
            r"position must be in \[-6, 6\) \(the prompts have 6 tokens\), got 6",
        ),
        (lambda: answer_logprob(3, position=-7), r"position must be in \[-6, 6\)"),
    ],
)
def test_metric_indices_are_checked_before_any_forward_pass(hooked, metric, message):
    """A token id >= the vocabulary raised a raw IndexError from inside the scan before the fix."""
    clean, corrupt = pair(seed=7)
    calls, handle = _count_forward_passes(hooked)
    try:
        for scan in (activation_patching, attribution_patching, path_patching):
            with pytest.raises(ValueError, match=message):
                scan(hooked, clean, corrupt, metric())
        with pytest.raises(ValueError, match=message):
            cross_model_layer_patching(hooked, hooked, clean, metric())
    finally:
        handle.remove()
    assert calls == []  # refused before running the model
    with pytest.raises(ValueError, match=message):  # and the metric itself checks the logits it gets
        metric()(torch.zeros(2, 6, 256))


def test_logit_metrics_of_a_half_model_are_computed_in_float32():
    # a bfloat16 difference and mean keep 8 bits: 1e-3 relative errors, and near metrics round to one value
    logits = (torch.randn(64, 3, 16, generator=torch.Generator().manual_seed(0)) * 4).bfloat16()
    exact = logits[:, -1].double()
    diff, margin = logit_diff(5, 7)(logits), logit_margin(5)(logits)
    assert diff.dtype == margin.dtype == torch.float32
    assert diff.item() == pytest.approx((exact[:, 5] - exact[:, 7]).mean().item(), rel=1e-6)
    others = torch.cat([exact[:, :5], exact[:, 6:]], 1).max(1).values
    assert margin.item() == pytest.approx((exact[:, 5] - others).mean().item(), rel=1e-6)
    assert logit_diff(5, 7)(logits.double()).dtype == torch.float64  # float64 logits stay float64


def test_metric_token_ids_must_be_non_negative_ints(hooked):
    with pytest.raises(ValueError, match=r"correct must be token ids >= 0, got -1$"):
        logit_diff(-1, 5)
    with pytest.raises(TypeError, match=r"wrong must be integer token ids, got 5\.5"):
        logit_diff(3, 5.5)
    with pytest.raises(TypeError, match="target must be integer token ids"):
        answer_logprob(True)
    with pytest.raises(TypeError, match="position must be an int"):
        logit_diff(3, 5, position=1.0)
    with pytest.raises(ValueError, match="correct must be one token id or a non-empty 1-d sequence"):
        logit_diff([], 5)
    with pytest.raises(TypeError, match="metric must be callable"):
        activation_patching(hooked, *pair(seed=8), "logit_diff")
    with pytest.raises(ValueError, match=r"layers must be ints in \[-3, 3\), got 3"):
        attribution_patching(hooked, *pair(seed=8), METRIC, layers=[3])
    # per-prompt ids, tensors and numpy ints still work
    clean, corrupt = pair(seed=8)
    per_prompt = logit_diff(torch.tensor([3, 4]), np.array([5, 6]))
    result = activation_patching(hooked, clean, corrupt, per_prompt, components=("resid_pre",), layers=[0])
    assert len(result.rows) == 6


@settings(max_examples=25, deadline=None)
@given(
    argument=st.sampled_from(["correct", "wrong", "target"]),
    token=st.integers(256, 2**62) | st.integers(-(2**62), -1),
    per_prompt=st.booleans(),
)
def test_random_bad_token_ids_always_raise_value_error_naming_the_argument(
    hooked, argument, token, per_prompt
):
    clean, corrupt = pair(seed=9)
    ids = {"correct": 3, "wrong": 5, "target": 3}
    ids[argument] = [7, token] if per_prompt else token
    with pytest.raises(ValueError, match=rf"^{argument} must be token ids"):
        metric = (
            answer_logprob(ids["target"])
            if argument == "target"
            else logit_diff(ids["correct"], ids["wrong"])
        )
        activation_patching(hooked, clean, corrupt, metric, components=("resid_pre",), layers=[0])
