"""Reproduction ``similarity-cooperation``: does the representational similarity of a model pair predict how
well the pair cooperates (higher) and how novel its joint output is (lower), across eight games?

Protocol fixed in ``packages/icml-agents/docs/games.md`` before the first run. The zoo
(:mod:`icml_agents_experiments.games.zoo`) is trained once and cached. Script:
``python -m icml_agents_experiments.games.repro --budget full``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

import numpy as np
import torch

from icml_agents.backends import HFLocalBackend
from icml_agents.games import (
    GAMES,
    Player,
    cooperation_score,
    novelty_score,
    pair_permutation_test,
    pair_regression,
    play_all,
)
from icml_agents_experiments.games.zoo import MEMBERS, heldout_lines, load_zoo, probe_texts
from icml_interp.similarity import layer_representations, linear_cka, pair_similarity

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"rounds": 6, "probes": 120, "permutations": 999},
    "full": {"rounds": 24, "probes": 240, "permutations": 9999},
}
COOPERATION = tuple(n for n, g in GAMES.items() if g.kind == "cooperation")
NOVELTY = tuple(n for n, g in GAMES.items() if g.kind == "novelty")
TEMPERATURE = {"cooperation": 0.0, "novelty": 1.0}  # greedy coordination; sampled ideation
BUCKETS = ("early", "middle", "late")


def held_out_loss(model, tokenizer, texts: list[str]) -> float:
    """Mean next-token loss on ``texts`` (the zoo member's performance, a regression control)."""
    losses = []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([tokenizer(text)["input_ids"]])
            losses.append(float(model(input_ids=ids, labels=ids).loss))
    return float(np.mean(losses))


def play_pair(models: dict, a: str, b: str, rounds: int, seed: int) -> dict[str, float]:
    """The pair's cooperation (greedy players, the four cooperation games) and novelty (sampling players,
    the four novelty games); ``a == b`` pairs a model with its own copy."""
    out: dict[str, float] = {}
    for kind, games in (("cooperation", COOPERATION), ("novelty", NOVELTY)):
        players = [
            Player(
                f"{name}#{i}", HFLocalBackend(models[name][0], models[name][1]), temperature=TEMPERATURE[kind]
            )
            for i, name in enumerate((a, b))
        ]
        results = play_all(players[0], players[1], games=list(games), n_rounds=rounds, seed=seed)
        out[kind] = cooperation_score(results) if kind == "cooperation" else novelty_score(results)
        out.update({f"{name}": r.score for name, r in results.items()})
    return out


def run(budget: str = "quick", seed: int = 0) -> dict:
    start = time.perf_counter()
    cfg = BUDGETS[budget]
    zoo = load_zoo()
    built = [r for _, _, r in zoo.values() if not r["cached"]]
    cache = (
        f"built: {len(built)} zoo members ({sum(r['train_seconds'] for r in built):.0f} s)"
        if built
        else "hit: zoo"
    )
    names = [m.name for m in MEMBERS]
    probes = probe_texts(cfg["probes"])
    reps = {n: layer_representations(zoo[n][0], zoo[n][1], probes, pooling="mean") for n in names}
    perf = {n: held_out_loss(zoo[n][0], zoo[n][1], heldout_lines()) for n in names}
    pairs = [(min(p), max(p)) for p in itertools.combinations(names, 2)]  # (a, b) with a < b
    sim: dict[str, dict[tuple[str, str], float]] = {b: {} for b in (*BUCKETS, "all")}
    for a, b in pairs:
        by_bucket = pair_similarity(reps[a], reps[b], metric=linear_cka)
        for bucket in BUCKETS:
            sim[bucket][(a, b)] = by_bucket[bucket]["similarity"]
        sim["all"][(a, b)] = float(np.mean([linear_cka(x, y) for x, y in zip(reps[a], reps[b], strict=True)]))
    games = {p: play_pair(zoo, *p, cfg["rounds"], seed) for p in pairs}
    selves = {n: play_pair(zoo, n, n, cfg["rounds"], seed) for n in names}
    coop = {p: g["cooperation"] for p, g in games.items()}
    nov = {p: g["novelty"] for p, g in games.items()}

    tests: dict[str, dict[str, float]] = {}
    for bucket in (*BUCKETS, "all"):
        for outcome, values, alt in (("cooperation", coop, "greater"), ("novelty", nov, "less")):
            t = pair_permutation_test(
                values, sim[bucket], n_permutations=cfg["permutations"], alternative=alt, seed=0
            )
            tests[f"{outcome} ~ {bucket}"] = {"rho": t.statistic, "p": t.p_value}
    controls = {
        "perf_gap": {p: abs(perf[p[0]] - perf[p[1]]) for p in pairs},
        "same_family": {
            p: float(MEMBERS[names.index(p[0])].private == MEMBERS[names.index(p[1])].private) for p in pairs
        },
    }
    regressions = {}
    for outcome, values in (("cooperation", coop), ("novelty", nov)):
        r = pair_regression(values, sim["all"], controls, n_permutations=cfg["permutations"], seed=0)
        regressions[outcome] = r.summary()

    early = np.array(list(sim["early"].values()))
    least = min(pairs, key=lambda p: sim["all"][p])
    self_coop = float(np.mean([s["cooperation"] for s in selves.values()]))
    self_nov = float(np.mean([s["novelty"] for s in selves.values()]))
    checks = {
        "H: early-layer CKA across pairs spans >= 0.3": float(early.max() - early.min()) >= 0.3,
        "H: self-pairs cooperate >= 0.2 more than the least similar pair": self_coop - coop[least] >= 0.2,
        "H: self-pairs are less novel than the least similar pair": self_nov < nov[least],
        "C: rho(similarity, cooperation) > 0, permutation p < 0.05": tests["cooperation ~ all"]["rho"] > 0
        and tests["cooperation ~ all"]["p"] < 0.05,
        "C: rho(similarity, novelty) < 0, permutation p < 0.05": tests["novelty ~ all"]["rho"] < 0
        and tests["novelty ~ all"]["p"] < 0.05,
    }
    headroom_ok = all(v for k, v in checks.items() if k.startswith("H"))
    claim_ok = all(v for k, v in checks.items() if k.startswith("C"))
    rows = [
        {
            "pair": f"{a}-{b}",
            **{f"cka_{k}": round(sim[k][(a, b)], 4) for k in (*BUCKETS, "all")},
            "cooperation": round(coop[(a, b)], 4),
            "novelty": round(nov[(a, b)], 4),
            **{g: round(games[(a, b)][g], 4) for g in GAMES},
        }
        for a, b in pairs
    ]
    all_sim = np.array([sim["all"][p] for p in pairs])
    return {
        "system": "similarity-cooperation",
        "claim": (
            "Model pairs with more similar representations cooperate more and produce less novelty; early-layer "
            "similarity predicts best."
        ),
        "metric": "Spearman rho of pair CKA (all layers) with cooperation over the zoo's pairs (higher supports "
        "the claim); baseline 0 = no association",
        "ours": tests["cooperation ~ all"]["rho"],
        "baseline": 0.0,
        "criterion": "; ".join(checks) + " (all; without headroom the comparison cannot decide)",
        "passed": bool(headroom_ok and claim_ok),
        "checks": checks,
        "cache": cache,
        "tests": tests,
        "regressions": regressions,
        "self_pairs": {n: {k: round(v, 4) for k, v in s.items()} for n, s in selves.items()},
        "least_similar_pair": f"{least[0]}-{least[1]}",
        "performance_loss": perf,
        "rows": rows,
        "figures": [
            {
                "name": "similarity_outcomes",
                "title": f"{len(pairs)} zoo pairs: CKA vs outcomes",
                "xlabel": "linear CKA (all layers)",
                "ylabel": "outcome",
                "x": [float(v) for v in all_sim],
                "series": {"cooperation": [coop[p] for p in pairs], "novelty": [nov[p] for p in pairs]},
                "kind": "scatter",
            }
        ],
        "notes": (
            f"budget={budget}: {len(names)} members, {len(pairs)} pairs, {cfg['rounds']} rounds per game, "
            f"{cfg['probes']} probe texts; self-pairs cooperation {self_coop:.3f}, novelty {self_nov:.3f}; least "
            f"similar pair {least} cooperation {coop[least]:.3f}, novelty {nov[least]:.3f}; early CKA range "
            f"[{early.min():.3f}, {early.max():.3f}]; tests {tests}; checks {checks}; total "
            f"{time.perf_counter() - start:.1f} s"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=tuple(BUDGETS), default="quick")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.budget), indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
