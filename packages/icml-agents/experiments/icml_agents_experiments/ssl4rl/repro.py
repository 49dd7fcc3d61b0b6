"""Reproduction ``ssl4rl-digits``: self-supervised tasks as verifiable rewards train a vision encoder.

Data: scikit-learn's bundled digits (1,797 8x8 images, upsampled to 16x16). A fixed split (seed 0) keeps
1,297 images for the self-supervised tasks and the probe's labelled examples, and 500 for the probe's test.

Fast tier (:mod:`icml_agents_experiments.ssl4rl.cnn`): a small CNN with one categorical answer head per task is
trained by GRPO (G = 16 answers per image, beta = 0.04 k3 KL to the initial policy, DAPO token
aggregation, Adam lr 1e-3 constant, batch 32 images) on the official rewards; no digit label is used. (The
release's ``kl_coef`` 0.01 let the 4-way head's entropy collapse within ~100 steps on this testbed, leaving
confidently wrong answers that no tied group can correct; 0.04, TRL's former default, keeps it; see
``docs/ssl4rl.md``.) Then the frozen encoder's features get a linear probe trained on 10 labels per class
and tested on the 500 held-out digits. The probe, fixed before the runs that use it: the last convolution
block's map average-pooled to 2 x 2 (256 features), standardized, L2 logistic regression with ``C`` chosen
from 1e-3..1e2 by stratified 5-fold cross-validation on the 100 labelled examples only. The earlier probe
(global-average-pooled 64 features, ``C = 1``) is reported beside it. Compared with the same architecture at
random init, with supervised cross-entropy on the same pretext labels for the same number of steps, and
with raw pixels. Variants: each task (rotation 90 and 45 degrees, rotation with independent random crops
of the two views, jigsaw 2x2 and 3x3, position, contrastive, masked patch) and the average of several
rewards on one joint answer per image (``rotation+jigsaw``; ``combined-4`` adds position and contrastive).

Text tier (:mod:`icml_agents_experiments.ssl4rl.vlm`): a tiny vision-language policy writes ``<answer>...</answer>``
after a 40-step format warm-up on random answers, then GRPO on the rotation reward (G = 16, 16 images per
step, Adam lr 2e-3, beta = 0.01, Dr. GRPO scaling ``scale_rewards="none"``; 120 steps quick, 240 full).
Its post-warm-up and final rewards are the means of the first and the last three logged points (each the
mean over 256 sampled answers). The quick budget runs 2 seeds x 300 GRPO steps of rotation only (no
supervised reference); the full budget 5 seeds x 600 steps of rotation (with the supervised reference),
rotation-45, rotation-crop, jigsaw, jigsaw-3x3 and rotation+jigsaw, the seeds and the text tier in
parallel processes.
The other variants (position, contrastive, patch, combined-4) are in ``VARIANTS`` but not in the full
budget, for time (2 shared CPU cores).

Criteria, fixed before the runs: (1) the rotation policy's greedy reward, mean over seeds, is >= 0.8;
(2) the lower end of the 95% CI (t interval over seeds) of the SSL4RL-rotation probe accuracy is above the
upper end of the random-init one; (3) the text policy's mean rotation reward rises by >= 0.3 over its
post-warm-up value. ``passed`` needs all three. The split, the architecture, the hyper-parameters, the
probe and the 45-degree / crop / 3x3 / patch variants are our choices.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TypedDict

import numpy as np
import torch

from icml_agents.rl.grpo import GRPOConfig
from icml_agents.ssl4rl.tasks import canonical
from icml_agents_experiments.ssl4rl import cnn, vlm
from icml_tools.progress import status

SYSTEM = "ssl4rl-digits"
CLAIM = (
    "SSL4RL: self-supervised tasks (rotation, jigsaw, position, contrastive) used as verifiable rewards "
    "for RL improve a vision(-language) policy's visual representation; task difficulty and task "
    "combination matter."
)
CRITERION = (
    "(1) rotation reward (greedy, mean over seeds) >= 0.8 from chance 0.25; (2) probe accuracy after "
    "SSL4RL-rotation above random-init with non-overlapping 95% CIs over seeds; (3) text policy's "
    "mean rotation reward >= post-warm-up value + 0.3"
)
GROUP, BETA, LR, BATCH = 16, 0.04, 1e-3, 32
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {  # name -> {task: builder options}
    "rotation": {"rotation": {}},
    "rotation-45": {"rotation": {"granularity": 45}},
    "rotation-crop": {"rotation": {"crop_scale": 0.7}},
    "jigsaw": {"jigsaw": {"grid": 2}},
    "jigsaw-3x3": {"jigsaw": {"grid": 3}},
    "position": {"position": {}},
    "contrastive": {"contrastive": {"scale": (0.3, 1.0)}},
    "patch": {"patch": {}},
    "rotation+jigsaw": {"rotation": {}, "jigsaw": {"grid": 2}},
    "combined-4": {
        "rotation": {},
        "jigsaw": {"grid": 2},
        "position": {},
        "contrastive": {"scale": (0.3, 1.0)},
    },
}


class Budget(TypedDict):
    """A fast-tier budget: seeds, GRPO steps, the variants run, those that also get the supervised-pretext
    reference, the text tier's budget and the number of worker processes."""

    seeds: int
    steps: int
    variants: tuple[str, ...]
    supervised: tuple[str, ...]
    text: str
    workers: int


BUDGETS: dict[str, Budget] = {
    "quick": {
        "seeds": 2,
        "steps": 300,
        "variants": ("rotation",),
        "supervised": (),
        "text": "quick",
        "workers": 1,
    },
    "full": {
        "seeds": 5,
        "steps": 600,
        "variants": ("rotation", "rotation-45", "rotation-crop", "jigsaw", "jigsaw-3x3", "rotation+jigsaw"),
        "supervised": ("rotation",),
        "text": "full",
        "workers": 6,
    },
}
N_SSL, LABELS_PER_CLASS = 1297, 10


def mean_ci(values) -> tuple[float, float]:
    """Mean and the half-width of the two-sided 95% t interval."""
    from scipy import stats  # lazy: a scikit-learn dependency

    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), float("nan")
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def load_split():
    """Digits in [0, 1], the SSL/probe-train indices and the probe-test indices (a fixed split)."""
    from sklearn.datasets import load_digits  # lazy: dev / repro only

    digits = load_digits()
    images, labels = digits.images / 16.0, digits.target
    perm = np.random.default_rng(0).permutation(len(images))
    return images, labels, perm[:N_SSL], perm[N_SSL:]


def _seed_run(budget: str, run_seed: int) -> dict:
    """One seed of the fast tier: random-init probe, then every variant with GRPO (and supervised)."""
    torch.set_num_threads(1)
    cfg = BUDGETS[budget]
    images, labels, train, test = load_split()
    canon = torch.from_numpy(np.stack([canonical(x) for x in images])).permute(0, 3, 1, 2).contiguous()
    probe_idx = np.concatenate([train[labels[train] == c][:LABELS_PER_CLASS] for c in range(10)])

    def probe(encoder, layer="pooled", c_grid=cnn.PROBE_C_GRID) -> tuple[float, float]:
        return cnn.linear_probe(
            cnn.features(encoder, canon[probe_idx], layer),
            labels[probe_idx],
            cnn.features(encoder, canon[test], layer),
            labels[test],
            c_grid=c_grid,
        )

    torch.manual_seed(run_seed)
    random_encoder = cnn.SSLPolicy({"rotation": _pool("rotation", {}, images[train], 0)}).encoder
    flat = images.reshape(len(images), -1)

    def record(key, encoder):  # the criterion's probe (C by CV) and the earlier one (GAP, C = 1)
        out["probe"][key], out["probe_c"][key] = probe(encoder)
        out["probe_gap"][key] = probe(encoder, "gap", (1.0,))[0]

    out: dict[str, Any] = {
        "probe": {},
        "probe_c": {},
        "probe_gap": {},
        "reward": {},
        "start_reward": {},
        "curves": {},
        "times": {},
        "pixels": cnn.linear_probe(flat[probe_idx], labels[probe_idx], flat[test], labels[test])[0],
    }
    record("random-init", random_encoder)
    for variant in cfg["variants"]:
        tasks = {t: _pool(t, opts, images[train], run_seed) for t, opts in VARIANTS[variant].items()}
        for method in ("ssl4rl", "supervised") if variant in cfg["supervised"] else ("ssl4rl",):
            torch.manual_seed(run_seed)  # the same initial encoder for every method of a seed
            policy = cnn.SSLPolicy(tasks)
            key = f"{method}:{variant}"
            out["start_reward"][key] = {t: cnn.task_reward(policy, tasks[t]) for t in tasks}
            t0 = time.perf_counter()
            if method == "ssl4rl":
                out["curves"][variant] = cnn.grpo_train(
                    policy,
                    tasks,
                    cfg["steps"],
                    seed=run_seed,
                    batch=BATCH,
                    lr=LR,
                    config=GRPOConfig(num_generations=GROUP, beta=BETA),
                    combine=len(tasks) > 1,
                    log_every=max(1, cfg["steps"] // 25),
                )
            else:
                cnn.supervised_train(policy, tasks, cfg["steps"], seed=run_seed, batch=BATCH, lr=LR)
            out["times"][key] = time.perf_counter() - t0
            record(key, policy.encoder)
            out["reward"][key] = {t: cnn.task_reward(policy, tasks[t]) for t in tasks}
            print(
                f"[ssl4rl-digits seed {run_seed}] {key}: probe {out['probe'][key]:.4f} (random-init "
                f"{out['probe']['random-init']:.4f}), reward {out['reward'][key]}, "
                f"{out['times'][key]:.0f} s",
                file=sys.stderr,
                flush=True,
            )  # progress of long runs
    return out


def fast_tier(budget: str, seed: int) -> tuple[dict, dict]:
    """All seeds of the fast tier and the text tier, in ``workers`` processes; fast-tier results as lists
    over seeds, and the text tier's result."""
    cfg = BUDGETS[budget]
    seeds = [1000 * seed + s for s in range(cfg["seeds"])]
    status(f"fast tier ({len(seeds)} seeds) and text tier, {cfg['workers']} process(es); a line as each ends")
    if cfg["workers"] > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(cfg["workers"], mp_context=mp.get_context("spawn")) as pool:
            text_job = pool.submit(_text_run, cfg["text"], seed)
            per_seed = list(pool.map(_seed_run, [budget] * len(seeds), seeds))
            text = text_job.result()
    else:
        per_seed = [_seed_run(budget, s) for s in seeds]
        text = _text_run(cfg["text"], seed)
    merged: dict[str, Any] = {}
    for part in ("probe", "probe_c", "probe_gap", "reward", "start_reward", "curves", "times"):
        merged[part] = {k: [p[part][k] for p in per_seed] for k in per_seed[0][part]}
    merged["pixels"] = per_seed[0]["pixels"]
    return merged, text


def _text_run(budget: str, seed: int) -> dict:
    torch.set_num_threads(1)
    status("text tier: GRPO warm-up and training of the small language model")
    t0 = time.perf_counter()
    out = vlm.run_text_tier(budget, seed)
    out["seconds"] = time.perf_counter() - t0
    print(
        f"[ssl4rl-digits text tier] post-warm-up {out['post_warmup_reward']:.3f}, final "
        f"{out['final_reward']:.3f}, {out['seconds']:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return out


def _pool(task: str, options: dict, images, seed: int) -> cnn.TaskSpec:
    return cnn.make_task(task, images, seed=seed, n_per_image=4, **options)


def run(budget: str = "quick", seed: int = 0) -> dict:
    """Run the reproduction; returns the protocol dict (see :mod:`icml_tools.protocol`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        fast, text = fast_tier(budget, seed)
        t_all, t_text = time.perf_counter() - t0, text["seconds"]
    finally:
        torch.set_num_threads(threads)
    rows = []
    for key, accs in fast["probe"].items():
        m, h = mean_ci(accs)
        row = {"method": key, "probe_accuracy": m, "ci95": h, "seeds": len(accs)}
        row["probe_accuracy_gap_c1"], row["gap_c1_ci95"] = mean_ci(fast["probe_gap"][key])
        row["probe_per_seed"] = " ".join(f"{a:.3f}" for a in accs)
        row["probe_c_per_seed"] = " ".join(f"{c:g}" for c in fast["probe_c"][key])
        if key in fast["reward"]:
            for task in fast["reward"][key][0]:
                row[f"reward_{task}"], row[f"reward_{task}_ci95"] = mean_ci(
                    [r[task] for r in fast["reward"][key]]
                )
                row[f"start_reward_{task}"] = float(np.mean([r[task] for r in fast["start_reward"][key]]))
            row["train_seconds"] = float(np.mean(fast["times"][key]))
            curves = fast["curves"].get(key.split(":", 1)[1]) if key.startswith("ssl4rl:") else None
            if curves:
                row["final_entropy"] = float(np.mean([c["entropy"][-1] for c in curves]))
                row["final_frac_zero_std"] = float(np.mean([c["frac_zero_std"][-1] for c in curves]))
        rows.append(row)
    rows.append({"method": "raw pixels (8x8, same probe)", "probe_accuracy": fast["pixels"], "seeds": 1})
    by = {r["method"]: r for r in rows}
    rot, rnd = by["ssl4rl:rotation"], by["random-init"]
    reward_ok = rot["reward_rotation"] >= 0.8
    probe_ok = rot["probe_accuracy"] - rot["ci95"] > rnd["probe_accuracy"] + rnd["ci95"]
    text_gain = text["final_reward"] - text["post_warmup_reward"]
    text_ok = text_gain >= 0.3
    rows.append(
        {
            "method": "text tier (tiny VLM, rotation)",
            "post_warmup_reward": text["post_warmup_reward"],
            "final_reward": text["final_reward"],
            "gain": text_gain,
            "format_rate": text["final_format"],
            "train_seconds": t_text,
        }
    )
    figures = [
        _reward_figure(fast["curves"]),
        {
            "name": "ssl4rl_text_tier_reward",
            "title": "Tiny vision-language policy: GRPO on the rotation reward",
            "xlabel": "GRPO step",
            "ylabel": "mean rotation reward of sampled answers",
            "x": text["curve"]["step"],
            "series": {
                "rotation reward": text["curve"]["reward"],
                "format reward": text["curve"]["format"],
                "chance (0.25)": [0.25] * len(text["curve"]["step"]),
            },
            "kind": "line",
        },
    ]
    probe_names = [r["method"] for r in rows if "probe_accuracy" in r]
    figures.append(
        {
            "name": "ssl4rl_probe_accuracy",
            "title": "Linear probe, 10 labels per class (mean over seeds)",
            "xlabel": "encoder",
            "ylabel": "test accuracy",
            "x": probe_names,
            "series": {"probe accuracy": [by[n]["probe_accuracy"] for n in probe_names]},
            "kind": "bar",
        }
    )
    notes = (
        f"{t_all:.0f} s in all, text tier {t_text:.0f} s (1 torch thread per process). Criterion parts: reward "
        f"{reward_ok}, probe CIs {probe_ok}, text gain {text_ok} ({text_gain:+.3f}). Difficulty and "
        "combination effects are in the rows (full budget), reported as found."
    )
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "probe test accuracy after SSL4RL-rotation (higher is better); baseline: random-init encoder",
        "ours": rot["probe_accuracy"],
        "baseline": rnd["probe_accuracy"],
        "criterion": CRITERION,
        "passed": bool(reward_ok and probe_ok and text_ok),
        "threads": "1: small networks trained seed by seed on one torch thread, so the numbers do not depend on "
        "the machine's core count",
        "rows": rows,
        "figures": figures,
        "notes": notes,
        "text_curve": text["curve"],
    }


def _reward_figure(curves: dict) -> dict:
    series, x = {}, None
    for variant, runs in curves.items():
        x = runs[0]["step"]
        for task in runs[0]["reward"]:
            label = variant if len(runs[0]["reward"]) == 1 else f"{variant} ({task})"
            series[label] = np.mean([r["reward"][task] for r in runs], axis=0).tolist()
    return {
        "name": "ssl4rl_reward_curves",
        "title": "GRPO on SSL rewards (CNN policy, mean over seeds)",
        "xlabel": "GRPO step",
        "ylabel": "mean reward of sampled answers",
        "x": x,
        "series": series,
        "kind": "line",
    }
