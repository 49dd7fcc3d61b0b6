"""The method's regime (issue 24): synthetic traces with a noisy measured ratio, where NaviCache's filtered error
judgment is compared with EasyCache's instantaneous ratio at equal numbers of skips. No diffusion model.

A trace (:func:`make_traces`, :class:`TraceFamily`) has the reproduction's schedule: ``steps`` = 30 steps, the
first ``alignment_steps`` = 6 and the last computed, 23 that may be skipped; ``σ_t`` of the flow schedule with
shift 3 (:func:`~icml_generative_experiments.cache.testbed.flow_sigmas`). For every step ``t ≥ 1``:

- the input change ``d_t = (σ_{t−1} − σ_t) · exp(0.1 η_t)``;
- the true ratio ``k_t = exp(b · t / (steps − 1) + w_t)``, ``b ~ U(−2, 2)`` per trace, ``w`` a Gaussian random
  walk with step 0.05 and ``w_0 = 0``;
- the output norm is 1, so the true accumulated error from the last computed step ``c`` to ``t`` is
  ``e(c, t) = Σ_{c<j≤t} k_j d_j``;
- the ratio measured at a computed step ``t`` is ``z = e(c, t) / Σ_{c<j≤t} d_j · exp(s ε_t)``, ``ε_t ~ N(0, 1)``:
  multiplicative log-normal measurement noise of size ``s`` (:data:`SIGMAS`), the same ``ε`` for every rule and
  every ``s`` (common random numbers).

The rules (:func:`simulate`) are NaviCache's rule, the first 6 and the last step computed, ``E += k̂ d_t``,
skip while ``E < τ``, ``E = 0`` on computing; they differ only in ``k̂``: ``"filtered"``, the released scalar
Kalman filter (:class:`~icml_generative.cache.estimators.RatioKalman`, Q = R = 0.05; each alignment
measurement re-initialises it), ``"instant"``, the last measurement (EasyCache,
:class:`~icml_generative.cache.estimators.InstantRatio`), and ``"oracle"``, the true ``k_t`` (then ``E`` is the
true error). Vectorised over thresholds and traces in numpy; a test checks it against the library's
estimators step by step. Each rule's threshold runs over ``τ = m · g``, ``g`` in :data:`THRESHOLD_FACTORS`
(241 geometric points from 0.01 to 100), ``m`` the trace's mean ``k_t d_t``.

Metric at equal skips: the total true error of the outputs reused at the skipped steps,
``Σ_{skipped t} e(c(t), t)``, matched at ``S`` = 9, 12 and 15 skipped steps (:data:`SKIP_TARGETS`; 21, 18 and 15
of 30 forwards) with :func:`~icml_generative_experiments.cache.matching.interp_at` (points with equal ``S``
averaged, linear interpolation in ``S``). Per (trace, noise draw) the item is the mean over the three ``S`` of
``log(error(rule) / error(instant))``; intervals: :func:`icml_tools.claims.nested_bootstrap_interval` over
(traces, noise draws), 10,000 resamples, 95 %. Sizes (:data:`SIZES`): full 100 traces × 10 noise draws, quick
20 × 5; traces, then noise, drawn from ``numpy.random.default_rng([24, seed])``.

Headroom (fixed before the full run): at ``s`` = 0.2 and at ``s`` = 0.4 the oracle's interval against instant
lies below 0. Criterion: at ``s`` = 0.2 and at ``s`` = 0.4 the filtered rule's interval against instant lies
below 0. ``s`` = 0 and 0.1 are reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from icml_generative.validation import check_choice, check_int, check_number, check_positive
from icml_generative_experiments.cache.matching import interp_at
from icml_generative_experiments.cache.testbed import flow_sigmas
from icml_tools.claims import nested_bootstrap_interval

SIGMAS = (0.0, 0.1, 0.2, 0.4)  # sizes of the measurement noise (std of log z)
DECIDING_SIGMAS = (0.2, 0.4)  # where the headroom and the criterion are judged; the others are reported
SKIP_TARGETS = (9, 12, 15)  # skipped steps of the 23 that may be skipped (21, 18, 15 of 30 forwards)
THRESHOLD_FACTORS = np.geomspace(0.01, 100.0, 241)  # thresholds, in units of the trace's mean k_t d_t
RULES = ("oracle", "filtered", "instant")
PROCESS_NOISE = 0.05  # the released Q and R
MEASUREMENT_NOISE = 0.05
SIZES = {"quick": (20, 5), "full": (100, 10)}  # (traces, noise draws per trace)
BOOTSTRAP = 10_000


@dataclass(frozen=True)
class TraceFamily:
    """The synthetic traces: schedule, trend and random walk of the true ratio, jitter of the input change."""

    steps: int = 30
    alignment_steps: int = 6
    shift: float = 3.0
    trend: float = 2.0  # log k_t changes by b ~ U(-trend, trend) over the schedule
    walk: float = 0.05  # step of the Gaussian random walk of log k_t
    input_jitter: float = 0.1  # std of log d_t around the flow schedule's step

    def __post_init__(self) -> None:
        check_int(self.steps, "steps", 3)
        check_int(self.alignment_steps, "alignment_steps", 2)
        if self.alignment_steps >= self.steps - 1:
            raise ValueError(
                f"alignment_steps must leave steps to skip (< steps - 1 = {self.steps - 1}), "
                f"got {self.alignment_steps}"
            )
        check_positive(self.shift, "shift")
        for name in ("trend", "walk", "input_jitter"):
            check_number(getattr(self, name), name, 0)


def make_traces(family: TraceFamily, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` traces: the true ratio ``k`` and the input change ``d``, both ``(n, steps)`` (``d[:, 0] = 0``)."""
    check_int(n, "n", 1)
    steps = family.steps
    sigmas = flow_sigmas(steps, family.shift).numpy()
    step_size = np.zeros(steps)
    step_size[1:] = sigmas[:-2] - sigmas[1:-1]  # σ_{t−1} − σ_t for t = 1 .. steps − 1
    b = rng.uniform(-family.trend, family.trend, (n, 1))
    w = np.cumsum(family.walk * rng.standard_normal((n, steps)), axis=1)
    w -= w[:, :1]
    k = np.exp(b * np.arange(steps) / (steps - 1) + w)
    d = step_size * np.exp(family.input_jitter * rng.standard_normal((n, steps)))
    d[:, 0] = 0.0
    return k, d


def simulate(
    k: np.ndarray,
    d: np.ndarray,
    eps: np.ndarray,
    noise: float,
    rule: str,
    thresholds: np.ndarray,
    alignment_steps: int,
    process_noise: float = PROCESS_NOISE,
    measurement_noise: float = MEASUREMENT_NOISE,
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``rule`` on traces ``k``, ``d`` (``(L, T)``) with noise ``exp(noise · eps)`` (``eps``: ``(L, T)``) at
    thresholds ``(L, G)``; returns the skipped steps and the total true error of the reused outputs, ``(L, G)``."""
    check_choice(rule, "rule", RULES)
    check_number(noise, "noise", 0)
    if not (k.shape == d.shape == eps.shape and k.ndim == 2):
        raise ValueError(f"k, d and eps must have one shape (L, T), got {k.shape}, {d.shape}, {eps.shape}")
    if thresholds.ndim != 2 or thresholds.shape[0] != k.shape[0]:
        raise ValueError(f"thresholds must be (L, G) with L = {k.shape[0]}, got {thresholds.shape}")
    steps = k.shape[1]
    shape = thresholds.shape
    cum_err = np.cumsum(k * d, axis=1)  # e(c, t) = cum_err[t] − cum_err[c]
    cum_in = np.cumsum(d, axis=1)
    last = np.zeros(shape, dtype=np.int64)  # the last computed step (step 0 is computed)
    acc = np.zeros(shape)  # E
    ratio = np.zeros(shape)  # k̂
    var = np.ones(shape)  # the filter's P
    skips = np.zeros(shape, dtype=np.int64)
    error = np.zeros(shape)
    for t in range(1, steps):
        true_err = cum_err[:, t : t + 1] - np.take_along_axis(cum_err, last, axis=1)
        if t < alignment_steps or t == steps - 1:
            compute = np.ones(shape, dtype=bool)
        else:
            acc = acc + (k[:, t : t + 1] if rule == "oracle" else ratio) * d[:, t : t + 1]
            compute = acc >= thresholds
        skip = ~compute
        skips += skip
        error += np.where(skip, true_err, 0.0)
        z = true_err / (cum_in[:, t : t + 1] - np.take_along_axis(cum_in, last, axis=1))
        z = z * np.exp(noise * eps[:, t : t + 1])
        if rule == "instant" or (rule == "filtered" and t < alignment_steps):
            ratio = np.where(compute, z, ratio)
            var = np.where(compute, 1.0, var)
        elif rule == "filtered":
            prior = var + process_noise
            gain = prior / (prior + measurement_noise)
            ratio = np.where(compute, ratio + gain * (z - ratio), ratio)
            var = np.where(compute, (1.0 - gain) * prior, var)
        acc = np.where(compute, 0.0, acc)
        last = np.where(compute, t, last)
    return skips, error


def matched_errors(skips: np.ndarray, error: np.ndarray, targets=SKIP_TARGETS) -> np.ndarray:
    """Per lane, the error interpolated at each target number of skips: ``(L, len(targets))``."""
    return np.array(
        [
            [interp_at(zip(s.tolist(), e.tolist(), strict=True), target) for target in targets]
            for s, e in zip(skips, error, strict=True)
        ]
    )


def _interval(items: np.ndarray, seed: int) -> list[float]:
    if not np.isfinite(items).all():
        return [math.nan, math.nan]
    return nested_bootstrap_interval(items, resamples=BOOTSTRAP, seed=seed)


def regime_study(budget: str = "quick", seed: int = 0, family: TraceFamily = TraceFamily()) -> dict[str, Any]:
    """The trace study of the reproduction: rows per noise size and comparison, the headroom and the verdict."""
    check_choice(budget, "budget", tuple(SIZES))
    n, draws = SIZES[budget]
    rng = np.random.default_rng([24, seed])
    k, d = make_traces(family, n, rng)
    eps = rng.standard_normal((n, draws, family.steps))
    k_l, d_l = np.repeat(k, draws, axis=0), np.repeat(d, draws, axis=0)
    eps_l = eps.reshape(n * draws, family.steps)
    scale = (k_l * d_l)[:, 1:].mean(axis=1, keepdims=True)
    thresholds = scale * THRESHOLD_FACTORS[None, :]
    rows, headroom, criterion = [], True, True
    for noise in SIGMAS:
        matched = {}
        for rule in RULES:
            skips, error = simulate(k_l, d_l, eps_l, noise, rule, thresholds, family.alignment_steps)
            matched[rule] = matched_errors(skips, error)
        for rule in ("oracle", "filtered"):
            log_ratio = np.log(matched[rule] / matched["instant"])  # (lanes, targets)
            items = log_ratio.mean(axis=1).reshape(n, draws)
            lo, hi = _interval(items, seed)
            deciding = noise in DECIDING_SIGMAS
            below = bool(hi < 0)  # False when undefined (NaN)
            role = ("headroom" if rule == "oracle" else "criterion") if deciding else "reported"
            if deciding and rule == "oracle":
                headroom &= below
            if deciding and rule == "filtered":
                criterion &= below
            row = {
                "kind": "regime",
                "sigma": noise,
                "comparison": f"{rule} vs instant",
                "role": role,
                "mean_log_error_ratio": float(np.mean(items)) if np.isfinite(items).all() else math.nan,
                "ci_low": lo,
                "ci_high": hi,
                "below_zero": below,
                "traces": n,
                "noise_draws": draws,
            }
            for j, target in enumerate(SKIP_TARGETS):
                row[f"mean_log_error_ratio_skips_{target}"] = float(np.nanmean(log_ratio[:, j]))
            rows.append(row)
    return {"rows": rows, "headroom": headroom, "criterion": criterion, "passed": headroom and criterion}
