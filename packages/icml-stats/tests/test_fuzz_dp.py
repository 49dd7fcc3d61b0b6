"""Bad-input fuzz tests (GUIDE "Bad input") of icml_stats.dp: every public API either returns a result its
check accepts or raises ValueError/TypeError naming the argument, and never answers NaN/inf from finite
input without a warning. Data are tiny: 12 samples of 3 public features (and 12 one-hot rows of 3
categories); the regressors take 3 Poisson steps.

The accountant costs seconds a call, so calibrate_noise and the calibrated CondDPRegressor are fuzzed on
their refusals only (they come before the accountant runs), privacy_spent's valid call runs once (memoized)
and epsilon_ is read once on a fitted estimator.

The inputs that once broke the contract (accountant arguments named after the accountant's own, unhashable
arguments hitting the cache, batches with no length, of the wrong width or huge, a huge noise multiplier)
were fixed in the library; they are fuzzed again and replayed exactly in ``REPLAYS`` at the end, so they
stay fixed."""

import importlib.util
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import icml_stats.dp  # noqa: E402
import icml_stats.dp.conditioning  # noqa: E402
import icml_stats.dp.estimators  # noqa: E402
import icml_stats.dp.sgd  # noqa: E402
from icml_stats.dp import (  # noqa: E402
    CondDPRegressor,
    CondDPSGD,
    LaplaceLabelRegressor,
    calibrate_noise,
    conditioning_matrix,
    frequency_conditioning,
    privacy_spent,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile, keeps_contract, rejects  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HAS_OPACUS = importlib.util.find_spec("opacus") is not None

FUZZ = Coverage()

RNG = np.random.default_rng(0)
N, D = 12, 3
X = RNG.normal(size=(N, D))
Y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * RNG.normal(size=N)
ONE_HOT = np.eye(D)[np.r_[0, 1, 2, RNG.integers(0, D, N - 3)]]
C = conditioning_matrix(X)
XT, YT = torch.tensor(X[:4]), torch.tensor(Y[:4])
X_REF = X  # the rows predicted after a fit (whatever X the fit was given)


def refused(interval: str) -> st.SearchStrategy:
    """Values a real parameter in ``interval`` must refuse: wrong types, NaN, ±inf and numbers outside it
    (the valid ones would run the accountant, seconds a call)."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    outside = [v for v in (-1.0, 0.0, 1.0, 1.5, 2.0, 1e300) if not (low < v < high or v in (low, high))]
    outside += [v for v, closed in ((low, interval[0] == "("), (high, interval[-1] == ")")) if closed]
    return st.sampled_from(
        [None, "x", b"x", object(), (), [0.5], True, "0.5", math.nan, math.inf, -math.inf, *outside]
    )


def no_larger(top: float):
    return lambda v: not (isinstance(v, int | float) and not isinstance(v, bool) and abs(v) > top)


def is_matrix(out) -> bool:
    return (
        isinstance(out, np.ndarray)
        and out.ndim == 2
        and out.shape[0] == out.shape[1]
        and np.allclose(out, out.T)
    )


# ------------------------------------------------------------------------------------- conditioning
def cond_matrix(X, power, reg, normalize, rcond):
    return conditioning_matrix(X, power=power, reg=reg, normalize=normalize, rcond=rcond)


@FUZZ.covers(conditioning_matrix)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_conditioning_matrix(data):
    fuzz_call(
        data,
        cond_matrix,
        {"X": X, "power": 1.0, "reg": 0.0, "normalize": "rms", "rcond": 1e-10},
        check=is_matrix,
    )


def freq_conditioning(X, normalize):
    return frequency_conditioning(X, normalize=normalize)


@FUZZ.covers(frequency_conditioning)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_frequency_conditioning(data):
    fuzz_call(
        data,
        freq_conditioning,
        {"X": ONE_HOT, "normalize": "rms"},
        check=lambda c: is_matrix(c) and np.count_nonzero(c - np.diag(np.diag(c))) == 0,
    )


# -------------------------------------------------------------------------------------------- estimators
def laplace_fit_predict(X, y, epsilon, label_bound, fit_intercept, random_state):
    est = LaplaceLabelRegressor(
        epsilon, label_bound=label_bound, fit_intercept=fit_intercept, random_state=random_state
    )
    return est.fit(X, y).predict(X_REF[:3])


@FUZZ.covers(LaplaceLabelRegressor)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_laplace_regressor_fit_predict(data):
    fuzz_call(
        data,
        laplace_fit_predict,
        {"X": X, "y": Y, "epsilon": 1.0, "label_bound": 3.0, "fit_intercept": True, "random_state": 0},
        check=lambda p: p.shape == (3,),
        related={"X": ["y"], "y": ["X"]},
    )


COND_DP_VALID = {
    "X": X,
    "y": Y,
    "epsilon": 1.0,
    "delta": 0.05,
    "conditioning": "svd",
    "power": 1.0,
    "reg": 0.0,
    "lr": 0.5,
    "max_grad_norm": 1.0,
    "batch_size": 4,
    "epochs": 1.0,
    "noise_multiplier": 1.0,
    "relation": "replace-one",
    "fit_intercept": True,
    "random_state": 0,
}


def cond_dp(X, y, epsilon, delta, **params):
    return CondDPRegressor(epsilon, delta, **params).fit(X, y)


def cond_dp_fit_predict(X, y, **params):
    return cond_dp(X, y, **params).predict(X_REF[:3])


@FUZZ.covers(CondDPRegressor)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_cond_dp_regressor_fit_predict(data):
    """Fit with a fixed noise multiplier (no calibration) and predict; epsilon is ignored then."""
    fuzz_call(
        data,
        cond_dp_fit_predict,
        COND_DP_VALID,
        check=lambda p: p.shape == (3,),
        strategies={
            "conditioning": st.one_of(
                hostile("svd"),
                st.sampled_from(["identity", "frequency", np.eye(D), np.eye(2), C * math.nan, C.tolist()]),
            ),
            # None calibrates (the accountant, seconds a call; fuzzed on its refusals below); a huge one
            # (above ~2e38 here) diverges with a DivergedError naming noise_multiplier; many epochs are
            # slow, not bad input
            "noise_multiplier": hostile(1.0).filter(lambda v: v is not None),
            "epochs": hostile(1.0).filter(no_larger(10)),
        },
        related={"X": ["y"], "y": ["X"], "conditioning": ["X"], "power": [], "reg": []},
    )


@FUZZ.covers(CondDPRegressor)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cond_dp_regressor_calibrated_refusals(data):
    """With noise_multiplier=None the noise is calibrated to (epsilon, delta): a refused epsilon, delta or
    relation must be named before the accountant runs."""
    name = data.draw(st.sampled_from(["epsilon", "delta", "relation", "batch_size"]), label="argument")
    value = data.draw(
        {
            "epsilon": refused("(0, inf)"),
            "delta": refused("(0, 1)").filter(lambda v: v is not None),  # None: 1 / n, valid
            "relation": st.sampled_from(["", "x", "REPLACE-ONE", None, 3, ["replace-one"]]),
            "batch_size": st.sampled_from([0, -1, None, "x", 0.5, True, math.nan]),
        }[name],
        label=name,
    )
    kwargs = {**COND_DP_VALID, "noise_multiplier": None, name: value}
    rejects(cond_dp, name=name, **kwargs)


@pytest.fixture(scope="module")
def fitted():
    return {
        "cond": CondDPRegressor(
            noise_multiplier=1.0, delta=0.05, batch_size=4, epochs=1.0, random_state=0
        ).fit(X, Y),
        "laplace": LaplaceLabelRegressor(random_state=0).fit(X, Y),
    }


@FUZZ.covers(CondDPRegressor, LaplaceLabelRegressor)
@pytest.mark.parametrize("name", ["cond", "laplace"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_regressors_predict(fitted, name, data):
    fuzz_call(data, fitted[name].predict, {"X": X[:3]}, check=lambda p: p.shape[0] >= 0)


@FUZZ.covers(CondDPRegressor)
def test_cond_dp_epsilon_spent(fitted):
    """epsilon_ (one accountant call): the cost of the fixed noise multiplier, before fit NotFittedError."""
    with pytest.raises(NotFittedError):
        CondDPRegressor(noise_multiplier=1.0).epsilon_  # noqa: B018
    eps = fitted["cond"].epsilon_
    assert isinstance(eps, float) and 0 < eps < math.inf
    assert fitted["cond"].epsilon_ == eps  # computed once


# ------------------------------------------------------------------------------------------ accountant
PRIVACY_VALID = {
    "noise_multiplier": 1.0,
    "sample_rate": 1.0,
    "steps": 1,
    "delta": 0.05,
    "relation": "replace-one",
}
_SPENT: dict = {}


# steps refused: any valid count runs the accountant (seconds a call); 10**9 + 1 is past MAX_STEPS
REFUSED_STEPS = st.sampled_from(
    [0, -1, -(2**63), 10**9 + 1, 2**63, None, "x", b"x", [1], 0.5, 1.0, True, math.nan, math.inf]
)


def privacy_spent_once(**kwargs):
    """privacy_spent, memoizing its valid call (the accountant takes seconds; the result is deterministic)."""
    if kwargs == PRIVACY_VALID:
        if "valid" not in _SPENT:
            _SPENT["valid"] = privacy_spent(**kwargs)
        return _SPENT["valid"]
    return privacy_spent(**kwargs)


@FUZZ.covers(privacy_spent)
@settings(max_examples=12, deadline=None)
@given(st.data())
def test_privacy_spent(data):
    fuzz_call(
        data,
        privacy_spent_once,
        PRIVACY_VALID,
        check=lambda e: isinstance(e, float) and 0 < e < math.inf,
        strategies={
            "noise_multiplier": refused("(0, inf)"),
            "sample_rate": refused("(0, 1]"),
            "steps": REFUSED_STEPS,
            "delta": refused("(0, 1)"),
        },
    )


@FUZZ.covers(calibrate_noise)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_calibrate_noise_refusals(data):
    """Refusals only (a valid calibration takes ~15 s), named by our argument names before the cache (so
    unhashable values too) and before the accountant."""
    valid = {"epsilon": 2.0, "delta": 0.05, "sample_rate": 1.0, "steps": 1, "relation": "replace-one"}
    name = data.draw(st.sampled_from(list(valid)), label="argument")
    value = data.draw(
        {
            "epsilon": refused("(0, inf)"),
            "delta": refused("(0, 1)"),
            "sample_rate": refused("(0, 1]"),
            "steps": REFUSED_STEPS,
            "relation": hostile("replace-one"),  # unhashable ones too ({}, [None])
        }[name],
        label=name,
    )
    rejects(calibrate_noise, name=name, **{**valid, name: value})


# ----------------------------------------------------------------------------------------------- SGD
def linear():
    torch.manual_seed(0)
    return nn.Linear(D, 1, dtype=torch.float64)


def sgd(model, lr, max_grad_norm, noise_multiplier, expected_batch_size, conditioning, loss_fn, generator):
    return CondDPSGD(
        model,
        lr=lr,
        max_grad_norm=max_grad_norm,
        noise_multiplier=noise_multiplier,
        expected_batch_size=expected_batch_size,
        conditioning=conditioning,
        loss_fn=loss_fn,
        generator=generator,
    )


SGD_VALID = {
    "model": linear(),
    "lr": 0.1,
    "max_grad_norm": 1.0,
    "noise_multiplier": 1.0,
    "expected_batch_size": 4.0,
    "conditioning": {"weight": C},
    "loss_fn": None,  # the default squared error
    "generator": None,
}


@FUZZ.covers(CondDPSGD)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_cond_dp_sgd_constructor(data):
    fuzz_call(
        data,
        sgd,
        SGD_VALID,
        # {"weight": ..., "bias": ...} for a Linear with a bias is a valid conditioning among the samples
        check=lambda o: isinstance(o, CondDPSGD) and set(o.conditioning) <= {"weight", "bias"},
        strategies={
            "conditioning": st.one_of(
                hostile({"weight": C}),
                st.sampled_from(
                    [
                        {"weight": C[:1]},
                        {"weight": C * math.nan},
                        {"weight": None},
                        {"bias2": C},
                        {0: C},
                        {"weight": C.astype(str)},
                        {"weight": "x"},
                        {"weight": object()},
                        {"weight": np.eye(D), "bias": np.eye(1)},
                    ]
                ),
            ),
            "model": st.one_of(hostile(None), st.sampled_from([nn.Linear, nn.ReLU(), torch.zeros(3)])),
            "generator": st.one_of(
                hostile(None), st.sampled_from([0, torch.Generator, np.random.default_rng(0)])
            ),
        },
    )


def grads_of(method: str):
    def check(out) -> bool:
        if method == "step":
            return out is None
        rows = (4,) if method == "per_sample_gradients" else ()
        return set(out) == {"weight", "bias"} and out["weight"].shape == (*rows, 1, D)

    return check


@FUZZ.covers(CondDPSGD)
@pytest.mark.parametrize("method", ["per_sample_gradients", "clipped_sum", "step"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_cond_dp_sgd_methods(method, data):
    opt = sgd(**{**SGD_VALID, "model": linear(), "generator": torch.Generator().manual_seed(0)})
    fuzz_call(
        data,
        getattr(opt, method),
        {"inputs": XT, "targets": YT},
        check=grads_of(method),
        related={"inputs": ["targets"], "targets": ["inputs"]},
    )


@FUZZ.covers(CondDPSGD)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cond_dp_sgd_poisson_batch(data):
    opt = sgd(**{**SGD_VALID, "generator": torch.Generator().manual_seed(0)})
    fuzz_call(
        data,
        opt.poisson_batch,
        {"n": N, "sample_rate": 0.5},
        check=lambda idx: idx.ndim == 1 and idx.dtype == torch.int64 and bool((idx >= 0).all()),
    )


# -------------------------------------------------------------------------------------------- opacus
def dp_optimizer(optimizer, conditioning, noise_multiplier, max_grad_norm, expected_batch_size):
    from icml_stats.dp.opacus import CondDPOptimizer

    return CondDPOptimizer(
        optimizer,
        conditioning=conditioning,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        expected_batch_size=expected_batch_size,
    )


_GM: list = []


def grad_module():
    """One GradSampleModule for the whole module (built on first use: opacus is optional)."""
    if not _GM:
        from opacus import GradSampleModule

        _GM.append(GradSampleModule(linear()))
    return _GM[0]


def sane_optimizer(opt) -> bool:
    return (
        math.isfinite(opt.noise_multiplier)
        and opt.noise_multiplier >= 0
        and math.isfinite(opt.max_grad_norm)
        and opt.max_grad_norm > 0
        and opt.expected_batch_size > 0
    )


@pytest.mark.skipif(not HAS_OPACUS, reason="needs opacus")
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_cond_dp_optimizer(data):
    w = grad_module()._module.weight
    fuzz_call(
        data,
        dp_optimizer,
        {
            "optimizer": torch.optim.SGD(grad_module().parameters(), lr=0.1),
            "conditioning": {w: C},
            "noise_multiplier": 1.0,
            "max_grad_norm": 1.0,
            "expected_batch_size": 4,
        },
        check=sane_optimizer,
        strategies={
            "optimizer": st.one_of(hostile(None), st.sampled_from([torch.optim.SGD, grad_module(), [w]])),
            "conditioning": st.one_of(
                hostile({w: C}),
                st.sampled_from(
                    [
                        {w: C[:1]},
                        {w: C * math.nan},
                        {w: None},
                        {w: "x"},
                        {w: object()},
                        {"weight": C},
                        {torch.zeros(D): C},
                        [C],
                    ]
                ),
            ),
        },
    )


if HAS_OPACUS:
    from icml_stats.dp.opacus import CondDPOptimizer

    test_cond_dp_optimizer = FUZZ.covers(CondDPOptimizer)(test_cond_dp_optimizer)


# ------------------------------------------------------------------------------------ a property test
@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 20),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    scale=st.floats(1e-3, 1e3),
    target=st.floats(-1e3, 1e3),
    clip=st.floats(1e-4, 1e4),
    power=st.floats(0.0, 4.0),
    reg=st.sampled_from([0.0, 1e-3, 1.0]),
    normalize=st.sampled_from(["rms", None]),
)
def test_clipped_single_gradient_norm_at_most_the_bound(
    n, d, seed, scale, target, clip, power, reg, normalize
):
    """clipped_sum of a batch of one sample has norm <= max_grad_norm, whatever the data, clip bound and
    conditioning matrix (random features, tempered by power and reg)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rank-deficient features (d > n - ...)
        C = conditioning_matrix(X, power=power, reg=reg, normalize=normalize)
    torch.manual_seed(seed % 2**31)
    model = nn.Linear(d, 1, dtype=torch.float64)
    opt = CondDPSGD(
        model,
        lr=0.1,
        max_grad_norm=clip,
        noise_multiplier=1.0,
        expected_batch_size=1.0,
        conditioning={"weight": C},
    )
    i = int(rng.integers(n))
    out = opt.clipped_sum(torch.tensor(X[i : i + 1]), torch.tensor([target]))
    norm = math.sqrt(sum(float((v**2).sum()) for v in out.values()))
    assert norm <= clip + 1e-9


# ------------------------------------------------------------------ former breaches, replayed exactly
def _opt():
    return sgd(**{**SGD_VALID, "model": linear()})


def _clip_reaches_bound():
    """A sample of finite gradients ~1e200 (at the bound c = 1 when clipped) must be clipped to norm c, not 0."""
    out = _opt().clipped_sum(XT[:1], YT[:1] * 1e200)
    norm = math.sqrt(sum(float((v**2).sum()) for v in out.values()))
    assert abs(norm - 1.0) < 1e-6, f"clipped norm {norm}, not max_grad_norm 1.0"


HUGE_X = X * (0.5 * np.finfo(float).max / np.abs(X).max())

# name: (call, the arguments a refusal may name, what it did before the fix); each must keep the contract
REPLAYS = {
    "cond_dp_fit_huge_noise_multiplier": (
        lambda: CondDPRegressor(noise_multiplier=1e100, delta=0.05, batch_size=4, epochs=1.0).fit(X, Y),
        ("noise_multiplier",),
        "was: noise of std 1e100 * max_grad_norm, DivergedError 'lower lr or max_grad_norm' not naming "
        "noise_multiplier",
    ),
    "privacy_spent_steps_0": (
        lambda: privacy_spent(1.0, 1.0, 0, 0.05, "replace-one"),
        ("steps",),
        "was: the accountant's ValueError named num_steps, not the argument steps",
    ),
    "privacy_spent_steps_none": (
        lambda: privacy_spent(1.0, 1.0, None, 0.05, "replace-one"),
        ("steps",),
        "was: the accountant's TypeError named num_steps, not the argument steps",
    ),
    "calibrate_noise_epsilon_negative": (
        lambda: calibrate_noise(-1.0, 0.05, 1.0, 1, "replace-one"),
        ("epsilon",),
        "was: get_noise_multiplier's ValueError named target_epsilon, not the argument epsilon",
    ),
    "calibrate_noise_delta_2": (
        lambda: calibrate_noise(2.0, 2.0, 1.0, 1, "replace-one"),
        ("delta",),
        "was: get_noise_multiplier's ValueError named target_delta, not the argument delta",
    ),
    "calibrate_noise_steps_2_63": (
        lambda: calibrate_noise(2.0, 0.05, 1.0, 2**63, "replace-one"),
        ("steps",),
        "was: no upper bound on steps; the accountant's ValueError named num_steps",
    ),
    "calibrate_noise_unhashable": (
        lambda: calibrate_noise([2.0], 0.05, 1.0, 1, "replace-one"),
        ("epsilon",),
        "functools.lru_cache raises TypeError 'unhashable type: list' before any check",
    ),
    "calibrate_noise_relation_list": (
        lambda: calibrate_noise(2.0, 0.05, 1.0, 1, ["replace-one"]),
        ("relation",),
        "functools.lru_cache raises TypeError 'unhashable type: list' before any check",
    ),
    "clipped_sum_inputs_none": (
        lambda: _opt().clipped_sum(None, YT),
        ("inputs",),
        "was: TypeError 'object of type NoneType has no len()' not naming inputs",
    ),
    "clipped_sum_inputs_0d": (
        lambda: _opt().clipped_sum(XT[0, 0], YT),
        ("inputs",),
        "was: a 0-d tensor, TypeError 'len() of a 0-d tensor' not naming inputs",
    ),
    "clipped_sum_inputs_wrong_width": (
        lambda: _opt().clipped_sum(XT[:, :1], YT),
        ("inputs",),
        "was: inputs (4, 1) for a (1, 3) weight, torch RuntimeError 'mat1 and mat2 shapes cannot be multiplied'",
    ),
    "clipped_sum_huge_inputs": (
        lambda: _opt().clipped_sum(torch.tensor(HUGE_X[:4]), YT),
        ("inputs",),
        "was: finite inputs whose per-sample norms overflow, a NaN clipped sum with no warning",
    ),
    "clipped_sum_large_targets": (
        _clip_reaches_bound,
        ("targets",),
        "was: finite gradients (~1e200) whose squared norm overflowed to inf, a clip factor 0 and a clipped "
        "sum silently 0 (each sample should contribute norm max_grad_norm)",
    ),
    "per_sample_gradients_huge_inputs": (
        lambda: _opt().per_sample_gradients(torch.tensor(HUGE_X[:4]), YT),
        ("inputs",),
        "was: finite inputs, ±inf gradients with no warning",
    ),
    "step_inputs_wrong_width": (
        lambda: _opt().step(XT[:, :1], YT),
        ("inputs",),
        "was: torch RuntimeError 'mat1 and mat2 shapes cannot be multiplied'",
    ),
}


@pytest.mark.parametrize("case", sorted(REPLAYS))
def test_former_breaches(case):
    fn, names, _ = REPLAYS[case]
    keeps_contract(fn, names, tolerate=(NotFittedError,))


def test_every_public_api_is_fuzzed():
    modules = [icml_stats.dp, icml_stats.dp.conditioning, icml_stats.dp.estimators, icml_stats.dp.sgd]
    if HAS_OPACUS:
        modules.append(importlib.import_module("icml_stats.dp.opacus"))
    FUZZ.assert_complete(*modules)
