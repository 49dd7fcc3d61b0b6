"""dp_accounting's ``PrivacyAccountant`` interface over :class:`~icml_theory.privacy.OptimalRDPAccountant`.

Importing this module needs dp-accounting (the ``compare`` extra). ``compose`` accepts the events of
DP-SGD as dp_accounting's ``RdpAccountant`` does: ``GaussianDpEvent``, ``PoissonSampledDpEvent`` of a Gaussian
or of a ``ComposedDpEvent`` / ``SelfComposedDpEvent`` of Gaussians (one Gaussian of noise
``(sum sigma_i^-2)^-1/2``), and any ``SelfComposedDpEvent`` / ``ComposedDpEvent`` of them; ``NoOpDpEvent``
adds nothing and ``NonPrivateDpEvent`` makes epsilon infinite (delta 1). Other events are refused with
dp_accounting's ``UnsupportedEventError``.
"""

from __future__ import annotations

import math

from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant

from icml_theory.privacy.accountant import OptimalRDPAccountant
from icml_theory.validation import check_real

_RELATIONS = {
    NeighboringRelation.ADD_OR_REMOVE_ONE: "add-remove",
    NeighboringRelation.REPLACE_ONE: "replace-one",
}


def _effective_noise(event):
    """The noise multiplier of the one Gaussian equivalent to ``event``, a Gaussian or a (self-)composition of
    Gaussians: ``(sum_i sigma_i^-2)^-1/2``, dp_accounting's rule (0 if any is 0, ``inf`` for nothing released, a
    negative one passed on for the caller to refuse), or the first sub-event that is neither."""
    if isinstance(event, dp_event.GaussianDpEvent):
        return float(event.noise_multiplier)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        sigma = _effective_noise(event.event)
        if isinstance(sigma, dp_event.DpEvent) or sigma <= 0:
            return sigma
        return sigma / math.sqrt(event.count) if event.count > 0 else math.inf
    if isinstance(event, dp_event.ComposedDpEvent):
        sigmas = [_effective_noise(e) for e in event.events]
        bad = [s for s in sigmas if isinstance(s, dp_event.DpEvent)]
        if bad or not sigmas:
            return bad[0] if bad else math.inf
        if min(sigmas) <= 0:
            return min(sigmas)
        precision = sum(s**-2 for s in sigmas)  # an inf entry (nothing released) adds 0
        return precision**-0.5 if precision > 0 else math.inf
    return event


class OptimalRDPPrivacyAccountant(PrivacyAccountant):
    """``compose(event, count)``, ``get_epsilon(target_delta)``, ``get_delta(target_epsilon)`` and ``ledger``, as
    dp_accounting's ``RdpAccountant`` has them, with the optimal RDP -> (epsilon, delta) conversion;
    :attr:`accountant` is the :class:`OptimalRDPAccountant` underneath (its trade-off curve and attack views)."""

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE):
        if neighboring_relation not in _RELATIONS:
            raise ValueError(
                f"neighboring_relation must be one of {list(_RELATIONS)}, got {neighboring_relation!r}"
            )
        super().__init__(neighboring_relation)
        self.accountant = OptimalRDPAccountant(_RELATIONS[neighboring_relation])

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.NonPrivateDpEvent):
            # as dp_accounting's RdpAccountant (RDP += inf) and PLDAccountant: no guarantee from here on, even
            # at count 0; recorded as a step without noise (one step when count is 0)
            if do_compose:
                self.accountant.step(noise_multiplier=0.0, sample_rate=1.0, num_steps=max(count, 1))
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dp_event.ComposedDpEvent):
            for sub in event.events:
                error = self._maybe_compose(sub, count, do_compose)
                if error is not None:
                    return error
            return None
        rate = 1.0
        if isinstance(event, dp_event.PoissonSampledDpEvent):
            rate, inner = event.sampling_probability, event.event
            sigma = _effective_noise(inner)
            if isinstance(sigma, dp_event.DpEvent):
                return self.CompositionErrorDetails(
                    event,
                    "a Poisson-sampled event must be a Gaussian or a (self-)composition of Gaussians, "
                    f"found {sigma}",
                )
        elif isinstance(event, dp_event.GaussianDpEvent):
            sigma = event.noise_multiplier
        else:
            return self.CompositionErrorDetails(
                event,
                "supported: Gaussian and Poisson-sampled Gaussian events, self-composed or composed, "
                "NoOpDpEvent and NonPrivateDpEvent",
            )
        if sigma < 0:
            return self.CompositionErrorDetails(event, "a noise multiplier must be >= 0")
        if do_compose and count > 0 and rate > 0 and sigma < math.inf:  # inf: nothing released
            self.accountant.step(noise_multiplier=sigma, sample_rate=rate, num_steps=count)
        return None

    def get_epsilon(self, target_delta: float) -> float:
        target_delta = check_real(target_delta, "target_delta", "(0, 1)")
        return self.accountant.get_epsilon(target_delta) if self.accountant.history else 0.0

    def get_delta(self, target_epsilon: float) -> float:
        target_epsilon = check_real(target_epsilon, "target_epsilon", "[0, inf)")
        return self.accountant.get_delta(target_epsilon) if self.accountant.history else 0.0
