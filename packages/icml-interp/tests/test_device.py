"""Device checks on a faked CUDA device (the workspace's ``fake_cuda`` fixture): a model (or SAE, or tensors)
on CUDA next to the CPU inputs the public calls take (token-id lists, masks the library builds, neuron
indices) must keep every op on one device. Fake tensors hold no values: only devices and shapes are checked
here; the values are those of the CPU tests. Where a value read decides a check rather than a device, the
test picks the stand-in (``fake_cuda(truth=False)``) or skips the check (``no_vocab_check``).

``torch.autograd.grad`` and ``Tensor.backward`` cannot run on fake CUDA tensors (the autograd engine asks
for a real CUDA context); the attribution tests replace them with stand-ins that return zero gradients on
each input's own device, as real autograd does, so that the code around them runs."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from icml_interp.crh import continuation_perplexity, fit_spiral_probe
from icml_interp.crh.cylinder import SpiralProbe
from icml_interp.diffing import latent_attribution
from icml_interp.hooks import HookedModel
from icml_interp.patching import (
    build_graph,
    edge_attribution_patching,
    evaluate_circuit,
    logit_diff,
)
from icml_interp.perplexity import split_perplexity, split_perplexity_over_checkpoints
from icml_interp.sae import SAE, SAEConfig, auxk_ablation
from icml_interp.steering import (
    add_steering_vector,
    difference_vectors,
    direction_from_activations,
    generate_steered,
    key_scaling_test,
    last_token_activations,
    neuron_scores,
    scale_mlp_keys,
    steering_vector,
)
from icml_interp.validation import check_token_ids
from icml_tools.assets import tiny_llama

D_MODEL = 64  # tiny_llama's width


def on_cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def on_fake_cuda(model) -> HookedModel:
    """``model`` (built outside the fake mode) moved to the fake CUDA device (call inside ``fake_cuda()``)."""
    return HookedModel(model.to("cuda"))


def ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def no_vocab_check(monkeypatch):
    """Token ids checked for type and shape only: the range check ``ids.min() < 0 or ids.max() >= vocab``
    reads values, which fake tensors answer with one stand-in for every comparison."""
    import icml_interp.patching.activation as activation

    monkeypatch.setattr(HookedModel, "token_ids", lambda self, input_ids: check_token_ids(input_ids))
    monkeypatch.setattr(
        activation, "check_token_ids", lambda input_ids, vocab=None, name="": check_token_ids(input_ids)
    )


@pytest.fixture
def zero_grads(monkeypatch):
    """``torch.autograd.grad`` and ``Tensor.backward`` stand-ins for fake CUDA tensors (see the module doc)."""

    def grad(outputs, inputs, grad_outputs=None, **kwargs):
        inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        return tuple(torch.zeros_like(x) for x in inputs)

    monkeypatch.setattr(torch.autograd, "grad", grad)
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *args, **kwargs: None)


# --- steering: right-padded batches and probes ----------------------------------------------------------
def test_last_token_activations_pad_on_the_models_device(fake_cuda, one_torch_thread, no_vocab_check):
    seqs = [[1, 2, 3], [4, 5]]  # ragged token-id lists: the padded batch is built by the library
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        acts = last_token_activations(hooked, seqs, 1)
        assert on_cuda(acts) and acts.shape == (2, D_MODEL)
        diffs = difference_vectors(hooked, seqs, [[6, 7], [8, 9, 10]], 1)
        assert on_cuda(diffs) and diffs.shape == (2, D_MODEL)
        vector = steering_vector(hooked, seqs, [[6, 7], [8, 9, 10]], 1)
        assert on_cuda(vector) and vector.shape == (D_MODEL,)


def test_probe_direction_fits_on_the_activations_device(
    fake_cuda, one_torch_thread, no_vocab_check, zero_grads
):
    model = tiny_llama(seed=0)
    with fake_cuda():
        pos, neg = torch.randn(5, D_MODEL, device="cuda"), torch.randn(4, D_MODEL, device="cuda")
        direction = direction_from_activations(pos, neg, "probe", probe_steps=2)
        assert on_cuda(direction) and direction.shape == (D_MODEL,)
        hooked = on_fake_cuda(model)
        vector = steering_vector(hooked, [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]], 1, method="probe")
        assert on_cuda(vector) and vector.shape == (D_MODEL,)


def test_neuron_scores_compare_answers_on_the_lens_device(fake_cuda, one_torch_thread, no_vocab_check):
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        out = neuron_scores(hooked, ids(2, 5).to("cuda"), 0, [[5, 7], [9]])
        assert all(on_cuda(t) for t in out.values())
        assert out["score"].shape == (hooked.d_mlp,) and out["overlap"].shape == (2, hooked.d_mlp)


def test_scale_mlp_keys_masks_on_the_keys_device(fake_cuda, one_torch_thread):
    model = tiny_llama(seed=0)
    with fake_cuda(truth=False):  # False: the neuron indices pass the range check
        hooked = on_fake_cuda(model)
        x = ids(2, 5).to("cuda")
        for neurons in ([1, 2], torch.tensor([[1, 2], [3, 4]])):  # shared and per-prompt (CPU) indices
            with scale_mlp_keys(hooked, {0: neurons}, 0.0) as scaled:
                logits = scaled(x)
            assert on_cuda(logits) and logits.shape == (2, 5, 256)


def test_key_scaling_test_runs_on_the_models_device(fake_cuda, one_torch_thread):
    metric = logit_diff(5, 7)
    model = tiny_llama(seed=0)
    with fake_cuda(truth=False):  # False: the neuron indices pass the range check
        hooked = on_fake_cuda(model)
        out = key_scaling_test(hooked, ids(2, 5).to("cuda"), {0: [1, 2]}, metric, factors=(0.0,), n_random=2)
        assert list(out) == [0.0] and out[0.0].null.shape == (2,)


# --- perplexity -------------------------------------------------------------------------------------------
def test_split_perplexity_builds_the_ids_on_the_models_device(fake_cuda, one_torch_thread, no_vocab_check):
    pairs = [([1, 2, 3], [4, 5]), ([6, 7], [8])]
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        result = split_perplexity(hooked, pairs)
        assert len(result["items"]) == 2 and isinstance(result["answer_ppl"], float)
        rows = split_perplexity_over_checkpoints({"a": hooked}, pairs)
        assert [row["checkpoint"] for row in rows] == ["a"]


def test_continuation_perplexity_pads_on_the_models_device(fake_cuda, one_torch_thread, no_vocab_check):
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        prompts = [torch.tensor([1, 2, 3], device="cuda"), torch.tensor([4, 5], device="cuda")]
        ppl = continuation_perplexity(hooked, prompts, [[6, 7], [8]])  # continuations: CPU lists
        assert ppl.shape == (2,)


# --- edge attribution and circuits -----------------------------------------------------------------------
def test_edge_attribution_runs_on_the_models_device_and_returns_cpu_scores(
    fake_cuda, one_torch_thread, no_vocab_check, zero_grads
):
    metric = logit_diff(5, 7)
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        graph = build_graph(hooked)
        clean, corrupt = ids(1, 4).to("cuda"), ids(1, 4).to("cuda")
        for method in ("eap", "eap-ig"):
            scores = edge_attribution_patching(hooked, clean, corrupt, metric, method=method, steps=2)
            assert scores.scores.device.type == "cpu" and scores.scores.shape == graph.mask.shape
            assert scores.edges(3)  # sorted with the graph's CPU mask (how many: a stand-in count)


def test_evaluate_circuit_patches_on_the_models_device(fake_cuda, one_torch_thread, no_vocab_check):
    metric = logit_diff(5, 7)
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        clean, corrupt = ids(1, 4).to("cuda"), ids(1, 4).to("cuda")
        value = evaluate_circuit(hooked, clean, corrupt, metric, [("input", "logits"), ("a0.h1", "m1")])
        assert isinstance(value, float)


# --- crh: the spiral probe --------------------------------------------------------------------------------
def test_spiral_probe_points_on_the_probes_device(fake_cuda, one_torch_thread):
    # fit_spiral_probe's lstsq cannot run on fake tensors: fit on the CPU, move the probe, map points back
    diffs = torch.randn(8, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    probe = fit_spiral_probe(diffs, k=3)
    with fake_cuda():
        moved = SpiralProbe(
            *(t.to("cuda") for t in (probe.mean, probe.components, probe.projection, probe.helix_mean)),
            probe.n_rot,
            probe.radius,
            probe.r2,
        )
        for t in (0.5, [0.0, 1.0], torch.tensor([0.25, 0.75])):  # numbers, lists and CPU tensors
            points = moved.point(t)
            assert on_cuda(points) and points.shape == (len(torch.as_tensor(t).reshape(-1)), 16)


# --- diffing: latent attribution --------------------------------------------------------------------------
def test_latent_attribution_accumulates_on_the_saes_device(fake_cuda, one_torch_thread, zero_grads):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    sae = SAE(SAEConfig(d_in=16, d_sae=32, k=4))
    with fake_cuda():
        model, sae = model.to("cuda"), sae.to("cuda")
        inputs = torch.randn(6, 8, device="cuda")
        total = latent_attribution(model, model[0], sae, inputs, lambda out, sl: out.sum(), batch=4)
        assert on_cuda(total) and total.shape == (32,)


# --- sae: AuxK ablation on CUDA evaluation activations -----------------------------------------------------
def test_auxk_ablation_evaluates_cuda_activations(fake_cuda, one_torch_thread, monkeypatch):
    import icml_interp.sae.train as train

    cfg = SAEConfig(d_in=16, d_sae=32, k=4, batch_size=64, total_tokens=128)
    acts = torch.randn(512, 16, generator=torch.Generator().manual_seed(0))
    trained = train.train_sae(acts, cfg, progress=False)
    # train_sae trains on the CPU (real tensors, outside the fake mode): the fake part is the evaluation
    monkeypatch.setattr(train, "train_sae", lambda source, run_cfg, progress: trained)
    with fake_cuda():
        out = auxk_ablation(acts, cfg, torch.randn(128, 16, device="cuda"), progress=False)
        assert set(out) == {"auxk", "no_auxk"}
        assert all("fvu" in metrics and "train_dead_fraction" in metrics for metrics in out.values())


# --- hooks: to_tokens -------------------------------------------------------------------------------------
def test_to_tokens_puts_the_ids_on_the_models_device(fake_cuda, one_torch_thread, no_vocab_check):
    def tokenizer(text):
        return {"input_ids": [ord(c) % 256 for c in text]}

    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = HookedModel(model.to("cuda"), tokenizer=tokenizer)
        tokens = hooked.to_tokens("some text")
        assert on_cuda(tokens) and tokens.shape == (1, 9)
        logits, cache = hooked.run_with_cache(hooked.to_tokens("some text"), ["blocks.0.hook_resid_post"])
        assert on_cuda(logits) and on_cuda(cache["blocks.0.hook_resid_post"])
        assert hooked.to_tokens("some text", move_to_device=False).device.type == "cpu"
        with pytest.raises(TypeError, match="move_to_device"):
            hooked.to_tokens("some text", move_to_device=1)


# --- steering with the caller's CPU vector ------------------------------------------------------
def test_steering_moves_the_callers_cpu_vector_to_the_activations(
    fake_cuda, one_torch_thread, no_vocab_check
):
    vector = torch.randn(D_MODEL, generator=torch.Generator().manual_seed(1))  # a CPU vector, as users pass
    model = tiny_llama(seed=0)
    with fake_cuda():
        hooked = on_fake_cuda(model)
        with add_steering_vector(hooked, 1, vector, 2.0) as steered:
            logits = steered(ids(2, 5).to("cuda"))
        assert on_cuda(logits) and logits.shape == (2, 5, 256)
        out = generate_steered(hooked, [[1, 2, 3], [4, 5]], vector, 1, max_new_tokens=2)
        assert len(out) == 2 and all(on_cuda(row) for row in out)
