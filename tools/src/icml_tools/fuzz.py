"""The bad-input contract every public API keeps, as a test helper shared by the packages' fuzz tests.

GUIDE "Bad input": a public function given anything either returns a result its test checks, or raises
``ValueError``/``TypeError`` whose message names the argument; it never answers NaN from finite input
without a warning. One fuzz test per public API checks this with hypothesis:

.. code-block:: python

    FUZZ = Coverage()

    @FUZZ.covers(lac_sets)
    @settings(max_examples=40, deadline=None)
    @given(st.data())
    def test_lac_sets(data):
        fuzz_call(data, lac_sets, {"probs": PROBS, "qhat": 0.7}, check=lambda s: s.shape == PROBS.shape)

    def test_every_public_api_is_fuzzed():
        FUZZ.assert_complete(icml_stats.conformal)

:func:`fuzz_call` draws one argument of a valid call and replaces it with a hostile value of its kind
(:func:`hostile`): a wrong type, NaN or ±inf, an empty or re-shaped array, another dtype, an
out-of-range number. :class:`Coverage` records which APIs have a fuzz test and fails for a public name
of a module that has none, so a new API without one is noticed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

import numpy as np
from hypothesis import strategies as st

try:  # optional: the torch-free packages (icml-stats) use this helper without torch installed
    import torch
except ImportError:  # pragma: no cover - exercised by the lowest-versions job
    torch = None  # type: ignore[assignment]


def _is_tensor(value: Any) -> bool:
    return torch is not None and isinstance(value, torch.Tensor)


__all__ = ["Coverage", "FuzzContractError", "fuzz_call", "hostile", "non_finite", "rejects"]

ACCEPTED = (ValueError, TypeError)
_WEIRD_OBJECTS: tuple[Any, ...] = (None, "x", b"x", object(), (), {}, [None])


class FuzzContractError(AssertionError):
    """A call broke the bad-input contract; the message shows the call."""


def non_finite(value: Any, _depth: int = 0) -> bool:
    """Whether a result holds NaN or ±inf anywhere: floats, numpy arrays, tensors, and the tuples, lists,
    dicts and dataclasses that hold them (to a depth of 4)."""
    if _depth > 4:
        return False
    if isinstance(value, bool | int | str | bytes) or value is None:
        return False
    if isinstance(value, float | np.floating | complex | np.complexfloating):
        return not np.isfinite(value)
    if _is_tensor(value):
        return bool(value.is_floating_point() or value.is_complex()) and not bool(
            torch.isfinite(value.detach()).all()
        )
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "fc" and not bool(np.isfinite(value).all())
    if isinstance(value, Mapping):
        return any(non_finite(v, _depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return any(non_finite(v, _depth + 1) for v in value[:1000])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(non_finite(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value))
    return False


def _describe(fn: Callable, kwargs: Mapping[str, Any]) -> str:
    def short(v: Any) -> str:
        if isinstance(v, np.ndarray) or _is_tensor(v):
            return f"<{type(v).__name__} shape={tuple(v.shape)} dtype={v.dtype}>"
        text = repr(v)
        return text if len(text) <= 80 else text[:77] + "..."

    args = ", ".join(f"{k}={short(v)}" for k, v in kwargs.items())
    return f"{getattr(fn, '__qualname__', fn)}({args})"


def _names_in(message: str, names: Iterable[str]) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names)


def rejects(fn: Callable, *args: Any, name: str | Iterable[str], **kwargs: Any) -> Exception:
    """``fn(*args, **kwargs)`` must raise ``ValueError`` or ``TypeError`` whose message names ``name``
    (one of them, if several); returns the exception."""
    names = [name] if isinstance(name, str) else list(name)
    try:
        fn(*args, **kwargs)
    except ACCEPTED as err:
        if not _names_in(str(err), names):
            raise FuzzContractError(
                f"{_describe(fn, kwargs)} raised {type(err).__name__} not naming {names}: {err}"
            ) from err
        return err
    raise FuzzContractError(f"{_describe(fn, kwargs)} was accepted; expected an error naming {names}")


def _call_checked(
    fn: Callable,
    kwargs: Mapping[str, Any],
    check: Callable[[Any], Any] | None,
    names: list[str] | None,
    finite_input: bool,
    allow_non_finite: bool,
) -> Any:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(**kwargs)
        except ACCEPTED as err:
            if names is None:
                raise FuzzContractError(f"{_describe(fn, kwargs)} refused a valid call: {err!r}") from err
            if not _names_in(str(err), names):
                raise FuzzContractError(
                    f"{_describe(fn, kwargs)} raised {type(err).__name__} not naming {names}: {err}"
                ) from err
            return err
        except Exception as err:  # the contract allows only ValueError/TypeError
            raise FuzzContractError(f"{_describe(fn, kwargs)} raised {type(err).__name__}: {err}") from err
    if not allow_non_finite and non_finite(result) and not caught:
        where = "finite input" if finite_input else "non-finite input it should have refused"
        raise FuzzContractError(f"{_describe(fn, kwargs)} returned NaN/inf from {where} with no warning")
    if check is not None and check(result) is False:
        raise FuzzContractError(f"{_describe(fn, kwargs)} returned a result its check refused: {result!r}")
    return result


def keeps_contract(
    fn: Callable[[], Any], names: Iterable[str], *, tolerate: tuple[type[BaseException], ...] = ()
) -> None:
    """Replay one recorded call ``fn()`` (a breach the fuzz once found): it returns a result with no NaN/inf
    unless warned, or raises ``ValueError``/``TypeError`` naming one of ``names``, or one of ``tolerate``
    (e.g. scikit-learn's ``NotFittedError``); anything else raises :class:`FuzzContractError`."""
    try:
        _call_checked(fn, {}, None, list(names), True, False)
    except FuzzContractError as err:
        if not (tolerate and isinstance(err.__cause__, tolerate)):
            raise


def _finite_kwargs(kwargs: Mapping[str, Any]) -> bool:
    return not any(non_finite(v) for v in kwargs.values())


def hostile(valid: Any) -> st.SearchStrategy:
    """Values a user might pass instead of ``valid``: chosen by ``valid``'s kind (bool, int, float,
    string, numpy array, tensor, sequence), always including wrong types and None."""
    weird = st.sampled_from(_WEIRD_OBJECTS)
    if isinstance(valid, bool):
        return st.one_of(weird, st.sampled_from([0, 1, 2, 0.5, "yes", math.nan]))
    if isinstance(valid, int | np.integer):
        return st.one_of(
            weird,
            st.sampled_from([0, -1, 1, True, 2**63, -(2**63), 0.5, float(valid), math.nan, math.inf]),
            st.integers(
                -1000, 1000
            ),  # huge valid sizes are slow, not bad input: the extremes above cover overflow
        )
    if isinstance(valid, float | np.floating):
        return st.one_of(
            weird,
            st.sampled_from([0.0, -0.0, -1.0, 1.0, 1e-300, -1e-300, 1e300, -1e300, True, "0.5"]),
            st.sampled_from([math.nan, math.inf, -math.inf]),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
        )
    if isinstance(valid, str):
        return st.one_of(weird, st.sampled_from(["", " ", valid.upper(), valid + "x", "nan"]), st.integers())
    if isinstance(valid, np.ndarray) or _is_tensor(valid):
        return st.one_of(weird, _hostile_array(valid))
    if isinstance(valid, list | tuple):
        return st.one_of(
            weird,
            st.just(type(valid)()),
            st.just(list(valid[:1])),
            st.just([*list(valid), valid[0]] if len(valid) else [None]),
            st.just([math.nan] * max(len(valid), 1)),
            st.just(["x"] * max(len(valid), 1)),
        )
    return weird


def _hostile_array(valid: Any) -> st.SearchStrategy:
    is_tensor = _is_tensor(valid)
    arr = valid.detach().cpu().numpy() if is_tensor else np.asarray(valid)

    def wrap(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a)) if is_tensor else a

    options: list[Any] = [wrap(arr[:0]), wrap(arr.reshape(-1)), wrap(arr[None]), arr.tolist()]
    if arr.ndim >= 1:
        options.append(wrap(arr[..., :1]))
        options.append(wrap(np.concatenate([arr, arr[..., :1]], axis=-1)))
    if arr.ndim >= 2:
        options.append(wrap(arr.T.copy()))
        options.append(wrap(arr[:1]))
    if arr.size:
        options.append(wrap(arr.reshape(-1)[0]))  # a 0-d array
        if arr.dtype.kind in "fc":
            for bad in (math.nan, math.inf, -math.inf):
                a = arr.copy()
                a.reshape(-1)[arr.size // 2] = bad
                options.append(wrap(a))
            options.append(wrap(arr.astype(np.float16)))
            top = float(np.abs(arr).max())
            if top > 0 and arr.dtype.kind == "f":  # huge but finite in the array's own dtype
                options.append(wrap((arr * (0.5 * float(np.finfo(arr.dtype).max) / top)).astype(arr.dtype)))
        options.append(wrap(arr.astype(np.complex64)))
        options.append(wrap(np.zeros_like(arr)))
        options.append(wrap(-np.abs(arr.astype(np.float64)) - 1))
    options.append(arr.astype(str))
    if arr.dtype.kind in "fc":
        options.append(wrap(np.round(arr).astype(np.int64)))
        options.append(wrap(arr > 0))
    return st.sampled_from(options)


def fuzz_call(
    data: st.DataObject,
    fn: Callable,
    valid: Mapping[str, Any],
    *,
    check: Callable[[Any], Any] | None = None,
    mutate: Iterable[str] | None = None,
    strategies: Mapping[str, st.SearchStrategy] | None = None,
    related: Mapping[str, Iterable[str]] | None = None,
    allow_non_finite: bool = False,
) -> Any:
    """One fuzz case: ``fn(**valid)`` with one argument (drawn from ``mutate``, default all) replaced by
    a hostile value (``strategies[name]`` if given, else :func:`hostile` of the valid value).

    The call must return a result (for which ``check`` is not False, and no NaN/inf from finite input
    without a warning unless ``allow_non_finite``) or raise ``ValueError``/``TypeError`` whose message
    names the replaced argument or one of ``related[name]`` (arguments whose agreement it broke).
    The unchanged call runs first and must succeed. Returns the result or the exception."""
    valid = dict(valid)
    strategies = dict(strategies or {})
    related = {k: list(v) for k, v in (related or {}).items()}
    names = list(mutate) if mutate is not None else list(valid)
    unknown = [n for n in [*names, *strategies] if n not in valid]
    if unknown:
        raise KeyError(f"fuzz_call: arguments {unknown} are not in the valid call")
    if not names or data.draw(st.booleans(), label="unchanged call"):
        return _call_checked(fn, valid, check, None, _finite_kwargs(valid), allow_non_finite)
    name = data.draw(st.sampled_from(names), label="argument")
    value = data.draw(strategies.get(name, hostile(valid[name])), label=name)
    kwargs = {**valid, name: value}
    return _call_checked(
        fn, kwargs, check, [name, *related.get(name, [])], _finite_kwargs(kwargs), allow_non_finite
    )


class Coverage:
    """Which public APIs a test module fuzzes. :meth:`covers` decorates a test; :meth:`assert_complete`
    fails for every public callable of the given modules (their ``__all__``) with no fuzz test and no
    :meth:`exempt` reason. Exception classes are exempt; constants are not APIs."""

    def __init__(self) -> None:
        self._covered: dict[int, Any] = {}
        self._exempt: dict[int, str] = {}

    def covers(self, *apis: Any) -> Callable[[Callable], Callable]:
        def mark(test: Callable) -> Callable:
            for api in apis:
                self._covered[id(api)] = api
            return test

        return mark

    def exempt(self, api: Any, reason: str) -> None:
        """An API with no fuzz test of its own, e.g. a result container only the library builds."""
        if not reason:
            raise ValueError("exempt needs a reason")
        self._exempt[id(api)] = reason

    def assert_complete(self, *modules: ModuleType) -> None:
        missing = []
        for module in modules:
            for name in getattr(module, "__all__", ()):
                api = getattr(module, name)
                if not callable(api) or (isinstance(api, type) and issubclass(api, BaseException)):
                    continue
                if id(api) not in self._covered and id(api) not in self._exempt:
                    missing.append(f"{module.__name__}.{name}")
        if missing:
            raise AssertionError(f"public APIs without a fuzz test: {sorted(set(missing))}")
