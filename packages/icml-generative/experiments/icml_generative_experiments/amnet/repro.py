"""Reproduction ``amnet-any-modality``: AMNet enhances low-light clips from RGB alone as well as an RGB-only
model of equal capacity, far better than a multimodal model fed zeros for its missing inputs, and better
with each auxiliary modality added.

Testbed (:mod:`.testbed`): 48 × 48 clips of 8 frames cut from scikit-image's photographs with a moving
camera and moving sprites; low-light RGB (exposure 0.02–0.08, 2000 photons at full scale, read noise
0.002, 8 bits), events (voxel grids, 5 bins per frame interval) and an infrared proxy (sprites hot) made
from the clean clip. Training clips and held-out clips come from different photographs.

Models, per seed, trained on the same windows with the same steps, batch, optimizer and seed:

* ``amnet``: :class:`~icml_generative.amnet.AMNet` (width 32, events and infrared, S2DG translators),
  modality dropout 0.5, alignment weight 0.1;
* ``rgb_only``: an RGB-only AMNet whose width is chosen so its parameter count is the nearest to AMNet's;
* ``zero_filled``: the multimodal model without translators trained with every modality (no dropout), fed
  zero inputs for missing modalities at test time;
* ``no_translator``: AMNet without translators (zero features for missing modalities), modality dropout
  0.5 (reported, not in the verdict).

Measured on held-out clips: PSNR and SSIM per clip (all frames), for each model and each input combination
it accepts; the translator alignment cosine (translated against real features) on held-out windows.

Criterion (the issue's; fixed in docs/amnet.md before the first full run): headroom, seed means:
PSNR(zero_filled, RGB+E+IR) − PSNR(rgb_only) ≥ 0.5 dB. Then, pooled over the seeds' held-out clips, the
95 % paired-bootstrap interval of (i) PSNR(amnet, RGB) − PSNR(rgb_only) lies above −0.2 dB
(non-inferiority) and (ii) PSNR(amnet, RGB) − PSNR(zero_filled, RGB + zeros) above 0; (iii) AMNet's PSNR
rises as modalities are added (seed means): RGB < RGB+E < RGB+E+IR and RGB < RGB+IR < RGB+E+IR.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from icml_generative.amnet import AMNet, enhance, frame_windows
from icml_generative.cache.metrics import psnr, ssim
from icml_generative_experiments.amnet import testbed as tb
from icml_tools.claims import paired_bootstrap_interval

SYSTEM = "amnet-any-modality"
CLAIM = (
    "AMNet's S2DG translators let one low-light video enhancer take any subset of its auxiliary modalities "
    "(events, infrared): with RGB alone it matches an RGB-only model and beats a multimodal model fed zeros, "
    "and it improves as modalities are added."
)
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"seeds": 1, "train_clips": 48, "heldout_clips": 12, "steps": 150},
    "full": {"seeds": 3, "train_clips": 96, "heldout_clips": 24, "steps": 800},
}
WIDTH = 32
DROPOUT = 0.5
HEADROOM_DB, MARGIN_DB = 0.5, -0.2
COMBOS: dict[str, tuple[str, ...]] = {
    "RGB": (),
    "RGB+E": ("events",),
    "RGB+IR": ("infrared",),
    "RGB+E+IR": ("events", "infrared"),
}
CRITERION = (
    f"headroom (seed means): PSNR(multimodal, RGB+E+IR) - PSNR(RGB-only model) >= {HEADROOM_DB} dB. Then, "
    f"paired over held-out clips pooled over seeds (95% bootstrap interval): (i) PSNR(AMNet, RGB) - "
    f"PSNR(RGB-only) above {MARGIN_DB} dB; (ii) PSNR(AMNet, RGB) - PSNR(multimodal fed zeros, RGB) above 0; "
    f"(iii) AMNet PSNR rises as modalities are added (seed means): RGB < RGB+E < RGB+E+IR and "
    f"RGB < RGB+IR < RGB+E+IR; SSIM reported"
)


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def rgb_only_width(reference: int) -> int:
    """The even width of an RGB-only AMNet whose parameter count is the nearest to ``reference``."""
    return min(range(8, 129, 2), key=lambda w: abs(parameters(AMNet(modalities=(), width=w)) - reference))


def evaluate(model: AMNet, heldout: dict[str, torch.Tensor], combo: tuple[str, ...], zeros: bool) -> dict:
    """Per-clip PSNR and SSIM of ``model`` given the modalities in ``combo``; the model's other modalities
    are fed zeros when ``zeros`` and left out otherwise."""
    scores: dict[str, list[float]] = {"psnr": [], "ssim": []}
    for i in range(heldout["low"].shape[0]):
        aux: dict[str, Any] = {}
        for m in model.modalities:
            if m in combo:
                aux[m] = heldout[m][i]
            elif zeros:
                aux[m] = torch.zeros_like(heldout[m][i])
        out = enhance(model, heldout["low"][i], **aux, progress=False)
        scores["psnr"].append(psnr(out, heldout["clean"][i], 1.0))
        scores["ssim"].append(ssim(out, heldout["clean"][i], 1.0))
    return scores


@torch.no_grad()
def alignment_cosine(model: AMNet, heldout: dict[str, torch.Tensor]) -> dict[str, float]:
    """Mean cosine (over channels, per position) between translated and real features on held-out windows."""
    win = {
        k: torch.cat([frame_windows(c, model.window) for c in heldout[k]]) for k in ("low", *model.modalities)
    }
    out = model(win["low"], **{m: win[m] for m in model.modalities}, return_features=True)
    return {
        m: float(
            torch.nn.functional.cosine_similarity(
                out.translated_features[m], out.real_features[m], dim=1
            ).mean()
        )
        for m in model.modalities
    }


def run_seed(seed: int, cfg: dict) -> dict[str, Any]:
    train = tb.windows(tb.clips("train", seed, cfg["train_clips"]))
    heldout = tb.clips("heldout", seed, cfg["heldout_clips"])
    width = rgb_only_width(parameters(AMNet(width=WIDTH)))
    specs: dict[str, tuple[dict[str, Any], float]] = {  # name: (config, modality dropout)
        "amnet": ({"width": WIDTH}, DROPOUT),
        "rgb_only": ({"modalities": (), "width": width}, 0.0),
        "zero_filled": ({"width": WIDTH, "translators": False}, 0.0),
        "no_translator": ({"width": WIDTH, "translators": False}, DROPOUT),
    }
    out: dict[str, Any] = {"seed": seed, "rgb_only_width": width, "models": {}, "scores": {}}
    trained = {}
    for name, (config, dropout) in specs.items():
        torch.manual_seed(seed)  # the same initialization stream for every model
        model = trained[name] = AMNet(**config)
        log = tb.train(model, train, cfg["steps"], seed, dropout=dropout)
        out["models"][name] = {"parameters": parameters(model), **log}
        combos = {"RGB": ()} if not model.modalities else COMBOS
        for label, combo in combos.items():
            out["scores"][f"{name} | {label}"] = evaluate(model, heldout, combo, zeros=name == "zero_filled")
    out["alignment_cosine"] = alignment_cosine(trained["amnet"], heldout)
    return out


def run(budget: str = "quick", seed: int = 0) -> dict[str, Any]:
    cfg = BUDGETS[budget]
    start = time.perf_counter()
    per_seed = [run_seed(seed + i, cfg) for i in range(cfg["seeds"])]
    keys = list(per_seed[0]["scores"])

    def seed_mean(key: str, metric: str = "psnr") -> float:
        return float(np.mean([np.mean(r["scores"][key][metric]) for r in per_seed]))

    def pooled(key: str) -> np.ndarray:
        return np.concatenate([r["scores"][key]["psnr"] for r in per_seed])

    psnr_mean = {k: seed_mean(k) for k in keys}
    ssim_mean = {k: seed_mean(k, "ssim") for k in keys}
    a = {label: psnr_mean[f"amnet | {label}"] for label in COMBOS}
    headroom_gap = psnr_mean["zero_filled | RGB+E+IR"] - psnr_mean["rgb_only | RGB"]
    headroom = {"multimodal_beats_rgb_only_by_0.5dB": headroom_gap >= HEADROOM_DB}
    intervals: dict[str, dict[str, Any]] = {}
    for name, other in (("vs_rgb_only", "rgb_only | RGB"), ("vs_zero_filled", "zero_filled | RGB")):
        diff = pooled("amnet | RGB") - pooled(other)
        intervals[name] = {"mean": float(diff.mean()), "ci95": paired_bootstrap_interval(diff, seed=seed)}
    checks = {
        "non_inferior_to_rgb_only": intervals["vs_rgb_only"]["ci95"][0] > MARGIN_DB,
        "above_zero_filled": intervals["vs_zero_filled"]["ci95"][0] > 0,
        "rises_with_modalities": a["RGB"] < a["RGB+E"] < a["RGB+E+IR"]
        and a["RGB"] < a["RGB+IR"] < a["RGB+E+IR"],
    }
    passed = all(headroom.values()) and all(checks.values())
    cosine = {
        m: float(np.mean([r["alignment_cosine"][m] for r in per_seed]))
        for m in per_seed[0]["alignment_cosine"]
    }
    rows = [
        {"model | inputs": k, "seeds": len(per_seed), "psnr_db": psnr_mean[k], "ssim": ssim_mean[k]}
        for k in keys
    ]
    rows += [
        {
            "model | inputs": k,
            "seed": r["seed"],
            "psnr_db": float(np.mean(r["scores"][k]["psnr"])),
            "ssim": float(np.mean(r["scores"][k]["ssim"])),
        }
        for r in per_seed
        for k in keys
    ]
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "held-out PSNR (dB) with RGB input only; baseline: RGB-only model of equal parameter count",
        "ours": a["RGB"],
        "baseline": psnr_mean["rgb_only | RGB"],
        "criterion": CRITERION,
        "passed": bool(passed),
        "headroom": {
            "holds": bool(all(headroom.values())),
            "gap_db": headroom_gap,
            **{k: bool(v) for k, v in headroom.items()},
        },
        "checks": {k: bool(v) for k, v in checks.items()},
        "paired_psnr_amnet_rgb_minus": intervals,
        "alignment_cosine": cosine,
        "training": {f"seed {r['seed']}": r["models"] for r in per_seed},
        "rgb_only_width": [r["rgb_only_width"] for r in per_seed],
        "rows": rows,
        "figures": [
            {
                "name": "amnet_psnr_by_inputs",
                "title": "Held-out PSNR (dB) by input combination, seed means",
                "xlabel": "inputs",
                "ylabel": "PSNR (dB)",
                "x": list(COMBOS),
                "series": {
                    name: [psnr_mean.get(f"{name} | {label}", float("nan")) for label in COMBOS]
                    for name in ("amnet", "zero_filled", "no_translator")
                }
                | {"rgb_only": [psnr_mean["rgb_only | RGB"]] * len(COMBOS)},
                "kind": "line",
            }
        ],
        "notes": (
            f"seeds {[r['seed'] for r in per_seed]}, {cfg['train_clips']} training clips, {cfg['heldout_clips']} "
            f"held-out clips, {cfg['steps']} steps. PSNR (dB): "
            + "; ".join(f"{k} {psnr_mean[k]:.2f}" for k in keys)
            + f". Headroom gap {headroom_gap:+.2f} dB. AMNet RGB - RGB-only {intervals['vs_rgb_only']['mean']:+.2f} "
            f"{intervals['vs_rgb_only']['ci95']}; - zero-filled {intervals['vs_zero_filled']['mean']:+.2f} "
            f"{intervals['vs_zero_filled']['ci95']}. Alignment cosine {cosine}. {time.perf_counter() - start:.0f} s."
            + ("" if all(headroom.values()) else " NO HEADROOM: the comparison does not decide")
        ),
    }
