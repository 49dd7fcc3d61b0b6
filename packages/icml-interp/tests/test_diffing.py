"""Latent alignment, cohort statistics, attribution and the diff report, against brute force and planted cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from icml_interp.diffing import (
    activation_alignment,
    cohort_latent_table,
    correlation_matrix,
    decoder_alignment,
    diff_report,
    exclusive_latents,
    firing_frequency,
    latent_attribution,
    latent_maps,
    layer_activations,
    plot_diff_report,
    specific_latents,
)


class LinearSAE(nn.Module):
    def __init__(self, d_in=4, d_sae=6, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W_enc = torch.randn(d_in, d_sae, generator=g)
        self.W_dec = torch.randn(d_sae, d_in, generator=g)
        self.b_dec = torch.randn(d_in, generator=g)

    def encode(self, x):
        return torch.relu(x @ self.W_enc)

    def decode(self, f):
        return f @ self.W_dec + self.b_dec


def test_decoder_alignment_recovers_a_permutation():
    g = torch.Generator().manual_seed(0)
    w_a = torch.randn(12, 8, generator=g)
    perm = torch.randperm(12, generator=g)
    w_b = w_a[perm] * 3.0 + 0.05 * torch.randn(12, 8, generator=g)  # scale does not matter (cosine)
    w_b[0] = torch.randn(8, generator=g)  # one latent of B is new
    al = decoder_alignment(w_a, w_b, threshold=0.9)
    # w_b[i] is w_a[perm[i]]: every shared pair is right; the optimal assignment may trade one exact match
    # for two mediocre ones around the replaced latent, never more
    for (a, b), shared in zip(al.pairs, al.shared, strict=True):
        if shared:
            assert a == int(perm[b])
    assert al.shared.sum() >= 10
    assert not al.shared[al.pairs[:, 0] == int(perm[0])][0]  # its partner in B was replaced
    excl_a, excl_b = exclusive_latents(al)
    assert 0 in excl_b.tolist() and int(perm[0]) in excl_a.tolist()
    assert len(excl_a) == len(excl_b) == 12 - al.shared.sum()


def test_correlation_matrix_matches_numpy():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 4, 5, 5, generator=g), torch.randn(3, 2, 5, 5, generator=g)
    b[:, 1] = 0.0  # a dead latent scores 0
    c = correlation_matrix(a, b)
    ta = a.permute(0, 2, 3, 1).reshape(-1, 4).numpy()
    tb = b.permute(0, 2, 3, 1).reshape(-1, 2).numpy()
    ref = np.corrcoef(ta.T, tb[:, :1].T)[:4, 4]
    np.testing.assert_allclose(c[:, 0], ref, rtol=1e-6, atol=1e-9)
    assert np.all(c[:, 1] == 0)


def test_activation_alignment_across_grids_and_null():
    g = torch.Generator().manual_seed(2)
    base = torch.rand(20, 5, 6, 6, generator=g) ** 4  # sparse-ish latent maps on a 6x6 grid
    perm = torch.tensor([3, 0, 4, 1, 2])
    maps_b = base[:, perm].repeat_interleave(2, 2).repeat_interleave(2, 3)  # same latents, permuted, 12x12
    al = activation_alignment(base, maps_b, grid=(6, 6), seed=0)
    for a, b in al.pairs:
        assert perm[b] == a
    np.testing.assert_allclose(al.score, 1.0, atol=1e-9)
    assert np.all(np.abs(al.null) < 0.2)  # independent images: near-zero correlation
    assert al.partner(int(perm[0])) == 0
    rows = al.rows()
    assert len(rows) == 5 and {"latent_a", "latent_b", "correlation", "shared", "null"} <= rows[0].keys()


def test_activation_alignment_never_pairs_a_dead_latent():
    g = torch.Generator().manual_seed(3)
    base = torch.rand(12, 3, 5, 5, generator=g) ** 4
    maps_b = torch.zeros(12, 3, 5, 5)
    maps_b[:, 0], maps_b[:, 2] = base[:, 1], 0.5 * base[:, 0] + 0.5 * base[:, 2]  # latent 1 of b is dead
    al = activation_alignment(base, maps_b, seed=0, null_draws=3)
    # the square matching of the full matrix would hand one live latent of a the dead latent 1 (score 0)
    assert 1 not in al.pairs[:, 1].tolist() and len(al.pairs) == 2
    assert al.partner(1) == 0 and al.score[al.pairs[:, 0] == 1][0] == pytest.approx(1.0)
    assert sum(al.partner(a) == -1 for a in (0, 2)) == 1  # one of the two mixed latents stays unmatched
    assert al.null.shape == (2,) and np.all(np.abs(al.null) < 0.6)
    with pytest.raises(ValueError, match="null_draws must be a positive int"):
        activation_alignment(base, maps_b, null_draws=0)


def test_cohort_table_statuses():
    n = 1000
    codes_a = torch.zeros(n, 4)
    codes_b = torch.zeros(n, 4)
    codes_a[:100, 0] = 1.0  # latent 0: A only
    codes_b[:100, 1] = 2.0  # latent 1: B only
    codes_a[:300, 2] = 1.0  # latent 2: both, similar frequency
    codes_b[:250, 2] = 1.0
    # latent 3: dead
    table = cohort_latent_table({"A": codes_a, "B": codes_b})
    assert [r["status"] for r in table] == ["A", "B", "shared", "dead"]
    assert table[1]["freq_B"] == pytest.approx(0.1) and table[1]["mean_B"] == pytest.approx(0.2)
    assert table[0]["log_ratio"] < 0 < table[1]["log_ratio"]
    assert specific_latents({"A": codes_a, "B": codes_b}, "B") == [1]
    torch.testing.assert_close(firing_frequency(codes_a), torch.tensor([0.1, 0.0, 0.3, 0.0]))


def test_attribution_equals_closed_form():
    torch.manual_seed(0)
    conv = nn.Conv2d(1, 4, 3, padding=1)
    head = nn.Conv2d(4, 1, 1, bias=False)
    model = nn.Sequential(conv, head)
    sae = LinearSAE()
    x = torch.randn(5, 1, 6, 6)
    attr = latent_attribution(model, conv, sae, x, lambda out, sl: out.sum(), batch=2)
    # metric = sum over pixels of head(h); d metric / d f_j = W_dec[j] . w_head at every pixel
    with torch.no_grad():
        h = conv(x).permute(0, 2, 3, 1).reshape(-1, 4)
        f = sae.encode(h)
        w = head.weight.view(4)
        expected = f.sum(0) * (sae.W_dec @ w)
    torch.testing.assert_close(attr, expected, rtol=1e-4, atol=1e-4)
    # the splice leaves the forward value unchanged, and the hook is gone
    assert not conv._forward_hooks


def training_flags(model: nn.Module) -> dict[str, bool]:
    return {name: module.training for name, module in model.named_modules()}


def mixed_mode_net() -> nn.Sequential:
    """A training conv net whose BatchNorm the user froze (eval), for the mode checks below."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 1, 1))
    net.train()
    net[1].eval()
    return net


def test_attribution_keeps_every_submodules_training_flag():
    # the top-level flag was restored with model.train(was_training), which put the frozen BatchNorm back in
    # training mode
    net, sae, x = mixed_mode_net(), LinearSAE(), torch.randn(3, 1, 5, 5)
    before = training_flags(net)
    latent_attribution(net, net[0], sae, x, lambda out, sl: out.sum(), batch=2)
    assert training_flags(net) == before
    with pytest.raises(ValueError, match="metric must return a scalar"):
        latent_attribution(net, net[0], sae, x, lambda out, sl: out)
    assert training_flags(net) == before
    net.eval()
    net[1].train()  # the other way round: an eval model with one module kept in training mode
    before = training_flags(net)
    latent_attribution(net, net[0], sae, x, lambda out, sl: out.sum())
    assert training_flags(net) == before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_attribution_of_a_float32_sae_on_a_half_model(dtype):
    # train_sae gives float32 SAEs; the splice promoted the half model's activations to float32 and the next
    # layer raised (reported as "model failed on inputs")
    torch.manual_seed(0)
    conv = nn.Conv2d(1, 4, 3, padding=1)
    model = nn.Sequential(conv, nn.ReLU(), nn.Conv2d(4, 1, 1, bias=False))
    sae, x = LinearSAE(), torch.randn(5, 1, 6, 6)
    want = latent_attribution(model, conv, sae, x, lambda out, sl: out.float().sum(), batch=2)
    model = model.to(dtype)
    got = latent_attribution(model, model[0], sae, x.to(dtype), lambda out, sl: out.float().sum(), batch=2)
    torch.testing.assert_close(got, want, rtol=0, atol=0.05 * float(want.abs().max()))


def test_attribution_of_a_float16_sae_sums_tokens_beyond_float16():
    # f * g summed over tokens in float16 overflowed past 65504 ("the attribution overflowed")
    conv = nn.Conv2d(1, 1, 1, bias=False)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    model = nn.Sequential(conv).half()
    sae = LinearSAE(d_in=1, d_sae=1)
    with torch.no_grad():
        sae.W_enc.fill_(1.0), sae.W_dec.fill_(1.0), sae.b_dec.zero_()
    sae.W_enc, sae.W_dec, sae.b_dec = sae.W_enc.half(), sae.W_dec.half(), sae.b_dec.half()
    x = torch.full((1, 1, 100, 100), 8.0, dtype=torch.float16)  # f = 8 and g = 1 at 10^4 pixels: 80000
    attr = latent_attribution(model, conv, sae, x, lambda out, sl: out.float().sum())
    assert attr.tolist() == [80000.0]


def test_latent_maps_and_layer_activations():
    torch.manual_seed(0)
    conv = nn.Conv2d(1, 4, 3, padding=1)
    model = nn.Sequential(conv, nn.ReLU())
    x = torch.randn(3, 1, 5, 5)
    acts = layer_activations(model, conv, x, batch=2)
    torch.testing.assert_close(acts, conv(x).detach())
    sae = LinearSAE()
    maps = latent_maps(sae, acts)
    assert maps.shape == (3, 6, 5, 5)
    torch.testing.assert_close(maps[1, :, 2, 3], sae.encode(acts[1, :, 2, 3]))


def test_layer_activations_restore_every_submodules_training_flag():
    # the model was left in eval mode, after a successful call and after one that raised
    net, x = mixed_mode_net(), torch.randn(3, 1, 5, 5)
    before = training_flags(net)
    acts = layer_activations(net, net[0], x, batch=2)
    assert training_flags(net) == before
    torch.testing.assert_close(acts, net[0](x).detach())
    with pytest.raises(ValueError, match="did not run"):
        layer_activations(net, nn.Conv2d(1, 4, 3), x)
    assert training_flags(net) == before
    with pytest.raises(ValueError, match="model failed"):
        layer_activations(net, net[0], torch.randn(3, 2, 5, 5))
    assert training_flags(net) == before


def test_diff_report_and_plot(tmp_path):
    codes_a = torch.zeros(100, 3)
    codes_b = torch.zeros(100, 3)
    codes_a[:10, 0] = 1.0
    codes_b[:40, 1] = 1.0
    codes_a[:20, 2] = codes_b[:20, 2] = 1.0
    table = cohort_latent_table({"A": codes_a, "B": codes_b})
    rows = diff_report(table, attribution=torch.tensor([0.5, -1.0, 0.0]), labels={1: "b-texture"})
    assert [r["latent"] for r in rows] == [1, 0, 2]  # by frequency difference
    assert rows[0]["label"] == "b-texture" and rows[0]["attribution"] == -1.0
    path = plot_diff_report(rows, tmp_path / "diff.png")
    assert path.stat().st_size > 1000


def test_plot_diff_report_leaves_the_matplotlib_backend_alone(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    rows = [{"latent": 0, "freq_A": 0.1, "freq_B": 0.2, "freq_diff": 0.1}]
    previous = plt.get_backend()
    plt.switch_backend("pdf")  # a caller's backend other than Agg
    try:
        plot_diff_report(rows, tmp_path / "diff.png")
        assert plt.get_backend() == "pdf" and plt.get_fignums() == []
    finally:
        plt.switch_backend(previous)
    assert (tmp_path / "diff.png").stat().st_size > 1000


def test_bad_input():
    with pytest.raises(ValueError, match="different spaces"):
        decoder_alignment(torch.randn(4, 3), torch.randn(4, 5))
    with pytest.raises(ValueError, match="threshold"):
        decoder_alignment(torch.randn(4, 3), torch.randn(4, 3), threshold=2.0)
    with pytest.raises(ValueError, match="same inputs"):
        correlation_matrix(torch.randn(3, 2, 4, 4), torch.randn(4, 2, 4, 4))
    with pytest.raises(ValueError, match="maps_a must be"):
        correlation_matrix(torch.randn(3, 2, 4), torch.randn(3, 2, 4, 4))
    with pytest.raises(ValueError, match="NaN"):
        correlation_matrix(torch.full((2, 2, 3, 3), float("nan")), torch.randn(2, 2, 3, 3))
    with pytest.raises(ValueError, match="grid"):
        correlation_matrix(torch.randn(2, 2, 3, 3), torch.randn(2, 2, 3, 3), grid=(0, 3))
    with pytest.raises(ValueError, match="at least 2 images"):
        activation_alignment(torch.randn(1, 2, 3, 3), torch.randn(1, 2, 3, 3))
    with pytest.raises(ValueError, match="at least two cohorts"):
        cohort_latent_table({"A": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match="same SAE"):
        cohort_latent_table({"A": torch.zeros(3, 2), "B": torch.zeros(3, 4)})
    with pytest.raises(ValueError, match="cohort must be one of"):
        specific_latents({"A": torch.zeros(3, 2), "B": torch.zeros(3, 2)}, "C")
    with pytest.raises(ValueError, match="d_in"):
        latent_maps(LinearSAE(), torch.randn(2, 5, 3, 3))
    with pytest.raises(ValueError, match="one value per latent"):
        diff_report(
            cohort_latent_table({"A": torch.zeros(3, 2), "B": torch.ones(3, 2)}), attribution=torch.zeros(3)
        )
    conv = nn.Conv2d(1, 4, 3)
    with pytest.raises(ValueError, match="did not run"):
        layer_activations(nn.Identity(), conv, torch.randn(2, 1, 4, 4))
    with pytest.raises(TypeError, match="metric must be callable"):
        latent_attribution(nn.Sequential(conv), conv, LinearSAE(), torch.randn(2, 1, 4, 4), metric=3)
