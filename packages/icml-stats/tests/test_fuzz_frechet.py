"""Bad-input fuzz tests (GUIDE "Bad input", issue 22) of icml_stats.frechet: every public API either returns
a result its check accepts or raises ValueError/TypeError naming the argument, and never answers NaN/inf
from finite input without a warning. Data are tiny: 10 objects (2-vectors, W2 quantile functions on 5
levels, 3x3 SPD matrices and graph Laplacians, points of the 2-sphere, 3-part compositions); DeSI trains a
width-4 network for 5 epochs with one start.

Each breach the fuzz found once (unchecked dist2/objective/global_weights/local_weights arguments, solver
parameters reported as extreme weights, scikit-learn messages not naming X, AttributeError before fit,
overflowing X blamed on weights or bandwidth, unchecked object shapes in score, unbounded DeSI sizes) was
fixed in the library and is replayed explicitly in ``BREACHES`` at the end, so it stays fixed."""

import importlib.util
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError

import icml_stats.frechet
from icml_stats.frechet import (
    SPD,
    Compositional,
    DeSI,
    Euclidean,
    GlobalFrechetRegressor,
    Laplacian,
    LocalFrechetRegressor,
    Space,
    Sphere,
    Wasserstein,
    as_space,
    check_weights,
    global_weights,
    local_weights,
    quantiles,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile, keeps_contract, non_finite

FUZZ = Coverage()  # KERNELS and SPACES are constants (a tuple and a dict): not APIs, nothing to exempt

RNG = np.random.default_rng(0)
N = 10
LEVELS = np.linspace(0.1, 0.9, 5)
SAMPLES = RNG.normal(size=(N, 12)) + RNG.normal(size=(N, 1))


def _spd(n: int, d: int = 3) -> np.ndarray:
    a = RNG.normal(size=(n, d, d))
    return a @ a.transpose(0, 2, 1) + 0.3 * np.eye(d)


def _unit(n: int, d: int = 3) -> np.ndarray:
    a = RNG.normal(size=(n, d))
    return a / np.linalg.norm(a, axis=1, keepdims=True)


# one space and N valid objects of it per case
CASES = {
    "euclidean": (Euclidean(), RNG.normal(size=(N, 2))),
    "wasserstein": (Wasserstein(), quantiles(SAMPLES, LEVELS)),
    "spd-frobenius": (SPD("frobenius"), _spd(N)),
    "spd-log_euclidean": (SPD("log_euclidean"), _spd(N)),
    "spd-affine_invariant": (SPD("affine_invariant", max_iter=30, tol=1e-8), _spd(N)),
    "laplacian": (Laplacian(), Laplacian.from_offdiagonal(-RNG.uniform(0.1, 1.0, (N, 3)), 3)),
    "sphere": (Sphere(max_iter=50, tol=1e-8), _unit(N)),
    "compositional": (Compositional(max_iter=50, tol=1e-8), RNG.dirichlet(np.ones(3), N)),
}
W = np.full(N, 1.0 / N)  # one set of weights (sum 1)
W2 = np.stack([W, np.r_[0.6, 0.4, np.zeros(N - 2)]])  # two sets, one per row
X2 = RNG.normal(size=(N, 2))  # predictors of the global regression and DeSI
X1 = np.linspace(-1.0, 1.0, N)[:, None]  # the scalar predictor of local regression
Y_EU = CASES["euclidean"][1]
BANDWIDTHS = [0.3, 0.6, 1.2]


def small(valid, top: int) -> st.SearchStrategy:
    """hostile(valid) less the integers above ``top`` (valid but slow: many epochs, wide layers); the
    overflowing extremes (2**63) are replayed in BREACHES."""
    return hostile(valid).filter(lambda v: not (isinstance(v, int) and not isinstance(v, bool) and v > top))


def is_objects(space: Space, k: int):
    """A check: ``k`` finite objects the space accepts (``check`` raising fails the test)."""

    def check(out) -> bool:
        return (
            isinstance(out, np.ndarray)
            and len(out) == k
            and not non_finite(out)
            and (k == 0 or space.check(out) is not None)
        )

    return check


# ---------------------------------------------------------------------------------------------- spaces
@FUZZ.covers(Space, Euclidean, Wasserstein, SPD, Laplacian, Sphere, Compositional)
@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_space_check_mean_means(case, data):
    """Space.check, mean and means of every space (and SPD under each metric): hostile objects and weights
    (wrong shapes, NaN/inf, weights not summing to 1, float16, strings, complex)."""
    space, y = CASES[case]
    related = {"y": ["weights"], "weights": ["y"]}
    method = data.draw(st.sampled_from(["check", "mean", "means"]), label="method")
    if method == "check":
        fuzz_call(data, space.check, {"y": y}, check=lambda a: a.ndim == space.ndim + 1 and len(a) >= 1)
    elif method == "mean":
        fuzz_call(
            data,
            space.mean,
            {"y": y, "weights": W},
            check=lambda m: is_objects(space, 1)(m[None]),
            related=related,
        )
    else:
        fuzz_call(
            data,
            space.means,
            {"y": y, "weights": W2},
            check=lambda m: is_objects(space, len(m))(m),
            related=related,
        )


@FUZZ.covers(Space)
@pytest.mark.parametrize("case", ["euclidean", "wasserstein", "spd-log_euclidean", "laplacian", "sphere"])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_space_objective(case, data):
    space, y = CASES[case]
    omega = space.mean(y, W)
    fuzz_call(
        data,
        space.objective,
        {"y": y, "weights": W, "omega": omega},
        # inf only with an overflow warning (the contract checks that)
        check=lambda f: isinstance(f, float) and not math.isnan(f) and f >= -1e-12,
        mutate=["y", "weights"],
        related={"y": ["weights", "omega"], "weights": ["y"]},
    )


@pytest.mark.parametrize("case", ["euclidean", "spd-log_euclidean"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_space_objective_omega(case, data):
    space, y = CASES[case]
    fuzz_call(data, space.objective, {"y": y, "weights": W, "omega": space.mean(y, W)}, mutate=["omega"])


@pytest.mark.parametrize("case", ["euclidean", "wasserstein", "spd-log_euclidean", "sphere"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_space_dist2(case, data):
    space, y = CASES[case]
    fuzz_call(
        data,
        space.dist2,
        {"a": y, "b": y[:1]},
        check=lambda d: d.shape == (N,) and bool(np.all(d >= -1e-12)),
        related={"a": ["b"], "b": ["a"]},
    )


# every space's parameters, through means. Those checked with the objects (support bounds, metric, edge
# weight bound) keep the contract; one that makes the (valid) objects invalid may be refused naming y.
CHECKED_PARAMS = [
    (Wasserstein, "wasserstein", {"lower": -10.0, "upper": 10.0}, {"lower": ["y"], "upper": ["y", "lower"]}),
    (SPD, "spd-affine_invariant", {"metric": "affine_invariant"}, {}),
    (Laplacian, "laplacian", {"max_weight": 5.0}, {"max_weight": ["y"]}),
]
# the solver parameters, checked inside _means: Space._solve turns their ValueError into FrechetMeanError
SOLVER_PARAMS = [
    (SPD, "spd-affine_invariant", {"metric": "affine_invariant", "floor": 1e-8, "max_iter": 30, "tol": 1e-8}),
    (SPD, "spd-frobenius", {"metric": "frobenius", "floor": 1e-8}),
    (Laplacian, "laplacian", {"tol": 1e-10}),
    (Sphere, "sphere", {"max_iter": 50, "tol": 1e-8}),
    (Compositional, "compositional", {"max_iter": 50, "tol": 1e-8}),
]


def _fuzz_space_params(data, cls, case, params, related) -> None:
    y = CASES[case][1]

    def means_with(**kwargs):
        return cls(**kwargs).means(y, W2)

    fuzz_call(
        data,
        means_with,
        params,
        check=lambda m: m.shape == (2, *y.shape[1:]) and not non_finite(m),
        strategies={k: small(v, 1000) for k, v in params.items() if k == "max_iter"},
        related=related,
    )


@FUZZ.covers(Wasserstein, SPD, Laplacian)
@pytest.mark.parametrize("cls, case, params, related", CHECKED_PARAMS, ids=[p[1] for p in CHECKED_PARAMS])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_space_checked_parameters(cls, case, params, related, data):
    _fuzz_space_params(data, cls, case, params, related)


@FUZZ.covers(SPD, Laplacian, Sphere, Compositional)
@pytest.mark.parametrize("cls, case, params", SOLVER_PARAMS, ids=[p[1] for p in SOLVER_PARAMS])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_space_solver_parameters(cls, case, params, data):
    _fuzz_space_params(data, cls, case, params, {})


@FUZZ.covers(as_space)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_as_space(data):
    fuzz_call(
        data,
        as_space,
        {"space": "spd"},
        check=lambda s: isinstance(s, Space),
        strategies={"space": st.one_of(hostile("spd"), st.sampled_from([SPD, Space, Sphere, 3, ["spd"]]))},
    )


@FUZZ.covers(quantiles)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_quantiles(data):
    def check(q):
        return q.shape[0] == N and bool(np.all(np.diff(q, axis=1) >= 0))

    fuzz_call(
        data,
        quantiles,
        {"samples": SAMPLES, "levels": LEVELS},
        check=lambda q: q.ndim == 2 and not non_finite(q) and q.shape[1] == len(LEVELS),
    )
    fuzz_call(data, quantiles, {"samples": SAMPLES, "levels": LEVELS}, check=check, mutate=["levels"])


@FUZZ.covers(check_weights)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_check_weights(data):
    valid = data.draw(st.sampled_from([W, W2]), label="weights")
    fuzz_call(
        data,
        check_weights,
        {"weights": valid, "n": N},
        check=lambda w: w.shape[-1] == N and np.allclose(w.sum(-1), 1.0),
        related={"n": ["weights"]},  # a wrong n breaks the agreement of the weights' length with it
    )


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_check_weights_default_n(data):
    fuzz_call(data, check_weights, {"weights": None, "n": N}, mutate=["n"])


# ---------------------------------------------------------------------------------- regression weights
@FUZZ.covers(global_weights)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_global_weights(data):
    fuzz_call(
        data,
        global_weights,
        {"x_train": X2, "x_query": X2[:3]},
        # a fuzzed x_train may hold fewer rows than N (one row: every weight 1), so the width is not checked
        check=lambda w: w.ndim == 2 and np.allclose(w.sum(1), 1.0),
        related={"x_train": ["x_query"], "x_query": ["x_train"]},
    )


def refused_bandwidths() -> st.SearchStrategy:
    """Bandwidths that are not positive finite numbers: wrong types, NaN, inf, zero, negatives (a tiny or
    huge positive bandwidth is fuzzed in the test after this one)."""
    return st.one_of(
        st.sampled_from([None, "x", b"x", object(), (), [0.5], True, "0.5", math.nan, math.inf, -math.inf]),
        st.sampled_from([0.0, -0.0, -1.0, -1e-300, -1e300]),
    )


@FUZZ.covers(local_weights)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_local_weights(data):
    u = X1[:, 0]
    fuzz_call(
        data,
        local_weights,
        {"u_train": u, "u_query": u[:3], "bandwidth": 0.5, "kernel": "gaussian"},
        check=lambda w: w.shape == (3, N) and np.allclose(w.sum(1), 1.0),
        mutate=["bandwidth", "kernel"],
        strategies={"bandwidth": refused_bandwidths()},
    )


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_local_weights_data_and_extreme_bandwidths(data):
    u = X1[:, 0]
    fuzz_call(
        data,
        local_weights,
        {"u_train": u, "u_query": u[:3], "bandwidth": 0.5, "kernel": "gaussian"},
        mutate=["u_train", "u_query", "bandwidth"],
    )


# -------------------------------------------------------------------------------------------- estimators
# the objects fitted in the estimator tests: a few spaces, so y's hostile values meet each space's check
FIT_CASES = ["euclidean", "wasserstein", "spd-log_euclidean", "sphere"]


def predicts(model_x: np.ndarray):
    """A check of a fitted estimator: predict on three training rows gives three finite objects shaped like
    the fitted ones, or a refusal naming the bandwidth (a valid but tiny one leaves no neighbours)."""

    def check(est) -> bool:
        try:
            out = est.predict(model_x[:3])
        except ValueError as err:
            return "bandwidth" in str(err)
        objects = (est.local_ if isinstance(est, DeSI) else est).y_fit_
        return out.shape == (3, *objects.shape[1:]) and not non_finite(out)

    return check


def global_fit(X, y, space):
    return GlobalFrechetRegressor(space).fit(X, y)


@FUZZ.covers(GlobalFrechetRegressor)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_global_regressor_fit(data):
    case = data.draw(st.sampled_from(FIT_CASES), label="case")
    space, y = CASES[case]
    fuzz_call(
        data,
        global_fit,
        {"X": X2, "y": y, "space": space},
        check=predicts(X2),
        mutate=["y", "space"],  # X: test_estimators_x below
        strategies={
            "space": st.one_of(hostile(case.split("-")[0]), st.sampled_from([SPD, "euclidean", Sphere()]))
        },
        related={"y": ["X"], "space": ["y"]},
    )


def local_fit(X, y, space, bandwidth, kernel, bandwidths, cv, random_state):
    return LocalFrechetRegressor(space, bandwidth, kernel, bandwidths, cv, random_state).fit(X, y)


@FUZZ.covers(LocalFrechetRegressor)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_local_regressor_fit(data):
    case = data.draw(st.sampled_from(FIT_CASES), label="case")
    space, y = CASES[case]
    fuzz_call(
        data,
        local_fit,
        {
            "X": X1,
            "y": y,
            "space": space,
            "bandwidth": None,
            "kernel": "gaussian",
            "bandwidths": BANDWIDTHS,
            "cv": 3,
            "random_state": 0,
        },
        check=predicts(X1),
        mutate=[
            "y",
            "space",
            "bandwidth",
            "kernel",
            "bandwidths",
            "cv",
            "random_state",
        ],  # X: test_estimators_x below
        strategies={
            "space": st.one_of(hostile(case.split("-")[0]), st.sampled_from([SPD, Sphere()])),
            "bandwidth": hostile(0.5),  # None (the valid call) means "choose by cross-validation"
        },
        related={"y": ["X"], "space": ["y"]},
    )


def desi_fit(
    X, y, space, hidden, epochs, lr, weight_decay, n_init, bandwidth, bandwidths, kernel, cv, random_state
):
    return DeSI(
        space, hidden, epochs, lr, weight_decay, n_init, bandwidth, bandwidths, kernel, cv, random_state
    ).fit(X, y)


DESI_VALID = {
    "X": X2,
    "y": Y_EU,
    "space": "euclidean",
    "hidden": 4,
    "epochs": 5,
    "lr": 0.01,
    "weight_decay": 0.0,
    "n_init": 1,
    "bandwidth": None,
    "bandwidths": BANDWIDTHS,
    "kernel": "gaussian",
    "cv": 3,
    "random_state": 0,
}


@FUZZ.covers(DeSI)
@pytest.mark.usefixtures("one_torch_thread")
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_desi_fit(data):
    fuzz_call(
        data,
        desi_fit,
        DESI_VALID,
        check=lambda est: (
            predicts(X2)(est)
            and est.index_direction_.shape == (2,)
            and math.isclose(float(np.linalg.norm(est.index_direction_)), 1.0)
        ),
        mutate=[k for k in DESI_VALID if k != "X"],  # X: test_estimators_x below
        strategies={
            "hidden": small(4, 8),
            "epochs": small(5, 10),
            "n_init": small(1, 2),
            "bandwidth": hostile(0.5),
        },
        related={"y": ["X"], "space": ["y"]},
    )


# fitted estimators for the methods: wrong widths and unfitted estimators here, X fuzzed in test_estimators_x
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def fitted():
    out = {
        "global": (GlobalFrechetRegressor().fit(X2, Y_EU), X2),
        "local": (LocalFrechetRegressor(bandwidth=0.5).fit(X1, Y_EU), X1),
    }
    if HAS_TORCH:  # DeSI needs the deep extra
        out["desi"] = (DeSI(hidden=4, epochs=5, n_init=1, bandwidth=1.0, random_state=0).fit(X2, Y_EU), X2)
    return out


@pytest.mark.parametrize("name", ["global", "local", "desi"])
def test_methods_refuse_wrong_widths(fitted, name):
    if name not in fitted:
        pytest.skip("DeSI needs torch")
    est, x = fitted[name]
    methods = [est.predict, est.score] + ([est.index] if name == "desi" else [est.weights])
    wrong = np.concatenate([x, x], axis=1)
    for method in methods:
        args = (wrong, Y_EU) if method == est.score else (wrong,)
        with pytest.raises(ValueError, match=r"\bX has \d+ features\b"):
            method(*args)
    assert est.predict(x[:3]).shape == (3, 2)
    assert est.score(x, Y_EU) <= 1.0


@pytest.mark.parametrize("cls", [GlobalFrechetRegressor, LocalFrechetRegressor, DeSI])
def test_methods_before_fit_raise_not_fitted(cls):
    est = cls()
    x = X1 if cls is LocalFrechetRegressor else X2
    with pytest.raises(NotFittedError):
        est.score(x, Y_EU)
    with pytest.raises(NotFittedError):
        est.index(x) if cls is DeSI else est.weights(x)


@pytest.mark.parametrize("name", ["global-fit", "local-fit", "desi-fit", "global", "local", "desi"])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_estimators_x(fitted, name, data):
    if "desi" in name and not HAS_TORCH:
        pytest.skip("DeSI needs torch")
    if name.endswith("-fit"):
        fn, valid = {
            "global-fit": (global_fit, {"X": X2, "y": Y_EU, "space": "euclidean"}),
            "local-fit": (
                local_fit,
                {
                    "X": X1,
                    "y": Y_EU,
                    "space": "euclidean",
                    "bandwidth": None,
                    "kernel": "gaussian",
                    "bandwidths": BANDWIDTHS,
                    "cv": 3,
                    "random_state": 0,
                },
            ),
            "desi-fit": (desi_fit, DESI_VALID),
        }[name]
        fuzz_call(data, fn, valid, mutate=["X"], related={"X": ["y"]})
        return
    est, x = fitted[name]
    method = data.draw(st.sampled_from(["predict", "score", "index" if name == "desi" else "weights"]))
    valid = {"X": x, "y": Y_EU} if method == "score" else {"X": x[:3]}
    fuzz_call(data, getattr(est, method), valid, mutate=["X"], related={"X": ["y"]})


# ---------------------------------------------------------------------------- breaches, replayed exactly
def _score(name, y):
    est = {
        "global": GlobalFrechetRegressor().fit(X2, Y_EU),
        "local": LocalFrechetRegressor(bandwidth=0.5).fit(X1, Y_EU),
    }[name]
    return est.score(X2 if name == "global" else X1, y)


def _must_refuse(fn, *args):
    """``fn(*args)``, failing if it returns: for calls whose silent result is the breach."""
    result = fn(*args)
    raise AssertionError(f"accepted, returning {result!r}")


# name: (call, the arguments a refusal may name, the reason); each must keep the contract once fixed
BREACHES = {
    "global_predict_before_fit": (
        lambda: GlobalFrechetRegressor().predict(X2),
        ("X",),
        "predict reads self.space_ before weights() checks fitting: AttributeError, not NotFittedError",
    ),
    "local_predict_before_fit": (
        lambda: LocalFrechetRegressor().predict(X1),
        ("X",),
        "predict reads self.space_ before weights() checks fitting: AttributeError, not NotFittedError",
    ),
    "desi_predict_before_fit": (
        lambda: DeSI().predict(X2),
        ("X",),
        "predict reads self.local_ before index() checks fitting: AttributeError, not NotFittedError",
    ),
    "desi_hidden_2_63": (
        lambda: desi_fit(**{**DESI_VALID, "hidden": 2**63}),
        ("hidden",),
        "check_int has no upper bound: torch raises TypeError 'empty(): argument size ... Overflow'",
    ),
    "desi_epochs_2_63": (
        lambda: desi_fit(**{**DESI_VALID, "epochs": 2**63}),
        ("epochs",),
        "check_int has no upper bound: np.empty raises ValueError 'Maximum allowed dimension exceeded'",
    ),
    "spd_affine_means_zero_rows": (
        lambda: SPD("affine_invariant").means(CASES["spd-affine_invariant"][1], np.zeros((0, N))),
        ("weights",),
        "weights (0, n) are accepted by check_weights, then np.stack raises 'need at least one array to stack' "
        "(the other spaces return (0, *shape))",
    ),
    "quantiles_no_draws": (
        lambda: quantiles(np.zeros((3, 0)), LEVELS),
        ("samples",),
        "samples with no draws reach np.quantile: IndexError 'index -1 is out of bounds'",
    ),
    "quantiles_empty_tuple": (
        lambda: quantiles((), LEVELS),
        ("samples",),
        "samples=() reaches np.quantile: IndexError 'index -1 is out of bounds'",
    ),
    "objective_2d_weights": (
        lambda: Euclidean().objective(Y_EU, W2, Y_EU[0]),
        ("weights",),
        "2-D weights pass check_weights; float() then raises TypeError 'only 0-dimensional arrays ...'",
    ),
    "spd_floor_zero": (
        lambda: SPD("frobenius", floor=0.0).mean(CASES["spd-frobenius"][1]),
        ("floor",),
        "check_real's ValueError for floor is caught by Space._solve: FrechetMeanError 'weights too extreme'",
    ),
    "sphere_max_iter_zero": (
        lambda: Sphere(max_iter=0).mean(CASES["sphere"][1]),
        ("max_iter",),
        "check_int's ValueError for max_iter is caught by Space._solve: FrechetMeanError 'weights too extreme'",
    ),
    "laplacian_tol_nan": (
        lambda: Laplacian(tol=math.nan).mean(CASES["laplacian"][1]),
        ("tol",),
        "check_real's ValueError for tol is caught by Space._solve: FrechetMeanError 'weights too extreme'",
    ),
    "objective_y_object_shape_not_omegas": (
        lambda: Euclidean().objective(np.c_[Y_EU, Y_EU[:, :1]], W, Y_EU[0]),
        ("y", "omega"),
        "y (10, 3) against omega (2,): numpy's broadcast ValueError naming neither",
    ),
    "check_weights_n_0": (
        lambda: check_weights(None, 0),
        ("n",),
        "ZeroDivisionError from 1.0 / n",
    ),
    "local_weights_huge_bandwidth": (
        lambda: local_weights(X1[:, 0], X1[:3, 0], 1e300),
        ("bandwidth",),
        "finite input, NaN weights and no warning (mu_0 mu_2 - mu_1^2 underflows to 0)",
    ),
    "local_weights_tiny_bandwidth": (
        lambda: local_weights(X1[:, 0], X1[:3, 0] + 0.05, 1e-60),
        ("bandwidth",),
        "finite input, NaN weights and no warning",
    ),
    "local_weights_no_neighbours": (
        lambda: local_weights(X1[:, 0], [10.0], 0.5, "epanechnikov"),
        ("u_query", "bandwidth"),
        "documented NaN rows, but no warning (GUIDE: no NaN from finite input without a warning)",
    ),
    "local_weights_u_train_none": (
        lambda: local_weights(None, X1[:3, 0], 0.5),
        ("u_train",),
        "u_train=None becomes array(nan): NaN weights, no warning",
    ),
    "global_weights_x_query_none": (
        lambda: global_weights(X2, None),
        ("x_query",),
        "AxisError 'axis 1 is out of bounds'",
    ),
    "dist2_b_none": (
        lambda: Euclidean().dist2(Y_EU, None),
        ("b",),
        "TypeError 'unsupported operand type(s) for -' not naming b",
    ),
    "objective_omega_none": (
        lambda: Wasserstein().objective(CASES["wasserstein"][1], W, None),
        ("omega",),
        "omega=None becomes NaN: the objective is NaN with no warning",
    ),
    "global_predict_huge_x": (
        lambda: GlobalFrechetRegressor().fit(X2, Y_EU).predict(X2 * 1e160),
        ("X",),
        "finite X whose weights overflow: ValueError 'weights must be finite', naming weights (not an argument)",
    ),
    "global_fit_huge_x": (
        lambda: GlobalFrechetRegressor().fit(X2 * 1e306, Y_EU).predict(X2),
        ("X",),
        "finite X whose covariance overflows: ValueError 'weights must not contain NaN' at predict",
    ),
    "local_fit_huge_x_default_grid": (
        lambda: LocalFrechetRegressor(cv=3).fit(X1 * 1e307, Y_EU),
        ("X",),
        "std(X) overflows: ValueError 'bandwidth == inf, must be < inf' names bandwidth, which was not given",
    ),
    "local_fit_constant_x_with_bandwidths": (
        lambda: LocalFrechetRegressor(bandwidths=BANDWIDTHS, cv=3).fit(np.zeros_like(X1), Y_EU),
        ("X",),
        "constant X: the refusal blames bandwidths; without bandwidths it names X ('X must vary')",
    ),
    "desi_fit_constant_x": (
        lambda: desi_fit(**{**DESI_VALID, "X": np.zeros_like(X2)}),
        ("X",),
        "constant X: the refusal blames bandwidths, not X",
    ),
    "global_score_wrong_object_width": (
        lambda: _must_refuse(_score, "global", Y_EU[:, :1]),
        ("y",),
        "y of width 1 against predictions of width 2 broadcasts: a score (-1.4) is returned silently",
    ),
    "local_score_wrong_object_width": (
        lambda: _score("local", np.c_[Y_EU, Y_EU[:, :1]]),
        ("y",),
        "y of width 3 against predictions of width 2: numpy's broadcast ValueError not naming y",
    ),
    "global_fit_x_1d": (
        lambda: GlobalFrechetRegressor().fit(X2[:, 0], Y_EU),
        ("X",),
        "scikit-learn's 'Expected 2D array, got 1D array instead' does not name X",
    ),
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(k) for k, v in sorted(BREACHES.items())],
)
def test_found_breaches(case):
    if case.startswith("desi") and not HAS_TORCH:
        pytest.skip("DeSI needs torch")
    fn, names, _ = BREACHES[case]
    keeps_contract(fn, names, tolerate=(NotFittedError,))


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_stats.frechet)
