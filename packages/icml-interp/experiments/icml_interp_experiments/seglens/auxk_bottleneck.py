"""AuxK against no AuxK on the testbed models' bottlenecks, the layer the issue names for the SAEs.

    uv run python -m icml_interp_experiments.seglens.auxk_bottleneck [--out FILE]

Retired (issue 24), kept for the history in ``docs/seglens.md``: its never-fire comparison counted the latents
of surplus dictionaries (7-17 % of the 512 latents fire on more than 1 % of tokens), so it could not test
AuxK. The test of AuxK where it should matter is :mod:`icml_interp_experiments.seglens.auxk_revival`.

Why: on the reproduction's repair layers (16–32 channels, k = 4) AuxK lowered the dead-latent fraction in
3 of 10 comparisons (``docs/seglens.md``), while on SmolLM2 (576-d) it halved the dead fraction during
training. This script measures the same comparison on the 64-channel bottlenecks of both segmentation
models: U-Net ``bottleneck`` and SegFormer ``net.segformer.stages.1`` (both 64 × 12 × 12).

Protocol and criterion, fixed before the first run (2026-11-30): the full budget's models (seeds 0, 1, 2),
data (fit scans of cohorts A and B, data seeds 1000 + seed; probe scans A and B, 3000 + seed; 128 / 64 each)
and SAE recipe (``repair.fit_layer_sae``: TopK, k = 4, expansion 8 → 512 latents, 800k tokens, dead after
30 steps), one SAE seed per model (= the model seed), trained with and without AuxK (``aux_coefficient``
1/32 vs 0; same initialization and data order). Metric: the fraction of latents that never fire on the
probe scans. AuxK "lowers the dead fraction" when it is lower with AuxK in at least 4 of the 6
(model, seed) pairs and lower on average over them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch

from icml_interp_experiments.seglens import repair
from icml_interp_experiments.seglens.data import make_scans
from icml_interp_experiments.seglens.repro import BUDGETS, K
from icml_interp_experiments.seglens.train import pretrained

LAYERS = {"unet": "bottleneck", "segformer": "net.segformer.stages.1"}
EXPANSION = 8


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    cfg = BUDGETS["full"]
    rows = []
    for seed in range(cfg["seeds"]):
        fit = [make_scans(c, cfg["n_fit"], 1000 + seed) for c in "AB"]
        probe = [make_scans(c, cfg["n_probe"], 3000 + seed) for c in "AB"]
        for arch, name in LAYERS.items():
            model = pretrained(arch, seed)
            layer = model.get_submodule(name)
            acts = torch.cat([repair.layer_maps(model, layer, s.images) for s in fit])
            probe_acts = torch.cat([repair.layer_maps(model, layer, s.images) for s in probe])
            row: dict[str, Any] = {"arch": arch, "layer": name, "seed": seed, "d_in": acts.shape[1], "k": K}
            for label, aux in (("auxk", True), ("no_auxk", False)):
                start = time.perf_counter()
                sae = repair.fit_layer_sae(
                    acts, expansion=EXPANSION, k=K, total_tokens=cfg["sae_tokens"], seed=seed, aux=aux
                )
                q = repair.sae_quality(sae, probe_acts)
                row.update({f"{label}_{k}": v for k, v in q.items()})
                row[f"{label}_seconds"] = time.perf_counter() - start
            rows.append(row)
            print(
                f"{arch:9s} seed {seed}: dead AuxK {row['auxk_dead_fraction']:.3f} vs "
                f"{row['no_auxk_dead_fraction']:.3f} without; FVU {row['auxk_fvu']:.3f} / {row['no_auxk_fvu']:.3f}",
                flush=True,
            )
    lower = sum(r["auxk_dead_fraction"] < r["no_auxk_dead_fraction"] for r in rows)
    mean_aux = sum(r["auxk_dead_fraction"] for r in rows) / len(rows)
    mean_no = sum(r["no_auxk_dead_fraction"] for r in rows) / len(rows)
    passed = lower >= 4 and mean_aux < mean_no
    print(
        f"AuxK lower in {lower} of {len(rows)} pairs; mean dead {mean_aux:.3f} vs {mean_no:.3f}: "
        f"{'PASS' if passed else 'FAIL'}"
    )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                {
                    "rows": rows,
                    "lower": lower,
                    "mean_auxk": mean_aux,
                    "mean_no_auxk": mean_no,
                    "passed": passed,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
