"""Reproduction ``bedtime-harness``: BEDTime's findings at small scale — a model reading plots describes
series better than one reading serialized numbers, and every model is fragile under robustness
transforms — on generated series with known attributes.

Harness sanity (2000 recognition and 2000 four-way differentiation items): random within 3 standard errors
of chance; the feature describer (least squares + BIC, no training) >= 95 % on clean data.

Headroom, measured first: a logistic regression on the description's length in characters and in words
alone (trained on 2000 recognition items, tested on the 2000 above) stays within 5 points of chance; each
transform's top severity lowers the feature describer's recognition accuracy by >= 10 points.

Comparison, seeds 0-2, three models trained here at equal steps (:mod:`.nets`: a plot CNN, a character CNN
on the numeric text, a 1-D CNN on the array; Adam 2e-3, batch 64, fresh series each step): (a) plot CNN
minus text model, correct-per-item differences on the same test items, pooled over seeds: the 95 %
paired-bootstrap interval above 0 on recognition and on differentiation; (b) for each trained model and
each transform, recognition accuracy at severities 0, 0.25, 0.5, 0.75, 1 (the same 600 items): the
least-squares slope's 95 % bootstrap interval (items resampled) below 0. SmolLM2-135M-Instruct on the numeric
text (full budget, 100 items per task, 48-step series), every describer's generation scores and the feature describer on
statsmodels' real series (:func:`realism`) are reported.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from icml_agents.bedtime import (
    TRANSFORMS,
    BackendDescriber,
    FeatureDescriber,
    RandomDescriber,
    build_differentiation,
    build_generation,
    build_recognition,
    evaluate,
)
from icml_agents_experiments.bedtime.nets import PlotCNN, SeriesCNN, TextCNN, train

SYSTEM = "bedtime-harness"
CLAIM = (
    "Describing time series: a model reading rendered plots beats one reading serialized numbers on "
    "recognition and differentiation, and every model's accuracy falls under robustness transforms."
)
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {
        "seeds": 1,
        "steps": 150,
        "test": 400,
        "robust": 200,
        "severities": (0.0, 0.5, 1.0),
        "smollm2": 0,
    },
    "full": {
        "seeds": 3,
        "steps": 600,
        "test": 1000,
        "robust": 600,
        "severities": (0.0, 0.25, 0.5, 0.75, 1.0),
        "smollm2": 100,
    },
}
SANITY_ITEMS, SANITY_SE, FEATURE_MIN = 2000, 3.0, 0.95
SMOLLM2_LENGTH = 48
LENGTH_SLACK, TRANSFORM_DROP = 0.05, 0.10
CRITERION = (
    f"sanity: random within {SANITY_SE:g} SE of chance, feature describer >= {FEATURE_MIN:.0%} (clean); headroom: "
    f"length-only classifier within {LENGTH_SLACK:.0%} of chance, each transform's top severity lowers the "
    f"feature describer by >= {TRANSFORM_DROP:.0%}; then (a) plot CNN - text model paired-bootstrap 95% interval "
    "above 0 on recognition and differentiation, (b) every trained model's accuracy slope over severity below 0 "
    "(95% interval) for every transform"
)
MODELS = {"plot": PlotCNN, "text": TextCNN, "array": SeriesCNN}


def _bootstrap(values: np.ndarray, seed: int, stat=np.mean, draws: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(draws, len(values)))
    stats = np.array([stat(values[i]) for i in idx])
    return float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975))


def length_classifier(seed: int) -> dict[str, float]:
    """Logistic regression on (characters, words) of the description: recognition accuracy held out."""
    from sklearn.linear_model import LogisticRegression

    def features(items):
        texts = [it.candidates[0] for it in items]
        return np.array([[len(t), len(t.split())] for t in texts], dtype=float), np.array(
            [it.answer for it in items]
        )

    xtr, ytr = features(build_recognition(SANITY_ITEMS, seed + 100))
    xte, yte = features(build_recognition(SANITY_ITEMS, seed + 200))
    clf = LogisticRegression().fit(xtr, ytr)
    return {"accuracy": float((clf.predict(xte) == yte).mean()), "chance": 0.5}


def _slope_interval(correct: np.ndarray, severities: np.ndarray, seed: int) -> tuple[float, float, float]:
    """OLS slope of accuracy over severity and its bootstrap interval; ``correct`` is (severities, items)."""
    centred = severities - severities.mean()

    def slope(cols: Any) -> float:
        return float(centred @ correct[:, cols].mean(axis=1) / (centred @ centred))

    rng = np.random.default_rng(seed)
    n = correct.shape[1]
    draws = np.array([slope(rng.integers(0, n, n)) for _ in range(1000)])
    return slope(np.arange(n)), float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))


def run(budget: str = "quick", seed: int = 0) -> dict[str, Any]:
    cfg = BUDGETS[budget]
    start = time.perf_counter()
    rec = build_recognition(SANITY_ITEMS, seed + 1)
    dif = build_differentiation(SANITY_ITEMS, 4, seed + 2)
    rows: list[dict[str, Any]] = []
    sanity = {}
    for describer in (RandomDescriber(seed), FeatureDescriber()):
        for items in (rec, dif):
            row = evaluate(describer, items)
            rows.append({k: v for k, v in row.items() if k != "correct"})
            key = f"{describer.name} {row['task']}"
            if describer.name == "random":
                sanity[key] = abs(row["accuracy"] - row["chance"]) <= SANITY_SE * np.sqrt(
                    row["chance"] * (1 - row["chance"]) / row["n"]
                )
            else:
                sanity[key] = row["accuracy"] >= FEATURE_MIN
    length = length_classifier(seed)
    robust_items = build_recognition(cfg["robust"], seed + 3)
    severities = np.array(cfg["severities"])
    feature = FeatureDescriber()
    feature_clean = evaluate(feature, robust_items)["accuracy"]
    feature_drop = {
        tr: feature_clean - evaluate(feature, robust_items, transform=tr, severity=1.0, seed=seed)["accuracy"]
        for tr in TRANSFORMS
    }
    headroom = {
        "length_classifier_at_chance": abs(length["accuracy"] - 0.5) <= LENGTH_SLACK,
        **{f"{tr}_lowers_feature_describer": d >= TRANSFORM_DROP for tr, d in feature_drop.items()},
    }
    # (a) and (b): the trained models
    test: dict[str, list[dict[str, np.ndarray]]] = {"recognition": [], "differentiation": []}  # per seed
    slopes: dict[str, dict[str, list]] = {m: {tr: [] for tr in TRANSFORMS} for m in MODELS}
    trained = {}
    for s in range(seed, seed + cfg["seeds"]):
        test_items = {
            "recognition": build_recognition(cfg["test"], 1000 + s),
            "differentiation": build_differentiation(cfg["test"], 4, 2000 + s),
        }
        per_task: dict[str, dict[str, np.ndarray]] = {t: {} for t in test_items}
        for modality, cls in MODELS.items():
            model = cls()
            log = train(model, cfg["steps"], s)
            trained[(modality, s)] = model
            for task, its in test_items.items():
                row = evaluate(model, its)
                per_task[task][modality] = np.array(row["correct"])
                rows.append(
                    {
                        **{k: v for k, v in row.items() if k != "correct"},
                        "seed": s,
                        "train_seconds": log["seconds"],
                    }
                )
            for tr in TRANSFORMS:
                correct = np.array(
                    [
                        evaluate(model, robust_items, transform=tr, severity=float(v), seed=s)["correct"]
                        for v in severities
                    ]
                )
                slopes[modality][tr].append(correct)
            gen = evaluate(model, build_generation(200, 3000 + s))
            rows.append({k: v for k, v in gen.items() if k != "descriptions"} | {"seed": s})
        for task in test_items:
            test[task].append(per_task[task])
    comparison: dict[str, dict[str, Any]] = {}
    for task in test:
        diff = np.concatenate([d["plot"] - d["text"] for d in test[task]]).astype(float)
        lo, hi = _bootstrap(diff, seed)
        comparison[task] = {
            "plot_accuracy": float(np.mean([d["plot"].mean() for d in test[task]])),
            "text_accuracy": float(np.mean([d["text"].mean() for d in test[task]])),
            "array_accuracy": float(np.mean([d["array"].mean() for d in test[task]])),
            "plot_minus_text": float(diff.mean()),
            "ci95": [lo, hi],
        }
    fragility: dict[str, dict[str, Any]] = {}
    for modality in MODELS:
        for tr in TRANSFORMS:
            correct = np.concatenate(slopes[modality][tr], axis=1)  # (severities, seeds * items)
            value, lo, hi = _slope_interval(correct, severities, seed)
            fragility[f"{modality}/{tr}"] = {
                "slope": value,
                "ci95": [lo, hi],
                "accuracy_by_severity": correct.mean(axis=1).round(4).tolist(),
            }
    checks = {
        "plot_beats_text_recognition": comparison["recognition"]["ci95"][0] > 0,
        "plot_beats_text_differentiation": comparison["differentiation"]["ci95"][0] > 0,
        "every_model_fragile_to_every_transform": all(f["ci95"][1] < 0 for f in fragility.values()),
    }
    smollm2 = _smollm2(cfg["smollm2"], seed) if cfg["smollm2"] else None
    if smollm2:
        rows.extend(smollm2)
    passed = all(sanity.values()) and all(headroom.values()) and all(checks.values())
    fragile_count = sum(f["ci95"][1] < 0 for f in fragility.values())
    return {
        "system": SYSTEM,
        "claim": CLAIM,
        "metric": "recognition accuracy, plot CNN (baseline: character CNN on serialized numbers), seed mean",
        "ours": comparison["recognition"]["plot_accuracy"],
        "baseline": comparison["recognition"]["text_accuracy"],
        "criterion": CRITERION,
        "passed": bool(passed),
        "sanity": {k: bool(v) for k, v in sanity.items()},
        "headroom": {"holds": bool(all(headroom.values())), **{k: bool(v) for k, v in headroom.items()}},
        "checks": {k: bool(v) for k, v in checks.items()},
        "length_classifier": length,
        "realism_feature_describer": realism(),
        "feature_describer_drop_at_top_severity": feature_drop,
        "comparison": comparison,
        "fragility": fragility,
        "rows": rows,
        "notes": (
            f"seeds {list(range(seed, seed + cfg['seeds']))}, {cfg['steps']} training steps per model. "
            + "; ".join(
                f"{t}: plot {c['plot_accuracy']:.3f}, text {c['text_accuracy']:.3f}, array {c['array_accuracy']:.3f}, "
                f"plot-text {c['plot_minus_text']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]"
                for t, c in comparison.items()
            )
            + f"; {fragile_count}/{len(fragility)} model x transform slopes below 0. Length classifier "
            f"{length['accuracy']:.3f}. {time.perf_counter() - start:.0f} s."
            + ("" if all(headroom.values()) else " NO HEADROOM: the comparison does not decide")
        ),
    }


def realism() -> dict[str, dict[str, Any]]:
    """The feature describer on statsmodels' bundled real series, standardised (reported): the Nile's annual
    flow (1871-1970, a known drop after the Aswan dam works of 1898), the last 120 monthly means of Mauna
    Loa CO2 (rising, with a 12-month cycle our vocabulary does not have), the last 120 years of sunspots."""
    import statsmodels.api as sm

    series = {
        "nile": sm.datasets.nile.load_pandas().data["volume"].to_numpy(float),
        "co2 (last 120 months)": sm.datasets.co2.load_pandas()
        .data["co2"]
        .resample("MS")
        .mean()
        .interpolate()
        .to_numpy()[-120:],
        "sunspots (last 120 years)": sm.datasets.sunspots.load_pandas()
        .data["SUNACTIVITY"]
        .to_numpy(float)[-120:],
    }
    out = {}
    for name, x in series.items():
        attrs = FeatureDescriber().attributes((x - x.mean()) / x.std())
        out[name] = attrs.as_dict()
    return out


def _smollm2(n: int, seed: int) -> list[dict[str, Any]]:
    """SmolLM2-135M-Instruct on the numeric text (reported, not in the verdict)."""
    from icml_agents.backends import HFLocalBackend
    from icml_tools.assets import smollm2

    model, tokenizer = smollm2()
    describer = BackendDescriber(
        HFLocalBackend(model, tokenizer, batch_size=8), decimals=1, name="SmolLM2-135M"
    )
    out = []
    # 48-step series: a 135M model on 2 CPU cores reads about 2 prompts of 250 tokens a second
    for items in (
        build_recognition(n, 4000 + seed, SMOLLM2_LENGTH),
        build_differentiation(n, 4, 5000 + seed, SMOLLM2_LENGTH),
    ):
        row = evaluate(describer, items, batch_size=16)
        out.append({k: v for k, v in row.items() if k != "correct"})
    return out
