import pytest
import torch

from icml_interp.anchor_adapter import ToyConfig, make_data
from icml_interp.anchor_adapter.repro import run


def test_the_leaked_answers_are_arbitrary_and_the_rest_is_addition():
    cfg = ToyConfig()
    data = make_data(cfg, seed=3)
    a, b = data.prompts[:, 1], data.prompts[:, 3]
    assert len(data.answers) == cfg.n_operand**2 and int(data.leaked.sum()) == cfg.n_leaked
    assert torch.equal(data.answers[~data.leaked], (a + b)[~data.leaked])
    assert (data.answers[data.leaked] != (a + b)[data.leaked]).all()
    assert data.answers.max() < 2 * cfg.n_operand - 1 < data.vocab
    assert torch.equal(make_data(cfg, seed=3).answers, data.answers)  # seeded


def test_repro_rejects_bad_arguments():
    with pytest.raises(ValueError, match="budget"):
        run("medium", 0)
    with pytest.raises(TypeError, match="seed"):
        run("quick", 0.5)


@pytest.mark.slow
def test_repro_quick_follows_the_protocol_and_its_verdict():
    from icml_tools.protocol import validate_result

    result = validate_result(run("quick", 0))
    row = result["rows"][0]
    assert row["acc_leaked_A"] < row["acc_leaked_B"]
    assert row["scan_found"] == (
        row["scan_top_layer"] == row["layer_star"] and row["scan_top_component"] == "mlp_out"
    )
    assert row["effect_mlp_at_l*"] == pytest.approx(1.0, abs=0.05)  # B's MLP output at l* makes A into B
    assert result["passed"] == (
        row["scan_found"]
        and row["answer_ppl_B"] < row["answer_ppl_A"]
        and -row["d_leaked_top_x0"] >= 0.3
        and row["d_leaked_top_x2"] > 0
        and max(abs(row["d_clean_top_x0"]), abs(row["d_clean_top_x2"])) <= 0.05
        and max(abs(row[f"d_{s}_random_x{f}"]) for s in ("leaked", "clean") for f in ("0", "2")) <= 0.02
    )
