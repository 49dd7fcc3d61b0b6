"""Device checks on a faked CUDA device (the root conftest's ``fake_cuda``): public calls with CUDA tensors or
a model on CUDA must not mix in CPU tensors. Fake tensors hold no values (value reads return stand-ins),
so these tests assert only devices and shapes; the values are tested on the CPU elsewhere."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from icml_stats.dp import CondDPSGD, conditioning_matrix  # noqa: E402
from icml_stats.shape import cholesky_from_raw  # noqa: E402
from icml_stats.shape import fisher as gaussian  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_cholesky_from_raw_of_a_cuda_tensor(fake_cuda):
    with fake_cuda():
        raw = torch.randn(4, 6, dtype=torch.float64, device="cuda")
        chol = cholesky_from_raw(raw, 3)
        assert chol.device.type == "cuda" and chol.shape == (4, 3, 3) and chol.dtype == torch.float64


def cuda_model(p, t):
    """A closed-form model that computes on the GPU: it moves the library's (CPU) inputs there."""
    p, t = p.to("cuda"), t.to("cuda")
    cov = (1.0 + t**2)[:, None, None] * torch.eye(p.shape[1], dtype=p.dtype, device="cuda")
    return p * t[:, None], cov


# The public functions (gaussian_log_likelihood, fisher_information, estimate_covariate) end in .numpy(),
# which fake tensors refuse on every device: their torch parts, which every one of them runs, are checked.


def test_log_likelihood_of_a_model_on_cuda_is_computed_on_the_points_device(fake_cuda):
    with fake_cuda():
        p, t, d = (
            torch.randn(5, 2, dtype=torch.float64),
            torch.rand(5, dtype=torch.float64),
            torch.randn(5, 2),
        )
        ll = gaussian._log_likelihood(cuda_model, p, t, d.to(torch.float64))
        assert ll.device.type == "cpu" and ll.shape == (5,)


def test_fisher_information_of_a_model_on_cuda_is_returned_on_the_points_device(fake_cuda):
    with fake_cuda():
        p, t = torch.randn(5, 3, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
        info = gaussian._fisher(cuda_model, p, t)
        assert info.device.type == "cpu" and info.shape == (5,)


class GradientsGiven(CondDPSGD):
    """``vmap(grad(...))`` cannot run on fake tensors: per-sample gradients of the right shape, on the
    parameters' device, stand in for it, so :meth:`step` runs the clipping, conditioning and noise."""

    def per_sample_gradients(self, inputs, targets):
        return {
            k: torch.randn(len(inputs), *p.shape, dtype=p.dtype, device=p.device)
            for k, p in self.params.items()
        }


def test_cond_dp_sgd_steps_a_model_on_cuda(fake_cuda):
    # the conditioning matrix is documented as conditioning_matrix's numpy array: kept on the CPU
    C = conditioning_matrix(np.random.default_rng(0).standard_normal((50, 4)))
    model = nn.Sequential(nn.Linear(4, 1))
    with fake_cuda():
        model = model.to("cuda")
        opt = GradientsGiven(
            model,
            lr=0.1,
            max_grad_norm=1.0,
            noise_multiplier=1.0,
            expected_batch_size=8,
            conditioning={"0.weight": C},
        )
        x, y = torch.randn(8, 4, device="cuda"), torch.randn(8, device="cuda")
        summed = opt.clipped_sum(x, y)
        assert summed["0.weight"].device.type == "cuda" and summed["0.weight"].shape == (1, 4)
        opt.step(x, y)
        assert all(p.device.type == "cuda" for p in model.parameters())
