"""The fuzz helper catches each way of breaking the bad-input contract, and passes a function that keeps it."""

import math
import types
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_tools.fuzz import Coverage, FuzzContractError, fuzz_call, non_finite, rejects


def careful_mean(x, scale=1.0):
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"x must be an array of real numbers: {err}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"x must be a non-empty 1-d array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("x must be finite")
    with np.errstate(over="ignore"):
        out = float(np.mean(arr / scale))
    if not math.isfinite(out):
        warnings.warn("x overflowed", RuntimeWarning, stacklevel=2)
    return out


X = np.array([1.0, 2.0, 4.0])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_careful_function_keeps_the_contract(data):
    fuzz_call(data, careful_mean, {"x": X, "scale": 2.0}, check=lambda r: isinstance(r, float))


@pytest.mark.parametrize(
    "broken, complaint",
    [
        (lambda x, scale=1.0: [][0], "IndexError"),  # a raw error
        (lambda x, scale=1.0: careful_mean(x, scale) * math.nan, "NaN/inf from finite input"),
        (lambda x, scale=1.0: careful_mean(x, abs(scale)), "scale.*not naming|was accepted|NaN"),
    ],
)
def test_each_broken_contract_is_caught(broken, complaint):
    @settings(max_examples=300, deadline=None, database=None)
    @given(st.data())
    def run(data):
        fuzz_call(data, broken, {"x": X, "scale": 2.0})

    with pytest.raises(FuzzContractError, match=complaint):
        run()


def test_a_silent_nan_and_an_unnamed_argument_are_caught():
    with pytest.raises(FuzzContractError, match="was accepted"):
        rejects(lambda: None, name="x")
    with pytest.raises(FuzzContractError, match="not naming"):
        rejects(lambda: (_ for _ in ()).throw(ValueError("bad input")), name="x")
    assert "x" in str(rejects(careful_mean, [], name="x"))
    assert non_finite({"a": (1.0, np.array([np.nan]))}) and not non_finite([1, "a", np.ones(2)])


def test_coverage_names_the_public_apis_without_a_fuzz_test():
    def f():
        return None

    def g():
        return None

    module = types.ModuleType("fake")
    module.__all__ = ["f", "g", "CONSTANT", "Error"]
    module.f, module.g, module.CONSTANT, module.Error = f, g, 3, ValueError
    cov = Coverage()
    cov.covers(f)(lambda: None)
    with pytest.raises(AssertionError, match=r"fake\.g"):
        cov.assert_complete(module)
    cov.exempt(g, "built by f only")
    cov.assert_complete(module)


def test_keeps_contract_replays_one_call():
    from icml_tools.fuzz import keeps_contract

    def named():
        raise ValueError("alpha must be in (0, 1)")

    def unnamed():
        raise ValueError("bad value")

    class Unfitted(ValueError):
        pass

    def unfitted():
        raise Unfitted("call fit first")

    keeps_contract(named, ["alpha"])
    keeps_contract(lambda: 1.0, ["alpha"])
    keeps_contract(unfitted, ["alpha"], tolerate=(Unfitted,))
    with pytest.raises(FuzzContractError, match="not naming"):
        keeps_contract(unnamed, ["alpha"])
    with pytest.raises(FuzzContractError, match="not naming"):
        keeps_contract(unfitted, ["alpha"])
    with pytest.raises(FuzzContractError, match="KeyError"):
        keeps_contract(lambda: {}["x"], ["alpha"])
    with pytest.raises(FuzzContractError, match="NaN"):
        keeps_contract(lambda: float("nan"), ["alpha"])
