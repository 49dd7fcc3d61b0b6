"""Device checks on a faked CUDA device (the root conftest's ``fake_cuda``): public calls with CUDA tensors or
a model moved to CUDA must not mix in CPU tensors. Fake tensors hold no values (value reads return stand-ins),
so these tests assert only devices and shapes; the values are tested on the CPU elsewhere."""

import pytest

torch = pytest.importorskip("torch")

from icml_theory.boolean import majority  # noqa: E402
from icml_theory.boolean.sampling import (  # noqa: E402
    estimate_coefficients,
    estimate_influences,
    estimate_low_degree_weight,
    truth_table_function,
)
from icml_theory.ca import (  # noqa: E402
    GAME_OF_LIFE,
    Rule,
    local_map,
    local_table,
    simulate,
    step,
    window_image,
    window_step,
)
from icml_theory.markov import AttentionOnlyTransformer, MixtureOfLagsChain, train  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LIFE = Rule.life_like(GAME_OF_LIFE)


def test_ca_dynamics_run_on_the_states_device(fake_cuda):
    # the rule's table lives on the CPU; the lookup index was built there too
    with fake_cuda():
        grid = torch.randint(0, 2, (2, 6, 6), device="cuda")
        windows = torch.randint(0, 2, (4, 5, 5), device="cuda")
        x = torch.randn(4, 25, device="cuda").sign()
        assert step(grid, LIFE).device.type == "cuda" and step(grid, LIFE).shape == (2, 6, 6)
        assert simulate(grid, LIFE, 2, history=True).shape == (3, 2, 6, 6)
        assert simulate(grid, LIFE, 2).device.type == "cuda"
        out = window_step(windows, LIFE)
        assert out.device.type == "cuda" and out.shape == (4, 3, 3)
        out = window_image(windows, LIFE, 2)
        assert out.device.type == "cuda" and out.shape == (4,)
        out = local_map(LIFE, 2)(x)
        assert out.device.type == "cuda" and out.shape == (4,) and out.dtype == torch.float64


def test_local_table_of_a_rule_on_cuda(fake_cuda):
    # the 2-step table is built where the rule's table lives (the band codes used CPU shifts)
    with fake_cuda():
        rule = Rule.from_table(LIFE.table.to("cuda"))
        table = local_table(rule, 2)
        assert table.device.type == "cuda" and table.shape == (1 << 25,) and table.dtype == torch.uint8
        assert step(torch.zeros(5, 5, dtype=torch.uint8), rule).device.type == "cpu"


def test_boolean_estimates_of_a_function_computing_on_cuda(fake_cuda):
    # f returns CUDA values for the estimators' CPU points: the estimates stay on the points' device
    with fake_cuda():
        f = truth_table_function(majority(5).to("cuda"))
        est = estimate_coefficients(f, 5, [[0], [0, 1, 2]], samples=8)
        assert est.value.device.type == "cpu" and est.value.shape == (2,)
        est = estimate_low_degree_weight(f, 5, 1, samples=8, batches=2)
        assert est.value.device.type == "cpu" and est.value.shape == ()
        est = estimate_influences(f, 5, samples=8)
        assert est.value.device.type == "cpu" and est.low.shape == (5,)


def test_estimate_covers_exact_values_computed_on_cuda(fake_cuda):
    est = estimate_influences(truth_table_function(majority(5)), 5, samples=64)  # a real CPU estimate
    with fake_cuda():
        covered = est.covers(torch.rand(5, dtype=torch.float64, device="cuda"))
        assert covered.device.type == "cpu" and covered.shape == (5,) and covered.dtype == torch.bool


CHAIN = MixtureOfLagsChain(n_states=3, lags=(1, 2), weights=(0.6, 0.4))


@pytest.fixture
def no_backward(monkeypatch):
    """Fake tensors cannot run autograd's backward on a CUDA graph (no CUDA context): backward is a no-op
    (SGD then skips the gradient-less parameters), so what is checked is that every forward pass gets its
    batch on the model's device."""
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *args, **kwargs: None)


# full_logging=False below: the logged attention masses are read with .numpy(), which fake tensors refuse


def test_markov_train_moves_sampled_batches_to_the_models_device(fake_cuda, no_backward):
    model = AttentionOnlyTransformer(n_states=3, context=6, heads=2)
    with fake_cuda():
        model = model.to("cuda")
        log = train(model, CHAIN, steps=2, batch_size=4, log_every=1, full_logging=False)
        assert log.train_loss.shape == (2,) and model.attn.W_Q.device.type == "cuda"


def test_markov_train_takes_a_training_set_on_cuda(fake_cuda, no_backward):
    model = AttentionOnlyTransformer(n_states=3, context=6, heads=2)
    with fake_cuda():
        model = model.to("cuda")
        data = torch.zeros(5, 7, dtype=torch.long, device="cuda")
        log = train(model, CHAIN, steps=1, batch_size=4, train_data=data, full_logging=False)
        assert log.config["fixed_train_set"] == 5 and log.train_loss.shape == (1,)
