"""Reproduction ``proteus-gaussian``: lookup-free MUL-BAL codes quantize a Gaussian source as well as a
random lookup table on the bitshift trellis, and better than QTIP's computed codes.

Every code quantizes the same i.i.d. N(0, 1) tiles (256 weights, K = 2 bits per weight, tail-biting,
MSE measured on weights decoded from the packed words) at each L: ``lut`` (random Gaussian table),
QTIP's ``1mad`` and ``3inst``, QTIP's hybrid micro-LUT ``hyb`` (V = 2) and every member of the vetted
MUL-BAL pool; ``mulbal`` is the best pool member at each L (Proteus picks a pool member per layer).
References: the distortion-rate bound 2^(-2K) = 0.0625 and the 2-bit Lloyd-Max quantizer 0.1175.

The Proteus paper reports no Gaussian-source table (only its abstract was available); the criteria are
those of our issue: at L = 10 every computed code (1mad, 3inst, mulbal) beats Lloyd-Max by 30% or more;
mulbal is within 3% of lut at L = 10 and 12 and no worse than 1mad and 3inst at every L; every code's
MSE decreases with L.

Added 2026-12-06 (issue 24), fixed here before any run of them:

- **External anchor.** QTIP (Tseng et al., NeurIPS 2024) Table 1 publishes the MSE of 2-bit trellis
  quantization of an i.i.d. Gaussian at L = 16, 256-dimensional sequences (judged at the full budget; the
  quick budget skips it since 2026-12-06, for time): 1MAD 0.069, 3INST 0.069, the
  random-Gaussian lookup code (RPTC, V = 1; our ``lut``) 0.068 (HYB, V = 2, 0.071, its table size not
  stated: reported beside, not judged). Our MSE at L = 16 on 256 tiles of seed 0 (``ANCHOR_SEED``) must
  lie within the published rounding (±0.0005) plus two standard errors of the per-tile mean of each of
  the three codes. (Our tiles are tail-biting; the table does not say whether QTIP's were. QTIP's
  Table 2, L = 12 tail-biting: 0.0733 at K = 2, the code not named; our ``lut`` at L = 12 beside it.)
- **Out-of-sample mulbal against 1mad.** At every L <= 12 the pool member is chosen on the seed-0 tiles of
  the table (as before) and judged on 1024 fresh tiles of seed 1 (``PAIRED_SEED``; of seed 0 when the
  run's own seed is 1, since the first tiles of a seed do not depend on how many are drawn): the percentile
  bootstrap 95 % interval (``icml_tools.claims.paired_bootstrap_interval``, 10,000 resamples) of the
  per-tile difference MSE(mulbal) - MSE(1mad) must lie below 0.
- The monotonicity in L of every code stays a criterion (the full budget covers L = 8 .. 16).
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from icml_compress.proteus.gaussian import LLOYD_MAX_MSE, distortion_rate_bound, gaussian_tile_mse
from icml_compress.proteus.pool import MULBAL_POOL
from icml_tools.claims import paired_bootstrap_interval
from icml_tools.progress import status

K = 2
BUDGETS: dict[str, dict[str, Any]] = {
    # quick: no QTIP anchor since 2026-12-06 (its L = 16 Viterbi took the quick run from about 15 s to 50 s,
    # and the slow tier runs the quick budget five times); the anchor does not depend on the budget
    "quick": {"Ls": (8, 10, 12), "n_tiles": 128, "anchor": False},
    "full": {"Ls": (8, 10, 12, 14, 16), "n_tiles": 256, "anchor": True},
}
BASE_CODES = ("lut", "1mad", "3inst")
LLOYD_MARGIN, LUT_MARGIN = 0.30, 0.03
# QTIP (NeurIPS 2024) Table 1: i.i.d. Gaussian, K = 2, L = 16, 256-dimensional sequences, 3 decimals
QTIP_TABLE1_L16 = {"1mad": 0.069, "3inst": 0.069, "lut": 0.068, "hyb": 0.071}
QTIP_JUDGED = ("1mad", "3inst", "lut")  # hyb: V = 2 and a table size the table does not state
QTIP_TABLE2_L12 = 0.0733  # QTIP Table 2: tail-biting, L = 12, K = 2, 4K sequences of 256, code not named
ANCHOR_L, ANCHOR_TILES, ANCHOR_SEED, ROUNDING = 16, 256, 0, 0.0005
PAIRED_TILES, PAIRED_SEED, PAIRED_MAX_L = 1024, 1, 12


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Measure the MSE table codes x L and compute the verdict."""
    cfg = BUDGETS[budget]
    Ls, n_tiles = cfg["Ls"], cfg["n_tiles"]
    lloyd, bound = LLOYD_MAX_MSE[K], distortion_rate_bound(K)
    table: dict[str, dict[int, float]] = {}
    tiles: dict[tuple[str, int], Any] = {}  # (code, L) -> per-tile MSE of the table's tiles
    pool_names = [f"mulbal-{i}" for i in range(len(MULBAL_POOL))]
    for L in Ls:
        status(f"L = {L}: MSE of every code on {n_tiles} Gaussian tiles")
        for code in (*BASE_CODES, "hyb", *pool_names):
            tiles[code, L] = gaussian_tile_mse(code, L, K, 2 if code == "hyb" else 1, n_tiles, seed)
            table.setdefault(code, {})[L] = tiles[code, L].mean().item()
    best = {L: min(pool_names, key=lambda name: table[name][L]) for L in Ls}
    table["mulbal"] = {L: table[best[L]][L] for L in Ls}

    # external anchor: QTIP's Table 1 at L = 16 on 256 tiles of seed 0 (the full table's own tiles)
    anchor: dict[str, dict[str, float]] = {}
    for code, published in QTIP_TABLE1_L16.items() if cfg["anchor"] else ():
        if ANCHOR_L in Ls and n_tiles == ANCHOR_TILES and seed == ANCHOR_SEED:
            t = tiles[code, ANCHOR_L]
        else:
            status(f"L = {ANCHOR_L}: {code} on {ANCHOR_TILES} tiles (QTIP's Table 1)")
            t = gaussian_tile_mse(code, ANCHOR_L, K, 2 if code == "hyb" else 1, ANCHOR_TILES, ANCHOR_SEED)
        se = t.std().item() / math.sqrt(t.numel())
        anchor[code] = {
            "ours": t.mean().item(),
            "se": se,
            "qtip": published,
            "tolerance": ROUNDING + 2 * se,
            "within": abs(t.mean().item() - published) <= ROUNDING + 2 * se,
        }

    # mulbal (chosen on the table's tiles) against 1mad on fresh tiles, paired per tile: never the run's own
    # seed, whose first tiles (the same whatever their number) chose the member
    paired_seed = PAIRED_SEED if seed != PAIRED_SEED else 0
    paired: dict[int, dict[str, Any]] = {}
    for L in (L for L in Ls if L <= PAIRED_MAX_L):
        status(f"L = {L}: {best[L]} against 1mad on {PAIRED_TILES} fresh tiles (seed {paired_seed})")
        d = (
            gaussian_tile_mse(best[L], L, K, 1, PAIRED_TILES, paired_seed)
            - gaussian_tile_mse("1mad", L, K, 1, PAIRED_TILES, paired_seed)
        ).double()
        paired[L] = {
            "member": best[L],
            "mean": d.mean().item(),
            "ci95": paired_bootstrap_interval(d.numpy()),
            "mulbal_lower_tiles": int((d < 0).sum()),
        }

    computed = ("1mad", "3inst", "mulbal")
    checks = {
        "computed codes beat Lloyd-Max by >= 30% at L=10": all(
            table[c][10] <= (1 - LLOYD_MARGIN) * lloyd for c in computed
        ),
        "mulbal within 3% of lut at L=10 and L=12": all(
            table["mulbal"][L] <= (1 + LUT_MARGIN) * table["lut"][L] for L in (10, 12)
        ),
        "mulbal <= 1mad and <= 3inst at every L": all(
            table["mulbal"][L] <= min(table["1mad"][L], table["3inst"][L]) for L in Ls
        ),
        "MSE decreases with L for every code": all(
            all(row[a] > row[b] for a, b in pairwise(Ls)) for row in table.values()
        ),
        "mulbal < 1mad on fresh tiles at every L <= 12 (paired 95% interval below 0)": all(
            p["ci95"][1] < 0 for p in paired.values()
        ),
    }
    if anchor:
        checks["L=16 MSE of 1mad, 3inst, lut within QTIP Table 1 (rounding + 2 SE)"] = all(
            anchor[c]["within"] for c in QTIP_JUDGED
        )
    order = ["lut", "1mad", "3inst", "hyb", "mulbal", *pool_names]
    rows: list[dict[str, Any]] = []
    for code in order:
        row: dict[str, Any] = {"code": code, "V": 2 if code == "hyb" else 1}
        row.update({f"L={L}": round(table[code][L], 5) for L in Ls})
        row["vs_lut_L10"] = round(table[code][10] / table["lut"][10] - 1, 4)
        row["below_lloyd_max_L10"] = round(1 - table[code][10] / lloyd, 4)
        rows.append(row)
    for code, a in anchor.items():
        rows.append(
            {
                "code": f"{code} at L=16 ({ANCHOR_TILES} tiles) vs QTIP Table 1",
                "V": 2 if code == "hyb" else 1,
                "ours": round(a["ours"], 5),
                "se": round(a["se"], 5),
                "qtip": a["qtip"],
                "judged": code in QTIP_JUDGED,
                "within": a["within"],
            }
        )
    for L, p in paired.items():
        rows.append(
            {
                "code": f"{p['member']} - 1mad at L={L} ({PAIRED_TILES} fresh tiles)",
                "V": 1,
                "mean": round(p["mean"], 6),
                "ci95": [round(v, 6) for v in p["ci95"]],
                "mulbal_lower_tiles": p["mulbal_lower_tiles"],
            }
        )
    rows.append({"code": "distortion-rate bound 2^(-2K)", "V": None, **{f"L={L}": bound for L in Ls}})
    rows.append({"code": "Lloyd-Max 2-bit scalar", "V": None, **{f"L={L}": lloyd for L in Ls}})
    return {
        "system": "proteus-gaussian",
        "claim": (
            "Proteus' lookup-free MUL-BAL generator (integer mixing + affine Gaussianizer, a pre-vetted pool) "
            "gives near-Gaussian, overlap-robust code values: on the bitshift trellis it quantizes like a "
            "random lookup table and no worse than QTIP's computed codes."
        ),
        "metric": "MSE of 2-bit (K=2, V=1, T=256, tail-biting) trellis quantization of N(0,1) at L=10 (lower is better)",
        "ours": table["mulbal"][10],
        "baseline": table["lut"][10],
        "criterion": "; ".join(checks) + f" (all {len(checks)})",
        "threads": "the machine's; during each Viterbi call 1 here and as many worker processes (parallel_viterbi)",
        "passed": all(checks.values()),
        "rows": rows,
        "figures": [
            {
                "name": "proteus_gaussian_mse",
                "title": "Trellis quantization of N(0,1), K=2 bits, T=256, tail-biting",
                "xlabel": "L (state bits)",
                "ylabel": "MSE",
                "x": list(Ls),
                "series": {
                    **{
                        code: [table[code][L] for L in Ls]
                        for code in ("lut", "1mad", "3inst", "hyb", "mulbal")
                    },
                    "bound 2^(-2K)": [bound] * len(Ls),
                    "Lloyd-Max 2-bit": [lloyd] * len(Ls),
                },
                "kind": "line",
            }
        ],
        "notes": (
            f"budget={budget}: L in {list(Ls)}, {n_tiles} tiles x 256 weights per code, seed {seed}; "
            f"best pool member per L: {best}; checks: {checks}. mulbal is the best of {len(MULBAL_POOL)} "
            "pool members at each L (Proteus' per-layer pick from the pool); the pool was vetted offline "
            "by overlap-local statistics only, not by this MSE. hyb uses V=2. "
            f"QTIP anchor (L={ANCHOR_L}, {ANCHOR_TILES} tiles, seed {ANCHOR_SEED}; full budget only): "
            f"{anchor or 'not at this budget'}; "
            f"QTIP Table 2 (L=12, tail-biting, code not named) {QTIP_TABLE2_L12} beside our lut at L=12 "
            f"{table['lut'].get(12)}; mulbal - 1mad on {PAIRED_TILES} fresh tiles (seed {paired_seed}), "
            f"member chosen on the table's tiles: {paired}"
        ),
    }
