"""icml_theory.recursive: the evaluation counter (336 for TRM's schedule, 18 for DIS's), gradients through the
last cycle only, detached carries, fixed-step evaluation, halting, the losses, persistence and bad input."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from icml_theory.recursive import (
    RecursiveConfig,
    RecursiveModel,
    RecursiveTrainer,
    corruption_path,
    count_evaluations,
    dis_config,
    evaluate,
    predict,
    sequence_loss,
    stablemax_cross_entropy,
    trm_config,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates

V, L = 5, 6


def _tokens(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (n, L), generator=torch.Generator().manual_seed(seed))


def _model(config: RecursiveConfig, seed: int = 0) -> RecursiveModel:
    return RecursiveModel(config, seed=seed)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (trm_config(V, L, hidden=8), 336),
        (dis_config(V, L, hidden=8), 18),
        (dis_config(V, L, hidden=8, cfg=True), 36),
        (trm_config(V, L, hidden=8, mixer="attention", heads=2), 336),
    ],
)
def test_counter_reads_the_schedules_evaluations_per_example(config, expected):
    model = _model(config)
    assert config.evaluations == expected
    x = _tokens(5)
    with count_evaluations(model) as counter:
        preds = predict(model, x, batch_size=2)  # ragged batches: 2, 2, 1
    assert counter.per_example(5) == expected
    assert preds.shape == (config.supervision_steps, 5, L)
    result = evaluate(model, x, x)
    assert result.evaluations[-1] == expected and len(result.exact) == config.supervision_steps
    assert result.evaluations[0] == config.evaluations_per_step


def test_seeded_initialization_leaves_the_global_generators_alone(monkeypatch):
    # torch.manual_seed inside a CPU fork also reseeded every CUDA device's generator, which the fork keeps
    cuda_seeds = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", cuda_seeds.append)
    state = torch.get_rng_state()
    a = _model(trm_config(V, L, hidden=8), seed=3)
    assert torch.equal(torch.get_rng_state(), state) and cuda_seeds == []
    torch.manual_seed(123)  # a different caller state: the same model
    b = _model(trm_config(V, L, hidden=8), seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_only_the_last_cycle_is_differentiated_and_the_carry_leaves_detached():
    model = _model(trm_config(V, L, hidden=8, h_cycles=3, l_cycles=4))
    grad_enabled = []
    handle = model.net.register_forward_hook(lambda *_: grad_enabled.append(torch.is_grad_enabled()))
    carry = model.initial_carry(3)
    (z_h, z_l), logits, q = model(_tokens(3), carry)
    handle.remove()
    per_cycle = 4 + 1
    assert grad_enabled == [False] * (2 * per_cycle) + [True] * per_cycle
    assert logits.requires_grad and q.requires_grad
    assert not z_h.requires_grad and not z_l.requires_grad and z_h.grad_fn is None
    # the gradient equals that of the last cycle run alone from the no-grad cycles' state
    x = model.input_embedding(_tokens(3))
    with torch.no_grad():
        h, lo = carry
        for _ in range(2):
            h, lo = model._cycle(x, h, lo)
    model.zero_grad()
    model.head(model._cycle(x, h, lo)[0]).sum().backward()
    manual = [p.grad.clone() for p in model.net.parameters()]
    model.zero_grad()
    model.head(model.recurse(model.input_embedding(_tokens(3)), carry)[0]).sum().backward()
    assert all(torch.allclose(a, p.grad) for a, p in zip(manual, model.net.parameters(), strict=True))


def test_training_updates_do_not_reach_back_through_the_carry():
    model = _model(trm_config(V, L, hidden=8, supervision_steps=3, halt_exploration=0.0))
    carries = []
    original = model.forward

    def spy(*args, **kwargs):
        carries.append(args[1])
        return original(*args, **kwargs)

    model.forward = spy  # type: ignore[method-assign]
    RecursiveTrainer(model).train_batch(_tokens(4), _tokens(4, 1))
    assert len(carries) == 3
    assert all(not t.requires_grad for carry in carries for t in carry)


def test_evaluation_runs_every_step_even_when_the_halting_head_says_stop():
    model = _model(trm_config(V, L, hidden=8))
    torch.nn.init.constant_(model.q_head.bias, 5.0)
    with count_evaluations(model) as counter:
        preds = predict(model, _tokens(3))
    assert len(preds) == 16 and counter.per_example(3) == 336
    # training halts as soon as q > 0 (halt_exploration 0): one step, 21 evaluations per example
    result = RecursiveTrainer(_model(trm_config(V, L, hidden=8, halt_exploration=0.0))).train_batch(
        _tokens(3), _tokens(3, 1)
    )
    assert result.steps == 16 and result.evaluations == 336  # q starts at -5: nobody halts
    halting = _model(trm_config(V, L, hidden=8, halt_exploration=0.0))
    torch.nn.init.constant_(halting.q_head.bias, 5.0)
    result = RecursiveTrainer(halting, lr=1e-9).train_batch(_tokens(3), _tokens(3, 1))
    assert result.steps == 1 and result.evaluations == 21


def test_halting_exploration_keeps_examples_for_at_least_two_steps():
    model = _model(trm_config(V, L, hidden=8, halt_exploration=1.0))
    torch.nn.init.constant_(model.q_head.bias, 5.0)
    result = RecursiveTrainer(model, lr=1e-9, seed=3).train_batch(_tokens(64), _tokens(64, 1))
    assert 2 <= result.steps <= 16 and result.steps > 2  # uniform in [2, 16]: the mean is far above 2


def test_dis_feeds_back_its_previous_prediction_with_the_timestep():
    model = _model(dis_config(V, L, hidden=8))
    seen = []
    handle = model.embed.register_forward_hook(lambda _m, args, _o: seen.append(args[0].clone()))
    x = _tokens(4)
    preds = predict(model, x)
    handle.remove()
    assert len(seen) == 6 and torch.equal(seen[0], x)
    assert all(torch.equal(seen[t], preds[t - 1]) for t in range(1, 6))
    with pytest.raises(ValueError, match="step"):
        model(x, model.initial_carry(4))


def test_guided_logits_interpolate_reference_and_conditional_passes():
    base = dis_config(V, L, hidden=8, cfg=True, guidance=0.0)
    model = _model(base)
    x = _tokens(4)
    carry = model.initial_carry(4)
    _, reference, _ = model(x, carry, 0, 0)
    _, conditional, _ = model(x, carry, 0, 1)
    assert torch.equal(predict(model, x, steps=1)[0], reference.argmax(-1))
    model.config = dataclasses.replace(base, guidance=1.0)
    assert torch.equal(predict(model, x, steps=1)[0], conditional.argmax(-1))
    model.config = dataclasses.replace(base, guidance=3.0)
    guided = reference + 3.0 * (conditional - reference)
    assert torch.equal(predict(model, x, steps=1)[0], guided.argmax(-1))


def test_corruption_path_runs_from_input_to_solution_monotonically():
    start, end = _tokens(50), _tokens(50, 1)
    path = corruption_path(start, end, 6, torch.Generator().manual_seed(0))
    assert path.shape == (50, 7, L)
    assert torch.equal(path[:, 0], start) and torch.equal(path[:, -1], end)
    distance = (path != end[:, None]).sum(-1)
    assert (distance[:, 1:] <= distance[:, :-1]).all()
    n_diff = (start != end).sum(-1)
    for s in range(7):  # frame s has floor(s * n_diff / 6) of the differing positions replaced
        assert torch.equal(n_diff - distance[:, s], torch.div(s * n_diff, 6, rounding_mode="floor"))
    assert ((path == start[:, None]) | (path == end[:, None])).all()


def test_stablemax_cross_entropy_matches_its_definition():
    logits = torch.tensor([[[2.0, -1.0, 0.0, 0.5]], [[-3.0, 4.0, 1.0, -0.5]]])
    labels = torch.tensor([[0], [3]])

    def s(v: float) -> float:
        return v + 1 if v >= 0 else 1 / (1 - v)

    expected = [
        -math.log(s(row[k]) / sum(s(v) for v in row))
        for row, k in ((logits[0, 0].tolist(), 0), (logits[1, 0].tolist(), 3))
    ]
    got = stablemax_cross_entropy(logits, labels)[:, 0]
    assert got.dtype == torch.float64 and torch.allclose(got, torch.tensor(expected, dtype=torch.float64))
    big = torch.tensor([[[1e6, -1e6, 0.0]]])
    assert torch.isfinite(stablemax_cross_entropy(big, torch.tensor([[1]]))).all()
    huge = torch.tensor([[[1e308, 1e308, 1e308, 0.0]]], dtype=torch.float64)  # the sum would overflow
    assert stablemax_cross_entropy(huge, torch.tensor([[0]])).item() == pytest.approx(math.log(3))
    soft = sequence_loss(logits, labels, "softmax")
    assert torch.allclose(
        soft, torch.nn.functional.cross_entropy(logits[:, 0], labels[:, 0], reduction="none")
    )


def test_training_learns_a_token_map_on_cpu():
    model = _model(dis_config(V, L, hidden=16, expansion=2), seed=1)
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, V, (256, L), generator=gen)
    y = (x + 1) % V
    before = evaluate(model, x, y).token[-1]
    RecursiveTrainer(model, lr=3e-3, seed=1).fit(x, y, epochs=8, batch_size=32)
    after = evaluate(model, x, y)
    assert next(model.parameters()).device.type == "cpu"
    assert before < 0.5 and after.token[-1] > 0.95


def test_save_load_gives_identical_outputs_and_a_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    for config in (
        trm_config(V, L, hidden=8),
        dis_config(V, L, hidden=8, cfg=True, mixer="attention", heads=2),
    ):
        model = _model(config, seed=4)
        path = tmp_path / f"{config.method}.pt"
        model.save(path)
        loaded = RecursiveModel.load(path)
        assert loaded.config == config
        x = _tokens(3)
        assert torch.equal(predict(model, x), predict(loaded, x))
    before = path.read_bytes()

    def broken(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        _model(trm_config(V, L, hidden=8)).save(path)
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
    bogus = tmp_path / "bogus.pt"
    monkeypatch.undo()
    torch.save({"weights": 1}, bogus)
    with pytest.raises(ValueError, match=r"RecursiveModel\.save"):
        RecursiveModel.load(bogus)


@pytest.mark.usefixtures("one_torch_thread")
def test_save_load_keeps_a_bfloat16_model_in_bfloat16_and_reads_files_without_a_dtype(tmp_path):
    model = _model(trm_config(V, L, hidden=8), seed=2).to(torch.bfloat16)
    model.save(tmp_path / "bf16.pt")
    loaded = RecursiveModel.load(tmp_path / "bf16.pt")
    assert {p.dtype for p in loaded.state_dict().values()} == {torch.bfloat16}
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    x = _tokens(3)
    assert torch.equal(predict(model, x), predict(loaded, x))
    # a file written before the dtype was recorded: float32, as it was saved
    old = _model(trm_config(V, L, hidden=8), seed=2)
    torch.save({"config": dataclasses.asdict(old.config), "state": old.state_dict()}, tmp_path / "old.pt")
    loaded = RecursiveModel.load(tmp_path / "old.pt")
    assert loaded.head.weight.dtype == torch.float32
    assert torch.equal(predict(old, x), predict(loaded, x))
    # mixed parameter dtypes cannot come back as saved: refused, and nothing is written
    model.head.float()
    with pytest.raises(ValueError, match="one dtype"):
        model.save(tmp_path / "mixed.pt")
    assert not (tmp_path / "mixed.pt").exists()


@pytest.mark.usefixtures("one_torch_thread")
def test_the_trainer_refuses_float16_parameters_that_adamw_would_turn_to_nan():
    model = _model(trm_config(V, L, hidden=8, supervision_steps=1, h_cycles=2, l_cycles=2))
    with pytest.raises(ValueError, match=r"model has float16 .*bfloat16.*autocast"):
        RecursiveTrainer(model.to(torch.float16))
    model.to(torch.bfloat16)
    RecursiveTrainer(model).train_batch(_tokens(4), _tokens(4, 1))
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"h_cycles": 0}, "h_cycles"),
        ({"l_cycles": 0}, "l_cycles"),
        ({"supervision_steps": 0}, "supervision_steps"),
        ({"method": "hrm"}, "method"),
        ({"loss": "focal"}, "loss"),
        ({"mixer": "conv"}, "mixer"),
        ({"mixer": "attention", "hidden": 10, "heads": 4}, "divisible"),
        ({"halt_exploration": 1.5}, "halt_exploration"),
        ({"guidance": -1.0}, "guidance"),
    ],
)
def test_bad_configs_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        trm_config(V, L, **kwargs)


def test_bad_tokens_name_the_argument():
    model = _model(trm_config(V, L, hidden=8, supervision_steps=2))
    trainer = RecursiveTrainer(model)
    with pytest.raises(ValueError, match=r"inputs must have shape \(batch >= 1, 6\)"):
        predict(model, torch.zeros(2, 7, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels must hold tokens in \[0, 5\)"):
        trainer.train_batch(_tokens(2), torch.full((2, L), 5))
    with pytest.raises(ValueError, match="inputs must hold tokens"):
        evaluate(model, torch.full((2, L), -1), _tokens(2))
    with pytest.raises(TypeError, match="inputs must hold integer tokens"):
        predict(model, torch.zeros(2, L))
    with pytest.raises(ValueError, match="labels must have the shape of inputs"):
        trainer.train_batch(_tokens(2), _tokens(3))
    with pytest.raises(ValueError, match="steps must be"):
        predict(model, _tokens(2), steps=3)
    with pytest.raises(TypeError, match="config must be a RecursiveConfig"):
        RecursiveModel({"vocab_size": V})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="augment must be callable"):
        trainer.fit(_tokens(2), _tokens(2), augment=3)


def test_a_diverged_loss_raises_before_the_update():
    model = _model(dis_config(V, L, hidden=8))
    with torch.no_grad():
        model.head.weight.fill_(float("inf"))
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="lr"):
        RecursiveTrainer(model).train_batch(_tokens(2), _tokens(2, 1))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_budget_lookup_is_compute_matched():
    model = _model(dis_config(V, L, hidden=8))
    result = evaluate(model, _tokens(4), _tokens(4, 1))
    assert result.evaluations == [3.0 * (s + 1) for s in range(6)]
    assert result.at_budget(2) is None
    assert result.at_budget(10) == result.exact[2] and result.at_budget(1e9) == result.exact[-1]
