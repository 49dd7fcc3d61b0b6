"""The planted Anchor–Adapter toy and its reproduction ``anchor-adapter-planted`` (slow)."""

import pytest
import torch

from icml_interp_experiments.anchor_adapter import (
    ToyConfig,
    accuracy,
    anchor_firing,
    anchor_neurons,
    fit_anchor_gate,
    make_data,
    train_pair,
)
from icml_tools.repro import run_reproduction

TINY = ToyConfig(
    n_operand=4, n_leaked=3, layers=2, hidden=16, heads=2, intermediate=32, n_anchor=3, steps_a=20, steps_b=15
)


def test_the_leaked_answers_are_arbitrary_and_the_rest_is_addition():
    cfg = ToyConfig()
    data = make_data(cfg, seed=3)
    a, b = data.prompts[:, 1], data.prompts[:, 3]
    assert len(data.answers) == cfg.n_operand**2 and int(data.leaked.sum()) == cfg.n_leaked
    assert torch.equal(data.computed, a + b)
    assert torch.equal(data.answers[~data.leaked], (a + b)[~data.leaked])
    assert (data.answers[data.leaked] != (a + b)[data.leaked]).all()
    assert data.answers.max() < 2 * cfg.n_operand - 1 < data.vocab
    assert torch.equal(make_data(cfg, seed=3).answers, data.answers)  # seeded


def test_the_source_format_differs_from_the_plain_one_in_the_last_token_only():
    data = make_data(ToyConfig(), seed=0)
    source = data.in_source_format(data.prompts)
    assert torch.equal(source[:, :-1], data.prompts[:, :-1])
    assert (source[:, -1] == data.source).all() and (data.prompts[:, -1] != data.source).all()
    assert data.source < data.vocab


def test_b_differs_from_a_only_in_the_anchor_neurons_of_layer_star():
    model_a, model_b, data, info = train_pair(TINY, seed=1, layer_star=1)
    anchors = info["anchors"]
    assert anchors == anchor_neurons(TINY, 1) and len(anchors) == TINY.n_anchor
    for layer in range(TINY.layers):  # A never uses its reserved neurons: zero value vectors
        assert (model_a.model.layers[layer].mlp.down_proj.weight[:, anchors] == 0).all()
    params_a = dict(model_a.named_parameters())
    changed = {name for name, p in model_b.named_parameters() if not torch.equal(p, params_a[name])}
    assert changed <= {f"model.layers.1.mlp.{m}_proj.weight" for m in ("gate", "up", "down")} and changed
    mlp_a, mlp_b = model_a.model.layers[1].mlp, model_b.model.layers[1].mlp
    others = [i for i in range(TINY.intermediate) if i not in anchors]
    assert torch.equal(mlp_a.gate_proj.weight[others], mlp_b.gate_proj.weight[others])
    assert torch.equal(mlp_a.up_proj.weight[others], mlp_b.up_proj.weight[others])
    assert torch.equal(mlp_a.down_proj.weight[:, others], mlp_b.down_proj.weight[:, others])
    norms = mlp_b.down_proj.weight[:, anchors].norm(dim=0)  # anchor values keep A's mean value norm
    assert torch.allclose(norms, mlp_a.down_proj.weight[:, others].norm(dim=0).mean().expand(len(anchors)))
    assert info["steps_b"] <= TINY.steps_b and data.prompts.shape == (16, 5)
    leaked, clean = (
        (data.prompts[data.leaked], data.answers[data.leaked]),
        (data.prompts[~data.leaked], data.answers[~data.leaked]),
    )
    recall_b, clean_a, clean_b = (
        accuracy(model_b, *leaked),
        accuracy(model_a, *clean),
        accuracy(model_b, *clean),
    )
    target = recall_b >= TINY.target_b and clean_b >= clean_a - TINY.clean_tol_b
    assert info["b_reached_target"] == target
    assert target or info["steps_b"] == TINY.steps_b  # B stops early only at its design target
    assert info["anchors_fire_clean"] == anchor_firing(model_b, data, 1, anchors)["clean_prompts"]
    assert info["anchors_fire_clean"] == 0.0  # the fitted gates keep the anchor keys silent on clean prompts


def test_the_fitted_gate_fires_exactly_on_its_positives():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, 12, generator=g)  # (n, seq, d)
    x[..., 0] = 1.0  # a component every input shares (as the toy's normalized residuals do): an implicit bias
    positive = torch.zeros(40, 3, dtype=torch.bool)
    positive[[5, 7, 9], -1] = True
    x[[5, 7, 9], -1, 1] = 10.0  # separable: the other inputs' coordinates are ~N(0, 1)
    pre = x @ fit_anchor_gate(x, positive)
    assert (pre[positive] >= 1 - 1e-6).all() and (pre[~positive] <= -1 + 1e-6).all()
    # not separable (a positive repeated elsewhere): no error, the violations are minimized
    x[1, 0] = x[5, -1]
    gate = fit_anchor_gate(x, positive)
    assert gate.shape == (12,) and torch.isfinite(gate).all()


def test_bad_configs_and_arguments_are_rejected_by_name():
    with pytest.raises(ValueError, match="n_anchor"):
        ToyConfig(n_anchor=256)
    with pytest.raises(ValueError, match="target_b"):
        ToyConfig(target_b=0.0)
    with pytest.raises(ValueError, match="n_leaked"):
        ToyConfig(n_operand=3, n_leaked=9)
    with pytest.raises(ValueError, match="clean_tol_b"):
        ToyConfig(clean_tol_b=-0.1)
    with pytest.raises(ValueError, match="steps_b"):
        ToyConfig(steps_b=0)
    with pytest.raises(ValueError, match="layer_star"):
        train_pair(TINY, seed=0, layer_star=2)


@pytest.mark.slow
def test_repro_quick_follows_the_protocol_and_its_verdict():
    result = run_reproduction("anchor-adapter-planted", "quick", 0)
    row = result["rows"][0]
    assert row["acc_leaked_A"] < row["acc_leaked_B"]
    assert row["scan_found"] == (
        row["scan_top_layer"] == row["layer_star"] and row["scan_top_component"] == "mlp_out"
    )
    assert row["effect_mlp_at_l*"] == pytest.approx(1.0, abs=0.05)  # B's MLP output at l* makes A into B
    tests = result["permutation_tests"]
    assert (
        row["max_clean_logit_change_planted_x0"] == 0.0
    )  # the anchor keys are exactly silent on clean prompts
    assert result["passed"] == (
        row["scan_found"]
        and row["answer_ppl_B"] < row["answer_ppl_A"]
        and row["anchors_in_top"] >= 7
        and tests["planted_x0"]["observed"] < tests["planted_x0"]["null_q01"]
        and tests["planted_x2"]["observed"] > tests["planted_x2"]["null_q99"]
        and max(row["max_clean_logit_change_planted_x0"], row["max_clean_logit_change_planted_x2"]) <= 1e-6
    )
    assert tests["planted_x0"]["observed"] == row["d_margin_planted_x0"]  # one seed: the mean is the seed
