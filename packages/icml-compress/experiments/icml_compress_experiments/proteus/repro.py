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
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from icml_compress.proteus.gaussian import LLOYD_MAX_MSE, distortion_rate_bound, gaussian_mse
from icml_compress.proteus.pool import MULBAL_POOL
from icml_tools.progress import status

K = 2
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"Ls": (8, 10, 12), "n_tiles": 128},
    "full": {"Ls": (8, 10, 12, 14, 16), "n_tiles": 256},
}
BASE_CODES = ("lut", "1mad", "3inst")
LLOYD_MARGIN, LUT_MARGIN = 0.30, 0.03


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Measure the MSE table codes x L and compute the verdict."""
    cfg = BUDGETS[budget]
    Ls, n_tiles = cfg["Ls"], cfg["n_tiles"]
    lloyd, bound = LLOYD_MAX_MSE[K], distortion_rate_bound(K)
    table: dict[str, dict[int, float]] = {}
    for L in Ls:
        status(f"L = {L}: MSE of every code on {n_tiles} Gaussian tiles")
        for code in BASE_CODES:
            table.setdefault(code, {})[L] = gaussian_mse(code, L, K, 1, n_tiles, seed)
        table.setdefault("hyb", {})[L] = gaussian_mse("hyb", L, K, 2, n_tiles, seed)
        for i in range(len(MULBAL_POOL)):
            table.setdefault(f"mulbal-{i}", {})[L] = gaussian_mse(f"mulbal-{i}", L, K, 1, n_tiles, seed)
    pool_names = [f"mulbal-{i}" for i in range(len(MULBAL_POOL))]
    best = {L: min(pool_names, key=lambda name: table[name][L]) for L in Ls}
    table["mulbal"] = {L: table[best[L]][L] for L in Ls}

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
    }
    order = ["lut", "1mad", "3inst", "hyb", "mulbal", *pool_names]
    rows: list[dict[str, Any]] = []
    for code in order:
        row: dict[str, Any] = {"code": code, "V": 2 if code == "hyb" else 1}
        row.update({f"L={L}": round(table[code][L], 5) for L in Ls})
        row["vs_lut_L10"] = round(table[code][10] / table["lut"][10] - 1, 4)
        row["below_lloyd_max_L10"] = round(1 - table[code][10] / lloyd, 4)
        rows.append(row)
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
        "criterion": "; ".join(checks) + " (all four)",
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
            "by overlap-local statistics only, not by this MSE. hyb uses V=2."
        ),
    }
