"""Plugging :class:`~icml_theory.privacy.OptimalRDPAccountant` into opacus (imported only when asked)."""

from __future__ import annotations

from icml_theory.privacy.accountant import MECHANISM, OptimalRDPAccountant


def register_opacus() -> str:
    """Register :class:`OptimalRDPAccountant` in opacus' accountant registry (as a virtual subclass of its
    ``IAccountant``) and return its mechanism name, so that ``PrivacyEngine(accountant="optimal-rdp")`` and
    ``get_noise_multiplier(..., accountant="optimal-rdp")`` use the optimal conversion. Needs opacus (the
    ``compare`` extra); registering again is harmless."""
    try:
        from opacus.accountants import IAccountant, register_accountant
    except ImportError as err:  # pragma: no cover - opacus is in the dev group
        raise ImportError("register_opacus needs opacus: pip install 'icml-theory[compare]'") from err
    IAccountant.register(OptimalRDPAccountant)
    register_accountant(MECHANISM, OptimalRDPAccountant, force=True)
    return MECHANISM
