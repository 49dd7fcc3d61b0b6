"""CRH: the cylinder decomposition, steerability and its tests, contrastive steering vectors and steered
generation on tiny random GPT-2 and Llama models (the SmolLM2 run is the reproduction's)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from transformers import GPT2LMHeadModel

from icml_interp.crh import (
    CONCEPT,
    GIBBERISH,
    NORMAL,
    KeywordJudge,
    LMJudge,
    continuation_perplexity,
    decompose,
    exponent_search,
    fit_spiral_probe,
    fit_steerability,
    geometry_correlation,
    label_outputs,
    sector_bins,
    sector_prediction,
)
from icml_interp.hooks import HookedModel
from icml_interp.perplexity import token_nll
from icml_interp.steering import (
    add_steering_vector,
    default_layers,
    difference_vectors,
    direction_from_activations,
    generate_steered,
    last_token_activations,
    scale_sweep,
    steering_vector,
)
from icml_tools.assets import tiny_llama

FINITE = st.floats(-10, 10, allow_nan=False, width=64)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def hooked(request, zoo):
    return HookedModel(zoo.gpt2(0, layers=4) if request.param == "gpt2" else tiny_llama(seed=0, layers=4))


RAGGED = [[5, 17, 42, 9, 100], [3, 77, 12], [8, 8, 8, 8, 8, 8, 8], [250, 1]]
OTHER = [[5, 17, 43, 9, 101], [4, 77, 13], [9, 8, 8, 8, 8, 8, 8], [251, 1]]


# ------------------------------------------------------------------------------------------- the cylinder
@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(2, 12), st.integers(2, 8)), elements=FINITE))
def test_axis_and_normal_parts_sum_to_each_difference_vector(x):
    d = torch.tensor(x)
    if float(d.mean(0).abs().max()) == 0:
        with pytest.raises(ValueError, match="axis"):
            decompose(d)
        return
    cyl = decompose(d)
    torch.testing.assert_close(cyl.parallel[:, None] * cyl.axis + cyl.normal, d, rtol=0, atol=1e-9)
    torch.testing.assert_close(
        cyl.normal @ cyl.axis, torch.zeros(len(d), dtype=torch.float64), atol=1e-9, rtol=0
    )
    assert abs(float(cyl.axis.norm()) - 1) < 1e-12
    nonzero = cyl.norms > 1e-6
    torch.testing.assert_close(
        (cyl.cos**2 + cyl.sin**2)[nonzero], torch.ones(int(nonzero.sum()), dtype=torch.float64)
    )


def test_axis_is_the_mean_difference_and_angles_are_planted():
    axis = torch.tensor([1.0, 0, 0, 0])
    theta = torch.tensor([0.1, 0.5, 1.0, 1.3])
    phi = torch.tensor([0.3, -2.0, 2.5, -0.7])
    d = torch.stack([torch.cos(theta), torch.sin(theta) * torch.cos(phi), torch.sin(theta) * torch.sin(phi),
                     torch.zeros(4)], 1).double() * torch.tensor([1.0, 2, 3, 4]).double()[:, None]  # fmt: skip
    cyl = decompose(d, axis=axis * 5)
    torch.testing.assert_close(cyl.cos, torch.cos(theta).double())
    torch.testing.assert_close(cyl.sin, torch.sin(theta).double())
    basis = torch.tensor([[0, 1.0, 0, 0], [0, 0, 1.0, 0]])
    torch.testing.assert_close(cyl.sector_angles(basis), phi.double())
    torch.testing.assert_close(decompose(d).axis, d.mean(0) / d.mean(0).norm())
    # held-out difference vectors are measured about this cylinder's axis
    torch.testing.assert_close(cyl.sector_angles(basis, diffs=d[:2] * 7), phi[:2].double())
    b = cyl.normal_basis(2)
    torch.testing.assert_close(b @ b.T, torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(b @ cyl.axis, torch.zeros(2, dtype=torch.float64), atol=1e-12, rtol=0)


def test_penalty_vectors_interpolate_between_own_direction_and_axis():
    d = torch.tensor([[2.0, 1.0, 0.0], [1.0, -1.0, 3.0], [1.0, 0.0, 0.0]])
    cyl = decompose(d, axis=torch.tensor([1.0, 0.0, 0.0]))
    own = cyl.penalty_vectors(2.5, 0.0)
    torch.testing.assert_close(own, 2.5 * d.double() / d.double().norm(dim=1, keepdim=True))
    axis_only = cyl.penalty_vectors(2.5, 1.0)
    torch.testing.assert_close(axis_only, 2.5 * cyl.cos[:, None] * cyl.axis)
    half = cyl.penalty_vectors(2.5, 0.5)
    torch.testing.assert_close((half - axis_only).norm(dim=1), 0.5 * 2.5 * cyl.sin)
    with pytest.raises(ValueError, match="lam"):
        cyl.penalty_vectors(1.0, 1.5)


def test_sector_bins_edges_and_errors():
    angles = torch.tensor(
        [-math.pi, -math.pi / 2 + 1e-9, 0.0, math.pi / 2 - 1e-9, math.pi], dtype=torch.float64
    )
    assert sector_bins(angles, 4).tolist() == [0, 1, 2, 2, 3]
    assert sector_bins(angles, 1).tolist() == [0] * 5
    with pytest.raises(ValueError, match="angles"):
        sector_bins(torch.tensor([4.0]))
    with pytest.raises(ValueError, match="n_sectors"):
        sector_bins(angles, 0)


def test_spiral_probe_recovers_a_planted_helix():
    g = torch.Generator().manual_seed(0)
    t = torch.linspace(0, 1, 60, dtype=torch.float64)
    helix = torch.stack(
        [t, 1.5 * torch.cos(2 * math.pi * 1.25 * t), 1.5 * torch.sin(2 * math.pi * 1.25 * t)], 1
    )
    embed = torch.linalg.qr(torch.randn(16, 3, generator=g, dtype=torch.float64)).Q.T  # (3, 16) orthonormal
    d = helix @ (embed * torch.tensor([[2.0], [1.0], [1.0]], dtype=torch.float64)) + 0.3
    d = d + 1e-3 * torch.randn(d.shape, generator=g, dtype=torch.float64)
    probe = fit_spiral_probe(d, k=3)
    assert probe.n_rot == 1.25
    assert probe.r2 > 0.99
    assert float((probe.point(t) - d).norm() / (d - d.mean(0)).norm()) < 0.05
    with pytest.raises(ValueError, match="diffs"):
        fit_spiral_probe(d[:2])


# ------------------------------------------------------------------------------------------- steerability
def test_fit_steerability_matches_numpy_polyfit():
    rng = np.random.default_rng(0)
    scales = np.array([0.0, 1, 2, 3, 4, 5])
    scores = rng.normal(size=(7, 6)) + np.arange(7)[:, None] * scales
    st_ = fit_steerability(scales, scores)
    for i in range(7):
        (slope, intercept), cov = np.polyfit(scales, scores[i], 1, cov="unscaled")
        resid = scores[i] - (slope * scales + intercept)
        assert st_.slope[i] == pytest.approx(slope)
        assert st_.intercept[i] == pytest.approx(intercept)
        assert st_.slope_se[i] == pytest.approx(math.sqrt(cov[0, 0] * (resid @ resid) / 4))
    exact = fit_steerability(scales, [2 * scales + 1])
    assert exact.slope[0] == pytest.approx(2) and exact.slope_se[0] == pytest.approx(0, abs=1e-12)
    with pytest.raises(ValueError, match="scores"):
        fit_steerability(scales, scores[:, :5])
    with pytest.raises(ValueError, match="scales"):
        fit_steerability([1.0, 1.0], [[1.0, 2.0]])


def _planted_cylinder(n=80, seed=0):
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.1, 1.2, n)
    phi = rng.uniform(-math.pi, math.pi, n)
    r = rng.uniform(0.5, 2, n)
    d = np.stack([np.cos(theta), np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi)], 1) * r[:, None]
    return decompose(torch.tensor(d), axis=torch.tensor([1.0, 0, 0])), theta, phi, r


def test_geometry_correlation_finds_a_planted_law_and_not_a_shuffled_one():
    cyl, theta, _, r = _planted_cylinder()
    law = r**2 * np.sin(theta) ** 2 / np.cos(theta)
    exact = geometry_correlation(cyl, law, n_permutations=499)
    assert exact["r"] == pytest.approx(1.0) and exact["p_value"] == pytest.approx(1 / 500)
    shuffled = np.random.default_rng(1).permutation(law)
    null = geometry_correlation(cyl, shuffled, n_permutations=499)
    assert abs(null["r"]) < 0.3 and null["p_value"] > 0.05
    grid = exponent_search(cyl, law)
    assert (grid[0]["a"], grid[0]["p"], grid[0]["t"]) == (2.0, 2.0, -1.0) and grid[0]["r"] == pytest.approx(1)
    with pytest.raises(ValueError, match="steerability"):
        geometry_correlation(cyl, law[:-1])


def test_sector_prediction_beats_chance_only_when_sectors_matter():
    _, _, phi, _ = _planted_cylinder(n=400, seed=2)
    angles = torch.tensor(phi)
    rng = np.random.default_rng(3)
    shared = np.cos(phi - 1.0) + 0.3 * rng.normal(size=400)  # one sensitive sector for all samples
    own = np.cos(phi - rng.uniform(-math.pi, math.pi, 400))  # a sample-specific sensitive sector
    hit = sector_prediction(angles[:200], shared[:200], angles[200:], shared[200:], n_permutations=199)
    miss = sector_prediction(angles[:200], own[:200], angles[200:], own[200:], n_permutations=199)
    assert (
        hit["accuracy"] > 0.75 and hit["p_value"] < 0.02
    )  # a shuffle can rebuild the 8-entry table: p >~ 1/256
    assert abs(miss["accuracy"] - miss["chance"]) < 0.1 and miss["p_value"] > 0.05
    with pytest.raises(ValueError, match="test_values"):
        sector_prediction(angles[:10], shared[:10], angles[10:20], shared[10:19])


def test_keyword_judge_and_labels():
    judge = KeywordJudge(["wave", "sea"])
    assert judge(["The sea and the waves.", "No concept here", ""]) == [0.4, 0.0, 0.0]
    assert judge.present(["Seas!", "seaweed"]) == [True, False]
    labels = label_outputs([True, False, True, True], [3.0, 2.0, 50.0, float("nan")], 10.0)
    assert labels.tolist() == [CONCEPT, NORMAL, GIBBERISH, GIBBERISH]
    with pytest.raises(ValueError, match="keywords"):
        KeywordJudge(["two words"])


def test_lm_judge_through_an_agents_backend():
    backends = pytest.importorskip("icml_agents.backends")
    backend = backends.ScriptedBackend([("the sea", "2"), ("blah", "3 gibberish"), ("", "nothing")])
    judge = LMJudge(backend, "ocean")
    assert judge.labels(["I love the sea", "blah blah", "a house"]) == [CONCEPT, GIBBERISH, NORMAL]
    assert judge(["I love the sea", "a house"]) == [1.0, 0.0]
    assert judge.unparsed == 2
    assert "ocean" in backend.calls[0].prompt


def test_continuation_perplexity_matches_token_nll(hooked):
    prompts, conts = RAGGED[:3], [[7, 8], [9], []]
    ppl = continuation_perplexity(hooked, prompts, conts, batch_size=2)
    for p, c, value in zip(prompts, conts, ppl, strict=True):
        if not c:
            assert math.isnan(value)
            continue
        nll = token_nll(hooked, torch.tensor([p + c]))[0, len(p) - 1 :]
        assert value == pytest.approx(math.exp(float(nll.mean())), rel=1e-5)
    with pytest.raises(ValueError, match="continuations"):
        continuation_perplexity(hooked, prompts, conts[:2])


# ------------------------------------------------------------------------------------------- steering vectors
def test_activations_of_ragged_sequences_are_each_sequences_own(hooked):
    acts = last_token_activations(hooked, RAGGED, 1, batch_size=3)
    for i, seq in enumerate(RAGGED):
        _, cache = hooked.run_with_cache(torch.tensor([seq]), ["blocks.1.hook_resid_post"])
        torch.testing.assert_close(acts[i], cache["blocks.1.hook_resid_post"][0, -1], rtol=1e-5, atol=1e-5)
    diffs = difference_vectors(hooked, RAGGED, OTHER, 1)
    torch.testing.assert_close(diffs, acts - last_token_activations(hooked, OTHER, 1))
    torch.testing.assert_close(steering_vector(hooked, RAGGED, OTHER, 1), diffs.mean(0), rtol=1e-5, atol=1e-6)
    assert default_layers(hooked) == (2, 3)


def test_contrastive_sets_of_unequal_sizes_and_bad_layers_are_named(hooked):
    with pytest.raises(ValueError, match="positive and negative"):
        difference_vectors(hooked, RAGGED, OTHER[:3], 1)
    with pytest.raises(ValueError, match="layer"):
        difference_vectors(hooked, RAGGED, OTHER, 4)
    with pytest.raises(ValueError, match="layer"):
        steering_vector(hooked, RAGGED, OTHER, -1)
    with pytest.raises(ValueError, match="same shape"):
        direction_from_activations(torch.ones(3, 4), torch.zeros(2, 4), "pca")
    with pytest.raises(ValueError, match="prompts"):
        generate_steered(hooked, [[1, 999999]], torch.zeros(hooked.d_model), 0)


def test_directions_recover_a_planted_concept_direction():
    g = torch.Generator().manual_seed(0)
    u = torch.nn.functional.normalize(torch.randn(32, generator=g), dim=0)
    base = torch.randn(200, 32, generator=g)
    strength = 1 + torch.rand(200, generator=g)
    pos = base + 2.0 * strength[:, None] * u + 0.1 * torch.randn(200, 32, generator=g)
    for method in ("mean", "pca", "probe"):
        v = direction_from_activations(pos, base, method)
        cos = float(v @ u / v.norm())
        assert cos > 0.9, (method, cos)
        # scaled to the mean difference's projection: comparable lengths across methods
        assert float(v.norm()) == pytest.approx(float((pos - base).mean(0) @ v / v.norm()), rel=1e-4)


# ------------------------------------------------------------------------------------------- steered generation
def _capture(hooked, name):
    seen = []

    def keep(act, hook):
        seen.append(act.detach().clone())

    return seen, (name, keep)


@pytest.mark.parametrize("positions", ["all", "prefill"])
def test_the_hook_adds_exactly_s_times_the_unit_vector_where_asked(hooked, positions):
    v = torch.nn.functional.normalize(
        torch.randn(hooked.d_model, generator=torch.Generator().manual_seed(1)), dim=0
    )
    name = "blocks.1.hook_resid_post"
    prompt = torch.tensor([[5, 17, 42, 9]])
    before, capture_before = _capture(hooked, name)
    after, capture_after = _capture(hooked, name)
    # torch runs a module's hooks in the order they were attached: before, the steering, after
    with hooked.hooks([capture_before]), add_steering_vector(hooked, 1, v, 3.0, positions=positions):
        with hooked.hooks([capture_after]):
            hooked.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False,
                            pad_token_id=0)  # fmt: skip
    assert [a.shape[1] for a in after] == [4, 1, 1]  # the prompt's pass, then one pass per new token
    for k, (b, a) in enumerate(zip(before, after, strict=True)):
        expected = 3.0 * v if positions == "all" or k == 0 else torch.zeros_like(v)
        torch.testing.assert_close(a - b, expected.expand_as(b), rtol=0, atol=1e-5)
    # scale 0 leaves the logits identical
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with add_steering_vector(hooked, 1, v, 0.0, positions=positions):
        assert torch.equal(hooked(ids), hooked.model(input_ids=ids).logits)


def test_generate_steered_batches_ragged_prompts_exactly(hooked):
    v = torch.randn(hooked.d_model, generator=torch.Generator().manual_seed(2))
    for positions in ("prefill", "all"):
        batched = generate_steered(
            hooked, RAGGED, v, 1, 2.0, positions=positions, max_new_tokens=5, batch_size=4
        )
        for seq, out in zip(RAGGED, batched, strict=True):
            alone = generate_steered(hooked, [seq], v, 1, 2.0, positions=positions, max_new_tokens=5)[0]
            assert out.tolist() == alone.tolist()
    plain = generate_steered(hooked, RAGGED, v, 1, 0.0, max_new_tokens=5)
    ref = [hooked.generate(torch.tensor([s]), attention_mask=torch.ones(1, len(s), dtype=torch.long),
                           max_new_tokens=5, do_sample=False, pad_token_id=0)[0, len(s):] for s in RAGGED]  # fmt: skip
    assert [p.tolist() for p in plain] == [r.tolist() for r in ref]
    # per-prompt vectors (CRH's penalty test): each prompt gets its own row, batched or alone
    cyl = decompose(difference_vectors(hooked, RAGGED, OTHER, 1))
    rows = cyl.penalty_vectors(20.0, 0.5).float()
    batched = generate_steered(hooked, RAGGED, rows, 1, 1.0, max_new_tokens=5, batch_size=3)
    for i, seq in enumerate(RAGGED):
        alone = generate_steered(hooked, [seq], rows[i], 1, 1.0, max_new_tokens=5)[0]
        assert batched[i].tolist() == alone.tolist()
    with pytest.raises(ValueError, match="vector"):
        generate_steered(hooked, RAGGED, rows[:3], 1, 1.0)
    sweep = scale_sweep(hooked, RAGGED, v, 1, [0.0, 50.0], max_new_tokens=5)
    assert [s.tolist() for s in sweep[0]] == [p.tolist() for p in plain]
    assert [s.tolist() for s in sweep[1]] != [p.tolist() for p in plain]  # a large push changes some output


def test_generate_steered_per_prompt_vectors_follow_beams_and_returned_sequences(hooked):
    # generate repeats each prompt max(num_beams, num_return_sequences) times; per-prompt vectors raised
    # "vector holds 3 per-sequence rows, the batch has 6" here before 2026-12-18
    rows = torch.randn(len(RAGGED), hooked.d_model, generator=torch.Generator().manual_seed(3)) * 20
    kw = {"max_new_tokens": 4, "num_beams": 2, "num_return_sequences": 2}
    batched = generate_steered(hooked, RAGGED, rows, 1, 1.0, batch_size=3, **kw)
    plain = generate_steered(hooked, RAGGED, rows, 1, 0.0, **kw)
    assert len(batched) == 2 * len(RAGGED)
    assert [b.tolist() for b in batched] != [p.tolist() for p in plain]  # the vectors change the output
    for i, seq in enumerate(RAGGED):  # prompt i's two beams are entries 2i and 2i + 1, as alone
        alone = generate_steered(hooked, [seq], rows[i], 1, 1.0, **kw)
        assert [b.tolist() for b in batched[2 * i : 2 * i + 2]] == [a.tolist() for a in alone]


def test_steering_a_trained_concept_raises_its_token(zoo):
    """A tiny GPT-2 trained for a few steps to continue token 7 with 8 and token 9 with 10: the difference
    of means between sequences ending in 7 and in 9, added at the last block, moves the next-token
    distribution from 10 towards 8."""
    torch.manual_seed(0)
    model = zoo.gpt2(0, layers=2).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        ctx = torch.randint(20, 200, (32, 4), generator=g)
        first = torch.where(torch.rand(32, generator=g) < 0.5, 7, 9)
        batch = torch.cat([ctx, first[:, None], (first + 1)[:, None]], 1)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    hooked = HookedModel(model.eval())
    ctx = torch.randint(20, 200, (16, 4), generator=g)
    with_7 = torch.cat([ctx, torch.full((16, 1), 7)], 1)
    with_9 = torch.cat([ctx, torch.full((16, 1), 9)], 1)
    v = steering_vector(hooked, with_7, with_9, 1)
    with torch.no_grad():
        before = hooked(with_9)[:, -1].softmax(-1)
        with add_steering_vector(hooked, 1, v, 1.0, positions="all"):
            after = hooked(with_9)[:, -1].softmax(-1)
    assert float(before[:, 8].mean()) < 0.2 < float(after[:, 8].mean())
    assert isinstance(hooked.model, GPT2LMHeadModel)


# ------------------------------------------------------------------------------------- models left in training mode
PROMPTS = torch.randint(0, 256, (20, 6), generator=torch.Generator().manual_seed(3)).tolist()
PUSH = torch.randn(64, generator=torch.Generator().manual_seed(2))  # a steering vector for the tiny models
ANALYSES = {
    "last_token_activations": lambda m: last_token_activations(m, RAGGED, 1, batch_size=3),
    "difference_vectors": lambda m: difference_vectors(m, RAGGED, OTHER, 1),
    "steering_vector": lambda m: steering_vector(m, RAGGED, OTHER, 1, method="pca"),
    "generate_steered": lambda m: generate_steered(m, PROMPTS, PUSH, 1, 4.0, max_new_tokens=8),
    "scale_sweep": lambda m: scale_sweep(m, PROMPTS, PUSH, 1, [0.0, 4.0], max_new_tokens=8),
    "continuation_perplexity": lambda m: continuation_perplexity(
        m, RAGGED[:3], [[7, 8], [9], [3, 4, 5]], batch_size=2
    ),
}


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("what", list(ANALYSES))
def test_a_model_in_training_mode_gives_the_eval_mode_vectors_and_generations(zoo, modes, arch, what):
    # the passes ran in the model's mode: with dropout 0.1 in training mode (GPT-2's default; Qwen2's
    # attention dropout) the activations were off the eval-mode ones by up to 0.048 (GPT-2) / 0.018 (Qwen2),
    # the differences by 0.065 / 0.026, the PCA vector by 0.0065 / 0.00082, 5 / 18 of the 20 steered
    # continuations changed (19 / 31 of the sweep's 40) and the perplexities (up to 280) by 13 / 9.4. Now the
    # model runs in eval mode (bit-identical) and every submodule's mode comes back, also when a pass raises.
    want, got = modes.train_vs_eval(getattr(zoo, arch)(), ANALYSES[what])
    if isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
