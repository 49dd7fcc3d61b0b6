"""Estimators of the ratio ``k`` between a block stack's output change and its input change.

All three see the same measurements ``z = mean|Δout| / mean|Δin|`` over the interval between two computed
steps and predict the ratio for a later step:

- :class:`InstantRatio`: ``k = z``, the last measurement, unfiltered (EasyCache's transformation rate).
- :class:`RatioKalman`: NaviCache's released estimator: a one-dimensional random-walk Kalman filter with
  constant process noise ``Q`` and measurement noise ``R``; each measurement of the alignment phase
  re-initialises it (``k = z``, ``P = 1``).
- :class:`RatioDriftKalman`: the abstract's dual-state estimator (ratio and its drift per step) with a
  time-dependent process-noise schedule. **Our reconstruction**: the paper's text was not available and
  the released code has only the scalar filter. State ``[k, ḱ]``, transition ``[[1, Δ], [0, 1]]`` over
  ``Δ`` steps, ``H = [1, 0]``, process noise ``diag(q_k, q_d)·g(σ)·Δ`` with ``g(σ) = 0.1 + 0.9·σ`` (more
  uncertainty early in sampling, when σ is large), prediction ``k + ḱ·Δ``. The alignment phase fixes the
  initial ratio (last measurement) and drift (least-squares slope of the alignment measurements).
  A ratio of magnitudes is positive; when the drift would extrapolate it to zero or below (a ratio of 0
  would let the cache skip every later step), the prediction falls back to the filtered ratio without
  drift, or to the last measurement if that is not positive either, with a ``RuntimeWarning`` once per
  run (found on the DiT testbed, where a falling alignment ratio drove the extrapolation below zero).
"""

from __future__ import annotations

import warnings

from icml_generative.validation import check_positive


class RatioEstimator:
    """What NaviCache asks of an estimator: ``k``, the current ratio (None before the first measurement);
    ``align`` and ``update`` with a measurement ``z``; ``predict`` the ratio ``steps_ahead`` steps on."""

    k: float | None = None

    def reset(self) -> None:
        raise NotImplementedError

    def align(self, z: float, step: int) -> None:
        raise NotImplementedError

    def update(self, z: float, step: int, sigma: float) -> None:
        raise NotImplementedError

    def predict(self, steps_ahead: int) -> float:
        raise NotImplementedError

    def ratio(self) -> float:
        """``k``; a ``RuntimeError`` before the first measurement."""
        if self.k is None:
            raise RuntimeError(f"{type(self).__name__}: no measurement yet (align or update first)")
        return self.k


class InstantRatio(RatioEstimator):
    """The last measured ratio, unfiltered (EasyCache)."""

    def __init__(self) -> None:
        self.k = None

    def reset(self) -> None:
        self.k = None

    def align(self, z: float, step: int) -> None:
        self.k = z

    def update(self, z: float, step: int, sigma: float) -> None:
        self.k = z

    def predict(self, steps_ahead: int) -> float:
        return self.ratio()


class RatioKalman(RatioEstimator):
    """One-dimensional Kalman filter on the ratio with a random-walk model (NaviCache's release).

    ``update``: ``P ← P + Q``, ``K = P / (P + R)``, ``k ← k + K (z − k)``, ``P ← (1 − K) P``.
    """

    def __init__(self, process_noise: float = 0.05, measurement_noise: float = 0.05) -> None:
        self.q = check_positive(process_noise, "process_noise")
        self.r = check_positive(measurement_noise, "measurement_noise")
        self.reset()

    def reset(self) -> None:
        self.k = None
        self.p = 1.0

    def align(self, z: float, step: int) -> None:
        self.k, self.p = z, 1.0

    def update(self, z: float, step: int, sigma: float) -> None:
        if self.k is None:
            self.align(z, step)
            return
        self.p += self.q
        gain = self.p / (self.p + self.r)
        self.k += gain * (z - self.k)
        self.p *= 1.0 - gain

    def predict(self, steps_ahead: int) -> float:
        return self.ratio()


class RatioDriftKalman(RatioEstimator):
    """Two-state ``[ratio, drift]`` Kalman filter with a σ-dependent process noise (our reconstruction)."""

    def __init__(
        self, process_noise: float = 0.05, measurement_noise: float = 0.05, drift_noise: float = 0.005
    ) -> None:
        self.q = check_positive(process_noise, "process_noise")
        self.r = check_positive(measurement_noise, "measurement_noise")
        self.qd = check_positive(drift_noise, "drift_noise")
        self.reset()

    def reset(self) -> None:
        self.k = None
        self.d = 0.0
        self.p = [[1.0, 0.0], [0.0, self.qd]]  # covariance of (k, d)
        self.last_step: int | None = None
        self.last_z: float | None = None
        self._aligned: list[tuple[int, float]] = []
        self._warned = False

    @staticmethod
    def schedule(sigma: float) -> float:
        """g(σ): the process noise multiplier, 1 at σ = 1 falling to 0.1 at σ = 0."""
        return 0.1 + 0.9 * min(max(sigma, 0.0), 1.0)

    def align(self, z: float, step: int) -> None:
        self._aligned.append((step, z))
        n = len(self._aligned)
        if n >= 2:  # least-squares slope of the alignment measurements against the step index
            ms = sum(s for s, _ in self._aligned) / n
            mz = sum(v for _, v in self._aligned) / n
            var = sum((s - ms) ** 2 for s, _ in self._aligned)
            self.d = sum((s - ms) * (v - mz) for s, v in self._aligned) / var if var > 0 else 0.0
        self.k, self.last_step, self.last_z = z, step, z
        self.p = [[1.0, 0.0], [0.0, self.qd]]

    def update(self, z: float, step: int, sigma: float) -> None:
        if self.k is None or self.last_step is None:
            self.align(z, step)
            return
        dt = max(step - self.last_step, 1)
        g = self.schedule(sigma) * dt
        (p00, p01), (p10, p11) = self.p
        # predict: x <- F x, P <- F P F^T + Q
        k_pred = self.k + self.d * dt
        p00, p01, p10, p11 = (
            p00 + dt * (p10 + p01) + dt * dt * p11 + self.q * g,
            p01 + dt * p11,
            p10 + dt * p11,
            p11 + self.qd * g,
        )
        # measurement update with H = [1, 0]
        s = p00 + self.r
        g0, g1 = p00 / s, p10 / s
        innovation = z - k_pred
        self.k, self.d = k_pred + g0 * innovation, self.d + g1 * innovation
        self.p = [[(1 - g0) * p00, (1 - g0) * p01], [p10 - g1 * p00, p11 - g1 * p01]]
        self.last_step, self.last_z = step, z

    def predict(self, steps_ahead: int) -> float:
        k = self.ratio()
        pred = k + self.d * steps_ahead
        if pred > 0:
            return pred
        assert self.last_z is not None  # measured with k
        fallback = k if k > 0 else self.last_z
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"ratio+drift: the drift extrapolates the ratio to {pred:.3g} <= 0 ({steps_ahead} steps ahead); "
                f"using {fallback:.3g} "
                f"({'the filtered ratio without drift' if k > 0 else 'the last measurement'})",
                RuntimeWarning,
                stacklevel=2,
            )
        return fallback
