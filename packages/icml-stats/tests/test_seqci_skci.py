"""SKCI: streaming API, ablation sharing, modes, behaviour after rejection, bounded memory, bad input."""

import tracemalloc

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from icml_stats.seqci import SKCI, ConfoundingWarning, confounded_ci, gaussian_ci, run_ablation, shift_for
from icml_stats.seqci.betting import SequentialTestResult

SMALL = {"max_past": 120, "n_anchors": 40, "warmup": 40}


@pytest.fixture(autouse=True)
def _one_blas_thread():  # small matrices: several BLAS threads only fight over busy cores
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def test_shift_solves_its_equation():
    from scipy.stats import norm

    assert shift_for(0.0) == 0.0
    previous = 0.0
    for sigma in (0.3, 0.5, 1.0, 2.0):
        g = shift_for(sigma)
        assert g == pytest.approx(sigma * norm.cdf((g - 1) / sigma), abs=1e-9)
        assert g > previous  # a noisier payoff pays a larger premium
        previous = g


@pytest.mark.parametrize("scale", [1e-200, 1e-160, 1e-120, 1e50, 1e200])
def test_skci_is_invariant_to_rescaling_the_data(scale):
    # the mean regressions' kernel and ridge were chosen on the Gram y @ y.T, which underflowed to 0 below
    # ~1e-154 (every ridge had loss 0, the first candidate won; the LOO std was 0) and overflowed at 1e200:
    # the old code stopped at n = 220 (p 0.0101) at 1e-200, had p 0.016109 at 1e-160 and raised
    # "K_y must be finite" at 1e200, against n = 260, p = 0.016135 unscaled. Measured now: the same
    # stopping time and p-values within 5.5e-12 relative at every scale here (seeds 0-2): margin 18x.
    d = gaussian_ci(300, d=2, effect=0.5)
    base = SKCI(random_state=0).run(d.a, d.b, d.c)
    got = SKCI(random_state=0).run(d.a * scale, d.b * scale, d.c * scale)
    assert base.stopping_time == 260 and got.stopping_time == base.stopping_time
    assert got.p_value == pytest.approx(base.p_value, rel=1e-10)
    np.testing.assert_allclose(got.wealth, base.wealth, rtol=1e-10)


def test_update_returns_the_state_and_run_streams_batches():
    d = gaussian_ci(200, 3, 1.0, seed=0)
    test = SKCI(random_state=0, **SMALL)
    state = test.update(d.a[:20], d.b[:20], d.c[:20])
    assert isinstance(state, SequentialTestResult) and state.wealth.size == 0  # warm-up: no bet yet
    test.update(d.a[20:40], d.b[20:40], d.c[20:40])
    state = test.update(d.a[40:60], d.b[40:60], d.c[40:60])
    assert state.wealth.size == 1 and list(state.n_seen) == [60] and test.n_seen == 60
    whole = SKCI(random_state=0, **SMALL).run(d.a, d.b, d.c, batch_size=20)
    assert list(whole.n_seen) == list(range(60, 201, 20))
    np.testing.assert_allclose(whole.wealth[:1], state.wealth)
    assert set(whole.info) == {"gamma", "normalizer", "raw_payoff", "c_bandwidth"}
    assert all(len(v) == whole.wealth.size for v in whole.info.values())


@pytest.mark.filterwarnings("ignore::icml_stats.seqci.ConfoundingWarning")  # the "cme" variant's
def test_ablation_shares_kernels_without_changing_results():
    d = gaussian_ci(160, 3, 0.5, seed=1)
    variants = {
        "skci": {},
        "no shift": {"shift": False},
        "no norm": {"normalize": False},
        "oracle": {"model_x": "oracle"},
        "cme": {"estimator": "cme"},
    }
    shared = run_ablation(d.a, d.b, d.c, variants, conditional=d.conditional(), random_state=3, **SMALL)
    for name, over in variants.items():
        alone = SKCI(conditional=d.conditional(), random_state=3, **SMALL, **over).run(d.a, d.b, d.c)
        np.testing.assert_allclose(shared[name].wealth, alone.wealth, rtol=1e-12)
    assert all(g == 0.0 for g in shared["no shift"].info["gamma"])
    assert all(v == 1.0 for v in shared["no norm"].info["normalizer"])
    with pytest.raises(ValueError, match="may only override"):
        run_ablation(d.a, d.b, d.c, {"x": {"alpha": 0.1}})


def test_strong_dependence_is_detected_in_every_mode():
    d = gaussian_ci(400, 3, 1.0, seed=2)
    pre = gaussian_ci(300, 3, 0.0, seed=99)  # the same directions (data_seed), fresh samples
    for kwargs in (
        {},
        {"model_x": "oracle", "conditional": d.conditional()},
        {"model_x": "pretrained", "pretrain": (pre.a, pre.c)},
        {"betting": "ons"},
    ):
        res = SKCI(random_state=0, **SMALL, **kwargs).run(d.a, d.b, d.c)
        assert res.rejected and res.stopping_time <= 400 and res.p_value <= 0.05, kwargs


def test_default_keeps_the_level_where_the_embedding_of_earlier_versions_breaks_it():
    """Strong confounding (|w| = 3, dim C = 20): the earlier estimator rejects almost every null stream,
    the default almost none (the skci-confounding reproduction measures the whole grid)."""
    default = cme = 0
    for seed in range(8):
        d = confounded_ci(300, 20, 3.0, seed=seed, data_seed=seed)
        default += SKCI(random_state=seed).run(d.a, d.b, d.c).rejected
        with pytest.warns(ConfoundingWarning, match="explains"):
            cme += SKCI(estimator="cme", random_state=seed).run(d.a, d.b, d.c).rejected
    assert cme >= 6 and default <= 1


def test_confounding_warning_only_for_the_embedding_under_strong_confounding(recwarn):
    strong, weak = confounded_ci(200, 5, 2.0, seed=0), confounded_ci(200, 5, 0.3, seed=0)
    SKCI(random_state=0).run(strong.a, strong.b, strong.c)
    SKCI(estimator="cme", random_state=0).run(weak.a, weak.b, weak.c)
    assert not [w for w in recwarn if issubclass(w.category, ConfoundingWarning)]
    test = SKCI(estimator="cme", random_state=0)
    with pytest.warns(ConfoundingWarning) as caught:
        test.run(strong.a, strong.b, strong.c)
        test.run(strong.a, strong.b, strong.c)  # once per test, not once per refresh
    assert len([w for w in caught if issubclass(w.category, ConfoundingWarning)]) == 1


def test_rejection_is_final_but_the_stream_may_continue():
    d = gaussian_ci(400, 3, 1.0, seed=2)
    test = SKCI(random_state=0, **SMALL)
    first = test.run(d.a[:200], d.b[:200], d.c[:200])
    assert first.rejected
    later = test.run(d.a[200:], d.b[200:], d.c[200:])
    assert later.rejected and later.stopping_time == first.stopping_time
    assert later.wealth.size > first.wealth.size  # the wealth keeps being reported


def test_update_keeps_no_reference_to_the_callers_arrays():
    d = gaussian_ci(80, 2, 0.0, seed=1)
    copies, reused = SKCI(random_state=0, **SMALL), SKCI(random_state=0, **SMALL)
    buf = [np.empty((20, 1)), np.empty((20, 1)), np.empty((20, 2))]
    for i in range(0, 80, 20):
        batch = (d.a[i : i + 20], d.b[i : i + 20], d.c[i : i + 20])
        for dst, src in zip(buf, batch, strict=True):
            dst[:] = src  # a streaming caller refilling one buffer per batch
        expected, got = copies.update(*(x.copy() for x in batch)), reused.update(*buf)
    np.testing.assert_array_equal(got.wealth, expected.wealth)
    for past, column in zip(reused._past, (d.a, d.b, d.c), strict=True):
        np.testing.assert_array_equal(past, column)


def traced_peak(test, data, start, stop, batch):
    """tracemalloc's peak (bytes) over the updates of ``data[start:stop]`` (tracing only these: it is slow)."""
    tracemalloc.start()
    for i in range(start, stop, batch):
        test.update(data.a[i : i + batch], data.b[i : i + batch], data.c[i : i + batch])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_and_past_stay_bounded_on_a_long_stream():
    d = gaussian_ci(10_000, 3, 0.0, seed=3)
    test = SKCI(max_past=100, n_anchors=32, warmup=40, random_state=0)
    test.run(d.a[:1000], d.b[:1000], d.c[:1000], batch_size=50)
    early = traced_peak(test, d, 1000, 1500, 50)
    test.run(d.a[1500:9500], d.b[1500:9500], d.c[1500:9500], batch_size=50)
    late = traced_peak(test, d, 9500, 10_000, 50)
    res = test.result()
    assert test.n_seen == 10_000 and test._past[0].shape[0] == 100 and res.wealth.size == 199
    assert late < 1.2 * early + 1e5 and late < 5e6  # no growth with the stream's length


def test_bad_input():
    d = gaussian_ci(60, 3, 0.0, seed=0)
    test = SKCI(**SMALL)
    with pytest.raises(ValueError, match="b_batch must have one row per sample"):
        test.update(d.a[:20], d.b[:19], d.c[:20])
    bad = d.a[:20].copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="a_batch must not contain NaN"):
        test.update(bad, d.b[:20], d.c[:20])
    test.update(d.a[:20], d.b[:20], d.c[:20])
    with pytest.raises(ValueError, match="c_batch must have 3 columns"):
        test.update(d.a[:20], d.b[:20], d.c[:20, :2])
    for alpha in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(ValueError, match="alpha"):
            SKCI(alpha=alpha)
    with pytest.raises(ValueError, match="conditional"):
        SKCI(model_x="oracle")
    with pytest.raises(ValueError, match="pretrain"):
        SKCI(model_x="pretrained")
    with pytest.raises(ValueError, match="model_x"):
        SKCI(model_x="exact")
    with pytest.raises(ValueError, match="estimator"):
        SKCI(estimator="linear")
    with pytest.raises(ValueError, match="warmup"):
        SKCI(max_past=50, warmup=60)
    with pytest.raises(ValueError, match="betting"):
        SKCI(betting="kelly")
    with pytest.raises(TypeError, match="batch_size"):
        SKCI().run(d.a, d.b, d.c, batch_size=2.5)


@pytest.mark.slow
def test_default_skci_on_ten_thousand_samples_stays_bounded():
    d = gaussian_ci(10_000, 5, 0.0, seed=4)
    test = SKCI(random_state=0)
    test.run(d.a[:1000], d.b[:1000], d.c[:1000])
    early = traced_peak(test, d, 1000, 1200, 20)
    test.run(d.a[1200:9800], d.b[1200:9800], d.c[1200:9800])
    late = traced_peak(test, d, 9800, 10_000, 20)
    assert test._past[0].shape[0] == test.max_past and test.result().wealth.size == 498
    assert late < 1.2 * early + 1e5 and late < 50e6
