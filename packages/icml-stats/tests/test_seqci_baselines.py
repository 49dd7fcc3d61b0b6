"""Baselines: e-CRT, SKIT and batch KCI."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from icml_stats.seqci import gaussian_ci
from icml_stats.seqci.baselines import ECRT, SKIT, kci_test


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def test_ecrt_detects_dependence_and_its_oracle_payoffs_are_centred():
    d = gaussian_ci(400, 3, 1.0, seed=0)
    res = ECRT(random_state=0).run(d.a, d.b, d.c)
    assert res.rejected and res.stopping_time <= 400
    # oracle conditional under H0: a and its dummies are exchangeable, so the sign payoffs average ~0
    payoffs = []
    for seed in range(6):
        null = gaussian_ci(300, 3, 0.0, seed=seed)
        payoffs += list(
            ECRT(model_x="oracle", conditional=null.conditional(), random_state=seed)
            .run(null.a, null.b, null.c)
            .payoffs
        )
    payoffs = np.array(payoffs)
    assert abs(payoffs.mean()) < 3 * payoffs.std() / np.sqrt(payoffs.size)
    assert (np.abs(payoffs) <= 1).all()


def test_skit_payoff_is_antisymmetric_and_the_test_works():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 1))
    test = SKIT()
    test.run(x[:100], (0.8 * x + rng.standard_normal((200, 1)))[:100])
    a, b = rng.standard_normal((2, 1)), rng.standard_normal((2, 1))
    swapped = test._pair_payoffs(a, b[::-1])
    np.testing.assert_allclose(test._pair_payoffs(a, b), -swapped, atol=1e-12)
    y_dep = 0.8 * x + rng.standard_normal((200, 1))
    assert SKIT().run(x, y_dep).rejected
    rejections = sum(
        SKIT().run(rng.standard_normal((200, 1)), rng.standard_normal((200, 1))).rejected for _ in range(10)
    )
    assert rejections <= 2


@pytest.mark.parametrize("name", ["ECRT", "SKIT"])
def test_update_keeps_no_reference_to_the_callers_arrays(name):
    d = gaussian_ci(84, 2, 0.0, seed=1)
    columns = (d.a, d.b, d.c) if name == "ECRT" else (d.a, d.b)
    make = (lambda: ECRT(random_state=0, warmup=20)) if name == "ECRT" else (lambda: SKIT(warmup=20))
    copies, reused = make(), make()
    buf = [np.empty((21, x.shape[1])) for x in columns]  # odd batches: SKIT holds a point back
    for i in range(0, 84, 21):
        batch = [x[i : i + 21] for x in columns]
        for dst, src in zip(buf, batch, strict=True):
            dst[:] = src  # a streaming caller refilling one buffer per batch
        expected, got = copies.update(*(x.copy() for x in batch)), reused.update(*buf)
        if name == "SKIT" and i == 0:
            for b in buf:
                b[:] = np.nan  # scribbling on the buffer changes neither the past nor the held point
            np.testing.assert_array_equal(reused._past[0], d.a[:20])
            np.testing.assert_array_equal(reused._held[0], d.a[20:21])
    np.testing.assert_array_equal(got.wealth, expected.wealth)
    assert got.wealth.size > 0


def test_kci_rejects_dependence_and_not_independence():
    null_p = [kci_test(*(lambda d: (d.a, d.b, d.c))(gaussian_ci(150, 3, 0.0, seed=s)))[1] for s in range(8)]
    alt_p = [kci_test(*(lambda d: (d.a, d.b, d.c))(gaussian_ci(150, 3, 1.0, seed=s)))[1] for s in range(3)]
    assert max(alt_p) < 0.01
    assert np.mean(null_p) > 0.2 and sum(p < 0.05 for p in null_p) <= 2


def test_bad_input():
    d = gaussian_ci(60, 3, 0.0, seed=0)
    with pytest.raises(ValueError, match="alpha"):
        ECRT(alpha=1.0)
    with pytest.raises(ValueError, match="conditional"):
        ECRT(model_x="oracle")
    with pytest.raises(ValueError, match="b_batch must have one row"):
        ECRT().update(d.a[:20], d.b[:10], d.c[:20])
    with pytest.raises(ValueError, match="b_batch must have one row"):
        SKIT().update(d.a[:20], d.b[:10])
    with pytest.raises(ValueError, match="at least 4"):
        kci_test(d.a[:3], d.b[:3], d.c[:3])
    with pytest.raises(ValueError, match="NaN"):
        kci_test(np.full(10, np.nan), d.b[:10], d.c[:10])
