"""Testing by betting: wealth processes, betting-fraction strategies and Ville's rejection rule.

A sequential test of H0 bets on payoffs ``g_t >= -1`` whose conditional mean given the past is ``<= 0``
under H0. With a *predictable* fraction ``lambda_t in [0, 1]`` (chosen before ``g_t`` is seen) the wealth

    W_0 = 1,   W_t = W_{t-1} (1 + lambda_t g_t)

is a nonnegative supermartingale under H0, so by Ville's inequality ``P(sup_t W_t >= 1/alpha) <= alpha``:
rejecting the first time the wealth reaches ``1/alpha`` is valid at any data-dependent stopping time,
and ``min(1, 1 / sup_t W_t)`` is an anytime-valid p-value.

Strategies (each ``fraction()`` before a payoff, ``observe(g)`` after it):

* :class:`ONS`: online Newton step on ``-log(1 + lambda g)`` (Cutkosky & Orabona 2018; the choice of
  SKIT, Podkopaev et al. 2023), fractions in ``[0, max_fraction]``;
* :class:`AGRAPA`: approximate GRAPA, ``lambda = mean(g) / mean(g^2)`` of the payoffs so far, clipped;
* :class:`SigmoidFraction`: ``lambda = sigmoid(beta)`` with ``beta`` maximising the log-wealth of a set
  of payoffs (SKCI learns it on past data, Kelly-style) plus a Gaussian penalty on ``beta``;
* :class:`ConstantFraction`.

:class:`MixtureWealth` averages the wealth of a grid of constant fractions (e-CRT's choice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize_scalar

from icml_stats.validation import as_array, check_int, check_real

ONS_RATE = 2.0 / (2.0 - math.log(3.0))  # Cutkosky & Orabona's step for payoffs in [-1, 1]
MAX_GRID = 1_000_000  # MixtureWealth's fractions: a finer grid changes the mixture by nothing visible
LOGIT_MAX = 50.0  # |beta0| beyond this puts sigmoid(beta0) at 0 or 1 to double precision


def ville_threshold(alpha) -> float:
    """The wealth ``1/alpha`` at which a test-by-betting rejects at level ``alpha`` (Ville's inequality)."""
    threshold = 1.0 / check_real(alpha, "alpha", "(0, 1)")
    if math.isinf(threshold):
        raise ValueError(
            f"alpha must be at least {1 / np.finfo(float).max:g} (1/alpha overflows), got {alpha!r}"
        )
    return threshold


def anytime_p_value(wealth) -> float:
    """``min(1, 1 / max(1, sup_t W_t))``: valid at any stopping time by Ville's inequality."""
    w = as_array(wealth, "wealth", interval="[0, inf]")  # an infinite wealth is a p-value of 0
    if w.ndim != 1:
        raise ValueError(
            f"wealth must be a 1-D array of nonnegative numbers without NaN, got shape {w.shape}"
        )
    top = max(1.0, float(w.max())) if w.size else 1.0
    return min(1.0, 1.0 / top)


def _payoff(g) -> float:
    """A payoff ``>= -1``, so that ``1 + lambda g >= 0`` for every fraction ``lambda`` in [0, 1]."""
    return check_real(g, "payoff", "[-1, inf)")


class ConstantFraction:
    """Bet the same fraction every round."""

    def __init__(self, fraction: float = 0.5):
        self.value = check_real(fraction, "fraction", "(0, 1]")

    def fraction(self) -> float:
        return self.value

    def observe(self, payoff) -> None:
        _payoff(payoff)


class ONS:
    """Online Newton step on the loss ``-log(1 + lambda g)``, fractions in ``[0, max_fraction]``.

    ``max_fraction <= 1/2`` keeps ``1 + lambda g >= 1/2`` for payoffs in ``[-1, 1]``, which is what the
    step size assumes; larger payoffs are allowed (the wealth only grows faster).
    """

    def __init__(self, max_fraction: float = 0.5):
        self.max_fraction = check_real(max_fraction, "max_fraction", "(0, 1]")
        self.value = 0.0
        self._curvature = 1.0

    def fraction(self) -> float:
        return self.value

    def observe(self, payoff) -> None:
        g = _payoff(payoff)
        if 1.0 + self.value * g == 0.0:
            # the whole wealth bet (max_fraction = 1) and a payoff of -1: the loss -log(1 + lambda g) is
            # infinite (z = -inf), and the step's limit z / (curvature + z^2) -> 0 leaves the fraction as it
            # is, with an infinite curvature; the wealth is 0 from here on whatever the later fractions
            self._curvature = math.inf
            return
        z = g / (1.0 + self.value * g)  # minus the derivative of log(1 + lambda g)
        self._curvature += z * z
        # z / curvature first: a payoff near the float limit would make ONS_RATE * z overflow (inf / inf)
        self.value = float(np.clip(self.value + ONS_RATE * (z / self._curvature), 0.0, self.max_fraction))


class AGRAPA:
    """Approximate GRAPA: ``lambda = mean(g) / mean(g^2)`` over the payoffs so far, clipped to ``[0, max_fraction]``.

    ``prior_second_moment`` is one pseudo-payoff's ``g^2`` (it keeps the first fractions small).
    """

    def __init__(self, max_fraction: float = 0.5, prior_second_moment: float = 1.0):
        self.max_fraction = check_real(max_fraction, "max_fraction", "(0, 1]")
        self._sum, self._count = 0.0, 1
        self._sum_sq = check_real(prior_second_moment, "prior_second_moment", "(0, inf)")

    def fraction(self) -> float:
        return float(np.clip(self._sum / self._sum_sq, 0.0, self.max_fraction))

    def observe(self, payoff) -> None:
        g = _payoff(payoff)
        self._sum += g
        self._sum_sq += g * g
        self._count += 1


class SigmoidFraction:
    """``lambda = sigmoid(beta)``, ``beta`` maximising ``sum_k log(1 + sigmoid(beta) g_k) - (beta - beta0)^2 / (2 scale^2)``.

    ``fit(payoffs)`` learns ``beta`` from payoffs computed on past data (SKCI's use); used as an online
    strategy, ``observe`` refits on all payoffs seen so far. The log-wealth is concave in ``lambda``, so
    the bounded 1-D search finds the maximiser. ``max_fraction`` caps ``lambda`` (below 1, one payoff of
    -1 cannot wipe the wealth out).
    """

    def __init__(self, max_fraction: float = 0.9, beta0: float = 0.0, scale: float = 3.0):
        self.max_fraction = check_real(max_fraction, "max_fraction", "(0, 1)")  # below 1 for a sigmoid
        self.beta0 = check_real(beta0, "beta0", f"[-{LOGIT_MAX:g}, {LOGIT_MAX:g}]")
        self.scale = check_real(scale, "scale", "(0, inf)")
        self.beta = float(beta0)
        self._seen: list[float] = []

    def fraction(self) -> float:
        return min(float(1.0 / (1.0 + math.exp(-self.beta))), self.max_fraction)

    def fit(self, payoffs) -> SigmoidFraction:
        g = as_array(payoffs, "payoffs", interval="[-1, inf)").ravel()
        upper = math.log(self.max_fraction / (1.0 - self.max_fraction))

        def loss(beta: float) -> float:
            lam = 1.0 / (1.0 + math.exp(-beta))
            with np.errstate(over="ignore"):  # a tiny scale: an infinite penalty away from beta0
                penalty = 0.5 * np.square(np.float64(beta - self.beta0) / self.scale)
            return -float(np.log1p(lam * g).sum()) + float(penalty)

        lower = min(-12.0, upper - 1.0)  # a tiny max_fraction puts its logit below -12
        self.beta = float(
            minimize_scalar(loss, bounds=(lower, upper), method="bounded", options={"xatol": 1e-4}).x
        )
        return self

    def observe(self, payoff) -> None:
        self._seen.append(_payoff(payoff))
        self.fit(self._seen)


STRATEGIES = {"ons": ONS, "agrapa": AGRAPA, "sigmoid": SigmoidFraction, "constant": ConstantFraction}


def make_strategy(strategy, max_fraction: float | None = None, name: str = "betting"):
    """A strategy object from a name (``"ons"``, ``"agrapa"``, ``"sigmoid"``, ``"constant"``) or an object."""
    if strategy is None:
        return None
    if isinstance(strategy, str):
        if strategy not in STRATEGIES:
            raise ValueError(
                f"{name} must be one of the betting strategies {tuple(STRATEGIES)} or a strategy object, "
                f"got {strategy!r}"
            )
        cls = STRATEGIES[strategy]
        return cls() if max_fraction is None else cls(max_fraction)
    if isinstance(strategy, type) or not (hasattr(strategy, "fraction") and hasattr(strategy, "observe")):
        raise TypeError(f"{name} must be a name or an object with fraction() and observe(), got {strategy!r}")
    return strategy


class _Wealth:
    """What both wealth processes record: the wealth path, the payoffs and the first time ``W_t >= 1/alpha``."""

    def __init__(self, alpha: float):
        self.alpha = check_real(alpha, "alpha", "(0, 1)")
        self.wealth = 1.0
        self.path: list[float] = []
        self.payoffs: list[float] = []
        self.stopping_index: int | None = None

    @property
    def rejected(self) -> bool:
        return self.stopping_index is not None

    def _record(self, payoff: float) -> float:
        self.path.append(self.wealth)
        self.payoffs.append(payoff)
        if self.stopping_index is None and self.wealth >= 1.0 / self.alpha:
            self.stopping_index = len(self.path) - 1
        return self.wealth


class WealthProcess(_Wealth):
    """The wealth ``W_t = W_{t-1} (1 + lambda_t g_t)`` of a strategy, with Ville's rule at level ``alpha``.

    ``step(g)`` asks the strategy for its fraction, then shows it ``g``; ``step(g, fraction=lam)`` uses
    a fraction chosen elsewhere (it must still be chosen before ``g`` was seen; ``strategy=None`` means
    every step brings its fraction). Rejection is sticky: the
    first time ``W_t >= 1/alpha`` is recorded in ``stopping_index``, later steps keep updating the wealth.
    """

    def __init__(self, strategy="ons", alpha: float = 0.05):
        super().__init__(alpha)
        self.strategy = make_strategy(strategy, name="strategy")
        self.fractions: list[float] = []

    def step(self, payoff, fraction: float | None = None) -> float:
        g = _payoff(payoff)
        if fraction is None and self.strategy is None:
            raise ValueError("this wealth process has no strategy: pass fraction= to step")
        lam = check_real(self.strategy.fraction() if fraction is None else fraction, "fraction", "[0, 1]")
        self.wealth *= 1.0 + lam * g
        if self.strategy is not None:
            self.strategy.observe(g)
        self.fractions.append(lam)
        return self._record(g)


class MixtureWealth(_Wealth):
    """The average wealth of constant-fraction bettors on a grid (Shaer et al.'s e-CRT): a test martingale
    itself, as an average of test martingales; no fraction has to be learned."""

    def __init__(self, grid_size: int = 1000, alpha: float = 0.05):
        super().__init__(alpha)
        grid_size = check_int(grid_size, "grid_size", 1, MAX_GRID)
        self.grid = np.linspace(0.0, 1.0, grid_size + 1, endpoint=False)[1:]  # (G,) fractions in (0, 1)
        self._wealths = np.ones(grid_size)

    def step(self, payoff) -> float:
        g = _payoff(payoff)
        self._wealths *= 1.0 + self.grid * g
        self.wealth = float(self._wealths.mean())
        return self._record(g)


@dataclass(frozen=True, eq=False)
class SequentialTestResult:
    """The state of a sequential test after the data seen so far.

    Attributes:
        rejected: whether the wealth has reached ``1/alpha`` (sticky: stays True once reached).
        stopping_time: number of samples seen when the wealth first reached ``1/alpha``; None if never.
        wealth: ``(T,)`` the wealth after each bet.
        n_seen: ``(T,)`` samples seen (including the batch bet on) at each bet.
        alpha: the level.
        p_value: ``min(1, 1 / max(1, max wealth))``, anytime-valid.
        payoffs: ``(T,)`` the payoff of each bet.
        fractions: ``(T,)`` the betting fraction of each bet.
        method: the test's name.
        info: per-bet diagnostics (e.g. SKCI's shift ``gamma`` and normalizer), lists of length ``T``.
    """

    rejected: bool
    stopping_time: int | None
    wealth: np.ndarray = field(repr=False)
    n_seen: np.ndarray = field(repr=False)
    alpha: float = 0.05
    p_value: float = 1.0
    payoffs: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    fractions: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    method: str = ""
    info: dict = field(default_factory=dict, repr=False)

    @property
    def final_wealth(self) -> float:
        return float(self.wealth[-1]) if self.wealth.size else 1.0

    def rejected_by(self, n: int) -> bool:
        """Whether the test had rejected after ``n`` samples."""
        n = check_int(n, "n", 0)
        return self.stopping_time is not None and self.stopping_time <= n

    def plot(self, ax=None, label: str | None = None):
        """The wealth path on a log scale with Ville's threshold ``1/alpha``; returns the matplotlib Axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("SequentialTestResult.plot needs matplotlib: pip install matplotlib") from None
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        x = np.concatenate([[0], self.n_seen])
        ax.plot(x, np.concatenate([[1.0], self.wealth]), label=label or self.method or "wealth")
        ax.axhline(1.0 / self.alpha, color="black", ls="--", lw=1, label=f"1/alpha = {1 / self.alpha:g}")
        if self.stopping_time is not None:
            ax.axvline(
                self.stopping_time, color="C3", ls=":", lw=1, label=f"rejected at n = {self.stopping_time}"
            )
        ax.set_yscale("log")
        ax.set_xlabel("samples seen")
        ax.set_ylabel("wealth")
        ax.legend()
        return ax


def result_from_process(process, n_seen, method: str, info: dict | None = None) -> SequentialTestResult:
    """Freeze a :class:`WealthProcess` or :class:`MixtureWealth` into a :class:`SequentialTestResult`."""
    n_seen = np.asarray(n_seen, dtype=int)
    wealth = np.asarray(process.path, dtype=float)
    stop = None if process.stopping_index is None else int(n_seen[process.stopping_index])
    return SequentialTestResult(
        rejected=process.rejected,
        stopping_time=stop,
        wealth=wealth,
        n_seen=n_seen,
        alpha=process.alpha,
        p_value=anytime_p_value(wealth),
        payoffs=np.asarray(process.payoffs, dtype=float),
        fractions=np.asarray(getattr(process, "fractions", []), dtype=float),
        method=method,
        info={k: list(v) for k, v in (info or {}).items()},
    )
