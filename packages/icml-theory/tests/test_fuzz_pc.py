"""Bad-input fuzz tests (GUIDE "Bad input") of icml_theory.pc: every public API either returns a result its
check accepts or raises ValueError/TypeError naming the argument, and never answers NaN/inf from finite
input without a warning. Models are a 3-layer float64 tanh MLP (5 -> 6 -> 6 -> 3), built fresh for every
example; batches hold 4 rows; inference runs 3 steps.

Each breach the fuzz found once (wrong feature widths reaching torch, unchecked targets in ``infer``, huge
finite inputs overflowing silently, messages blaming another argument) is replayed explicitly at the end of
this file, so it stays fixed."""

import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import icml_theory.pc
from icml_theory.pc import (
    EPC,
    SPC,
    Backprop,
    Equilibrium,
    Trainer,
    TrainStep,
    as_layers,
    energy,
    equilibrium,
    error_energy,
    forward_states,
    iterations_to_tolerance,
    local_energy,
    output_loss,
    relative_error,
    states_from_errors,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile, non_finite

FUZZ = Coverage()
FUZZ.exempt(TrainStep, "frozen result record built only by the trainers, whose fuzz tests check it")
FUZZ.exempt(Equilibrium, "frozen result record built only by equilibrium, whose fuzz test checks it")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IN, WIDTH, OUT, B = 5, 6, 3, 4
STEPS = 3  # inference steps of every trainer here
F64 = torch.float64


def mlp(seed: int = 0, d_in: int = IN) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Sequential(nn.Linear(d_in, WIDTH), nn.Tanh()),
        nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()),
        nn.Linear(WIDTH, OUT),
    ).to(F64)


_GEN = torch.Generator().manual_seed(1)
X = torch.randn(B, IN, generator=_GEN, dtype=F64)
Y = {"ce": torch.tensor([0, 1, 2, 0]), "mse": torch.randn(B, OUT, generator=_GEN, dtype=F64)}
STATES = [s.detach() for s in forward_states(mlp(), X)[:-1]]  # the forward pass's hidden states
ERRORS = [0.1 * torch.randn(B, WIDTH, generator=_GEN, dtype=F64) for _ in range(2)]
TRACE = torch.tensor([5.0, 3.0, 2.0, 1.5, 1.4], dtype=F64)  # a falling energy trace
PC_ARGS = {"inference_lr": 0.1, "inference_steps": STEPS, "beta": 1.0}
SIZES = {"inference_steps": 20, "epochs": 3, "max_iter": 30}


def small(valid, top: int):
    """hostile(valid) less the integers above ``top``: valid but too costly here (many inference steps, many
    epochs), so they say nothing about bad input."""
    return hostile(valid).filter(lambda v: not (isinstance(v, int) and not isinstance(v, bool) and v > top))


def _numeric(v) -> bool:
    """A real, non-boolean tensor or numpy array (one the library converts rather than refuses)."""
    if isinstance(v, torch.Tensor):
        return not (v.is_complex() or v.dtype == torch.bool)
    return isinstance(v, np.ndarray) and v.dtype.kind in "iuf"


def beta_values():
    return hostile(1.0)


def x_values():
    return hostile(X)


def tensor_list(valid: list):
    """hostile(valid) for a list of tensors, plus the list with one of its tensors replaced by a hostile one."""

    def replace(i):
        return hostile(valid[i]).map(lambda v: [*valid[:i], v, *valid[i + 1 :]])

    return st.one_of(hostile(valid), st.sampled_from(range(len(valid))).flatmap(replace))


def model_values():
    """Non-models, empty and random stacks, and valid variants (a list of layers, a float32 copy)."""
    return st.one_of(
        hostile(mlp()),
        st.sampled_from(
            [
                nn.Sequential(),
                nn.ModuleList(),
                [],
                nn.Linear(IN, OUT).to(F64),  # a module, not a stack
                [nn.Linear(IN, OUT).to(F64), "x"],
                nn.Sequential(nn.Linear(IN, OUT), nn.Dropout(0.5)).to(F64),
                nn.Sequential(
                    nn.Sequential(nn.Linear(IN, WIDTH), nn.BatchNorm1d(WIDTH)), nn.Linear(WIDTH, OUT)
                ),
                list(mlp()),
                nn.ModuleList(mlp()),
                mlp().float(),
            ]
        ),
    )


def keeps_contract(fn, names=(), **kwargs) -> None:
    """One given call keeps the contract: ValueError/TypeError naming one of ``names`` (any message if none are
    given), or a result with no NaN/inf unless warned. Any other exception fails as an AssertionError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(**kwargs)
        except (ValueError, TypeError) as err:
            named = any(re.search(rf"(?<![A-Za-z0-9_]){n}(?![A-Za-z0-9_])", str(err)) for n in names)
            assert named or not names, f"{fn.__qualname__} raised {err!r}, not naming {names}"
            return
        except Exception as err:
            raise AssertionError(f"{fn.__qualname__} raised {type(err).__name__}: {err}") from err
    assert not (non_finite(result) and not caught), f"{fn.__qualname__} returned {result!r} unwarned"


# ---------------------------------------------------------------- trainers
TRAINERS = [EPC, SPC, Backprop, Trainer]


@FUZZ.covers(*TRAINERS)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_trainer_constructors(data):
    cls = data.draw(st.sampled_from(TRAINERS), label="class")
    model = mlp()
    valid = {"model": model, "loss": "ce", "lr": 1e-3, "optimizer": None}
    if cls in (EPC, SPC):
        valid |= PC_ARGS
    strategies = {k: small(v, SIZES[k]) for k, v in valid.items() if k in SIZES}
    strategies["model"] = model_values()
    strategies["optimizer"] = st.one_of(
        hostile(None),
        st.sampled_from(
            [
                torch.optim.SGD(model.parameters(), lr=0.1),  # valid
                torch.optim.SGD(mlp(seed=1).parameters(), lr=0.1),  # another model's parameters
                torch.optim.SGD(list(model.parameters())[:2], lr=0.1),  # some of them
                model,  # not an optimizer
            ]
        ),
    )

    def check(trainer):
        ok = isinstance(trainer, cls) and isinstance(trainer.optimizer, torch.optim.Optimizer)
        ok = ok and trainer.loss in ("ce", "mse") and trainer.lr > 0 and len(trainer.layers) >= 1
        if cls in (EPC, SPC):
            ok = ok and trainer.inference_steps >= 1 and trainer.inference_lr > 0 and trainer.beta > 0
        return ok

    fuzz_call(data, cls, valid, check=check, strategies=strategies, related={"optimizer": ["model"]})


def trainer(cls, loss: str):
    return cls(mlp(), loss, **(PC_ARGS if cls in (EPC, SPC) else {}))


def step_check(cls):
    def check(info):
        energies = (STEPS + 1,) if cls in (EPC, SPC) else (0,)
        return (
            isinstance(info, TrainStep)
            and isinstance(info.loss, float)
            and math.isfinite(info.loss)
            and info.loss >= 0
            and info.grad_norms.shape == (3,)
            and bool((info.grad_norms >= 0).all())
            and info.energies.shape == energies
        )

    return check


def y_values(loss: str, *, infer: bool = False):
    """hostile(y), and for ``"ce"`` class indices out of range (caught by the trainers' steps)."""
    valid = Y[loss]
    values = hostile(valid)
    if loss == "ce":
        values = st.one_of(values, st.sampled_from([torch.tensor([0, 1, 2, 3]), torch.tensor([0, -1, 2, 0])]))
    return values


@FUZZ.covers(EPC, SPC, Backprop)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_trainer_step_gradients_predict_fit(data):
    cls = data.draw(st.sampled_from([EPC, SPC, Backprop]), label="class")
    loss = data.draw(st.sampled_from(["ce", "mse"]), label="loss")
    method = data.draw(st.sampled_from(["step", "gradients", "predict", "fit"]), label="method")
    t = trainer(cls, loss)
    y = Y[loss]
    if method in ("step", "gradients"):
        fuzz_call(
            data,
            getattr(t, method),
            {"x": X, "y": y},
            check=step_check(cls),
            strategies={"x": x_values(), "y": y_values(loss)},
            related={"x": ["y"], "y": ["x"]},
        )
    elif method == "predict":
        fuzz_call(
            data,
            t.predict,
            {"x": X},
            check=lambda out: isinstance(out, torch.Tensor) and out.shape[-1] == OUT and out.dtype == F64,
            strategies={"x": x_values()},
        )
    else:
        valid = {"x": X, "y": y, "epochs": 2, "batch_size": 2, "seed": 0}

        def check(history):
            return isinstance(history, list) and all(
                isinstance(v, float) and math.isfinite(v) for v in history
            )

        history = fuzz_call(
            data,
            t.fit,
            valid,
            check=check,
            strategies={
                "x": x_values(),
                "y": y_values(loss),
                "epochs": small(2, SIZES["epochs"]),
                "batch_size": small(2, 1000),
            },
            related={"x": ["y"], "y": ["x"]},
        )
        assert isinstance(history, Exception) or 1 <= len(history) <= SIZES["epochs"]


@FUZZ.covers(EPC, SPC)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_trainer_infer(data):
    cls = data.draw(st.sampled_from([EPC, SPC]), label="class")
    loss = data.draw(st.sampled_from(["ce", "mse"]), label="loss")
    t = trainer(cls, loss)

    def check(result):
        states, trace = result
        return (
            len(states) == 2
            and all(s.shape == (B, WIDTH) and s.dtype == F64 for s in states)
            and trace.shape == (STEPS,)
        )

    fuzz_call(
        data,
        t.infer,
        {"x": X, "y": Y[loss]},
        check=check,
        strategies={"x": x_values(), "y": y_values(loss, infer=True)},
        related={"x": ["y"], "y": ["x"]},
    )


def two_steps(t) -> list[TrainStep]:
    return [t.step(X, Y["ce"]) for _ in range(2)]


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_trainer_valid_extremes_step(data):
    """A constructor's valid extreme settings (huge or tiny rates, β) give two steps that keep the contract."""
    cls = data.draw(st.sampled_from([EPC, SPC, Backprop]), label="class")
    names = ["lr"] + (["inference_lr", "beta"] if cls is not Backprop else [])
    name = data.draw(st.sampled_from(names), label="argument")
    extremes = [1e-300, 1e-200, 1e200, 1e300]
    value = data.draw(st.sampled_from(extremes), label=name)

    def run():
        return two_steps(cls(mlp(), "ce", **({**PC_ARGS} if cls is not Backprop else {}), **{name: value}))

    keeps_contract(run, names=(name,))


# ---------------------------------------------------------------- energies
@FUZZ.covers(as_layers)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_as_layers(data):
    fuzz_call(
        data,
        as_layers,
        {"model": mlp()},
        check=lambda layers: (
            isinstance(layers, list) and len(layers) >= 1 and all(isinstance(f, nn.Module) for f in layers)
        ),
        strategies={"model": model_values()},
    )


@FUZZ.covers(energy, error_energy, local_energy)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_energies(data):
    fn = data.draw(st.sampled_from([energy, error_energy, local_energy]), label="function")
    loss = data.draw(st.sampled_from(["ce", "mse"]), label="loss")
    seq = "errors" if fn is error_energy else "states"
    valid = {"model": mlp(), "x": X, "y": Y[loss], seq: ERRORS if fn is error_energy else STATES}
    valid |= {"loss": loss, "beta": 1.0}

    def check(e):
        return (
            isinstance(e, torch.Tensor) and e.shape == () and e.is_floating_point() and float(e.detach()) >= 0
        )

    fuzz_call(
        data,
        fn,
        valid,
        check=check,
        strategies={
            "model": model_values(),
            "x": x_values(),
            "y": y_values(loss),
            seq: tensor_list(valid[seq]),
            "beta": beta_values(),
        },
        related={"x": ["y", seq], "y": ["x"], seq: ["x"], "model": [seq, "y"], "loss": ["y"]},
    )


@FUZZ.covers(forward_states)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_forward_states(data):
    def check(states):
        return (
            isinstance(states, list)
            and len(states) == 3
            and states[-1].shape[-1] == OUT
            and all(s.shape[:-1] == states[-1].shape[:-1] for s in states)
        )

    fuzz_call(
        data,
        forward_states,
        {"model": mlp(), "x": X},
        check=check,
        strategies={"model": model_values().filter(lambda m: m is not None), "x": x_values()},
    )


@FUZZ.covers(states_from_errors)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_states_from_errors(data):
    def check(result):
        states, output = result
        return len(states) == 2 and all(s.shape == (B, WIDTH) for s in states) and output.shape == (B, OUT)

    fuzz_call(
        data,
        states_from_errors,
        {"model": mlp(), "x": X, "errors": ERRORS},
        check=check,
        strategies={
            "model": model_values(),
            "x": x_values(),
            "errors": tensor_list(ERRORS),
        },
        related={"x": ["errors"], "errors": ["x"], "model": ["errors"]},
    )


@FUZZ.covers(output_loss)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_output_loss(data):
    loss = data.draw(st.sampled_from(["ce", "mse"]), label="loss")
    output = forward_states(mlp(), X)[-1].detach()
    fuzz_call(
        data,
        output_loss,
        {"output": output, "target": Y[loss], "loss": loss},
        check=lambda v: isinstance(v, torch.Tensor) and v.shape == () and 0 <= float(v.detach()) < math.inf,
        strategies={"target": y_values(loss)},
        related={"output": ["target"], "target": ["output"], "loss": ["target"]},
    )


# ---------------------------------------------------------------- diagnostics
@FUZZ.covers(equilibrium)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_equilibrium(data):
    loss = data.draw(st.sampled_from(["ce", "mse"]), label="loss")
    model = mlp()
    valid = {"model": model, "x": X, "y": Y[loss], "loss": loss, "beta": 1.0, "tol": 1e-8, "max_iter": 20}

    def check(eq):
        return (
            isinstance(eq, Equilibrium)
            and len(eq.states) == 2
            and all(s.shape == (B, WIDTH) for s in eq.states)
            and len(eq.gradients) >= 1
            and math.isfinite(eq.energy)
            and eq.energy >= 0
            and 0 <= eq.iterations
            and isinstance(eq.converged, bool)
        )

    result = fuzz_call(
        data,
        equilibrium,
        valid,
        check=check,
        strategies={
            "model": model_values(),
            "x": x_values(),
            "y": y_values(loss),
            "max_iter": small(20, SIZES["max_iter"]),
            "beta": beta_values(),
        },
        related={"x": ["y"], "y": ["x"], "loss": ["y"]},
    )
    if isinstance(result, Equilibrium) and len(result.gradients) == 6:  # the valid model (or a copy)
        assert [g.shape for g in result.gradients] == [p.shape for p in model.parameters()]
    assert all(p.grad is None for p in model.parameters())  # .grad is left alone


@FUZZ.covers(relative_error)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_relative_error(data):
    reference = [p.detach().clone() for p in mlp().parameters()]
    estimate = [p + 0.01 for p in reference]
    fuzz_call(
        data,
        relative_error,
        {"estimate": estimate, "reference": reference},
        check=lambda r: isinstance(r, float) and math.isfinite(r) and r >= 0,
        strategies={
            "estimate": tensor_list(estimate),
            "reference": tensor_list(reference),
        },
        related={"estimate": ["reference"], "reference": ["estimate"]},
    )


@FUZZ.covers(iterations_to_tolerance)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_iterations_to_tolerance(data):
    result = fuzz_call(
        data,
        iterations_to_tolerance,
        {"energies": TRACE, "equilibrium_energy": 1.3, "tol": 0.5},
        check=lambda t: t is None or (isinstance(t, int) and t >= 0),
    )
    assert not isinstance(result, int) or result <= 100


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_theory.pc)


# ---------------------------------------------------------------- breaches found by the fuzz, replayed
BREACHES = {
    # x of the wrong feature width reaches nn.Linear unchecked (torch RuntimeError)
    "forward_states_x_width": (forward_states, ("x",), lambda: {"model": mlp(), "x": X[..., :1]}),
    "predict_x_width": (lambda x: trainer(EPC, "ce").predict(x), ("x",), lambda: {"x": X[..., :1]}),
    "step_x_width": (lambda x: trainer(EPC, "ce").step(x, Y["ce"]), ("x",), lambda: {"x": X[..., :1]}),
    "equilibrium_x_width": (equilibrium, ("x",), lambda: {"model": mlp(), "x": X[..., :1], "y": Y["ce"]}),
    # a state/error of the right batch size but the wrong width reaches the layers unchecked
    "energy_states_width": (
        energy,
        ("states",),
        lambda: {"model": mlp(), "x": X, "y": Y["ce"], "states": [STATES[0][:, :1], STATES[1]]},
    ),
    "error_energy_errors_width": (
        error_energy,
        ("errors",),
        lambda: {"model": mlp(), "x": X, "y": Y["ce"], "errors": [ERRORS[0], ERRORS[1][:, :1]]},
    ),
    # infer skips the output check: out-of-range classes (IndexError), mse targets of the wrong
    # width (RuntimeError, or silent broadcasting for width 1)
    "infer_ce_class_out_of_range": (
        lambda y: trainer(EPC, "ce").infer(X, y),
        ("y",),
        lambda: {"y": torch.tensor([0, 1, 2, 3])},
    ),
    "infer_mse_target_width": (
        lambda y: trainer(SPC, "mse").infer(X, y),
        ("y",),
        lambda: {"y": torch.zeros(B, OUT + 1, dtype=F64)},
    ),
    # huge finite entries give inf/NaN with no warning
    "output_loss_huge_output": (
        output_loss,
        ("output",),
        lambda: {"output": torch.full((B, OUT), 1e300, dtype=F64), "target": Y["mse"], "loss": "mse"},
    ),
    "relative_error_huge_reference": (
        relative_error,
        ("reference",),
        lambda: {"estimate": [X], "reference": [X * 1e307]},
    ),
    "energy_huge_states": (
        energy,
        ("states",),
        lambda: {"model": mlp(), "x": X, "y": Y["ce"], "states": [STATES[0], STATES[1] * 1e307]},
    ),
    "epc_step_huge_mse_target": (  # the overflow is blamed on inference_lr
        lambda y: EPC(mlp(), "mse", **PC_ARGS).step(X, y),
        ("y",),
        lambda: {"y": Y["mse"] * 1e307},
    ),
    # a huge beta, or a huge lr (on the second step), makes the step fail with a message that
    # blames inference_lr, not the argument
    "epc_huge_beta_step": (
        lambda beta: EPC(mlp(), "ce", inference_lr=0.1, inference_steps=STEPS, beta=beta).step(X, Y["ce"]),
        ("beta",),
        lambda: {"beta": 1e300},
    ),
    "epc_huge_lr_two_steps": (
        lambda lr: two_steps(EPC(mlp(), "ce", lr=lr, **PC_ARGS)),
        ("lr",),
        lambda: {"lr": 1e200},
    ),
    # a str array as class indices
    "step_ce_y_str_array": (
        lambda y: trainer(Backprop, "ce").step(X, y),
        ("y",),
        lambda: {"y": np.array(["0", "1", "2", "0"])},
    ),
    # output_loss's messages name y/x, not target/output
    "output_loss_target_none": (
        output_loss,
        ("target",),
        lambda: {"output": forward_states(mlp(), X)[-1].detach(), "target": None, "loss": "ce"},
    ),
    "output_loss_output_batch": (
        output_loss,
        ("output", "target"),
        lambda: {"output": forward_states(mlp(), X)[-1].detach()[:1], "target": Y["ce"], "loss": "ce"},
    ),
    # a huge (finite) beta overflows the energy silently
    "equilibrium_huge_beta": (
        equilibrium,
        ("beta",),
        lambda: {"model": mlp(), "x": X, "y": Y["ce"], "beta": 1e308, "max_iter": 20},
    ),
    # energies torch.as_tensor cannot read raise torch's errors, not naming energies
    "iterations_to_tolerance_none": (
        iterations_to_tolerance,
        ("energies",),
        lambda: {"energies": None, "equilibrium_energy": 1.0},
    ),
}


@pytest.mark.parametrize("case", sorted(BREACHES))
def test_found_breaches_stay_fixed(case):
    fn, names, kwargs = BREACHES[case]
    keeps_contract(fn, names=names, **kwargs())
