"""The Med-SegLens testbed: scans, Dice, models, the repair pieces; the reproduction `seglens-repair` (heavy)."""

from __future__ import annotations

import pytest
import torch

from icml_interp_experiments.seglens import TinySegFormer, TinyUNet, dice_per_class, make_scans, soft_dice
from icml_interp_experiments.seglens.data import EDEMA_INTENSITY
from icml_interp_experiments.seglens.repair import (
    as_map,
    band_width,
    core_band_region,
    core_distance,
    detect_latents,
    gt_free_region,
    random_region,
    to_grid,
)
from icml_tools.repro import run_reproduction


def test_scans_are_seeded_and_consistent():
    a = make_scans("A", 6, seed=3, size=32)
    again = make_scans("A", 6, seed=3, size=32)
    torch.testing.assert_close(a.images, again.images)
    assert a.images.shape == (6, 1, 32, 32) and a.labels.shape == (6, 32, 32)
    assert not torch.equal(a.images, make_scans("A", 6, seed=4, size=32).images)
    # labels and concept maps agree; the concepts are disjoint
    assert torch.equal(a.labels == 1, a.concepts["edema"].bool())
    assert torch.equal(a.labels == 2, a.concepts["core"].bool())
    total = sum(a.concepts[c] for c in ("core", "edema", "skull", "tissue"))
    assert total.max() <= 1
    assert a.concepts["core"].sum() > 0 and a.concepts["skull"].sum() > 0


def test_cohort_b_differs_in_the_edema_only():
    a, b = make_scans("A", 40, seed=0), make_scans("B", 40, seed=0)
    for s in (a, b):
        core = s.images[:, 0][s.labels == 2]
        assert abs(float(core.mean()) - 0.95) < 0.02
    ed_a, ed_b = a.images[:, 0][a.labels == 1], b.images[:, 0][b.labels == 1]
    assert abs(float(ed_a.mean()) - EDEMA_INTENSITY["A"]) < 0.03
    assert abs(float(ed_b.mean()) - EDEMA_INTENSITY["B"]) < 0.03
    tissue = b.images[:, 0][b.concepts["tissue"].bool()]
    assert float(ed_b.mean()) < float(tissue.mean()) < float(ed_a.mean())  # B's edema is hypo-intense


def test_dice_per_class_by_hand():
    labels = torch.tensor([[[0, 1], [2, 2]]])
    pred = torch.tensor([[[0, 1], [1, 2]]])
    d = dice_per_class(pred, labels)
    torch.testing.assert_close(d, torch.tensor([[1.0, 2 * 1 / 3, 2 * 1 / 3]]))
    # a class absent from both scores 1; logits are reduced by argmax
    logits = (
        torch.nn.functional.one_hot(torch.zeros(1, 2, 2, dtype=torch.long), 3).permute(0, 3, 1, 2).float()
    )
    torch.testing.assert_close(
        dice_per_class(logits, torch.zeros(1, 2, 2, dtype=torch.long)), torch.ones(1, 3)
    )
    big = torch.full((1, 3, 2, 2), -20.0)
    big[:, 1] = 20.0
    assert soft_dice(big, torch.ones(1, 2, 2, dtype=torch.long), 1).item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("cls", [TinyUNet, TinySegFormer])
def test_models_map_scans_to_logits(cls):
    torch.manual_seed(0)
    model = cls().eval()
    x = make_scans("A", 2, seed=0).images
    assert model(x).shape == (2, 3, 48, 48)
    got = []
    handle = model.sae_layer.register_forward_hook(lambda m, i, o: got.append(o))
    model(x)
    handle.remove()
    assert got and got[0].dim() == 4


def test_repair_helpers():
    mask = torch.zeros(2, 8, 8, dtype=torch.bool)
    mask[0, :4, :4] = True
    torch.testing.assert_close(to_grid(mask, (4, 4))[0, :2, :2], torch.ones(2, 2, dtype=torch.bool))
    assert to_grid(mask, (4, 4)).sum() == 4
    rr = random_region(mask, seed=0)
    assert rr.sum((1, 2)).tolist() == mask.sum((1, 2)).tolist()
    h = torch.randn(2, 16, 5)
    torch.testing.assert_close(as_map(h)[1, :, 2, 3], h[1, 2 * 4 + 3])


def test_core_band_region_is_the_dilated_core_minus_the_core():
    pred = torch.zeros(2, 16, 16, dtype=torch.long)
    pred[0, 6:9, 7:9] = 2  # a 3x2 core; scan 1 has none
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cy, cx = torch.nonzero(pred[0] == 2, as_tuple=True)
    brute = ((yy[..., None] - cy) ** 2 + (xx[..., None] - cx) ** 2).sqrt().min(-1).values  # distance to core
    torch.testing.assert_close(core_distance(pred)[0], brute)
    assert torch.isinf(core_distance(pred)[1]).all()
    band = core_band_region(pred, 2.5)
    assert torch.equal(band[0], (brute > 0) & (brute <= 2.5))
    assert not band[1].any() and not (band[0] & (pred[0] == 2)).any()
    # width from the model's own predictions: edema at distances 1, 2 and 3 of a one-pixel core
    pred_a = torch.zeros(1, 9, 9, dtype=torch.long)
    pred_a[0, 4, 4] = 2
    pred_a[0, 4, 5], pred_a[0, 4, 6], pred_a[0, 4, 7] = 1, 1, 1
    assert band_width(pred_a, 1.0) == pytest.approx(3.0)
    assert band_width(pred_a, 0.5) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="width must be a positive number"):
        core_band_region(pred, 0)
    with pytest.raises(ValueError, match="quantile must be a number in"):
        band_width(pred_a, 1.5)
    with pytest.raises(ValueError, match="pred must be a non-empty"):
        core_distance(torch.zeros(16, 16))
    with pytest.raises(ValueError, match="no edema pixel"):
        band_width(pred, 0.9)


class ReluSAE:
    """encode = relu, decode = identity: latent j is channel j."""

    W_dec = torch.eye(3)

    def encode(self, x):
        return torch.relu(x)

    def decode(self, f):
        return f


def test_detect_latents_and_region_on_a_planted_shift():
    acts_a, acts_b = torch.zeros(4, 3, 6, 6), torch.zeros(4, 3, 6, 6)
    acts_a[:, 0] = acts_b[:, 0] = 1.0  # latent 0: everywhere in both cohorts
    acts_a[:, 2, :2] = 1.0  # latent 2: cohort A only
    acts_b[:, 1, 3:5, 3:5] = 1.0  # latent 1: cohort B only, in a 2x2 patch
    sae = ReluSAE()
    assert detect_latents(sae, acts_a, acts_b, n=2) == [1]  # the only latent firing more on B
    region = gt_free_region(sae, acts_b, [1])
    assert region.shape == (4, 6, 6) and region.sum() == 16 and region[:, 3:5, 3:5].all()
    assert not gt_free_region(sae, acts_b, []).any()


class BrightIsEdema(torch.nn.Module):
    """Logits (n, 3, H, W) calling a pixel edema where the image is > 0.5."""

    def forward(self, x):
        return torch.cat([x < 0.5, x > 0.5, torch.zeros_like(x, dtype=torch.bool)], 1).float()


def test_select_gt_free_ranks_inside_the_band():
    from icml_interp_experiments.seglens.data import Scans
    from icml_interp_experiments.seglens.repair import select_gt_free

    images = torch.zeros(2, 1, 6, 6)
    images[:, :, :2] = 1.0  # the model calls rows 0-1 of A edema
    fit_a = Scans(images, torch.zeros(2, 6, 6, dtype=torch.long))
    acts_a, acts_b = torch.zeros(2, 3, 6, 6), torch.zeros(2, 3, 6, 6)
    acts_a[:, 0, :2], acts_b[:, 0, 2:4] = 1.0, 1.0  # latent 0: same cohort means, absent from B's band
    acts_a[:, 1] = 0.5  # latent 1: the largest gap between the cohorts over all tokens
    band = torch.zeros(2, 6, 6, dtype=torch.bool)
    band[:, :2] = True
    sae, model = ReluSAE(), BrightIsEdema()
    latents, ref, _, _ = select_gt_free(sae, model, fit_a, acts_a, acts_b, 1)
    assert latents == [1]
    latents, ref, _, _ = select_gt_free(sae, model, fit_a, acts_a, acts_b, 1, region_b=band)
    assert latents == [0]
    torch.testing.assert_close(ref, torch.tensor([1.0, 0.5, 0.0]))  # A's mean code on its predicted edema
    with pytest.raises(ValueError, match="region_b must be a bool mask"):
        select_gt_free(sae, model, fit_a, acts_a, acts_b, 1, region_b=band[:1])


def test_bad_input():
    with pytest.raises(ValueError, match="cohort must be one of"):
        make_scans("C", 2, seed=0)
    with pytest.raises(ValueError, match="n must be a positive int"):
        make_scans("A", 0, seed=0)
    with pytest.raises(ValueError, match="size must be an int >= 24"):
        make_scans("A", 2, seed=0, size=8)
    with pytest.raises(TypeError, match="seed must be an int"):
        make_scans("A", 2, seed=1.5)
    with pytest.raises(ValueError, match="pred must be"):
        dice_per_class(torch.zeros(2, 3, 3), torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match="not a square grid"):
        as_map(torch.randn(1, 15, 4))
    from icml_interp_experiments.seglens.train import pretrained

    with pytest.raises(ValueError, match="arch must be one of"):
        pretrained("resnet")


@pytest.mark.heavy  # trains two segmenters and their SAEs on a fresh cache
def test_repro_quick_follows_protocol():
    result = run_reproduction("seglens-repair", "quick", 0)
    assert result["system"] == "seglens-repair"
    summary = result["summary"]
    assert result["passed"] == all(summary["checks"].values())
    for arch in ("unet", "segformer"):
        assert summary["per_arch"][arch]["n_fail"] > 0


# ------------------------------------------------------------------------------ issue 24: AuxK revival testbed
def test_misaligned_dictionary_is_far_from_the_misaligned_latents():
    from icml_interp.sae import SAE
    from icml_interp_experiments.seglens import auxk_revival as ar

    initial = SAE(ar.sae_config(3, 10, aux=True)).W_dec.detach()
    assert torch.equal(initial, SAE(ar.sae_config(3, 10, aux=False)).W_dec.detach())  # both arms start alike
    features = ar.misaligned_dictionary(initial, 3)
    assert features.shape == (ar.N_FEATURES, ar.D_IN) and ar.N_FEATURES > ar.D_SAE
    torch.testing.assert_close(features.norm(dim=1), torch.ones(ar.N_FEATURES))
    cos = features.double() @ (initial / initial.norm(dim=1, keepdim=True)).double().T  # (features, latents)
    bound = ar.LEAK / (1 + ar.LEAK**2) ** 0.5
    assert float(cos[:, : ar.N_MISALIGNED].abs().max()) <= bound + 1e-6
    assert float(cos[:, ar.N_MISALIGNED :].abs().max(0).values.mean()) > 2 * bound  # the others are not far
    # the part of each feature in the misaligned latents' span is exactly the leak
    q, _ = torch.linalg.qr(initial[: ar.N_MISALIGNED].T.double())
    leak = (features.double() @ q).norm(dim=1)
    torch.testing.assert_close(leak, torch.full_like(leak, bound), atol=1e-6, rtol=0)


def test_planted_tokens_are_sparse_sums_of_features():
    from icml_interp_experiments.seglens import auxk_revival as ar

    features = torch.eye(ar.D_IN).repeat(ar.N_FEATURES // ar.D_IN, 1)[: ar.N_FEATURES]
    x = ar.planted_tokens(features, 1000, seed=5, chunk=300)
    assert x.shape == (1000, ar.D_IN) and torch.equal(x, ar.planted_tokens(features, 1000, seed=5, chunk=300))
    # one-hot features: a token's coordinates sum to its ACTIVE magnitudes (mean 2 each) plus noise (mean 0)
    assert abs(float(x.sum(1).mean()) - ar.ACTIVE * 2.0) < 0.15  # sd of this mean: about 0.04


def test_auxk_summary_counts_paired_seeds_and_gates_on_headroom():
    from icml_interp_experiments.seglens.auxk_revival import summarize

    def row(seed, revived, fvu, died_without=0.3):
        return {
            "seed": seed,
            "auxk_revived": revived[0],
            "no_auxk_revived": revived[1],
            "auxk_fvu": fvu[0],
            "no_auxk_fvu": fvu[1],
            "auxk_died": 0.3,
            "no_auxk_died": died_without,
            "auxk_dead_end": 0.0,
            "no_auxk_dead_end": 0.25,
            "init_max_cos_misaligned": 0.1,
            "init_mean_max_cos_others": 0.4,
        }

    good = [row(s, (0.2, 0.0), (0.3, 0.4)) for s in range(10)]
    s = summarize(good)
    assert s["passed"] and s["seeds_needed"] == 8 and s["revived_wins"] == 10 and s["fvu_wins"] == 10
    # 7 of 10 is not enough; a tie does not count as a win
    seven = good[:7] + [row(s, (0.0, 0.0), (0.4, 0.4)) for s in range(7, 10)]
    s = summarize(seven)
    assert not s["revival_holds"] and not s["fvu_holds"] and s["revived_wins"] == 7
    # no headroom: nothing died without AuxK -> not decidable, not passed
    s = summarize([row(s, (0.2, 0.0), (0.3, 0.4), died_without=0.05) for s in range(2)])
    assert not s["decidable"] and not s["passed"] and s["seeds_needed"] == 2


def test_repro_summary_gates_on_headroom_and_requires_every_seed():
    from icml_interp_experiments.seglens.repro import ARCHS, CONCEPTS, summarize

    def arch_row(arch, seed, n_fail=50, oracle=40, gt=40):
        return {
            "arch": arch,
            "seed": seed,
            "n_fail": n_fail,
            "n_test_B": 64,
            "sae_x_fvu": 0.05,
            **{f"recovered_{a}": v for a, v in (("gt_free", gt), ("oracle", oracle), ("random_region", 0))},
            "recovered_random_latents": 0,
            "recovered_detect_region": 0,
            **{f"dice_after_{a}": 0.5 for a in ("gt_free", "oracle", "random_region", "random_latents")},
            "dice_after_detect_region": 0.2,
            "dice_before": 0.0,
        }

    def concept_row(c, seed, above=True, headroom=True):
        return {
            "concept": c,
            "seed": seed,
            "best_partner_corr": 0.6,
            "best_partner_null_q": 0.2,
            "best_partner_above_null": above,
            "unet_concept_corr": 0.7,
            "unet_concept_null_q": 0.1,
            "unet_concept_above_null": headroom,
            "matched": True,
            "pair_corr": 0.5,
            "null_corr": 0.1,
        }

    rows = [arch_row(a, s) for a in ARCHS for s in (0, 1)]
    concepts = [concept_row(c, s) for c in CONCEPTS for s in (0, 1)]
    s = summarize(rows, concepts)
    assert s["decidable"] and s["passed"]
    # one seed's skull below its null fails the concept (every seed must hold)
    s = summarize(
        rows, [concept_row(c, sd, above=(c, sd) != ("skull", 1)) for c in CONCEPTS for sd in (0, 1)]
    )
    assert not s["checks"]["concept_skull"] and s["checks"]["concept_core"] and not s["passed"]
    # the oracle cannot close the gap: not decidable
    weak = [arch_row(a, s, oracle=10) for a in ARCHS for s in (0, 1)]
    s = summarize(weak, concepts)
    assert not s["decidable"] and not s["headroom"]["unet_repair"] and not s["passed"]
    # a concept latent that does not track its concept: not decidable
    s = summarize(rows, [concept_row(c, sd, headroom=c != "edema") for c in CONCEPTS for sd in (0, 1)])
    assert not s["headroom"]["concept_edema"] and not s["decidable"]
