"""An opacus / dp_accounting-shaped accountant that reports the optimal RDP -> f-DP conversion."""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import numpy as np

from icml_theory.privacy.conversions import OptimalConverter, cks_epsilon, mironov_epsilon
from icml_theory.privacy.profiles import RELATIONS, ComposedRDP, SubsampledGaussianRDP
from icml_theory.privacy.tradeoff import DEFAULT_ORDERS, TradeoffCurve
from icml_theory.validation import check_alphas, check_choice, check_int, check_orders, check_real

METHODS = ("optimal", "cks", "mironov")
MECHANISM = "optimal-rdp"  # the name opacus' registry knows it by (see icml_theory.privacy.register_opacus)
MIN_NOISE = 0.01  # get_noise_multiplier searches no lower: epsilon there is in the thousands


def _check_scalar(value, name: str, interval: str) -> float:
    """:func:`check_real`, also for a 0-d torch tensor or numpy array (what opacus' noise schedulers and users
    hand to ``step``: ``LambdaNoise`` with a torch lambda sets a tensor ``noise_multiplier``, and opacus'
    ``RDPAccountant`` takes it). A bool or complex element is still refused; larger tensors are not scalars."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        try:
            value = value.item()
        except (RuntimeError, ValueError, TypeError):  # e.g. a tensor on the "meta" device holds no value
            raise TypeError(f"{name} must be a real number in {interval}, got {value!r}") from None
    return check_real(value, name, interval)


class OptimalRDPAccountant:
    """Privacy accountant for DP-SGD (Poisson-subsampled Gaussian steps) with the optimal RDP conversion.

    Same shape as ``opacus.accountants.RDPAccountant``: ``step(noise_multiplier=, sample_rate=)`` once per
    optimizer step (steps may differ), ``history`` as ``[(noise_multiplier, sample_rate, count), ...]``,
    ``get_epsilon(delta)``; plus ``get_delta(epsilon)``, ``get_beta(alpha)``, ``tradeoff_curve(alphas)``.
    ``method="cks"`` / ``"mironov"`` gives the classical conversions of the same RDP profile (on
    :data:`DEFAULT_ORDERS` above 1) for comparison.

    ``relation`` is the neighbouring relation: ``"add-remove"`` (one record added or removed; opacus' and
    dp_accounting's default) or ``"replace-one"`` (one record replaced, e.g. one label changed under label
    DP; see :class:`~icml_theory.privacy.SubsampledGaussianRDP`).

    A step with ``noise_multiplier=0`` (a non-private baseline, e.g. opacus' ``make_private(noise_multiplier=0)``)
    is recorded as opacus' ``RDPAccountant`` records it: from then on ``get_epsilon`` is ``inf``, ``get_delta``
    1 and ``get_beta`` 0 (what opacus' and dp_accounting's RDP accountants report), while ``profile`` and
    ``tradeoff_curve`` raise (no finite RDP).

    Before the first step (empty ``history``, e.g. ``PrivacyEngine.get_epsilon`` logged at epoch 0) nothing
    has been released: ``get_epsilon`` is 0 (every method), ``get_delta`` 0 and ``get_beta`` / ``tradeoff_curve``
    the identity trade-off ``1 - alpha`` (order NaN: every order attains it), as opacus' ``RDPAccountant``
    and dp_accounting's ``RdpAccountant`` / ``PLDAccountant`` report; ``profile`` raises (no steps to profile).

    opacus' ``IAccountant`` interface is complete (``mechanism()``, ``get_optimizer_hook_fn``,
    ``state_dict`` / ``load_state_dict``): after :func:`~icml_theory.privacy.register_opacus`,
    ``PrivacyEngine(accountant="optimal-rdp")`` uses it, ``make_private_with_epsilon`` included; or assign
    an instance, ``engine.accountant = OptimalRDPAccountant()``, before ``make_private``. For dp_accounting's
    ``DpEvent`` interface see :class:`icml_theory.privacy.dp_accounting_adapter.OptimalRDPPrivacyAccountant`.
    """

    def __init__(self, relation: str = "add-remove"):
        self.relation = check_choice(relation, "relation", RELATIONS)
        self.history: list[tuple[float, float, int]] = []
        self._converter: OptimalConverter | None = None
        # the relation and history the converter was built for
        self._converted: tuple[str, list[tuple[float, float, int]]] = (self.relation, [])

    @classmethod
    def mechanism(cls) -> str:
        """The accounting mechanism's name (opacus' ``IAccountant.mechanism``)."""
        return MECHANISM

    def get_optimizer_hook_fn(self, sample_rate: float) -> Callable[[Any], None]:
        """A hook for opacus' ``DPOptimizer.attach_step_hook``: one :meth:`step` per optimizer step, at
        ``sample_rate`` times the optimizer's accumulated iterations (opacus' own rule)."""
        sample_rate = _check_scalar(sample_rate, "sample_rate", "(0, 1]")

        def hook_fn(optim: Any) -> None:
            self.step(
                noise_multiplier=optim.noise_multiplier,
                sample_rate=sample_rate * optim.accumulated_iterations,
            )

        return hook_fn

    def state_dict(self, destination: Any = None) -> Any:
        """``history``, ``mechanism`` and ``relation`` (opacus' layout plus the relation)."""
        destination = OrderedDict() if destination is None else destination
        destination["history"] = deepcopy(self.history)
        destination["mechanism"] = self.mechanism()
        destination["relation"] = self.relation
        return destination

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore what :meth:`state_dict` saved (an opacus RDP accountant's state loads too: add-remove)."""
        if not hasattr(state_dict, "get") or "history" not in state_dict:
            raise ValueError(f"state_dict must be a mapping with a 'history' entry, got {state_dict!r}")
        history = []
        for i, entry in enumerate(state_dict["history"]):
            if not (isinstance(entry, (tuple, list)) and len(entry) == 3):
                raise ValueError(f"state_dict['history'][{i}] must be (noise_multiplier, sample_rate, steps)")
            history.append(
                (
                    _check_scalar(entry[0], f"state_dict['history'][{i}] noise_multiplier", "[0, inf)"),
                    _check_scalar(entry[1], f"state_dict['history'][{i}] sample_rate", "(0, 1]"),
                    check_int(entry[2], f"state_dict['history'][{i}] steps", 1),
                )
            )
        self.relation = check_choice(
            state_dict.get("relation", "add-remove"), "state_dict['relation']", RELATIONS
        )
        self.history = history
        self._converter = None

    def step(
        self, *, noise_multiplier: float, sample_rate: float, num_steps: int = 1
    ) -> OptimalRDPAccountant:
        """Record ``num_steps`` steps with noise multiplier ``noise_multiplier`` and sampling rate ``sample_rate``
        (Python or numpy numbers, or 0-d torch tensors / numpy arrays, as opacus' ``RDPAccountant`` takes them;
        ``history`` holds them as floats)."""
        # 0 allowed: opacus trains a non-private baseline with noise_multiplier=0 and steps its accountant
        sigma = _check_scalar(noise_multiplier, "noise_multiplier", "[0, inf)")
        q = _check_scalar(sample_rate, "sample_rate", "(0, 1]")
        n = check_int(num_steps, "num_steps", 1, sys.maxsize - len(self))  # len() must stay an index
        if self.history and self.history[-1][:2] == (sigma, q):
            self.history[-1] = (sigma, q, self.history[-1][2] + n)
        else:
            self.history.append((sigma, q, n))
        self._converter = None
        return self

    def __len__(self) -> int:
        return sum(n for _, _, n in self.history)

    def _non_private(self) -> bool:
        """Whether a step without noise was recorded (then no guarantee holds: epsilon is infinite)."""
        return any(sigma == 0 for sigma, _, _ in self.history)

    @property
    def profile(self) -> ComposedRDP:
        """The RDP profile of everything recorded so far."""
        if not self.history:
            raise ValueError("no steps recorded: call step(noise_multiplier=..., sample_rate=...) first")
        if self._non_private():
            raise ValueError("a step with noise_multiplier=0 was recorded: no finite RDP profile")
        merged: dict[tuple[float, float], int] = {}
        for sigma, q, n in self.history:
            merged[(sigma, q)] = merged.get((sigma, q), 0) + n
        return ComposedRDP([SubsampledGaussianRDP(q, s, n, self.relation) for (s, q), n in merged.items()])

    def _conv(self, orders=None) -> OptimalConverter:
        if orders is not None:  # a caller's own orders, and only those: a converter for this query
            return OptimalConverter(self.profile, orders, refine=False)
        # keyed by the relation and the history themselves: opacus' get_noise_multiplier assigns ``history``
        # directly, and a converter kept across a change of relation (load_state_dict of a "replace-one" state,
        # or an assignment) reported the old relation's epsilon
        if self._converter is None or self._converted != (self.relation, self.history):
            self._converter = OptimalConverter(self.profile)
            self._converted = (self.relation, list(self.history))
        return self._converter

    def get_epsilon(self, delta: float, method: str = "optimal", *, alphas=None) -> float:
        """Least ``epsilon`` with an ``(epsilon, delta)``-DP guarantee, by ``method`` (optimal, cks, mironov).

        ``alphas``: the RDP orders to use, as in opacus' ``RDPAccountant.get_epsilon(delta, alphas=...)``.
        Given, every method uses the RDP values at these orders only (the optimal rule then does not refine
        between them), so the optimal value is never above the Balle/CKS value of the same orders, which is
        opacus' conversion (``method="cks"`` uses the orders above 1.01, as dp_accounting). Default: the
        optimal rule searches :data:`DEFAULT_ORDERS` and refines between them; cks/mironov use its orders > 1.
        """
        delta = check_real(delta, "delta", "(0, 1)")
        if not isinstance(method, str):  # opacus' second positional argument is ``alphas``
            raise TypeError(
                f"method must be one of {METHODS}, got {type(method).__name__} {method!r} "
                "(RDP orders go in alphas=...)"
            )
        method = check_choice(method, "method", METHODS)
        orders = None if alphas is None else np.unique(check_orders(alphas, "alphas").ravel())
        if orders is not None and orders.size == 0:
            raise ValueError("alphas must hold at least one Rényi order >= 0.5, got none")
        if self.history and self._non_private():
            return math.inf  # opacus' RDPAccountant and dp_accounting's accountants report inf too
        if method == "optimal":
            return float(self._conv(orders).epsilon([delta])[0]) if self.history else 0.0
        orders = DEFAULT_ORDERS if orders is None else orders
        orders = orders[orders > 1]
        if orders.size == 0:
            raise ValueError(f"alphas must include an order > 1 for method={method!r}, got {alphas!r}")
        if not self.history:
            return 0.0  # nothing released yet: opacus' RDPAccountant and dp_accounting's report 0 too
        conv = cks_epsilon if method == "cks" else mironov_epsilon
        return conv(orders, self.profile(orders), delta)[0]

    def get_delta(self, epsilon: float) -> float:
        """``delta(epsilon)`` of the optimal trade-off."""
        epsilon = check_real(epsilon, "epsilon", "[0, inf)")
        if self.history and self._non_private():
            return 1.0  # dp_accounting's RdpAccountant and PLDAccountant report 1 too
        if not self.history:
            return 0.0  # nothing released yet (dp_accounting's accountants: 0 too)
        return float(self._conv().delta([epsilon])[0])

    def get_beta(self, alpha):
        """Least type II error of any test at type I error ``alpha`` (scalar or array)."""
        a = check_alphas(alpha, "alpha")
        if self.history and self._non_private():
            beta = np.zeros_like(a, dtype=float)  # the trivial trade-off: a test can tell apart exactly
        elif not self.history:
            beta = 1.0 - np.asarray(a, dtype=float)  # nothing released: no test beats random guessing
        else:
            beta = self._conv().curve(a.ravel()).beta.reshape(a.shape)
        return float(beta) if beta.ndim == 0 else beta

    def tradeoff_curve(self, alphas) -> TradeoffCurve:
        """The optimal trade-off curve at ``alphas`` with the maximizing order per point (before the first
        step the identity trade-off ``1 - alpha``, order NaN)."""
        if not self.history:
            a = np.asarray(check_alphas(alphas), dtype=float).ravel()
            with np.errstate(divide="ignore"):  # alpha = 1: log beta = -inf
                return TradeoffCurve(a, 1.0 - a, np.full(a.shape, np.nan), np.log1p(-a))
        return self._conv().curve(alphas)


def get_noise_multiplier(
    target_epsilon: float,
    target_delta: float,
    sample_rate: float,
    steps: int,
    *,
    epsilon_tolerance: float = 0.01,
    relation: str = "add-remove",
) -> float:
    """Smallest noise multiplier (to ``epsilon_tolerance``) whose optimal-rule epsilon is <= ``target_epsilon``.

    Bisection in ``sigma`` like ``opacus.accountants.utils.get_noise_multiplier``, bracketed first with the
    fast Balle/CKS conversion (whose sigma always suffices); the returned ``sigma`` always meets the target.
    ``relation``: the neighbouring relation, as in :class:`OptimalRDPAccountant`.
    """
    relation = check_choice(relation, "relation", RELATIONS)
    target_epsilon = check_real(target_epsilon, "target_epsilon", "(0, inf)")
    check_real(target_delta, "target_delta", "(0, 1)")
    check_real(sample_rate, "sample_rate", "(0, 1]")
    check_int(steps, "steps", 1)
    epsilon_tolerance = check_real(epsilon_tolerance, "epsilon_tolerance", "(0, inf]")
    setting = f"target_epsilon = {target_epsilon} at target_delta = {target_delta}, sample_rate = {sample_rate}, steps = {steps}"

    def eps(sigma, method="optimal"):
        acc = OptimalRDPAccountant(relation).step(
            noise_multiplier=sigma, sample_rate=sample_rate, num_steps=steps
        )
        return acc.get_epsilon(target_delta, method=method)

    # bracket with the fast classical (CKS) conversion: the optimal epsilon is never larger, so the sigma
    # that meets the target by CKS meets it by the optimal rule too
    lo, hi = 0.0, 1.0
    while eps(hi, "cks") > target_epsilon:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise ValueError(f"no noise multiplier up to 1e6 reaches {setting}")
    while hi - lo > 1e-3 * hi:
        if hi < MIN_NOISE:
            raise ValueError(
                f"every noise multiplier down to {MIN_NOISE} meets {setting}: ask for a smaller target_epsilon"
            )
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid, "cks") > target_epsilon else (lo, mid)
    lo, eps_hi = hi, eps(hi)
    while lo > MIN_NOISE:  # walk down until the optimal epsilon exceeds the target
        lo = 0.9 * lo
        e = eps(lo)
        if e > target_epsilon:
            break
        hi, eps_hi = lo, e
    while target_epsilon - eps_hi > epsilon_tolerance and hi - lo > 1e-4 * hi:
        mid = 0.5 * (lo + hi)
        e = eps(mid)
        if e > target_epsilon:
            lo = mid
        else:
            hi, eps_hi = mid, e
    return float(hi)
