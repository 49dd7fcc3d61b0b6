"""Reproduction ``seglens-repair``: SAE model diffing finds the latents behind a planted cohort shift, and
clamping them to cohort-A statistics repairs cohort-B segmentation failures without retraining.

Per seed (models: :func:`~icml_interp_experiments.seglens.train.pretrained`, a tiny U-Net and a tiny SegFormer trained on
cohort A; data: :mod:`icml_interp_experiments.seglens.data`; the evaluation scans come from seeds ``1000/2000/3000 + seed``,
the design was explored on other seeds):

1. TopK SAEs (``icml_interp.sae``, k = ``K``, expansion ``EXPANSION``) on the activations of each layer in
   ``LAYERS[arch]`` over cohort A ∪ B scans: a *detect* layer (where cohort-specific latents locate the
   shift), a *steer* layer (where latents are clamped) and an *align* layer (the feature map the
   segmentation head reads); FVU, L0 and dead fraction on held-out probe scans;
2. concept alignment across the architectures on the same probe scans (A ∪ B, common 24 × 24 grid): for each
   planted concept the U-Net align-SAE latent most correlated with the concept's ground-truth map, and its
   **best partner** among the SegFormer align-SAE latents with a permutation null
   (:func:`~icml_interp.diffing.best_partner`: the same statistic with the SegFormer maps from a deranged scan
   order, ``BP_DRAWS`` derangements, so every latent map stays whole and only the pairing of scans between
   the models is broken); the earlier Hungarian matching and its shuffled-input null
   (:func:`~icml_interp.diffing.activation_alignment`) are reported as a diagnostic;
3. repair (:mod:`icml_interp_experiments.seglens.repair`): on cohort-B test scans whose edema Dice is below
   ``FAIL_DICE`` (the failure cases), four arms clamp ``N_LATENTS`` steer-layer latents to cohort-A
   reference values inside a region: ground-truth-free (the band of width = the ``BAND_QUANTILE`` quantile
   of the model's own edema-to-core distance on A around the model's own core on the B scan), oracle, random
   region, random latents. A case is recovered when its edema Dice reaches ``FAIL_DICE``. The earlier
   label-free region (detect latents) is reported beside them as a diagnostic, not an arm of the verdict;
4. AuxK where it should matter (:mod:`icml_interp_experiments.seglens.auxk_revival`): a planted dictionary
   with more true features than latents and latents misaligned at initialization, dead-latent revival and
   final FVU with and without AuxK, paired over seeds; its own criterion, reported, not in the verdict.

Revision for issue 24, fixed before the full run (2026-12-06; ``docs/seglens.md``). Headroom, measured and
reported; without it the verdict is "not decidable" (a fail with that reason): for both models (pooled over
the seeds) failures on >= ``HEADROOM_FAIL_MIN`` = 25 % of the cohort-B test scans and the oracle arm recovers
>= ``HEADROOM_ORACLE_MIN`` = 50 % of them; for each concept in every seed, the concept's U-Net latent
correlates with the concept's map above the 99th percentile of the same statistic with the concept maps from
a deranged scan order (``BP_DRAWS`` = 1000 draws).

Criterion: for both models FVU < 0.15 (unchanged); for both models the ground-truth-free arm recovers
>= 50 % of the pooled failure cases and more than the random-region and the random-latent controls
(unchanged); for each planted concept (core, edema, skull), in every seed, the best-partner correlation of
the concept's U-Net latent exceeds the ``BP_QUANTILE`` = 0.99 quantile of its derangement null (1000 draws,
generator seeded with the seed). This replaces "matched-pair r > 0.5 and shuffled-input null < 0.1 (seed
means)". The AuxK revival component (``auxk_revival.CRITERION``) is reported as ``auxk`` beside the verdict,
not part of it; the never-fire comparison of the steer SAE retrained without AuxK (a surplus dictionary) is
dropped.

Criterion before the revision (2026-11-30, kept for the history): for both models FVU < 0.15; for each planted
concept (core, edema, skull) the matched pair's correlation > 0.5 and its shuffled-input null < 0.1 (seed
means; the concept's latent must have a live partner in every seed); for both models the ground-truth-free
arm recovers >= 50 % of the pooled failure cases and more than the random-region and the random-latent
controls.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from icml_interp.diffing import activation_alignment, best_partner, latent_maps
from icml_interp.diffing.maps import layer_activations
from icml_interp_experiments.seglens import auxk_revival, repair
from icml_interp_experiments.seglens.data import make_scans
from icml_interp_experiments.seglens.train import cached_path, dice_per_class, predict, pretrained
from icml_tools.progress import status

SYSTEM = "seglens-repair"
CLAIM = (
    "SAE model diffing of a U-Net and a SegFormer finds population-specific latents behind a cohort shift; "
    "clamping them toward the reference cohort recovers failure cases without retraining (Med-SegLens: 70 % "
    "of failures recovered, edema Dice 39.4 -> 74.2 %); here with a ground-truth-free selection, on a planted toy."
)
BUDGETS = {
    "quick": {"seeds": 1, "n_fit": 64, "n_test": 64, "n_probe": 32, "sae_tokens": 300_000},
    "full": {"seeds": 3, "n_fit": 128, "n_test": 128, "n_probe": 64, "sae_tokens": 800_000},
}
ARCHS = ("unet", "segformer")
# per model: where cohort-specific latents locate the shift (detect), where latents are clamped (steer), and
# whose SAE is aligned across architectures (align: the feature map the segmentation head reads)
LAYERS = {
    "unet": {"detect": "enc1", "steer": "dec1", "align": "dec1"},
    "segformer": {
        "detect": "net.segformer.stages.0",
        "steer": "net.decode_head.activation",
        "align": "net.decode_head.activation",
    },
}
EXPANSION = {"enc1": 32, "dec1": 8, "net.segformer.stages.0": 8, "net.decode_head.activation": 4}
ROLE_TAG = {
    "enc1": "sae_enc1",
    "dec1": "sae_dec1",
    "net.segformer.stages.0": "sae_stage1",
    "net.decode_head.activation": "sae_head",
}
K, N_LATENTS, N_DETECT = 4, 4, 2
# the Hungarian diagnostic's null, averaged over 10 derangements (one draw is one random sample)
NULL_DRAWS = 10
BP_DRAWS, BP_QUANTILE = 1000, 0.99  # the best-partner null: derangements drawn, the quantile to exceed
HEADROOM_FAIL_MIN, HEADROOM_ORACLE_MIN = 0.25, 0.5
# the band's width quantile, chosen on development scans (data seeds 1100/2100 and 1200/2200 + seed, models 0
# and 1) among 0.75 / 0.9 / 0.95 before the evaluation runs; the evaluation never uses those scans
BAND_QUANTILE = 0.9
FAIL_DICE = 0.5
CONCEPTS = ("core", "edema", "skull")
FVU_MAX, RECOVER_MIN = 0.15, 0.5
ARMS = ("gt_free", "oracle", "random_region", "random_latents")
CRITERION = (
    f"headroom: for both models cohort-B failures (edema Dice < {FAIL_DICE}) on >= {HEADROOM_FAIL_MIN:.0%} of "
    f"the test scans and the oracle recovers >= {HEADROOM_ORACLE_MIN:.0%} of them; each concept's U-Net latent "
    f"correlates with the concept map above the {BP_QUANTILE} quantile of its derangement null (every seed); "
    f"else not decidable. Verdict: both models: SAE FVU < {FVU_MAX}; both models: the ground-truth-free arm "
    f"recovers >= {RECOVER_MIN:.0%} of cohort-B failures (recovered = edema Dice back >= {FAIL_DICE}) and more "
    f"than the random-region and random-latent controls; each planted concept {CONCEPTS}, in every seed: the "
    "best-partner correlation of its U-Net latent with the SegFormer latents > the "
    f"{BP_QUANTILE} quantile of its null ({BP_DRAWS} derangements of the SegFormer maps' scan order). "
    f"Reported beside the verdict, not in it: AuxK revival ({auxk_revival.CRITERION})"
)


def _sae(acts_a, acts_b, expansion, cfg, seed):
    return repair.fit_layer_sae(
        torch.cat([acts_a, acts_b]), expansion=expansion, k=K, total_tokens=cfg["sae_tokens"], seed=seed
    )


def analyse_model(arch: str, seed: int, cfg: dict, data: dict) -> tuple[dict, dict]:
    """Train the SAEs of one model and run the four repair arms; returns (row, state for the alignment)."""
    if not cached_path(arch, seed).is_file():
        status(f"seed {seed}, {arch}: training the segmenter (cached for later runs)")
    model = pretrained(arch, seed)
    status(f"seed {seed}, {arch}: layer SAEs and the four repair arms")
    fit_a, fit_b, test_b, probe = data["fit_a"], data["fit_b"], data["test_b"], data["probe"]
    row = {"arch": arch, "seed": seed, **{f"layer_{r}": name for r, name in LAYERS[arch].items()}, "k": K}
    saes, acts = {}, {}
    start = time.perf_counter()
    for name in dict.fromkeys(LAYERS[arch].values()):  # each distinct layer once
        layer = model.get_submodule(name)
        a, b = repair.layer_maps(model, layer, fit_a.images), repair.layer_maps(model, layer, fit_b.images)
        p = repair.layer_maps(model, layer, probe.images)
        saes[name] = _sae(a, b, EXPANSION[name], cfg, seed)
        acts[name] = (a, b, p)
        tag = ROLE_TAG[name]
        row.update({f"{tag}_{k}": v for k, v in repair.sae_quality(saes[name], p).items()})
        row[f"{tag}_d_in"], row[f"{tag}_d_sae"] = saes[name].d_in, saes[name].d_sae
    row["sae_seconds"] = time.perf_counter() - start
    steer_name, detect_name = LAYERS[arch]["steer"], LAYERS[arch]["detect"]

    dice_a = dice_per_class(predict(model, fit_a.images), fit_a.labels)
    dice_b = dice_per_class(predict(model, test_b.images), test_b.labels)
    row["dice_edema_A"], row["dice_edema_B"] = float(dice_a[:, 1].mean()), float(dice_b[:, 1].mean())
    fail = dice_b[:, 1] < FAIL_DICE
    row["n_test_B"], row["n_fail"] = int(dice_b.shape[0]), int(fail.sum())

    # where, without labels: the band around the model's own predicted core, its width = how far the model's
    # own edema reaches around its own core on cohort A; what: the steer latents with the largest gap between
    # A's predicted-edema mean code and B's mean code inside the band (fit scans, no labels)
    steer_sae, (sa, sb, _) = saes[steer_name], acts[steer_name]
    grid = (sa.shape[-2], sa.shape[-1])
    width = repair.band_width(predict(model, fit_a.images).argmax(1), BAND_QUANTILE)
    band_fit_b = repair.to_grid(repair.core_band_region(predict(model, fit_b.images).argmax(1), width), grid)
    latents, ref, _, _ = repair.select_gt_free(
        steer_sae, model, fit_a, sa, sb, N_LATENTS, region_b=band_fit_b
    )
    da, db, _ = acts[detect_name]
    b_up = repair.detect_latents(saes[detect_name], da, db, N_DETECT)
    o_latents, o_ref = repair.select_oracle(steer_sae, fit_a, fit_b, sa, sb, N_LATENTS)
    alive = (repair.codes_of(steer_sae, torch.cat([sa, sb])) > 0).any(0)
    pool = [j for j in range(steer_sae.d_sae) if alive[j] and j not in latents]
    g = torch.Generator().manual_seed(seed)
    r_latents = [pool[i] for i in torch.randperm(len(pool), generator=g)[:N_LATENTS].tolist()]
    row.update(
        {
            "band_width_px": width,
            "latents_gt_free": latents,
            "detect_b_specific": b_up,
            "latents_oracle": o_latents,
            "latents_random": r_latents,
        }
    )
    if row["n_fail"]:
        images, labels = test_b.images[fail], test_b.labels[fail]
        steer_layer = model.get_submodule(steer_name)
        region = repair.to_grid(repair.core_band_region(predict(model, images).argmax(1), width), grid)
        truth = repair.to_grid(labels == 1, grid)
        # the earlier label-free region (kept as a diagnostic, not an arm): where a B-specific detect latent fires
        detect_region = repair.to_grid(
            repair.gt_free_region(
                saes[detect_name], repair.layer_maps(model, model.get_submodule(detect_name), images), b_up
            ),
            grid,
        )
        row["region_tokens"] = float(region.float().sum((1, 2)).mean())
        row["truth_tokens"] = float(truth.float().sum((1, 2)).mean())
        for tag, reg in (("region", region), ("detect_region", detect_region)):
            row[f"{tag}_precision"] = float((reg & truth).sum() / reg.sum().clamp_min(1))
            row[f"{tag}_recall"] = float((reg & truth).sum() / truth.sum().clamp_min(1))
        arms = {
            "gt_free": (latents, ref, region),
            "oracle": (o_latents, o_ref, truth),
            "random_region": (latents, ref, repair.random_region(region, seed)),
            "random_latents": (r_latents, ref, region),
            "detect_region": (latents, ref, detect_region),  # diagnostic only
        }
        tokens_layout = layer_activations(model, steer_layer, images[:1]).dim() == 3
        row["dice_before"] = float(dice_b[fail, 1].mean())
        for name, (lat, values, reg) in arms.items():
            after = repair.steer_dice(
                model, steer_layer, steer_sae, images, labels, lat, values, reg, tokens_layout=tokens_layout
            )
            row[f"recovered_{name}"] = int((after >= FAIL_DICE).sum())
            row[f"dice_after_{name}"] = float(after.mean())
    align_name = LAYERS[arch]["align"]
    return row, {"sae": saes[align_name], "probe_acts": acts[align_name][2]}


def align_concepts(states: dict, probe, seed: int) -> list[dict]:
    """Per planted concept: the concept's U-Net latent (best partner of the concept map among the U-Net
    latents, with its null: the headroom check), its best SegFormer partner with the derangement null (the
    criterion), and the earlier Hungarian matched pair with its shuffled-input null (a diagnostic)."""
    maps_u = latent_maps(states["unet"]["sae"], states["unet"]["probe_acts"])
    maps_s = latent_maps(states["segformer"]["sae"], states["segformer"]["probe_acts"])
    small = maps_s if maps_s.shape[-1] <= maps_u.shape[-1] else maps_u
    grid = (small.shape[-2], small.shape[-1])
    al = activation_alignment(maps_u, maps_s, grid=grid, seed=seed, null_draws=NULL_DRAWS)
    assert al.null is not None  # null=True, the default
    n_alive = [int((m.transpose(0, 1).flatten(1).std(1) > 0).sum()) for m in (maps_u, maps_s)]
    rows = []
    for concept in CONCEPTS:
        truth = probe.concepts[concept][:, None]  # (n, 1, H, W): the concept map as a one-latent map
        to_unet = best_partner(truth, maps_u, grid=grid, null_draws=BP_DRAWS, seed=seed)
        u = int(to_unet.partner[0])
        to_segformer = best_partner(maps_u, maps_s, [u], grid=grid, null_draws=BP_DRAWS, seed=seed)
        hit = np.nonzero(al.pairs[:, 0] == u)[0]  # none if the matching left u without a live partner
        rows.append(
            {
                "seed": seed,
                "concept": concept,
                "unet_latent": u,
                "unet_concept_corr": float(to_unet.score[0]),
                "unet_concept_null_q": float(to_unet.null_quantile(BP_QUANTILE)[0]),
                "unet_concept_above_null": bool(to_unet.above_null(BP_QUANTILE)[0]),
                "segformer_best_partner": int(to_segformer.partner[0]),
                "best_partner_corr": float(to_segformer.score[0]),
                "best_partner_null_mean": float(to_segformer.null[0].mean()),
                "best_partner_null_q": float(to_segformer.null_quantile(BP_QUANTILE)[0]),
                "best_partner_p": float(to_segformer.p_values()[0]),
                "best_partner_above_null": bool(to_segformer.above_null(BP_QUANTILE)[0]),
                # the earlier rule (diagnostic): the Hungarian partner; unmatched: correlation 0, no null
                "segformer_latent": int(al.pairs[hit[0], 1]) if hit.size else -1,
                "matched": bool(hit.size),
                "pair_corr": float(al.score[hit[0]]) if hit.size else 0.0,
                "null_corr": float(al.null[hit[0]]) if hit.size else float("nan"),
                "n_shared_pairs": int(al.shared.sum()),
                "n_alive_unet": n_alive[0],
                "n_alive_segformer": n_alive[1],
            }
        )
    return rows


def one_seed(seed: int, budget: str = "quick", data_offset: int = 0) -> tuple[list[dict], list[dict]]:
    """Models of ``seed``; scans from seeds ``1000/2000/3000 + seed + data_offset`` (fit / test / probe)."""
    cfg = BUDGETS[budget]
    d = seed + data_offset
    data = {
        "fit_a": make_scans("A", cfg["n_fit"], 1000 + d),
        "fit_b": make_scans("B", cfg["n_fit"], 1000 + d),
        "test_b": make_scans("B", cfg["n_test"], 2000 + d),
    }
    pa, pb = make_scans("A", cfg["n_probe"], 3000 + d), make_scans("B", cfg["n_probe"], 3000 + d)
    data["probe"] = type(pa)(
        torch.cat([pa.images, pb.images]),
        torch.cat([pa.labels, pb.labels]),
        {k: torch.cat([pa.concepts[k], pb.concepts[k]]) for k in pa.concepts},
        "A+B",
    )
    rows, states = [], {}
    for arch in ARCHS:
        row, states[arch] = analyse_model(arch, seed, cfg, data)
        rows.append(row)
    return rows, align_concepts(states, data["probe"], seed)


def summarize(rows: list[dict], concept_rows: list[dict]) -> dict:
    """Pooled per-model arm results, the concepts' best partners, the headroom checks and the verdict."""
    per_arch, checks, headroom = {}, {}, {}
    for arch in ARCHS:
        rs = [r for r in rows if r["arch"] == arch]
        n_fail, n_test = sum(r["n_fail"] for r in rs), sum(r["n_test_B"] for r in rs)
        fvus = [v for r in rs for key, v in r.items() if key.startswith("sae_") and key.endswith("_fvu")]
        s = {"n_fail": n_fail, "n_test_B": n_test, "fail_fraction": n_fail / n_test, "fvu_max": max(fvus)}
        for arm in (*ARMS, "detect_region"):  # detect_region: the earlier label-free region, a diagnostic
            s[f"recovered_{arm}"] = sum(r.get(f"recovered_{arm}", 0) for r in rs) / n_fail if n_fail else 0.0
            s[f"dice_after_{arm}"] = (
                sum(r[f"dice_after_{arm}"] * r["n_fail"] for r in rs if r["n_fail"]) / n_fail
                if n_fail
                else float("nan")
            )
        s["dice_before"] = (
            sum(r["dice_before"] * r["n_fail"] for r in rs if r["n_fail"]) / n_fail
            if n_fail
            else float("nan")
        )
        per_arch[arch] = s
        headroom[f"{arch}_repair"] = bool(
            s["fail_fraction"] >= HEADROOM_FAIL_MIN and s["recovered_oracle"] >= HEADROOM_ORACLE_MIN
        )
        checks[f"{arch}_fvu"] = s["fvu_max"] < FVU_MAX
        checks[f"{arch}_repair"] = bool(
            n_fail > 0
            and s["recovered_gt_free"] >= RECOVER_MIN
            and s["recovered_gt_free"] > s["recovered_random_region"]
            and s["recovered_gt_free"] > s["recovered_random_latents"]
        )
    concepts = {}
    for c in CONCEPTS:
        cs = [r for r in concept_rows if r["concept"] == c]
        matched = [r for r in cs if r["matched"]]
        concepts[c] = {
            "best_partner_corr": [r["best_partner_corr"] for r in cs],
            "best_partner_null_q": [r["best_partner_null_q"] for r in cs],
            "unet_concept_corr": [r["unet_concept_corr"] for r in cs],
            "unet_concept_null_q": [r["unet_concept_null_q"] for r in cs],
            # the earlier rule's numbers (diagnostic)
            "pair_corr_mean": float(np.mean([r["pair_corr"] for r in cs])),  # an unmatched seed counts 0
            "null_corr_mean": float(np.mean([r["null_corr"] for r in matched])) if matched else float("nan"),
            "n_unmatched": len(cs) - len(matched),
        }
        headroom[f"concept_{c}"] = all(r["unet_concept_above_null"] for r in cs)
        checks[f"concept_{c}"] = all(r["best_partner_above_null"] for r in cs)
    decidable = all(headroom.values())
    return {
        "per_arch": per_arch,
        "concepts": concepts,
        "headroom": headroom,
        "decidable": decidable,
        "checks": checks,
        "passed": bool(decidable and all(checks.values())),
    }


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    seeds = range(seed, seed + BUDGETS[budget]["seeds"])
    to_train = [(a, s) for s in seeds for a in ARCHS if not cached_path(a, s).is_file()]
    try:
        rows, concept_rows = [], []
        for s in seeds:
            r, c = one_seed(s, budget)
            rows += r
            concept_rows += c
        status(f"AuxK revival on the planted dictionary ({auxk_revival.BUDGETS[budget]['seeds']} seeds)")
        auxk = auxk_revival.run_experiment(budget, seed)
    finally:
        torch.set_num_threads(threads)
    summary = summarize(rows, concept_rows)
    ak = auxk["summary"]
    pa = summary["per_arch"]
    ours = float(np.mean([pa[a]["recovered_gt_free"] for a in ARCHS]))
    baseline = float(
        np.mean([max(pa[a]["recovered_random_region"], pa[a]["recovered_random_latents"]) for a in ARCHS])
    )
    table = [
        {
            "arch": a,
            "arm": arm,
            "recovered": pa[a][f"recovered_{arm}"],
            "dice_before": pa[a]["dice_before"],
            "dice_after": pa[a][f"dice_after_{arm}"],
            "n_fail": pa[a]["n_fail"],
        }
        for a in ARCHS
        for arm in ARMS
    ]
    figures = [
        {
            "name": "seglens_recovered",
            "title": "Recovered cohort-B failure cases by arm",
            "xlabel": "arm",
            "ylabel": "fraction recovered",
            "x": list(ARMS),
            "kind": "bar",
            "series": {a: [pa[a][f"recovered_{arm}"] for arm in ARMS] for a in ARCHS},
        },
        {
            "name": "seglens_dice",
            "title": "Edema Dice on failure cases (before: first bar)",
            "xlabel": "arm",
            "ylabel": "mean edema Dice",
            "x": ["before", *ARMS],
            "kind": "bar",
            "series": {
                a: [pa[a]["dice_before"]] + [pa[a][f"dice_after_{arm}"] for arm in ARMS] for a in ARCHS
            },
        },
        {
            "name": "seglens_best_partner",
            "title": "Concept latents: best-partner correlation and the null's 0.99 quantile (per seed)",
            "xlabel": "concept, seed",
            "ylabel": "correlation",
            "x": [f"{r['concept']} s{r['seed']}" for r in concept_rows],
            "kind": "bar",
            "series": {
                "best partner": [r["best_partner_corr"] for r in concept_rows],
                f"null q{BP_QUANTILE}": [r["best_partner_null_q"] for r in concept_rows],
            },
        },
        {
            "name": "seglens_auxk_revival",
            "title": "Planted dictionary: latents revived (died, then fired again) per seed",
            "xlabel": "seed",
            "ylabel": "fraction of latents",
            "x": [r["seed"] for r in auxk["rows"]],
            "kind": "bar",
            "series": {
                "AuxK": [r["auxk_revived"] for r in auxk["rows"]],
                "no AuxK": [r["no_auxk_revived"] for r in auxk["rows"]],
            },
        },
    ]
    verdict = (
        "verdict: pass"
        if summary["passed"]
        else "verdict: not decidable (a headroom check failed)"
        if not summary["decidable"]
        else "verdict: fail"
    )
    auxk_line = (
        f"AuxK revival (own criterion, not in the verdict): {'pass' if ak['passed'] else 'fail'}"
        f"{'' if ak['decidable'] else ' (no headroom: not decidable)'}; revived {ak['revived_auxk']:.3f} vs "
        f"{ak['revived_no_auxk']:.3f} without (higher in {ak['revived_wins']} of {len(ak['seeds'])} seeds), "
        f"held-out FVU {ak['fvu_auxk']:.4f} vs {ak['fvu_no_auxk']:.4f} (lower in {ak['fvu_wins']}), "
        f"died without AuxK {ak['died_no_auxk']:.3f}"
    )
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "fraction of cohort-B failure cases recovered by the ground-truth-free arm (mean of the two models; higher is better)",
        "ours": ours,
        "baseline": baseline,
        "criterion": CRITERION,
        "passed": summary["passed"],
        "rows": table
        + rows_for_json(rows)
        + concept_rows
        + [{"component": "auxk", **r} for r in auxk["rows"]],
        "figures": figures,
        "cache": f"built: {len(to_train)} trained segmenters" if to_train else "hit: segmenters",
        "threads": "1: the segmenters train on one torch thread, so their weights (cached and reused) and the "
        "verdict do not depend on the machine's core count",
        "notes": (
            f"{verdict}; headroom: {summary['headroom']}; checks: {summary['checks']}; concepts (per seed): "
            f"{summary['concepts']}; {auxk_line}; baseline = the better control (random region or random "
            f"latents); {time.perf_counter() - start:.0f} s"
        ),
        "summary": summary,
        "headroom": summary["headroom"],
        "auxk": {"criterion": auxk["criterion"], "passed": ak["passed"], "summary": ak},
    }


def rows_for_json(rows: list[dict]) -> list[dict]:
    return [{k: (str(v) if isinstance(v, list) else v) for k, v in r.items()} for r in rows]
