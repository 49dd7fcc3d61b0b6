"""icml_theory.pc (issue 32): sPC and ePC against each other, the equilibrium and backprop.

Exactness is checked in float64 on a 4-layer tanh MLP (width 16, batch 8): both trainers' weight gradients
equal the equilibrium gradient (an independent L-BFGS solve of inference) to <= 1e-6 relative, the local
energy equals the full energy, ePC's energy equals sPC's under s_l = f_l(s_{l-1}) + e_l (hypothesis), and
the small-nudge limit PC / beta -> backprop holds with the error shrinking with beta."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml_theory.pc import (
    EPC,
    SPC,
    Backprop,
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

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def mlp(depth: int = 4, width: int = 16, d_in: int = 8, d_out: int = 4, seed: int = 0, dtype=torch.float64):
    torch.manual_seed(seed)
    layers = [nn.Sequential(nn.Linear(d_in, width), nn.Tanh())]
    layers += [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth - 2)]
    layers.append(nn.Linear(width, d_out))
    return nn.Sequential(*layers).to(dtype)


def batch(n: int = 8, d_in: int = 8, classes: int = 4, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_in, generator=gen, dtype=torch.float64), torch.randint(
        0, classes, (n,), generator=gen
    )


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


@pytest.fixture(scope="module")
def reference():
    """The 4-layer float64 MLP, a batch, and its equilibrium solved by L-BFGS."""
    model, (x, y) = mlp(), batch()
    return model, x, y, equilibrium(model, x, y, "ce", tol=1e-11)


# ---------------------------------------------------------------- exactness
def test_equilibrium_is_stationary(reference):
    model, x, y, eq = reference
    assert eq.converged and eq.grad_norm <= 1e-11
    states = [s.clone().requires_grad_(True) for s in eq.states]
    g = torch.autograd.grad(energy(list(model), x, y, states, "ce"), states)
    assert max(float(v.abs().max()) for v in g) <= 1e-9  # stationary in the state form too


@pytest.fixture(scope="module")
def trainer_gradients(reference):
    """ePC (400 inference steps) and sPC (1500) on the reference batch: ``{cls: (weight gradients, info)}``,
    computed once for the tests below, which only read them (``gradients`` zeroes the grads and updates no
    weight, so each run is what a test of its own would compute)."""
    model, x, y, _ = reference
    out = {}
    for cls, steps in ((EPC, 400), (SPC, 1500)):
        info = cls(model, "ce", inference_lr=0.1, inference_steps=steps).gradients(x, y)
        out[cls] = grads(model), info
    return out


@pytest.mark.parametrize("cls", [EPC, SPC])
def test_weight_gradients_equal_the_equilibrium_gradient(reference, trainer_gradients, cls):
    *_, eq = reference
    gradients, info = trainer_gradients[cls]
    assert relative_error(gradients, eq.gradients) <= 1e-6
    assert math.isclose(float(info.energies[-1]), eq.energy, rel_tol=1e-10)
    assert bool((info.energies[1:] <= info.energies[:-1] + 1e-12).all())  # gradient descent never climbs here


def test_epc_and_long_spc_agree(trainer_gradients):
    assert relative_error(trainer_gradients[EPC][0], trainer_gradients[SPC][0]) <= 1e-6


def test_local_energy_equals_full_energy_and_its_gradient(reference):
    model, x, y, eq = reference
    layers = list(model)
    states = [s + 0.1 * torch.randn_like(s) for s in eq.states]  # away from equilibrium too
    full = energy(layers, x, y, states, "ce").detach()
    local = local_energy(layers, x, y, states, "ce")
    assert math.isclose(float(full), float(local.detach()), rel_tol=1e-14)
    params = list(model.parameters())
    g_full = torch.autograd.grad(energy(layers, x, y, states, "ce"), params)
    g_local = torch.autograd.grad(local, params)
    assert relative_error(g_local, g_full) <= 1e-14
    # local: layer 2's parameters do not see layer 3's term, so moving s_3 leaves their gradient unchanged
    moved = [s.clone() for s in states]
    moved[2] = moved[2] + 1.0
    g_moved = torch.autograd.grad(local_energy(layers, x, y, moved, "ce"), list(layers[1].parameters()))
    assert relative_error(g_moved, list(g_local[2:4])) <= 1e-14


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-3, 10.0), loss=st.sampled_from(["ce", "mse"]))
def test_error_energy_equals_state_energy_under_the_map(seed, scale, loss):
    model = mlp(seed=seed % 7)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    y = (
        torch.randint(0, 4, (5,), generator=gen)
        if loss == "ce"
        else torch.randn(5, 4, generator=gen, dtype=torch.float64)
    )
    layers = list(model)
    with torch.no_grad():
        errors = [scale * torch.randn(5, 16, generator=gen, dtype=torch.float64) for _ in range(3)]
        states, _ = states_from_errors(layers, x, errors)
        e_energy = float(error_energy(layers, x, y, errors, loss))
        s_energy = float(energy(layers, x, y, states, loss))
    assert math.isclose(e_energy, s_energy, rel_tol=1e-12)


def test_zero_errors_give_the_forward_pass(reference):
    model, x, _, _ = reference
    layers = list(model)
    forward = forward_states(layers, x)
    states, output = states_from_errors(layers, x, [torch.zeros_like(s) for s in forward[:-1]])
    assert all(torch.equal(a, b) for a, b in zip(states, forward[:-1], strict=True))
    assert torch.equal(output, forward[-1])
    assert torch.equal(output, model(x))
    # inference starts there: ePC's and sPC's first energies are the forward pass's loss
    for cls in (EPC, SPC):
        info = cls(model, "ce", inference_steps=3).gradients(x, torch.zeros(8, dtype=torch.long))
        ce = float(
            nn.functional.cross_entropy(model(x), torch.zeros(8, dtype=torch.long), reduction="sum").detach()
        )
        assert math.isclose(float(info.energies[0]), ce, rel_tol=1e-12)


@pytest.mark.parametrize("loss", ["ce", "mse"])
def test_small_nudge_limit_approaches_backprop(loss):
    model, (x, y) = mlp(seed=3), batch(seed=4)
    if loss == "mse":
        y = torch.nn.functional.one_hot(y, 4).double()
    Backprop(model, loss).gradients(x, y)
    bp = grads(model)
    errors = []
    for beta in (1e-1, 1e-2, 1e-3):
        EPC(model, loss, beta=beta, inference_lr=0.2, inference_steps=300).gradients(x, y)
        errors.append(relative_error([g / beta for g in grads(model)], bp))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] <= 5e-3
    assert errors[1] / errors[2] > 5  # about linear in beta


# ---------------------------------------------------------------- signal decay
def test_spc_signal_decays_with_depth_and_epc_does_not():
    model, (x, y) = mlp(depth=12, seed=5), batch(seed=6)
    s = SPC(model, "ce", inference_lr=0.1, inference_steps=5).gradients(x, y).grad_norms
    e = EPC(model, "ce", inference_lr=0.1, inference_steps=5).gradients(x, y).grad_norms
    # after k sPC steps only the k layers nearest the output have errors: the first layers get exactly 0
    assert bool((s[: 12 - 6] == 0).all()) and bool((s[-5:] > 0).all())
    assert bool((e > 0).all())
    assert float(e[:6].max() / e[-1]) > 1e3 * float(s[:6].max() / s[-1] + 1e-300)


def test_iterations_to_tolerance_reads_the_trace():
    trace = torch.tensor([10.0, 5.0, 2.0, 1.1, 1.01, 1.001])
    assert iterations_to_tolerance(trace, 1.0, 0.5) == 1  # gap 4 <= 0.5 * 9
    assert iterations_to_tolerance(trace, 1.0, 0.01) == 4  # gap 0.01 <= 0.09
    assert iterations_to_tolerance(trace, 1.0, 1e-6) is None
    assert iterations_to_tolerance([1.0, 0.5], 2.0) == 0  # already at or below the reference
    assert iterations_to_tolerance(np.array([3.0, 2.0]), 1.0, 0.5) == 1


def test_relative_error_is_a_norm_ratio():
    a, b = [torch.tensor([3.0, 0.0]), torch.tensor([4.0])], [torch.tensor([0.0, 0.0]), torch.tensor([1.0])]
    assert math.isclose(relative_error(a, b), math.sqrt(9 + 9) / 1.0)
    assert relative_error(b, b) == 0.0


# ---------------------------------------------------------------- architectures
class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each with a residual."""

    def __init__(self, dim: int = 8, heads: int = 2):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, h):  # (B, T, D) -> (B, T, D)
        a = self.norm1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        return h + self.mlp(self.norm2(h))


def architectures():
    torch.manual_seed(0)
    mlp_model = mlp(dtype=torch.float32)
    cnn = nn.Sequential(
        nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU()),  # (B, 1, 8, 8) -> (B, 4, 8, 8)
        nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU()),  # -> (B, 4, 4, 4)
        nn.Sequential(nn.Flatten(), nn.Linear(64, 4)),
    )
    transformer = nn.Sequential(
        nn.Linear(8, 8), Block(), Block(), nn.Sequential(nn.Flatten(), nn.Linear(5 * 8, 4))
    )
    gen = torch.Generator().manual_seed(0)
    return {
        "mlp": (mlp_model, torch.randn(16, 8, generator=gen)),
        "cnn": (cnn, torch.randn(16, 1, 8, 8, generator=gen)),
        "transformer": (transformer, torch.randn(16, 5, 8, generator=gen)),
    }


@pytest.mark.parametrize("arch", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("loss", ["ce", "mse"])
@pytest.mark.parametrize("cls", [Backprop, SPC, EPC])
def test_trainers_fit_every_architecture(arch, loss, cls):
    model, x = architectures()[arch]
    labels = torch.arange(16) % 4
    y = labels if loss == "ce" else nn.functional.one_hot(labels, 4).float()
    # attention's curvature grows as it sharpens: sPC's state steps need a smaller size there
    kwargs = (
        {}
        if cls is Backprop
        else {"inference_lr": 0.02 if arch == "transformer" else 0.1, "inference_steps": 8}
    )
    trainer = cls(model, loss, lr=1e-2, **kwargs)
    before = float(trainer.gradients(x, y).loss)
    history = trainer.fit(x, y, epochs=30, batch_size=8, seed=0)
    assert len(history) == 30 and all(math.isfinite(h) for h in history)
    after = float(trainer.gradients(x, y).loss)
    assert after < 0.5 * before  # it learns the labels of 16 points
    assert trainer.predict(x).shape == (16, 4)


@pytest.mark.parametrize("cls", [Backprop, SPC, EPC])
def test_save_and_load_round_trip(tmp_path, cls):
    model, x = architectures()["cnn"]
    y = torch.arange(16) % 4
    kwargs = {} if cls is Backprop else {"inference_steps": 4}
    trainer = cls(model, "ce", lr=1e-2, **kwargs)
    trainer.fit(x, y, epochs=2, batch_size=8)
    path = tmp_path / "pc.pt"
    trainer.save(path)
    twin_model = architectures()["cnn"][0]
    twin = cls(twin_model, "ce", lr=1e-2, **kwargs)
    twin.load(path)
    assert torch.equal(twin.predict(x), trainer.predict(x))
    trainer.step(x, y)
    twin.step(x, y)  # the optimizer state came too: the next step is identical
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin_model.parameters(), strict=True))
    assert [p.name for p in tmp_path.iterdir()] == ["pc.pt"]  # no temporary file left


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    trainer = EPC(architectures()["mlp"][0], "ce", inference_steps=2)
    path = tmp_path / "pc.pt"
    trainer.save(path)
    old = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        trainer.save(path)
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["pc.pt"]


def test_same_seed_gives_the_same_batches():
    runs = []
    for _ in range(2):
        model, x = architectures()["mlp"]
        runs.append(
            EPC(model, "ce", inference_steps=4).fit(x, torch.arange(16) % 4, epochs=3, batch_size=5, seed=7)
        )
    assert runs[0] == runs[1]


def test_spc_leaves_the_callers_input_alone():
    # a first layer that returns its input (Flatten on flat data) made x itself SPC's first state
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(4, 8), nn.Tanh()), nn.Linear(8, 3))
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    copy = x.clone()
    for method in ("step", "gradients", "infer"):
        getattr(SPC(model, "ce", inference_steps=2), method)(x, y)
        assert not x.requires_grad and x.grad is None and torch.equal(x, copy), method


# ---------------------------------------------------------------- half precision
def test_half_precision_losses_and_energies_are_summed_in_float32():
    """A float16 sum of squares overflows above 65504: the sums run in float32 (they used to give inf, and
    the functions and trainers refused the batch)."""
    out = torch.zeros(64, 16, dtype=torch.float16)
    mse = output_loss(out, torch.full_like(out, 12.0), "mse")
    assert mse.dtype == torch.float32 and float(mse) == 0.5 * 144 * 64 * 16  # 73728
    logits = torch.zeros(8, 2, dtype=torch.float16)
    logits[:, 1] = 60000.0
    ce = output_loss(logits, torch.zeros(8, dtype=torch.long), "ce")
    assert ce.dtype == torch.float32 and float(ce) == 8 * 60000.0
    for dtype in (torch.float16, torch.bfloat16):
        model, (x, y) = mlp(dtype=dtype), batch()
        x = x.to(dtype)
        errors = [torch.full((8, 16), 20.0, dtype=dtype) for _ in range(3)]  # ½ · 400 · 384 = 76800
        states, _ = states_from_errors(model, x, errors)
        wide = mlp(dtype=dtype).double()  # the same (rounded) weights in float64
        with torch.no_grad():
            reference = float(error_energy(wide, x.double(), y, [e.double() for e in errors]))
            values = [
                error_energy(model, x, y, errors),
                energy(model, x, y, states),
                local_energy(model, x, y, states),
            ]
        assert reference > 76800
        for value in values:
            assert value.dtype == torch.float32
            assert float(value) == pytest.approx(reference, rel=1e-3)


@pytest.mark.parametrize("cls", [Backprop, SPC, EPC])
def test_trainers_refuse_float16_parameters_for_their_own_adam(cls):
    """Adam's eps 1e-8 rounds to 0 in float16 and its first step turned weights to NaN."""
    with pytest.raises(ValueError, match=r"^model has float16 .*bfloat16.*autocast"):
        cls(mlp(dtype=torch.float16), "ce")
    cls(mlp(dtype=torch.bfloat16), "ce")
    # an optimizer of the caller's is theirs to choose; a batch whose loss passes 65504 now trains
    model = mlp(depth=2, d_out=16, dtype=torch.float16)
    x = batch()[0].half()
    y = torch.full((8, 16), 40.0, dtype=torch.float16)  # summed loss ≈ ½ · 1600 · 128 = 102400
    trainer = cls(model, "mse", optimizer=torch.optim.SGD(model.parameters(), lr=1e-4))
    info = trainer.step(x, y)
    assert info.loss > 65504 / 8 and torch.isfinite(info.grad_norms).all()
    assert all(torch.isfinite(p).all() for p in model.parameters())


# ---------------------------------------------------------------- bad input
def test_bad_models_are_named():
    with pytest.raises(TypeError, match="model must be a sequential stack"):
        EPC(nn.Linear(3, 3))
    with pytest.raises(TypeError, match="model must be a sequential stack"):
        SPC("mlp")
    with pytest.raises(ValueError, match="model must have at least one layer"):
        EPC(nn.Sequential())
    with pytest.raises(ValueError, match="model holds Dropout"):
        EPC(nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.1), nn.Linear(3, 2)))
    with pytest.raises(ValueError, match="model holds BatchNorm1d"):
        as_layers([nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), nn.Linear(3, 2)])
    with pytest.raises(ValueError, match="model must have trainable parameters"):
        Backprop(nn.Sequential(nn.Tanh(), nn.Tanh()))
    assert len(as_layers(nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)]))) == 2


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"inference_lr": 0.0}, "inference_lr"),
        ({"inference_lr": -1.0}, "inference_lr"),
        ({"inference_steps": 0}, "inference_steps"),
        ({"inference_steps": 2.5}, "inference_steps"),
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"beta": 0.0}, "beta"),
        ({"loss": "hinge"}, "loss"),
        ({"optimizer": "adam"}, "optimizer"),
    ],
)
def test_bad_settings_are_named(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=rf"^{name} "):
        EPC(mlp(), **kwargs)


def test_bad_batches_are_named():
    model, (x, y) = mlp(), batch()
    trainer = SPC(model, "ce", inference_steps=2)
    with pytest.raises(ValueError, match=r"^x must be finite"):
        trainer.step(torch.full_like(x, float("nan")), y)
    with pytest.raises(TypeError, match=r"^y must be an integer tensor"):
        trainer.step(x, y.double())
    with pytest.raises(ValueError, match=r"^y must hold class indices in \[0, 4\)"):
        trainer.step(x, y + 4)
    with pytest.raises(ValueError, match=r"^y must have x's batch size"):
        trainer.step(x, y[:3])
    with pytest.raises(ValueError, match=r"^y must have the model output's shape"):
        SPC(model, "mse").step(x, torch.zeros(8, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^inference_lr=1e\+06 made the energy diverge"):
        EPC(model, "ce", inference_lr=1e6, inference_steps=20).step(x, y)
    other = mlp(seed=1)
    with pytest.raises(ValueError, match=r"^optimizer must hold every parameter of model"):
        EPC(model, optimizer=torch.optim.SGD(other.parameters(), lr=0.1))
    with pytest.raises(ValueError, match=r"^state must be a state_dict of a epc trainer"):
        EPC(model).load_state_dict(SPC(model).state_dict())
