"""AuxK where it should matter: a planted dictionary with more true features than latents, and latents
misaligned at initialization (issue 24; ``docs/seglens.md``, "Revision for issue 24").

    uv run python -m icml_interp_experiments.seglens.auxk_revival [--budget quick|full] [--seed 0] [--out FILE]

Design and criterion, fixed before the first run (2026-12-06). Per seed ``s``, the SAE's configuration comes
first: TopK, ``D_IN`` = 64 → ``D_SAE`` = 128 latents, k = 4, batch 1024 tokens, dead after ``DEAD_STEPS`` =
50 steps without firing, the library's default learning rate (2e-4 / sqrt(128 / 2**14) ≈ 2.26e-3), AuxK
with the default aux_k (d_in / 2 = 32) and coefficient 1/32, or coefficient 0; SAE seed ``s``. Its initial
decoder rows are those ``train_sae`` starts from (``SAE(cfg)``: seeded random unit rows, the encoder tied to
them). The first ``N_MISALIGNED`` = 32 latents are the *misaligned* ones: the ``N_FEATURES`` = 256 true
features (2 × the latents: no dictionary is surplus here) are ``normalize(u + LEAK v)``, ``u`` a random unit
vector in S, the 32-dimensional orthogonal complement of those latents' initial directions, ``v`` a random
unit vector in their span, ``LEAK`` = 0.15, so a misaligned latent starts at ``|cos| <= 0.148`` to every true
feature. Tokens: exactly ``ACTIVE`` = 4 features drawn uniformly, magnitudes uniform in [1, 3], plus
Gaussian noise of standard deviation ``NOISE`` = 0.05 per coordinate; 131,072 training tokens (dictionary
seed 7000 + s, token seed 8000 + s), 16,384 held-out tokens (seed 9000 + s). Both arms: the same
initialization, data and data order. Budgets: quick, seeds ``seed, seed + 1``, 600 steps per arm; full,
seeds ``seed .. seed + 9`` (0-9 for the full run), 1500 steps per arm.

Measured per arm (``TrainLog.died`` / ``TrainLog.revived``): the revived fraction (latents dead at some step
that fired again later, over all 128 latents), the died fraction, the dead fraction at the end, revival among
the misaligned latents, and the final FVU on the held-out tokens.

Headroom: without AuxK the died fraction is >= ``HEADROOM_DIED`` = 0.10 on the mean over the seeds (the
condition AuxK addresses is present); more features than latents and the misalignment hold by construction
(the cosines are measured and reported).

Criterion: with AuxK against without, paired per seed, the revived fraction is higher in >= 80 % of the
seeds (quick 2 of 2, full 8 of 10) and on the mean, and the final held-out FVU is lower in >= 80 % of the
seeds and on the mean. A component of ``seglens-repair`` reported beside its verdict, not part of it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np
import torch

from icml_interp.sae import SAE, SAEConfig, evaluate_sae, train_sae

D_IN, D_SAE, K, BATCH, DEAD_STEPS = 64, 128, 4, 1024, 50
N_FEATURES, N_MISALIGNED, ACTIVE = 256, 32, 4
LEAK, NOISE, MAGNITUDE = 0.15, 0.05, (1.0, 3.0)
N_TRAIN, N_EVAL = 131_072, 16_384
AUX_COEFFICIENT = 1 / 32
BUDGETS = {"quick": {"seeds": 2, "steps": 600}, "full": {"seeds": 10, "steps": 1500}}
HEADROOM_DIED, SEED_SHARE = 0.10, 0.8
CRITERION = (
    f"planted dictionary: {N_FEATURES} true features > {D_SAE} latents (TopK k={K}, d_in={D_IN}), the first "
    f"{N_MISALIGNED} latents start misaligned (|cos| <= {LEAK / math.sqrt(1 + LEAK**2):.3f} to every feature); "
    f"headroom: without AuxK the fraction of latents dead at some step (no firing for {DEAD_STEPS} steps) >= "
    f"{HEADROOM_DIED} on the seed mean; with AuxK (coefficient 1/32) against without, paired per seed: the "
    f"revived fraction (died, then fired again) higher in >= {SEED_SHARE:.0%} of the seeds and on the mean, and "
    f"the final held-out FVU lower in >= {SEED_SHARE:.0%} of the seeds and on the mean; reported beside the "
    "seglens-repair verdict, not part of it"
)


def sae_config(seed: int, steps: int, aux: bool) -> SAEConfig:
    """The SAE of the experiment (seed ``seed``, ``steps`` steps of ``BATCH`` tokens, AuxK on or off)."""
    return SAEConfig(
        d_in=D_IN,
        d_sae=D_SAE,
        architecture="topk",
        k=K,
        batch_size=BATCH,
        total_tokens=BATCH * steps,
        dead_steps=DEAD_STEPS,
        aux_coefficient=AUX_COEFFICIENT if aux else 0.0,
        seed=seed,
    )


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True)


def misaligned_dictionary(initial_decoder: torch.Tensor, seed: int) -> torch.Tensor:
    """``(N_FEATURES, D_IN)`` unit features far from the first ``N_MISALIGNED`` rows of ``initial_decoder``:
    ``normalize(u + LEAK v)``, ``u`` random in the orthogonal complement of those rows, ``v`` random in their
    span."""
    g = torch.Generator().manual_seed(7000 + seed)
    q, _ = torch.linalg.qr(initial_decoder[:N_MISALIGNED].T.double(), mode="complete")  # (D_IN, D_IN)
    span, complement = q[:, :N_MISALIGNED], q[:, N_MISALIGNED:]  # orthonormal bases
    u = _unit_rows(
        torch.randn(N_FEATURES, D_IN - N_MISALIGNED, generator=g, dtype=torch.float64) @ complement.T
    )
    v = _unit_rows(torch.randn(N_FEATURES, N_MISALIGNED, generator=g, dtype=torch.float64) @ span.T)
    return _unit_rows(u + LEAK * v).float()


def planted_tokens(features: torch.Tensor, n: int, seed: int, chunk: int = 16_384) -> torch.Tensor:
    """``(n, D_IN)`` tokens: ``ACTIVE`` features chosen uniformly per token, magnitudes uniform in
    ``MAGNITUDE``, plus isotropic Gaussian noise of standard deviation ``NOISE``."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = MAGNITUDE
    out = []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        idx = torch.rand(m, features.shape[0], generator=g).argsort(1)[:, :ACTIVE]  # (m, ACTIVE) distinct
        mag = lo + (hi - lo) * torch.rand(m, ACTIVE, generator=g)
        x = (mag[:, :, None] * features[idx]).sum(1)  # (m, D_IN)
        out.append(x + NOISE * torch.randn(m, features.shape[1], generator=g))
    return torch.cat(out)


def _max_abs_cos(rows: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    return (_unit_rows(rows.double()) @ features.double().T).abs().max(1).values


def one_seed(seed: int, steps: int) -> dict[str, Any]:
    """Both arms on the planted data of ``seed``; a flat row of their measurements."""
    initial = SAE(sae_config(seed, steps, aux=True)).W_dec.detach()  # the initialization train_sae uses
    features = misaligned_dictionary(initial, seed)
    train, held_out = (
        planted_tokens(features, N_TRAIN, 8000 + seed),
        planted_tokens(features, N_EVAL, 9000 + seed),
    )
    init_cos = _max_abs_cos(initial, features)
    row: dict[str, Any] = {
        "seed": seed,
        "steps": steps,
        "init_max_cos_misaligned": float(init_cos[:N_MISALIGNED].max()),
        "init_mean_max_cos_misaligned": float(init_cos[:N_MISALIGNED].mean()),
        "init_mean_max_cos_others": float(init_cos[N_MISALIGNED:].mean()),
    }
    misaligned = set(range(N_MISALIGNED))
    for label, aux in (("auxk", True), ("no_auxk", False)):
        start = time.perf_counter()
        sae, log = train_sae(train, sae_config(seed, steps, aux), progress=False)
        q = evaluate_sae(sae, held_out)
        row.update(
            {
                f"{label}_fvu": q["fvu"],
                f"{label}_died": len(log.died) / D_SAE,
                f"{label}_revived": len(log.revived) / D_SAE,
                f"{label}_dead_end": log.dead_fraction[-1],
                f"{label}_never_fire_held_out": q["dead_fraction"],
                f"{label}_misaligned_died": len(misaligned & set(log.died)) / N_MISALIGNED,
                f"{label}_misaligned_revived": len(misaligned & set(log.revived)) / N_MISALIGNED,
                f"{label}_seconds": time.perf_counter() - start,
            }
        )
    return row


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Headroom, the paired comparisons and the component's verdict from the per-seed rows."""
    n = len(rows)
    need = math.ceil(SEED_SHARE * n)

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    headroom = {
        "no_auxk_died_mean": mean("no_auxk_died"),
        "features_over_latents": N_FEATURES / D_SAE,
        "init_max_cos_misaligned": max(r["init_max_cos_misaligned"] for r in rows),
        "init_mean_max_cos_others": mean("init_mean_max_cos_others"),
    }
    headroom["holds"] = bool(headroom["no_auxk_died_mean"] >= HEADROOM_DIED)
    revived_wins = sum(r["auxk_revived"] > r["no_auxk_revived"] for r in rows)
    fvu_wins = sum(r["auxk_fvu"] < r["no_auxk_fvu"] for r in rows)
    revival_holds = revived_wins >= need and mean("auxk_revived") > mean("no_auxk_revived")
    fvu_holds = fvu_wins >= need and mean("auxk_fvu") < mean("no_auxk_fvu")
    return {
        "seeds": [r["seed"] for r in rows],
        "seeds_needed": need,
        "headroom": headroom,
        "revived_auxk": mean("auxk_revived"),
        "revived_no_auxk": mean("no_auxk_revived"),
        "revived_wins": revived_wins,
        "revival_holds": bool(revival_holds),
        "fvu_auxk": mean("auxk_fvu"),
        "fvu_no_auxk": mean("no_auxk_fvu"),
        "fvu_wins": fvu_wins,
        "fvu_holds": bool(fvu_holds),
        "died_auxk": mean("auxk_died"),
        "died_no_auxk": mean("no_auxk_died"),
        "dead_end_auxk": mean("auxk_dead_end"),
        "dead_end_no_auxk": mean("no_auxk_dead_end"),
        "passed": bool(headroom["holds"] and revival_holds and fvu_holds),
        "decidable": headroom["holds"],
    }


def run_experiment(budget: str = "quick", seed: int = 0) -> dict[str, Any]:
    """Every seed of the budget: ``{"rows": [...], "summary": {...}, "criterion": str}``."""
    cfg = BUDGETS[budget]
    rows = [one_seed(s, cfg["steps"]) for s in range(seed, seed + cfg["seeds"])]
    return {"rows": rows, "summary": summarize(rows), "criterion": CRITERION}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    result = run_experiment(a.budget, a.seed)
    for r in result["rows"]:
        print(
            f"seed {r['seed']}: revived AuxK {r['auxk_revived']:.3f} vs {r['no_auxk_revived']:.3f} without; "
            f"FVU {r['auxk_fvu']:.4f} / {r['no_auxk_fvu']:.4f}; died {r['auxk_died']:.3f} / {r['no_auxk_died']:.3f}",
            flush=True,
        )
    s = result["summary"]
    print(f"headroom {s['headroom']}; {'PASS' if s['passed'] else 'FAIL'}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
