"""The accountant where opacus and dp_accounting users plug accountants in (issue 23, item 1)."""

import math

import numpy as np
import pytest

from icml_theory.privacy import OptimalRDPAccountant, register_opacus

opacus = pytest.importorskip("opacus")
dp_accounting = pytest.importorskip("dp_accounting")
torch = pytest.importorskip("torch")

from dp_accounting import dp_event  # noqa: E402

from icml_theory.privacy.dp_accounting_adapter import OptimalRDPPrivacyAccountant  # noqa: E402

DELTA = 1e-5


def _train(engine, steps_wanted=6, sigma=1.1, batch=16, n=128):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    data = torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randn(n, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma, max_grad_norm=1.0
    )
    steps = 0
    for x, y in loader:
        if steps == steps_wanted:
            break
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward() if len(x) else None
        optimizer.step()
        steps += 1
    return steps, batch / n


@pytest.mark.parametrize("how", ["registered name", "assigned instance"])
def test_privacy_engine_reports_the_standalone_epsilon(how):
    if how == "registered name":
        assert register_opacus() == "optimal-rdp"
        engine = opacus.PrivacyEngine(accountant="optimal-rdp")
    else:
        engine = opacus.PrivacyEngine()
        engine.accountant = OptimalRDPAccountant()
    assert isinstance(engine.accountant, OptimalRDPAccountant)
    steps, q = _train(engine)
    assert len(engine.accountant) == steps == 6
    standalone = OptimalRDPAccountant().step(noise_multiplier=1.1, sample_rate=q, num_steps=steps)
    assert engine.accountant.history == standalone.history == [(1.1, q, 6)]
    if how == "assigned instance":
        return  # the same history: the epsilon below is a function of it
    assert engine.get_epsilon(DELTA) == standalone.get_epsilon(DELTA)
    # tighter than opacus' own RDP accountant for the same steps (the paper's claim, here as a sanity check)
    rdp = opacus.accountants.RDPAccountant()
    for _ in range(steps):
        rdp.step(noise_multiplier=1.1, sample_rate=q)
    assert engine.get_epsilon(DELTA) < rdp.get_epsilon(DELTA)


@pytest.mark.slow  # opacus' bisection calls the optimal conversion ~10 times (30 s)
def test_make_private_with_epsilon_uses_the_optimal_conversion():
    register_opacus()
    engine = opacus.PrivacyEngine(accountant="optimal-rdp")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    data = torch.utils.data.TensorDataset(torch.randn(128, 4), torch.randn(128, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    _, optimizer, _ = engine.make_private_with_epsilon(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=loader,
        target_epsilon=2.0,
        target_delta=DELTA,
        epochs=2,
        max_grad_norm=1.0,
    )
    sigma = optimizer.noise_multiplier
    spent = OptimalRDPAccountant().step(noise_multiplier=sigma, sample_rate=16 / 128, num_steps=16)
    assert spent.get_epsilon(DELTA) <= 2.0 + 0.01  # opacus' bisection tolerance
    rdp_sigma = opacus.accountants.utils.get_noise_multiplier(
        target_epsilon=2.0, target_delta=DELTA, sample_rate=16 / 128, epochs=2, accountant="rdp"
    )
    assert sigma < rdp_sigma  # less noise for the same guarantee


def test_state_dict_round_trips_and_loads_opacus_rdp_state():
    acc = OptimalRDPAccountant("replace-one").step(noise_multiplier=1.3, sample_rate=0.01, num_steps=50)
    acc.step(noise_multiplier=0.9, sample_rate=0.02, num_steps=5)
    state = acc.state_dict()
    assert state["mechanism"] == "optimal-rdp" and state["relation"] == "replace-one"
    again = OptimalRDPAccountant()
    again.load_state_dict(state)
    assert again.history == acc.history and again.relation == "replace-one"  # epsilon is a function of these
    rdp = opacus.accountants.RDPAccountant()
    rdp.step(noise_multiplier=1.3, sample_rate=0.01)
    from_opacus = OptimalRDPAccountant()
    from_opacus.load_state_dict(rdp.state_dict())
    assert from_opacus.history == [(1.3, 0.01, 1)]
    with pytest.raises(ValueError, match="history"):
        OptimalRDPAccountant().load_state_dict({"mechanism": "rdp"})
    with pytest.raises(ValueError, match="sample_rate"):
        OptimalRDPAccountant().load_state_dict({"history": [(1.0, 2.0, 1)]})


def test_assigning_history_recomputes_epsilon():
    acc = OptimalRDPAccountant().step(noise_multiplier=1.0, sample_rate=0.01, num_steps=100)
    first = acc.get_epsilon(DELTA)
    acc.history = [(1.0, 0.01, 400)]  # what opacus' get_noise_multiplier does
    assert acc.get_epsilon(DELTA) > first


def test_dp_accounting_events_give_the_same_epsilon_as_steps():
    q1, s1, q2, s2 = 0.01, 1.1, 0.02, 0.8
    event = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(q1, dp_event.GaussianDpEvent(s1)), 100
            ),
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(q2, dp_event.GaussianDpEvent(s2)), 20
            ),
            dp_event.NoOpDpEvent(),
        ]
    )
    adapter = OptimalRDPPrivacyAccountant().compose(event, 2)
    steps = OptimalRDPAccountant()
    for _ in range(2):
        steps.step(noise_multiplier=s1, sample_rate=q1, num_steps=100)
        steps.step(noise_multiplier=s2, sample_rate=q2, num_steps=20)
    assert adapter.get_epsilon(DELTA) == steps.get_epsilon(DELTA)
    assert adapter.get_delta(1.0) == steps.get_delta(1.0)
    assert adapter.ledger == dp_event.SelfComposedDpEvent(event, 2)
    # never looser than dp_accounting's own RDP accountant on the same events
    rdp = dp_accounting.rdp.RdpAccountant().compose(event, 2)
    assert adapter.get_epsilon(DELTA) <= rdp.get_epsilon(DELTA)
    # the un-subsampled Gaussian
    g = OptimalRDPPrivacyAccountant().compose(dp_event.GaussianDpEvent(2.0), 3)
    assert g.accountant.history == [(2.0, 1.0, 3)]
    assert OptimalRDPPrivacyAccountant().get_epsilon(DELTA) == 0.0


def test_dp_accounting_refuses_what_it_cannot_account():
    acc = OptimalRDPPrivacyAccountant()
    assert not acc.supports(dp_event.LaplaceDpEvent(1.0))
    assert not acc.supports(dp_event.PoissonSampledDpEvent(0.1, dp_event.LaplaceDpEvent(1.0)))
    with pytest.raises(dp_accounting.UnsupportedEventError):
        acc.compose(dp_event.GaussianDpEvent(-1.0))
    with pytest.raises(ValueError, match="neighboring_relation"):
        OptimalRDPPrivacyAccountant(dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    replace = OptimalRDPPrivacyAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert replace.accountant.relation == "replace-one"
    with pytest.raises(ValueError, match="target_delta"):
        acc.get_epsilon(0.0)
    assert math.isfinite(replace.compose(dp_event.GaussianDpEvent(3.0)).get_epsilon(DELTA))


def test_a_non_private_baseline_trains_and_reports_what_opacus_and_dp_accounting_report():
    """opacus users train a baseline with ``make_private(noise_multiplier=0)``: opacus' "rdp" accountant
    steps and reports epsilon = inf; ours raised ValueError from inside ``optimizer.step()`` (the hook).
    dp_accounting's RdpAccountant / PLDAccountant compose a Gaussian of noise 0 to (inf, delta 1); ours
    raised UnsupportedEventError."""
    register_opacus()
    reports = {}
    for name in ("rdp", "optimal-rdp"):
        engine = opacus.PrivacyEngine(accountant=name)
        steps, _ = _train(engine, steps_wanted=3, sigma=0.0)
        assert sum(n for *_, n in engine.accountant.history) == steps == 3  # opacus: len() counts entries
        reports[name] = engine.get_epsilon(DELTA)
        # then noisy steps: still no guarantee, and the state round-trips
        engine.accountant.step(noise_multiplier=1.0, sample_rate=0.1)
    assert reports == {"rdp": math.inf, "optimal-rdp": math.inf}
    acc = (
        OptimalRDPAccountant()
        .step(noise_multiplier=1.0, sample_rate=0.1)
        .step(noise_multiplier=0, sample_rate=0.1)
    )
    assert acc.get_epsilon(DELTA) == acc.get_epsilon(DELTA, method="cks") == math.inf
    assert acc.get_delta(5.0) == 1.0 and acc.get_beta(0.1) == 0.0
    assert acc.get_beta(np.array([0.0, 0.5])).tolist() == [0.0, 0.0]
    loaded = OptimalRDPAccountant()
    loaded.load_state_dict(acc.state_dict())
    assert loaded.history == acc.history and loaded.get_epsilon(DELTA) == math.inf
    with pytest.raises(ValueError, match="noise_multiplier=0"):
        acc.tradeoff_curve([0.1])

    from dp_accounting.rdp import RdpAccountant

    event = dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(0.0))
    ours, theirs = OptimalRDPPrivacyAccountant(), RdpAccountant()
    for accountant in (ours, theirs):
        accountant.compose(event, 2)
    assert ours.get_epsilon(DELTA) == theirs.get_epsilon(DELTA) == math.inf
    assert ours.get_delta(1.0) == theirs.get_delta(1.0) == 1.0
