"""Sparse autoencoders: the four architectures, training pieces, metrics, the activation source, save/load."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml_interp.hooks import HookedModel
from icml_interp.sae import (
    SAE,
    ActivationSource,
    SAEConfig,
    SAEFileError,
    TrainLog,
    auxk_ablation,
    evaluate_sae,
    from_tokens,
    geometric_median,
    load_sae,
    splice,
    spliced_loss,
    to_tokens,
    train_sae,
)

ARCHS = ("topk", "batchtopk", "relu", "jumprelu")


def sparse_data(
    n: int, d: int = 32, m: int = 96, active: int = 3, seed: int = 0, dictionary_seed: int = 1000
):
    """Tokens that are sums of ``active`` of ``m`` random unit directions with magnitudes in [1, 4], plus an
    offset: a dictionary with known ground truth. Its seed is not an SAE's: ``SAE(cfg)`` draws its initial
    decoder as ``randn(d_sae, d_in)`` from ``cfg.seed``, and a dictionary drawn the same way from the same
    seed would be the SAE's starting point (it was, for seed 0, until 2026-12-06)."""
    dictionary = torch.randn(m, d, generator=torch.Generator().manual_seed(dictionary_seed))
    dictionary /= dictionary.norm(dim=1, keepdim=True)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.rand(n, m, generator=gen).argsort(1)[:, :active]
    codes = torch.zeros(n, m).scatter_(1, idx, torch.rand(n, active, generator=gen) * 3 + 1)
    return codes @ dictionary + 0.3


def random_sae(arch: str, d_in: int = 16, d_sae: int = 48, k: int = 4, seed: int = 0) -> SAE:
    sae = SAE(SAEConfig(d_in=d_in, d_sae=d_sae, architecture=arch, k=k, seed=seed))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        sae.b_enc.copy_(torch.randn(d_sae, generator=gen) * 0.1)
        sae.b_dec.copy_(torch.randn(d_in, generator=gen) * 0.1)
        sae.W_enc.add_(torch.randn(d_in, d_sae, generator=gen) * 0.1)
        if hasattr(sae, "threshold"):
            sae.threshold.copy_(torch.rand(d_sae, generator=gen) * 0.5 + 0.05)
    return sae.eval()


# ---------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("arch", ARCHS)
def test_encode_decode_shapes_and_nonnegative(arch):
    sae = random_sae(arch)
    x = torch.randn(2, 5, 16)
    f = sae.encode(x)
    assert f.shape == (2, 5, 48) and (f >= 0).all()
    assert sae.decode(f).shape == x.shape
    torch.testing.assert_close(sae(x), f @ sae.W_dec + sae.b_dec)


def test_topk_keeps_exactly_the_k_largest():
    sae = random_sae("topk", k=4)
    x = torch.randn(50, 16)
    pre = sae.pre_acts(x)
    f = sae.encode(x)
    for row_pre, row_f in zip(pre, f, strict=True):
        top = set(row_pre.topk(4).indices.tolist())
        nz = set(torch.nonzero(row_f).flatten().tolist())
        assert nz <= top
        assert nz == {i for i in top if row_pre[i] > 0}


def test_batchtopk_inference_does_not_depend_on_the_batch():
    sae = random_sae("batchtopk")
    x = torch.randn(64, 16)
    together = sae.encode(x)
    alone = torch.cat([sae.encode(row[None]) for row in x])
    torch.testing.assert_close(together, alone)  # equal up to the rounding of different matmul shapes
    assert torch.equal(together > 0, alone > 0)
    # while training, the whole batch shares k * batch activations
    f, _ = sae.encode_train(x)
    assert int((f > 0).sum()) <= 4 * 64


def test_fold_input_scale_moves_the_sae_to_the_callers_units():
    for arch in ARCHS:
        sae = random_sae(arch)
        folded = copy.deepcopy(sae)
        scale = 3.7
        folded.fold_input_scale(scale)
        x = torch.randn(20, 16)
        f_norm = sae.encode(x * scale)
        torch.testing.assert_close(folded.encode(x), f_norm / scale, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            folded.decode(f_norm / scale), sae.decode(f_norm) / scale, rtol=1e-5, atol=1e-6
        )
        # decoder rows are unchanged (unit norm in the caller's units)
        assert torch.equal(folded.W_dec, sae.W_dec)


def test_remove_parallel_gradient_leaves_only_the_tangent_part():
    sae = random_sae("topk")
    sae.normalize_decoder()
    loss = sae(torch.randn(32, 16)).pow(2).sum()
    loss.backward()
    before = sae.W_dec.grad.clone()
    sae.remove_parallel_gradient()
    radial = (sae.W_dec.grad * sae.W_dec).sum(-1)
    assert radial.abs().max() < 1e-5 * before.abs().max()
    # the tangent part itself is untouched: grad_after = grad - <grad, w> w
    torch.testing.assert_close(
        sae.W_dec.grad, before - (before * sae.W_dec).sum(-1, keepdim=True) * sae.W_dec
    )


def test_geometric_median_matches_the_median_on_a_line_and_beats_the_mean():
    t = torch.tensor([0.0, 1.0, 2.0, 10.0, 50.0])
    direction = torch.tensor([3.0, 4.0]) / 5
    pts = t[:, None] * direction + torch.tensor([1.0, -2.0])
    gm = geometric_median(pts, max_iter=500, tol=1e-10)
    torch.testing.assert_close(gm, 2.0 * direction + torch.tensor([1.0, -2.0]), atol=1e-3, rtol=0)
    cloud = torch.randn(200, 5)
    gm = geometric_median(cloud)

    def cost(y):
        return float((cloud - y).norm(dim=1).sum())

    assert cost(gm) <= cost(cloud.mean(0)) + 1e-6
    for _ in range(5):
        assert cost(gm) <= cost(gm + 0.01 * torch.randn(5)) + 1e-6


# ---------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize(
    ("arch", "kwargs", "max_fvu"),
    [
        ("topk", {"k": 3}, 0.15),
        (
            "batchtopk",
            {"k": 3},
            0.3,
        ),  # measured 0.255 (0.2 held only while the SAE started at the dictionary)
        ("relu", {"l1_coefficient": 0.3}, 0.5),
        ("jumprelu", {}, 0.3),
    ],
)
def test_training_recovers_a_planted_sparse_dictionary(arch, kwargs, max_fvu):
    torch.manual_seed(0)
    train, test = sparse_data(12000), sparse_data(2000, seed=1)
    cfg = SAEConfig(
        d_in=32,
        d_sae=128,
        architecture=arch,
        batch_size=512,
        total_tokens=150_000,
        lr=3e-3,
        dead_steps=30,
        **kwargs,
    )
    sae, log = train_sae(train, cfg, progress=False)
    metrics = evaluate_sae(sae, test)
    assert metrics["fvu"] < max_fvu, metrics
    assert metrics["l0"] < 32 if arch in ("relu", "jumprelu") else abs(metrics["l0"] - 3) < 1, metrics
    torch.testing.assert_close(sae.W_dec.norm(dim=-1), torch.ones(128), atol=1e-5, rtol=0)
    assert len(log.fvu) == cfg.steps and log.fvu[-1] < log.fvu[0]
    assert not sae.training


def test_normalization_is_folded_into_the_trained_sae():
    """Training on x and on 100 * x gives the same SAE up to the units (encode scales by 100)."""
    x = sparse_data(4000)
    cfg = SAEConfig(d_in=32, d_sae=64, k=3, batch_size=500, total_tokens=20_000, lr=3e-3)
    small, log_small = train_sae(x, cfg, progress=False)
    big, log_big = train_sae(x * 100, cfg, progress=False)
    assert abs(log_small.scaling_factor / log_big.scaling_factor - 100) < 1e-3
    torch.testing.assert_close(big.encode(x * 100) / 100, small.encode(x), rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(big(x * 100) / 100, small(x), rtol=1e-3, atol=1e-4)


def test_auxk_loss_matches_a_brute_force_computation():
    from icml_interp.sae.train import _aux_loss

    cfg = SAEConfig(d_in=6, d_sae=10, k=2, aux_k=3)
    sae = random_sae("topk", d_in=6, d_sae=10, k=2)
    gen = torch.Generator().manual_seed(5)
    pre, residual = torch.randn(7, 10, generator=gen), torch.randn(7, 6, generator=gen)
    dead = torch.zeros(10, dtype=torch.bool)
    dead[[1, 4, 5, 8]] = True
    loss, n_dead = _aux_loss(sae, cfg, pre, residual, dead, torch.tensor(2.5))
    expected = 0.0
    for row in range(7):
        ranked = sorted((float(pre[row, j]), j) for j in range(10) if dead[j])[::-1][:3]  # top-3 dead latents
        e_hat = sum(max(v, 0.0) * sae.W_dec[j].detach() for v, j in ranked)
        expected += float((e_hat - residual[row]).pow(2).sum())
    assert n_dead == 4
    assert float(loss.detach()) == pytest.approx(min(4 / 3, 1.0) * expected / 2.5, rel=1e-5)
    assert (
        float(_aux_loss(sae, cfg, pre, residual, torch.zeros(10, dtype=torch.bool), torch.tensor(1.0))[0])
        == 0
    )


def test_auxk_only_acts_on_dead_latents():
    """With no latent dead (a dead window longer than the run) AuxK changes nothing: the runs are identical;
    ``auxk_ablation`` reports both arms of the same run."""
    x = sparse_data(3000, m=48)
    cfg = SAEConfig(d_in=32, d_sae=96, k=3, batch_size=250, total_tokens=5000, lr=3e-3, dead_steps=1000)
    with_aux, _ = train_sae(x, cfg, progress=False)
    without, _ = train_sae(x, SAEConfig(**{**cfg.to_dict(), "aux_coefficient": 0.0}), progress=False)
    assert torch.equal(with_aux.W_enc, without.W_enc) and torch.equal(with_aux.W_dec, without.W_dec)
    short = SAEConfig(**{**cfg.to_dict(), "dead_steps": 2})
    result = auxk_ablation(x, short, x[:500])
    assert set(result) == {"auxk", "no_auxk"} and result["auxk"]["fvu"] != result["no_auxk"]["fvu"]
    with pytest.raises(ValueError, match="AuxK on"):
        auxk_ablation(x, SAEConfig(d_in=32, d_sae=96, architecture="relu"), x)


# ---------------------------------------------------------------------------------------------- metrics
def test_evaluate_sae_on_a_hand_built_sae():
    """Identity encoder/decoder (ReLU): exact reconstruction of nonnegative inputs, known L0, dead and dense."""
    sae = SAE(SAEConfig(d_in=4, d_sae=4, architecture="relu"))
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.W_dec.copy_(torch.eye(4))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    x = torch.zeros(100, 4)
    x[:, 0] = torch.rand(100) + 0.5  # always on: dense
    x[:5, 1] = 1.0  # 5% of tokens
    x[:50, 2] = 2.0  # 50%: dense
    metrics = evaluate_sae(sae, x)  # latent 3 never fires: dead
    assert metrics["fvu"] == 0.0
    assert metrics["l0"] == pytest.approx(1 + 0.05 + 0.5)
    assert metrics["dead_fraction"] == 0.25 and metrics["dense_fraction"] == 0.5
    # a decoder that loses latent 0 leaves exactly its variance unexplained
    with torch.no_grad():
        sae.W_dec[0] = 0
    var = (x - x.mean(0)).pow(2).sum()
    lost = x[:, 0].pow(2).sum()
    assert evaluate_sae(sae, x)["fvu"] == pytest.approx(float(lost / var), rel=1e-6)


@pytest.mark.parametrize("offset", [0.0, 1e4, 1e8])
def test_evaluate_sae_fvu_equals_a_two_pass_reference_whatever_the_activations_offset(offset):
    torch.manual_seed(0)
    sae = SAE(SAEConfig(d_in=8, d_sae=16, k=4)).double()
    x = torch.randn(512, 8, dtype=torch.float64) + offset
    with torch.no_grad():
        err = (x - sae.decode(sae.encode(x))).pow(2).sum()
    reference = float(err / (x - x.mean(0)).pow(2).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no false "zero variance" warning at a large offset
        fvu = evaluate_sae(sae, x, batch_size=100)["fvu"]  # several batches
    assert fvu == pytest.approx(reference, rel=1e-9)


# ---------------------------------------------------------------------------------------------- source
class TinyConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(1, 6, 3, padding=1)
        self.body = nn.Conv2d(6, 5, 3, padding=1)
        self.head = nn.Conv2d(5, 2, 1)

    def forward(self, x):
        return self.head(self.body(self.stem(x).relu()).relu())


def test_conv_feature_maps_become_pixel_tokens():
    net = TinyConvNet()
    images = torch.randn(6, 1, 7, 9)
    src = ActivationSource((net, "body"), images, input_batch_size=4, shuffle=False)
    tokens = src.take()
    with torch.no_grad():
        fmap = net.body(net.stem(images).relu())  # (6, 5, 7, 9)
    assert tokens.shape == (6 * 7 * 9, 5) and src.d_in == 5
    torch.testing.assert_close(tokens, fmap.permute(0, 2, 3, 1).reshape(-1, 5))
    torch.testing.assert_close(from_tokens(to_tokens(fmap), fmap), fmap)
    # the same through a bare submodule with the parent model as ``forward``, and the head's input
    torch.testing.assert_close(ActivationSource(net.body, images, forward=net, shuffle=False).take(), tokens)
    torch.testing.assert_close(
        ActivationSource((net, "head"), images, hook="input", shuffle=False).take(), tokens.relu()
    )
    # the shuffling buffer hands out every token once per pass (a permutation)
    shuffled = torch.cat(
        list(
            ActivationSource((net, net.body), images, buffer_tokens=100, seed=3).batches(50, drop_last=False)
        )
    )
    assert shuffled.shape == tokens.shape and not torch.equal(shuffled, tokens)
    torch.testing.assert_close(shuffled[shuffled[:, 0].argsort()], tokens[tokens[:, 0].argsort()])


def test_hooked_model_hidden_states_become_tokens():
    from icml_tools.assets import tiny_llama

    hooked = HookedModel(tiny_llama())
    ids = torch.randint(0, 256, (3, 10), generator=torch.Generator().manual_seed(0))
    name = "blocks.1.hook_resid_post"
    _, cache = hooked.run_with_cache(ids, [name])
    src = ActivationSource((hooked, name), ids, shuffle=False, input_batch_size=2)
    torch.testing.assert_close(src.take(), cache[name].reshape(-1, 64))
    dropped = ActivationSource((hooked, name), ids, shuffle=False, drop_first_tokens=1).take()
    torch.testing.assert_close(dropped, cache[name][:, 1:].reshape(-1, 64))
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 7:] = 0  # padding
    masked = ActivationSource(
        (hooked, name), [{"input_ids": ids, "attention_mask": mask}], shuffle=False
    ).take()
    assert masked.shape == (27, 64)


@pytest.mark.parametrize("side", ["left", "right"])
def test_drop_first_tokens_drops_each_rows_first_real_tokens_on_either_padding_side(side):
    # Hugging Face tokenizers pad decoder LMs on the left for generation: the first positions of a short row
    # are padding, and its BOS comes later; it was kept (2 BOS outliers among 13 tokens before 2026-12-18)
    from icml_tools.assets import tiny_llama

    hooked = HookedModel(tiny_llama())
    name = "blocks.1.hook_resid_post"
    gen = torch.Generator().manual_seed(0)
    rows = [torch.cat([torch.tensor([1]), torch.randint(2, 256, (n,), generator=gen)]) for n in (3, 6, 4)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        cols = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[i, cols], mask[i, cols] = r, 1
    got = ActivationSource(
        (hooked, name), [{"input_ids": ids, "attention_mask": mask}], shuffle=False, drop_first_tokens=1
    ).take()
    # each row alone, its BOS dropped (left padding moves rotary positions: equal up to rounding, measured
    # max |diff| 1.5e-8 on both sides, within assert_close's float32 default atol 1e-5)
    expected = torch.cat([hooked.run_with_cache(r[None], [name])[1][name][0, 1:] for r in rows])
    assert got.shape == expected.shape == (13, 64)
    torch.testing.assert_close(got, expected)


def test_splice_with_error_term_is_exact_and_spliced_loss_matches_manual_runs():
    from icml_tools.assets import tiny_llama

    hooked = HookedModel(tiny_llama())
    name = "blocks.0.hook_resid_post"
    ids = torch.randint(0, 256, (8, 12), generator=torch.Generator().manual_seed(1))
    acts = ActivationSource((hooked, name), ids).take()
    sae, _ = train_sae(
        acts, SAEConfig(d_in=64, d_sae=256, k=16, batch_size=32, total_tokens=3200, lr=3e-3), progress=False
    )
    clean = hooked(ids)
    with splice(sae, (hooked, name), keep_error=True) as run:
        assert torch.equal(run(ids), clean)
    with splice(sae, (hooked, name)) as run:
        spliced = run(ids)
    manual = hooked.run_with_hooks(ids, [(name, lambda h, hook: sae(h))])
    torch.testing.assert_close(spliced, manual)
    assert not torch.equal(spliced, clean)
    result = spliced_loss(sae, (hooked, name), ids.split(4))

    def ce(logits):
        return float(
            torch.nn.functional.cross_entropy(
                logits.detach()[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1)
            )
        )

    zero = hooked.run_with_hooks(ids, [(name, lambda h, hook: torch.zeros_like(h))])
    # equal-size batches: the mean of the per-batch means is the overall mean
    assert result["clean_loss"] == pytest.approx(ce(clean), rel=1e-5)
    assert result["spliced_loss"] == pytest.approx(ce(manual), rel=1e-5)
    assert result["zero_ablation_loss"] == pytest.approx(ce(zero), rel=1e-5)
    assert result["loss_increase"] == pytest.approx(result["spliced_loss"] - result["clean_loss"])


def _next_token_ce(output, ids):
    return torch.nn.functional.cross_entropy(output.logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


SPLICED = {  # the target forms, each with the model's first block's output spliced
    "hook name": lambda m: ((HookedModel(m), "blocks.0.hook_resid_post"), {}),
    "pair": lambda m: ((m, HookedModel(m).blocks[0]), {"loss_fn": _next_token_ce}),
    "module and forward": lambda m: (HookedModel(m).blocks[0], {"forward": m, "loss_fn": _next_token_ce}),
    "module and hooked forward": lambda m: (
        HookedModel(m).blocks[0],
        {
            "forward": HookedModel(m),
            "loss_fn": lambda logits, ids: _next_token_ce(SimpleNamespace(logits=logits), ids),
        },
    ),
}


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("target", list(SPLICED))
def test_spliced_loss_of_a_model_in_training_mode_is_the_eval_mode_loss(zoo, modes, arch, target):
    # the clean, spliced and zero-ablated passes ran in the model's mode: with dropout 0.1 in training mode
    # (GPT-2's default; Qwen2's attention dropout) each drew its own mask: the losses were off the eval-mode
    # ones by up to 0.0072 (GPT-2) / 0.0090 (Qwen2), more than the spliced-clean difference (0.016 / 0.017),
    # and fraction_recovered was 0.14 / 1.66 for -0.23 / 1.46. Now the model (the target's, and forward's
    # where it is a module) runs in eval mode (bit-identical) and every submodule's mode comes back, also
    # when a pass raises. A HookedModel as forward was missed until 2026-12: fraction_recovered 0.84 / 1.39.
    sae = SAE(SAEConfig(d_in=64, d_sae=128, k=8, seed=0)).eval()
    ids = torch.randint(0, 256, (4, 10), generator=torch.Generator().manual_seed(7))

    def run(model):
        where, kwargs = SPLICED[target](model)
        return spliced_loss(sae, where, ids.split(2), **kwargs)

    want, got = modes.train_vs_eval(getattr(zoo, arch)(), run)
    assert got == want


SOURCES = {  # the target forms, each reading the model's last block's output (the zoo's models have two)
    "hook name": lambda m: ((HookedModel(m), "blocks.1.hook_resid_post"), {}),
    "pair": lambda m: ((m, HookedModel(m).blocks[1]), {}),
    "module and forward": lambda m: (HookedModel(m).blocks[1], {"forward": m}),
    "module and hooked forward": lambda m: (HookedModel(m).blocks[1], {"forward": HookedModel(m)}),
}


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("target", list(SOURCES))
def test_activations_of_a_model_in_training_mode_are_the_eval_mode_activations(
    zoo, modes, arch, target, one_torch_thread
):
    # ActivationSource ran the model in its mode: left in training mode (GPT-2's dropout 0.1, Qwen2's attention
    # dropout 0.1) the activations it handed to train_sae / evaluate_sae had dropout, a fresh mask each read:
    # off the eval-mode ones by up to 0.084 (GPT-2) / 0.070 (Qwen2), and evaluate_sae(sae, source)'s fvu off
    # by 0.012 / 0.0057. SAELens reads activations without dropout (a TransformerLens model has none). Now the
    # model runs in eval mode (bit-identical) and every submodule's mode comes back, also when a pass raises.
    sae = SAE(SAEConfig(d_in=64, d_sae=128, k=8, seed=0)).eval()
    ids = torch.randint(0, 256, (4, 10), generator=torch.Generator().manual_seed(7))

    def run(model):
        where, kwargs = SOURCES[target](model)
        src = ActivationSource(where, ids, input_batch_size=2, shuffle=False, **kwargs)
        return src.take(), evaluate_sae(sae, src)

    model = modes.fine_tuning(getattr(zoo, arch)()).eval()
    want_acts, want_eval = run(model)
    modes.fine_tuning(model)
    before = modes.flags(model)
    got_acts, got_eval = run(model)
    assert modes.flags(model) == before
    assert torch.equal(got_acts, want_acts)
    assert got_eval == want_eval
    with modes.failing(HookedModel(model).blocks[0]), pytest.raises(ValueError, match="boom"):
        run(model)  # the pass fails before the hooked block
    assert modes.flags(model) == before


def test_keep_mode_collects_activations_in_the_models_own_mode(zoo, modes, one_torch_thread):
    model = modes.fine_tuning(zoo.gpt2())
    flags = modes.flags(model)
    ids = torch.randint(0, 256, (4, 10), generator=torch.Generator().manual_seed(7))
    src = ActivationSource((HookedModel(model), "blocks.0.hook_resid_post"), ids, keep_mode=True)
    first, second = src.take(), src.take()
    assert not torch.equal(first, second)  # dropout on: a fresh mask each read
    assert modes.flags(model) == flags
    with pytest.raises(TypeError, match="keep_mode"):
        ActivationSource(model, ids, keep_mode="yes")


# ---------------------------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("arch", ARCHS)
def test_save_load_round_trips_bit_exactly(arch, tmp_path):
    sae = random_sae(arch)
    sae.info["hook_name"] = "blocks.3.hook_resid_post"
    folder = sae.save(tmp_path / "sae")
    assert sorted(p.name for p in folder.iterdir()) == ["cfg.json", "sae_weights.safetensors"]
    loaded = SAE.load(folder)
    assert loaded.cfg == sae.cfg and loaded.info == sae.info
    for name, tensor in sae.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    x = torch.randn(40, 16)
    assert torch.equal(loaded.encode(x), sae.encode(x)) and torch.equal(loaded(x), sae(x))
    # saving again over the same folder replaces it atomically and leaves no temporary folders behind
    sae.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sae"]


@pytest.mark.parametrize("arch", ARCHS)
def test_saved_folder_loads_with_saelens(arch, tmp_path):
    sae_lens = pytest.importorskip("sae_lens")
    sae = random_sae(arch)
    sae.save(tmp_path / "sae")
    theirs = sae_lens.SAE.load_from_disk(tmp_path / "sae")
    expected = {"topk": "topk", "batchtopk": "jumprelu", "relu": "standard", "jumprelu": "jumprelu"}[arch]
    assert theirs.cfg.architecture() == expected
    x = torch.randn(40, 16)
    with torch.no_grad():
        assert torch.equal(theirs.encode(x), sae.encode(x))
        f = sae.encode(x)
        assert torch.equal(theirs.decode(f), sae.decode(f))
    # and a folder SAELens wrote loads here
    theirs.save_model(tmp_path / "theirs")
    back = load_sae(tmp_path / "theirs")
    assert torch.equal(back.encode(x), sae.encode(x))
    assert back.cfg.architecture == ("jumprelu" if arch == "batchtopk" else arch)


def test_an_sae_trained_at_a_hook_point_attaches_there_in_saelens(tmp_path, one_torch_thread):
    sae_lens = pytest.importorskip("sae_lens")
    from transformer_lens import HookedTransformerConfig

    from icml_interp.hooks import HookedModel
    from icml_tools.assets import tiny_llama

    site = "blocks.1.hook_resid_post"
    hooked = HookedModel(tiny_llama(seed=0, layers=2, vocab=64))
    source = ActivationSource(
        (hooked, site), torch.randint(0, 64, (32, 12)), drop_first_tokens=1, buffer_tokens=256
    )
    cfg = SAEConfig(
        d_in=hooked.d_model, d_sae=64, architecture="topk", k=4, total_tokens=1024, batch_size=128
    )
    sae, _ = train_sae(source, cfg, progress=False)
    assert sae.info["hook_name"] == site
    sae.save(tmp_path / "s")
    assert json.loads((tmp_path / "s" / "cfg.json").read_text())["metadata"]["hook_name"] == site
    tl = sae_lens.HookedSAETransformer(
        HookedTransformerConfig(
            n_layers=2,
            d_model=hooked.d_model,
            d_head=8,
            n_heads=hooked.d_model // 8,
            n_ctx=16,
            d_vocab=64,
            act_fn="relu",
        )
    )
    tl.add_sae(sae_lens.SAE.load_from_disk(tmp_path / "s", device="cpu"))
    assert list(tl.acts_to_saes) == [site]  # without hook_name SAELens skips it silently
    # a source of raw activations names no hook point
    raw, _ = train_sae(
        torch.randn(512, 16), SAEConfig(d_in=16, d_sae=32, architecture="relu"), progress=False
    )
    assert "hook_name" not in raw.info


def test_saved_config_is_plain_saelens_json(tmp_path):
    sae = random_sae("topk")
    sae.save(tmp_path / "s")
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and cfg["k"] == 4 and cfg["normalize_activations"] == "none"
    assert cfg["d_in"] == 16 and cfg["d_sae"] == 48 and cfg["metadata"]["sae_lens_version"].startswith("6")


# ---------------------------------------------------------------------------------------------- bad input
def test_activation_width_mismatch_is_a_clear_error():
    sae = random_sae("topk")
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 16\).*width mismatch"):
        sae.encode(torch.randn(3, 17))
    with pytest.raises(ValueError, match=r"f must have shape \(\.\.\., 48\)"):
        sae.decode(torch.randn(3, 16))
    with pytest.raises(ValueError, match=r"width 17, but cfg\.d_in = 16"):
        train_sae(torch.randn(100, 17), SAEConfig(d_in=16, d_sae=32, k=4, batch_size=10, total_tokens=100))
    with pytest.raises(ValueError, match="d_in = 16"):
        evaluate_sae(sae, torch.randn(10, 17))


def test_k_larger_than_the_dictionary_is_a_clear_error():
    with pytest.raises(ValueError, match=r"k must be <= d_sae \(the dictionary has 32 latents\), got k=33"):
        SAEConfig(d_in=16, d_sae=32, k=33)
    with pytest.raises(ValueError, match="k must be <= d_sae"):
        SAEConfig(d_in=16, d_sae=32, architecture="batchtopk", k=64)
    with pytest.raises(ValueError, match="architecture must be one of"):
        SAEConfig(d_in=16, d_sae=32, architecture="gated")
    with pytest.raises(TypeError, match="k must be an int"):
        SAEConfig(d_in=16, d_sae=32, k=2.5)


def test_empty_sources_are_clear_errors():
    net = TinyConvNet()
    with pytest.raises(ValueError, match="inputs is an empty tensor"):
        ActivationSource(net, torch.empty(0, 1, 4, 4))
    with pytest.raises(ValueError, match="inputs is empty"):
        ActivationSource(net, [])
    with pytest.raises(ValueError, match="activations is empty"):
        ActivationSource.from_activations(torch.empty(0, 8))
    cfg = SAEConfig(d_in=5, d_sae=16, k=2, batch_size=8, total_tokens=80)
    with pytest.raises(ValueError, match="yielded no activations"):
        train_sae(ActivationSource((net, "body"), iter([])), cfg)
    with pytest.raises(ValueError, match="holds no tokens"):
        evaluate_sae(random_sae("topk"), torch.empty(0, 16))
    with pytest.raises(ValueError, match="not a submodule"):
        ActivationSource((net, "nope"), torch.randn(2, 1, 4, 4))
    with pytest.raises(TypeError, match="inputs must be a tensor, a list or an iterable"):
        ActivationSource(net, 3)


# ---------------------------------------------------------------------------------------------- issue 22, item 5
def finite(sae: SAE) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in sae.parameters())


@pytest.mark.parametrize("normalize", ["expected_average_only_in", "none"])
@pytest.mark.parametrize("b_dec_init", ["geometric_median", "mean", "zeros"])
@pytest.mark.parametrize("value", [3.7, 0.0])
def test_constant_activations_are_refused_instead_of_nan_parameters(normalize, b_dec_init, value):
    """The FVU divides by the batch's variance: 0 for constant activations (0 / 0 -> NaN parameters after one
    step before the fix, or a ratio of rounding errors -> garbage)."""
    cfg = SAEConfig(
        d_in=8, d_sae=16, k=2, batch_size=100, total_tokens=500, normalize_activations=normalize,
        b_dec_init=b_dec_init,
    )  # fmt: skip
    with pytest.raises(ValueError, match="source's activations have zero variance"):
        train_sae(torch.full((2000, 8), value), cfg, progress=False)


def test_a_batch_of_identical_tokens_is_skipped_with_a_warning():
    """Unshuffled data whose third batch repeats one vector: that batch is skipped (it made every parameter
    NaN before the fix); a source that yields only such batches raises."""
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(200, 8, generator=gen), torch.randn(8, generator=gen).expand(100, 8)])
    x = torch.cat([x, torch.randn(100, 8, generator=gen)])
    cfg = SAEConfig(d_in=8, d_sae=16, k=2, batch_size=100, total_tokens=400, lr=1e-3)
    with pytest.warns(RuntimeWarning, match="skipped 1 batches of source whose 100 tokens were all the same"):
        sae, log = train_sae(ActivationSource.from_activations(x, shuffle=False), cfg, progress=False)
    assert finite(sae) and log.step == [0, 1, 2, 3] and all(map(torch.isfinite, torch.tensor(log.fvu)))
    blocks = torch.randn(4, 8, generator=gen).repeat_interleave(100, 0)  # varied overall, constant per batch
    with pytest.raises(ValueError, match="batches whose batch_size=100 tokens are all the same vector"):
        train_sae(ActivationSource.from_activations(blocks, shuffle=False), cfg, progress=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", [5, 18_000])  # in the initialization batches / only seen later
def test_non_finite_activations_are_refused(bad, where):
    x = torch.randn(20_000, 4, generator=torch.Generator().manual_seed(1))
    x[where, 2] = bad
    cfg = SAEConfig(d_in=4, d_sae=8, k=2, batch_size=1000, total_tokens=20_000)
    with pytest.raises(ValueError, match="source's activations contain NaN or inf"):
        train_sae(ActivationSource.from_activations(x, shuffle=False), cfg, progress=False)
    with pytest.raises(ValueError, match="x must hold finite values"):
        geometric_median(x[where - 5 : where + 5])


def test_divergence_raises_instead_of_nan_parameters():
    cfg = SAEConfig(d_in=8, d_sae=16, k=2, batch_size=100, total_tokens=1000, lr=1e30)
    with pytest.raises(ValueError, match=r"training diverged at step \d+.*lower cfg\.lr"):
        train_sae(sparse_data(1000, d=8), cfg, progress=False)


def test_batch_size_and_total_tokens_are_checked():
    with pytest.raises(
        ValueError, match=r"total_tokens must be >= batch_size.*total_tokens=50 and batch_size=100"
    ):
        SAEConfig(d_in=8, d_sae=16, k=2, batch_size=100, total_tokens=50)
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        SAEConfig(d_in=8, d_sae=16, k=2, batch_size=1, total_tokens=50)
    cfg = SAEConfig(d_in=8, d_sae=16, k=2, batch_size=100, total_tokens=100)
    cfg.total_tokens = 10  # edited after construction: train_sae checks again
    with pytest.raises(ValueError, match="total_tokens must be >= batch_size"):
        train_sae(sparse_data(200, d=8), cfg, progress=False)


def _edit_cfg(folder: Path, edit) -> None:
    data = json.loads((folder / "cfg.json").read_text())
    edit(data)
    (folder / "cfg.json").write_text(json.dumps(data))


def _set_d_in(data, value):
    data["d_in"] = value


def _set_both_d_in(data, value):
    data["d_in"] = data["icml_interp"]["config"]["d_in"] = value


def _set_saelens_d_sae(data, value):
    del data["icml_interp"]
    data["d_sae"] = value


@pytest.mark.parametrize(
    ("edit", "file", "message"),
    [
        (
            lambda d: _set_d_in(d, 9),
            "cfg.json",
            r"says d_in=9 at the top level .* but d_in=16 in icml_interp",
        ),
        (lambda d: _set_d_in(d, "16"), "cfg.json", "d_in must be an int"),
        (
            lambda d: _set_both_d_in(d, 9),
            "sae_weights.safetensors",
            r"W_dec has shape \(48, 16\), but .*cfg.json says d_in=9, d_sae=48, which needs \(48, 9\)",
        ),
        (
            lambda d: _set_saelens_d_sae(d, 40),
            "sae_weights.safetensors",
            r"W_dec has shape \(48, 16\), but .* says d_in=16, d_sae=40, which needs \(40, 16\)",
        ),
        (lambda d: d.update(dtype="float16"), "cfg.json", "says dtype='float16'.*holds float32"),
        (lambda d: d.update(architecture="standard"), "cfg.json", "architecture='standard' at the top level"),
        (lambda d: d.pop("k"), "cfg.json", "k must be an int, got None"),
        (lambda d: d["icml_interp"].update(config=[1]), "cfg.json", "icml_interp.config is invalid"),
    ],
)
def test_load_refuses_a_config_that_disagrees_with_itself_or_the_tensors(tmp_path, edit, file, message):
    """Before the fix an edited top-level d_in was ignored (the SAE loaded as if nothing had happened)."""
    folder = random_sae("topk").save(tmp_path / "sae")
    _edit_cfg(folder, edit)
    with pytest.raises(SAEFileError, match=message) as info:
        load_sae(folder)
    assert str(folder / file) in str(info.value)


def test_load_refuses_missing_and_non_finite_files_and_save_refuses_nan(tmp_path):
    sae = random_sae("jumprelu")
    folder = sae.save(tmp_path / "sae")
    (folder / "sae_weights.safetensors").unlink()
    with pytest.raises(SAEFileError, match=r"sae_weights\.safetensors is missing") as info:
        load_sae(folder)
    assert isinstance(info.value, FileNotFoundError)  # also what an `except FileNotFoundError` catches
    from safetensors.torch import save_file

    tensors = {k: v.clone() for k, v in sae.state_dict().items()}
    tensors["threshold"][3] = float("nan")
    save_file(tensors, str(folder / "sae_weights.safetensors"))
    with pytest.raises(SAEFileError, match=r"\['threshold'\] hold NaN or inf"):
        load_sae(folder)
    with torch.no_grad():
        sae.b_dec[0] = float("inf")
    with pytest.raises(ValueError, match=r"sae must have finite parameters.*\['b_dec'\]"):
        sae.save(tmp_path / "nan")
    assert not (tmp_path / "nan").exists()


def test_a_failed_save_leaves_the_old_folder_and_no_temporary_files(tmp_path, monkeypatch):
    import icml_interp.sae.io as io

    old = random_sae("topk", seed=0)
    folder = old.save(tmp_path / "sae")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(io, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        random_sae("topk", seed=1).save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sae"]
    assert torch.equal(load_sae(folder).W_enc, old.W_enc)


def test_save_refuses_a_folder_holding_other_files_and_keeps_them(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "checkpoint.pt").write_text("precious")
    with pytest.raises(
        ValueError, match=r"path .*run holds files save_sae did not write \(\['checkpoint.pt'\]\)"
    ):
        random_sae("topk").save(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    assert torch.equal(load_sae(random_sae("topk").save(empty)).W_enc, random_sae("topk").W_enc)


@pytest.fixture(scope="module")
def saved_sae(tmp_path_factory):
    return random_sae("batchtopk").save(tmp_path_factory.mktemp("saved") / "sae")


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["cfg.json", "sae_weights.safetensors"]), fraction=st.floats(0, 1, exclude_max=True)
)
def test_a_save_truncated_anywhere_raises_the_one_error_naming_the_file(saved_sae, name, fraction):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(shutil.copytree(saved_sae, Path(tmp) / "sae"))
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(fraction * len(data))])
        with pytest.raises(SAEFileError, match="truncated or corrupt") as info:
            load_sae(folder)
        assert str(folder / name) in str(info.value)


def test_train_log_plots_its_curves(tmp_path):
    pytest.importorskip("matplotlib")
    x = sparse_data(2000)
    cfg = SAEConfig(d_in=32, d_sae=64, k=3, batch_size=500, total_tokens=10_000, lr=3e-3)
    _, log = train_sae(x, cfg, progress=False)
    fig = log.plot(tmp_path / "curves.png", title="toy")
    assert (tmp_path / "curves.png").stat().st_size > 1000
    drawn = {ax.get_title(): ax.lines[0].get_ydata().tolist() for ax in fig.axes}
    assert drawn == {name: list(getattr(log, name)) for name in log.CURVES}
    with pytest.raises(ValueError, match="no steps"):
        type(log)().plot()
    with pytest.raises(TypeError, match="title must be a str"):
        log.plot(title=3)


def test_train_log_plot_leaves_the_matplotlib_backend_alone(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    log = TrainLog(step=[0, 1], loss=[1.0, 0.5], fvu=[1.0, 0.5], l0=[3.0, 2.0], dead_fraction=[0.0, 0.0])
    previous = plt.get_backend()
    plt.switch_backend("pdf")  # a caller's backend other than Agg
    try:
        fig = log.plot(tmp_path / "curves.png")
        assert plt.get_backend() == "pdf" and plt.get_fignums() == []
    finally:
        plt.switch_backend(previous)
    assert len(fig.axes) == 4 and (tmp_path / "curves.png").stat().st_size > 1000


# ------------------------------------------------------------------------------------ checkpoint and resume
def same_weights(a: SAE, b: SAE) -> bool:
    """Bit-identical parameters and buffers."""
    ours, theirs = a.state_dict(), b.state_dict()
    return ours.keys() == theirs.keys() and all(torch.equal(ours[n], theirs[n]) for n in ours)


def _train_keeping_checkpoints(monkeypatch, tmp_path, source, cfg, every):
    """Train with ``checkpoint_every=every``, keeping a copy of each checkpoint as ``step<N>.pt``."""
    import icml_interp.sae.train as train_module

    save = train_module._save_checkpoint

    def keep(path, state):
        save(path, state)
        shutil.copy(path, tmp_path / f"step{state['step']}.pt")

    monkeypatch.setattr(train_module, "_save_checkpoint", keep)
    out = train_sae(source, cfg, progress=False, checkpoint=tmp_path / "ckpt.pt", checkpoint_every=every)
    monkeypatch.setattr(train_module, "_save_checkpoint", save)
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_training_resumed_from_a_checkpoint_equals_the_uninterrupted_run(
    arch, tmp_path, monkeypatch, one_torch_thread
):
    """Train 25 steps; resume from the checkpoints of steps 7, 14 and 21: the SAE and the log are those of the
    uninterrupted run bit for bit (measured: max |difference| 0.0 for every parameter; before, train_sae had
    no checkpoint or resume_from argument). The initialization reads 2 batches, so the resumed runs skip
    batches that came through the shuffling buffer, over several passes of the source (400 tokens, 1600
    read); dead_steps=3 makes the dead-latent counters matter."""
    import icml_interp.sae.train as train_module

    monkeypatch.setattr(train_module, "INIT_TOKENS", 128)
    acts = sparse_data(400, d=16, m=48)
    cfg = SAEConfig(
        d_in=16, d_sae=48, architecture=arch, k=4, batch_size=64, total_tokens=64 * 25, dead_steps=3,
        lr=1e-3, lr_warmup_steps=3,
    )  # fmt: skip

    def source():
        return ActivationSource.from_activations(acts, buffer_tokens=256, seed=1)

    full, full_log = train_sae(source(), cfg, progress=False)
    checkpointed, _ = _train_keeping_checkpoints(monkeypatch, tmp_path, source(), cfg, 7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "step14.pt", "step21.pt", "step7.pt"]
    for sae in [checkpointed] + [
        train_sae(source(), cfg, progress=False, resume_from=tmp_path / f"step{s}.pt")[0] for s in (7, 14, 21)
    ]:
        assert sae.info == full.info and not sae.training and same_weights(sae, full)
    # resumed and checkpointing again (to the file it resumed from): the step-21 checkpoint is the original's
    shutil.copy(tmp_path / "step14.pt", tmp_path / "again.pt")
    _, log = train_sae(
        source(), cfg, progress=False, resume_from=tmp_path / "again.pt", checkpoint=tmp_path / "again.pt",
        checkpoint_every=7,
    )  # fmt: skip
    again, first = (torch.load(tmp_path / n, weights_only=True) for n in ("again.pt", "step21.pt"))
    assert again["step"] == 21 and all(torch.equal(again["sae"][n], t) for n, t in first["sae"].items())
    for name in ("step", "tokens", "loss", "fvu", "l0", "dead_fraction", "aux_loss", "lr", "died", "revived"):
        assert getattr(log, name) == getattr(full_log, name), name


def test_resume_refuses_another_source_or_config_and_checks_its_arguments(tmp_path, monkeypatch):
    acts = sparse_data(640, d=8, m=24)
    cfg = SAEConfig(d_in=8, d_sae=16, k=2, batch_size=64, total_tokens=640, lr=1e-3)
    full, _ = _train_keeping_checkpoints(monkeypatch, tmp_path, acts, cfg, 5)
    ckpt = tmp_path / "step5.pt"
    with pytest.raises(ValueError, match=r"source is not the one resume_from=.* was trained on"):
        train_sae(ActivationSource.from_activations(acts, seed=5), cfg, progress=False, resume_from=ckpt)
    with pytest.raises(ValueError, match=r"another cfg \(fields \['k'\] differ\)"):
        train_sae(acts, SAEConfig(**{**cfg.to_dict(), "k": 3}), progress=False, resume_from=ckpt)
    one_shot = ActivationSource(None, iter([acts[:64], acts[64:128]]), layout="nd")
    with pytest.raises(ValueError, match="source ran out after 2 batches, before the 5"):
        train_sae(one_shot, cfg, progress=False, resume_from=ckpt)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    for bad in (tmp_path / "junk.pt", tmp_path / "missing.pt", tmp_path):
        with pytest.raises(ValueError, match="resume_from"):
            train_sae(acts, cfg, progress=False, resume_from=bad)
    with pytest.raises(ValueError, match="checkpoint and checkpoint_every go together"):
        train_sae(acts, cfg, progress=False, checkpoint=tmp_path / "c.pt")
    with pytest.raises(ValueError, match="checkpoint and checkpoint_every go together"):
        train_sae(acts, cfg, progress=False, checkpoint_every=2)
    with pytest.raises(ValueError, match="need distributed=False"):
        train_sae(acts, cfg, progress=False, resume_from=ckpt, distributed=True)
    # a checkpoint of the last step resumes to the finished SAE
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["step"] == cfg.steps
    sae, log = train_sae(acts, cfg, progress=False, resume_from=tmp_path / "ckpt.pt")
    assert log.step[-1] == cfg.steps - 1 and sae.info == full.info
    assert same_weights(sae, full)


def test_a_failed_checkpoint_save_keeps_the_earlier_checkpoint(tmp_path, monkeypatch):
    """The second save dies half-way through writing: the file still holds the first checkpoint (which
    resumes) and no temporary file is left beside it."""
    acts = sparse_data(640, d=8, m=24)
    cfg = SAEConfig(d_in=8, d_sae=16, k=2, batch_size=64, total_tokens=640, lr=1e-3)
    real_save, calls = torch.save, []

    def dies_on_the_second_save(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            f.write(b"half a checkpoint")
            raise OSError("disk full")
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", dies_on_the_second_save)
    with pytest.raises(OSError, match="disk full"):
        train_sae(acts, cfg, progress=False, checkpoint=tmp_path / "ckpt.pt", checkpoint_every=3)
    monkeypatch.setattr(torch, "save", real_save)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["step"] == 3
    resumed, _ = train_sae(acts, cfg, progress=False, resume_from=tmp_path / "ckpt.pt")
    full, _ = train_sae(acts, cfg, progress=False)
    assert same_weights(resumed, full)
