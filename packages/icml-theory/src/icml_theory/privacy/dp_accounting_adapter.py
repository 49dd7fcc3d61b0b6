"""dp_accounting's ``PrivacyAccountant`` interface over :class:`~icml_theory.privacy.OptimalRDPAccountant`.

Importing this module needs dp-accounting (the ``compare`` extra). ``compose`` accepts the events of
DP-SGD: ``GaussianDpEvent``, ``PoissonSampledDpEvent`` of a Gaussian, and any ``SelfComposedDpEvent`` /
``ComposedDpEvent`` of them (``NoOpDpEvent`` adds nothing); other events are refused with dp_accounting's
``UnsupportedEventError``.
"""

from __future__ import annotations

from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant

from icml_theory.privacy.accountant import OptimalRDPAccountant
from icml_theory.validation import check_real

_RELATIONS = {
    NeighboringRelation.ADD_OR_REMOVE_ONE: "add-remove",
    NeighboringRelation.REPLACE_ONE: "replace-one",
}


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
            if not isinstance(inner, dp_event.GaussianDpEvent):
                return self.CompositionErrorDetails(
                    event, "only Poisson-sampled Gaussian events are supported"
                )
            event = inner
        if not isinstance(event, dp_event.GaussianDpEvent):
            return self.CompositionErrorDetails(
                event, "supported: Gaussian and Poisson-sampled Gaussian events, self-composed or composed"
            )
        if event.noise_multiplier < 0:
            return self.CompositionErrorDetails(event, "a noise multiplier must be >= 0")
        if do_compose and count > 0 and rate > 0:
            self.accountant.step(noise_multiplier=event.noise_multiplier, sample_rate=rate, num_steps=count)
        return None

    def get_epsilon(self, target_delta: float) -> float:
        target_delta = check_real(target_delta, "target_delta", "(0, 1)")
        return self.accountant.get_epsilon(target_delta) if self.accountant.history else 0.0

    def get_delta(self, target_epsilon: float) -> float:
        target_epsilon = check_real(target_epsilon, "target_epsilon", "[0, inf)")
        return self.accountant.get_delta(target_epsilon) if self.accountant.history else 0.0
