"""Describers (anything that answers BEDTime's tasks) and the evaluation API.

A describer has ``recognize(items) -> (n,) bool``, ``differentiate(items) -> (n,) int`` and
``describe(series) -> list[str]``, and a ``modality`` (``"array"``, ``"text"`` or ``"plot"``: what it reads).

- :class:`AttributeDescriber`: the base for models that predict each attribute's distribution from the
  series (``predict_proba``). A description is scored by the log-probability of the attributes it states
  (the position only with an event); recognition answers true iff every stated value is the model's most
  probable one; differentiation picks the best-scored candidate; generation describes the most probable
  attributes. Trained networks (plot CNN, text model, 1-D CNN) subclass it with their own
  ``predict_proba``.
- :class:`FeatureDescriber`: a regression-based describer (least squares with trend, seasonal and event
  regressors, model choice by BIC), no training.
- :class:`RandomDescriber`: uniform guesses (the chance baseline).
- :class:`BackendDescriber`: any language-model backend (:mod:`icml_agents.backends`: local Hugging Face
  models such as SmolLM2, OpenAI-compatible servers, scripted) reading the numeric-text serialization,
  answering by log-likelihood of the answer tokens, generating descriptions by greedy decoding.

:func:`evaluate` runs a describer on items in batches (optionally under a robustness transform) and returns
a results row; :func:`results_table` formats rows as Markdown.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from icml_agents.backends import Backend
from icml_agents.bedtime.modalities import TRANSFORMS, perturb, serialize
from icml_agents.bedtime.series import ATTRIBUTES, PERIODS, Attributes, describe, parse_description
from icml_agents.bedtime.tasks import Item, attribute_scores, bleu, chance, check_items, rouge_l
from icml_agents.validation import check_choice, check_int, check_real, check_seed

MODALITIES = ("array", "text", "plot")
MAX_BATCH = 1 << 16


def _check_series_list(series: Any) -> list[np.ndarray]:
    if not isinstance(series, (list, tuple)) or not series:
        raise ValueError("series must be a non-empty list of 1-D arrays")
    out = []
    for i, x in enumerate(series):
        arr = np.asarray(x, dtype=np.float64) if not isinstance(x, str) else None
        if arr is None or arr.ndim != 1 or arr.size < 2 or np.isinf(arr).any() or np.isnan(arr).all():
            raise ValueError(f"series[{i}] must be a 1-D array of at least 2 steps, finite or NaN")
        out.append(arr)
    return out


class Describer(ABC):
    """What :func:`evaluate` runs: answers for each task, and the modality it reads."""

    modality: str = "array"
    name: str = "describer"

    @abstractmethod
    def recognize(self, items: Sequence[Item]) -> np.ndarray: ...

    @abstractmethod
    def differentiate(self, items: Sequence[Item]) -> np.ndarray: ...

    @abstractmethod
    def describe(self, series: Sequence[np.ndarray]) -> list[str]: ...


class AttributeDescriber(Describer):
    """A describer built on ``predict_proba(series) -> {attribute: (n, n_values) probabilities}`` (rows sum
    to 1, columns in :data:`~icml_agents.bedtime.series.ATTRIBUTES` order; ``position`` conditional on an
    event)."""

    @abstractmethod
    def predict_proba(self, series: Sequence[np.ndarray]) -> dict[str, np.ndarray]: ...

    def _proba(self, series: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        probs = self.predict_proba(list(series))
        for name, values in ATTRIBUTES.items():
            p = np.asarray(probs.get(name))
            if p.shape != (len(series), len(values)) or not np.isfinite(p).all():
                raise ValueError(
                    f"{type(self).__name__}.predict_proba must return {name!r} shaped "
                    f"({len(series)}, {len(values)}), finite, got {getattr(p, 'shape', None)}"
                )
        return {k: np.asarray(probs[k], dtype=np.float64) for k in ATTRIBUTES}

    @staticmethod
    def _log_score(probs: dict[str, np.ndarray], i: int, text: str) -> tuple[float, bool]:
        """(log-probability of the stated attributes, whether each stated value is the argmax)."""
        stated = parse_description(text)
        total, top = 0.0, True
        for name, value in stated.items():
            if value is None:
                continue
            row = probs[name][i]
            j = ATTRIBUTES[name].index(value)
            total += math.log(max(float(row[j]), 1e-12))
            top = top and int(np.argmax(row)) == j
        return total, top

    def recognize(self, items: Sequence[Item]) -> np.ndarray:
        items = check_items(items, "recognition")
        probs = self._proba([it.series for it in items])
        return np.array([self._log_score(probs, i, it.candidates[0])[1] for i, it in enumerate(items)])

    def differentiate(self, items: Sequence[Item]) -> np.ndarray:
        items = check_items(items, "differentiation")
        probs = self._proba([it.series for it in items])
        return np.array(
            [
                int(np.argmax([self._log_score(probs, i, c)[0] for c in it.candidates]))
                for i, it in enumerate(items)
            ]
        )

    def describe(self, series: Sequence[np.ndarray]) -> list[str]:
        probs = self._proba(_check_series_list(series))
        out = []
        for i in range(len(series)):
            values: dict[str, Any] = {k: ATTRIBUTES[k][int(np.argmax(probs[k][i]))] for k in ATTRIBUTES}
            if values["event"] == "none":
                values["position"] = None
            out.append(describe(Attributes(**values), i))
        return out


def one_hot(labels: Sequence[Attributes], smoothing: float = 1e-3) -> dict[str, np.ndarray]:
    """Attribute probabilities that put ``1 − smoothing`` on each given value (uniform position for
    series without an event)."""
    if not isinstance(labels, (list, tuple)) or not labels:
        raise ValueError(f"labels must be a non-empty list of Attributes, got {type(labels).__name__}")
    for i, a in enumerate(labels):
        if not isinstance(a, Attributes):
            raise TypeError(f"labels[{i}] must be an Attributes, got {type(a).__name__}")
    smoothing = check_real(smoothing, "smoothing", "[0, 1)")
    out = {}
    for name, values in ATTRIBUTES.items():
        p = np.full((len(labels), len(values)), smoothing / len(values))
        for i, a in enumerate(labels):
            v = getattr(a, name)
            if v is None:
                p[i] = 1.0 / len(values)
            else:
                p[i, values.index(v)] += 1 - smoothing
        out[name] = p
    return out


class FeatureDescriber(AttributeDescriber):
    """Least-squares describer. For each seasonality (none, period 6, period 20) it fits intercept + slope
    (+ sine and cosine of the period) and, over every step ``k``, an added impulse (spike) or step (level
    shift) at ``k``; the model of least BIC wins (the event's location counts as a parameter). Then: trend
    from the slope (``> 1.5`` increasing, ``< −1.5`` decreasing), noise from the residual std (``> 0.25``
    high), event and its sign from the chosen regressor, position from ``k`` (thirds of the series).
    Missing values are skipped; the time axis is the step index scaled to ``[0, 1]``. Thresholds sit halfway
    between the generator's values: a feature baseline, not a learned model."""

    modality = "array"
    name = "feature describer"

    def attributes(self, x: np.ndarray) -> Attributes:
        """The attributes of one series by the regression (class docstring)."""
        x = np.asarray(x, dtype=np.float64)
        n = x.size
        steps = np.arange(n)
        ok = ~np.isnan(x)
        y, t = x[ok], (steps / max(n - 1, 1))[ok]
        m = y.size
        spikes = np.eye(n)[ok]  # (m, n): impulse at each step
        shifts = (steps[None, :] <= steps[:, None]).astype(float)[ok]  # (m, n): step from each step on
        best: tuple[Any, ...] | None = None
        for season in ATTRIBUTES["seasonality"]:
            cols = [np.ones(m), t]
            if season != "none":
                w = 2 * math.pi * steps[ok] / PERIODS[season]
                cols += [np.sin(w), np.cos(w)]
            basis = np.stack(cols, 1)
            q = np.linalg.qr(basis)[0]
            r = y - q @ (q.T @ y)
            sse0 = float(r @ r)
            candidates = [("none", sse0, -1, 0)]
            for event, e in (("spike", spikes), ("shift", shifts)):
                denom = (e * e).sum(0) - ((q.T @ e) ** 2).sum(0)
                num = r @ e
                gain = np.where(denom > 1e-9, num**2 / np.where(denom > 1e-9, denom, 1.0), -np.inf)
                k = int(np.argmax(gain))
                candidates.append((event, sse0 - float(gain[k]), k, 2))
            for event, sse, k, extra in candidates:
                p = basis.shape[1] + extra
                bic = m * math.log(max(sse, 1e-12) / m) + p * math.log(m)
                if best is None or bic < best[0]:
                    best = (bic, season, event, k, p, sse)
        assert best is not None
        _, season, event, k, p, sse = best
        cols = [np.ones(m), t]
        if season != "none":
            w = 2 * math.pi * steps[ok] / PERIODS[season]
            cols += [np.sin(w), np.cos(w)]
        if event == "spike":
            cols.append(spikes[:, k])
        elif event == "shift":
            cols.append(shifts[:, k])
        coef = np.linalg.lstsq(np.stack(cols, 1), y, rcond=None)[0]
        slope = float(coef[1])
        trend = "increasing" if slope > 1.5 else ("decreasing" if slope < -1.5 else "flat")
        noise = "high" if math.sqrt(sse / max(m - p, 1)) > 0.25 else "low"
        if event == "none":
            return Attributes(trend, season, noise, "none", None)
        name = "spike" if event == "spike" else ("shift up" if coef[-1] > 0 else "shift down")
        position = ATTRIBUTES["position"][min(2, int(3 * k / n))]
        return Attributes(trend, season, noise, name, position)

    def predict_proba(self, series: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return one_hot([self.attributes(x) for x in series])


class RandomDescriber(Describer):
    """Uniform guesses from ``seed``: a fair coin for recognition, a uniform candidate for differentiation,
    random attributes for generation."""

    name = "random"

    def __init__(self, seed: int = 0, modality: str = "array") -> None:
        self.rng = check_seed(seed)
        self.modality = check_choice(modality, "modality", MODALITIES)

    def recognize(self, items: Sequence[Item]) -> np.ndarray:
        return self.rng.random(len(check_items(items, "recognition"))) < 0.5

    def differentiate(self, items: Sequence[Item]) -> np.ndarray:
        items = check_items(items, "differentiation")
        return np.array([int(self.rng.integers(len(it.candidates))) for it in items])

    def describe(self, series: Sequence[np.ndarray]) -> list[str]:
        from icml_agents.bedtime.series import random_attributes

        return [describe(random_attributes(self.rng), self.rng) for _ in _check_series_list(series)]


class BackendDescriber(Describer):
    """A language-model backend on the numeric-text serialization (``decimals`` decimals).

    Recognition compares the log-likelihoods of ``" True"`` and ``" False"`` after the prompt;
    differentiation lists the candidates as ``A``, ``B``, ... and picks the letter of highest
    log-likelihood; generation decodes greedily up to ``max_new_tokens``. Prompts go to the backend in one
    call per :func:`evaluate` batch.
    """

    modality = "text"

    def __init__(self, backend: Backend, decimals: int = 1, max_new_tokens: int = 40, name: str = "") -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be an icml_agents Backend, got {type(backend).__name__}")
        self.backend = backend
        self.decimals = check_int(decimals, "decimals", 0, 12)
        self.max_new_tokens = check_int(max_new_tokens, "max_new_tokens", 1, 4096)
        self.name = name or backend.cache_id

    def _series_text(self, x: np.ndarray) -> str:
        return f"Time series: {serialize(x, self.decimals)}\n"

    def recognize(self, items: Sequence[Item]) -> np.ndarray:
        items = check_items(items, "recognition")
        prompts = [
            f"{self._series_text(it.series)}Description: {it.candidates[0]}\n"
            "Does the description match the time series? Answer True or False.\nAnswer:"
            for it in items
        ]
        scores = self.backend.logprobs(prompts * 2, [" True"] * len(items) + [" False"] * len(items))
        return np.array([scores[i].total > scores[i + len(items)].total for i in range(len(items))])

    def differentiate(self, items: Sequence[Item]) -> np.ndarray:
        items = check_items(items, "differentiation")
        prompts, conts, owner = [], [], []
        for i, it in enumerate(items):
            letters = [chr(65 + j) for j in range(len(it.candidates))]
            options = "".join(f"{a}. {c}\n" for a, c in zip(letters, it.candidates, strict=True))
            prompt = (
                f"{self._series_text(it.series)}Which description matches the time series?\n{options}Answer:"
            )
            for a in letters:
                prompts.append(prompt)
                conts.append(f" {a}")
                owner.append(i)
        scores = [s.total for s in self.backend.logprobs(prompts, conts)]
        out = np.zeros(len(items), dtype=int)
        for i in range(len(items)):
            mine = [s for s, o in zip(scores, owner, strict=True) if o == i]
            out[i] = int(np.argmax(mine))
        return out

    def describe(self, series: Sequence[np.ndarray]) -> list[str]:
        prompts = [
            f"{self._series_text(x)}Describe the trend, seasonality, noise and any spike or level shift of "
            "this time series in one sentence.\nDescription:"
            for x in _check_series_list(series)
        ]
        completions = self.backend.generate(prompts, max_new_tokens=self.max_new_tokens, stop="\n")
        return [c.text.strip() for c in completions]


def evaluate(
    describer: Describer,
    items: Sequence[Item],
    *,
    batch_size: int = 64,
    transform: str | None = None,
    severity: float = 0.0,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run ``describer`` on ``items`` (one task per call), ``batch_size`` items per call, each series first
    perturbed by ``transform`` at ``severity`` (item ``i`` seeded by ``seed + i``). ``progress(done,
    total)`` is called after each batch.

    Returns a results row: ``task``, ``describer``, ``modality``, ``n``, ``transform``, ``severity``,
    ``seconds``, ``items_per_second`` and, for recognition and differentiation, ``accuracy``, its binomial
    standard error ``se``, ``chance`` and the per-item ``correct`` (0/1 list, for paired comparisons); for
    generation, mean attribute ``precision``, ``recall``, ``f1``, ``bleu`` and ``rouge_l``.
    """
    if not isinstance(describer, Describer):
        raise TypeError(f"describer must be a bedtime Describer, got {type(describer).__name__}")
    items = check_items(items)
    task = items[0].task
    check_items(items, task)
    check_int(batch_size, "batch_size", 1, MAX_BATCH)
    if transform is not None:
        check_choice(transform, "transform", TRANSFORMS)
    severity = check_real(severity, "severity", "[0, 1]")
    check_int(seed, "seed", 0, 2**62)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable (done, total), got {type(progress).__name__}")
    if transform is not None:
        items = [
            Item(
                it.task,
                perturb(it.series, transform, severity, seed + i),
                it.attributes,
                it.candidates,
                it.answer,
                it.reference,
                it.changed,
            )
            for i, it in enumerate(items)
        ]
    start = time.perf_counter()
    answers: list[Any] = []
    for lo in range(0, len(items), batch_size):
        batch = items[lo : lo + batch_size]
        if task == "recognition":
            answers.extend(np.asarray(describer.recognize(batch), dtype=bool).tolist())
        elif task == "differentiation":
            answers.extend(np.asarray(describer.differentiate(batch), dtype=int).tolist())
        else:
            answers.extend(describer.describe([it.series for it in batch]))
        if progress is not None:
            progress(min(lo + batch_size, len(items)), len(items))
    seconds = time.perf_counter() - start
    row: dict[str, Any] = {
        "task": task,
        "describer": getattr(describer, "name", type(describer).__name__),
        "modality": describer.modality,
        "n": len(items),
        "transform": transform or "none",
        "severity": severity,
        "seconds": seconds,
        "items_per_second": len(items) / seconds if seconds > 0 else math.inf,
    }
    if task == "generation":
        scores = [attribute_scores(text, it.attributes) for text, it in zip(answers, items, strict=True)]
        for key in ("precision", "recall", "f1"):
            row[key] = float(np.mean([s[key] for s in scores]))
        row["bleu"] = float(np.mean([bleu(a, it.reference) for a, it in zip(answers, items, strict=True)]))
        row["rouge_l"] = float(
            np.mean([rouge_l(a, it.reference) for a, it in zip(answers, items, strict=True)])
        )
        row["descriptions"] = answers
        return row
    truth = [bool(it.answer) if task == "recognition" else it.answer for it in items]
    correct = [int(a == b) for a, b in zip(answers, truth, strict=True)]
    acc = float(np.mean(correct))
    row.update(
        accuracy=acc,
        se=math.sqrt(acc * (1 - acc) / len(items)),
        chance=chance(items),
        correct=correct,
    )
    return row


def results_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows of :func:`evaluate` as a Markdown table (accuracy ± se or attribute F1 / BLEU / ROUGE-L)."""
    if not isinstance(rows, (list, tuple)):
        raise TypeError(f"rows must be a list of evaluate() results, got {type(rows).__name__}")
    lines = [
        "| task | describer | modality | transform | severity | n | score | items/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not isinstance(r, dict) or "task" not in r:
            raise ValueError(f"rows must hold evaluate() results, got {r!r}")
        score = (
            f"F1 {r['f1']:.3f} · BLEU {r['bleu']:.3f} · ROUGE-L {r['rouge_l']:.3f}"
            if r["task"] == "generation"
            else f"{r['accuracy']:.3f} ± {r['se']:.3f} (chance {r['chance']:.3f})"
        )
        lines.append(
            f"| {r['task']} | {r['describer']} | {r['modality']} | {r['transform']} | {r['severity']:g} | "
            f"{r['n']} | {score} | {r['items_per_second']:.1f} |"
        )
    return "\n".join(lines)
