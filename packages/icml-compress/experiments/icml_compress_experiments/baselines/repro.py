"""Reproduction ``rtn-2bit``: 2-bit RTN against 2-bit Lloyd–Max on SmolLM2-135M's MLP weights.

Placeholder check until Proteus lands. Both quantizers give every group of 128 input weights 4 levels:
RTN a uniform min-max grid, Lloyd–Max the MSE-optimal grid found by Lloyd iterations started from it.
The unit-Gaussian Lloyd–Max error ``sqrt(0.1175) ≈ 0.343`` is reported as the scalar-quantizer reference
that Proteus' trellis codes aim to beat. SmolLM2's weights were Q4_1 before we load them; the numbers
are relative to the float model we load.
"""

from __future__ import annotations

import math
from typing import Any

from icml_compress.baselines.lloyd import GAUSSIAN_LLOYD_MAX_MSE, lloyd_max
from icml_compress.baselines.rtn import rtn_quantize

BITS = 2
GROUP_SIZE = 128
LLOYD_ITERS = 25
GAUSSIAN_REL_RMSE = math.sqrt(GAUSSIAN_LLOYD_MAX_MSE)


def _layers(budget: str, n_layers: int) -> list[int]:
    return [n_layers // 2] if budget == "quick" else list(range(n_layers))


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Quantize ``mlp.down_proj.weight`` of the middle layer ("quick") or of every layer ("full").

    The computation is deterministic; ``seed`` is accepted for the protocol and changes nothing.
    """
    from icml_tools.assets import smollm2  # lazy: loads (and on first use caches) the model

    model, _ = smollm2()
    layers = _layers(budget, len(model.model.layers))
    rows: list[dict[str, Any]] = []
    totals = {"rtn": 0.0, "lloyd": 0.0, "norm": 0.0}
    for k in layers:
        w = model.model.layers[k].mlp.down_proj.weight.detach()  # (out, in) = (576, 1536)
        rtn = rtn_quantize(w, BITS, GROUP_SIZE).dequantized
        groups = w.reshape(w.shape[0], -1, GROUP_SIZE)  # (out, in / 128, 128)
        lloyd = lloyd_max(groups, levels=2**BITS, iters=LLOYD_ITERS).dequantized.reshape(w.shape)
        sq = {
            "rtn": (rtn - w).pow(2).sum().item(),
            "lloyd": (lloyd - w).pow(2).sum().item(),
            "norm": w.pow(2).sum().item(),
        }
        for key, value in sq.items():
            totals[key] += value
        rows.append(
            {
                "layer": k,
                "weight": f"model.layers.{k}.mlp.down_proj.weight",
                "rtn_rel_rmse": math.sqrt(sq["rtn"] / sq["norm"]),
                "lloyd_max_rel_rmse": math.sqrt(sq["lloyd"] / sq["norm"]),
                "gaussian_lloyd_max_rel_rmse": GAUSSIAN_REL_RMSE,
            }
        )
    ours = math.sqrt(totals["lloyd"] / totals["norm"])
    baseline = math.sqrt(totals["rtn"] / totals["norm"])
    return {
        "system": "rtn-2bit",
        "claim": (
            "Placeholder until Proteus lands: on real LM weights, 2-bit per-group Lloyd-Max quantization "
            "has lower error than 2-bit round-to-nearest (RTN), the baseline 2-bit methods must beat."
        ),
        "metric": "relative RMSE ||W_hat - W|| / ||W|| of mlp.down_proj weights, 2 bits, group 128 (lower is better)",
        "ours": ours,
        "baseline": baseline,
        "criterion": "Lloyd-Max relative RMSE < RTN relative RMSE on every measured weight",
        "passed": all(r["lloyd_max_rel_rmse"] < r["rtn_rel_rmse"] for r in rows),
        "rows": rows,
        "figures": [
            {
                "name": "rtn_2bit_rel_rmse",
                "title": "2-bit quantization error of SmolLM2-135M down_proj weights (group 128)",
                "xlabel": "layer",
                "ylabel": "relative RMSE",
                "x": layers,
                "series": {
                    "RTN (min-max)": [r["rtn_rel_rmse"] for r in rows],
                    "Lloyd-Max": [r["lloyd_max_rel_rmse"] for r in rows],
                    "Gaussian Lloyd-Max sqrt(0.1175)": [GAUSSIAN_REL_RMSE] * len(rows),
                },
                "kind": "bar",
            }
        ],
        "notes": (
            f"budget={budget}: layers {layers}; Lloyd-Max runs {LLOYD_ITERS} iterations per group, "
            f"started from the RTN grid. Reference: unit-Gaussian 4-level Lloyd-Max relative RMSE "
            f"{GAUSSIAN_REL_RMSE:.4f} (Max, 1960); RTN/Gaussian = {baseline / GAUSSIAN_REL_RMSE:.3f}, "
            f"Lloyd-Max/Gaussian = {ours / GAUSSIAN_REL_RMSE:.3f}. SmolLM2 was Q4_1 before loading."
        ),
    }
