"""The root conftest's ``fake_cuda`` fixture: device checks of GPU code paths on machines without a GPU."""

import pytest

torch = pytest.importorskip("torch")


def test_fake_cuda_catches_a_cpu_tensor_mixed_into_cuda_work(fake_cuda):
    with fake_cuda():
        x = torch.randn(3, device="cuda")
        assert x.device.type == "cuda" and (x * 2).device.type == "cuda"
        assert bool(x.sum() > 0) and x.sum().item() == 1.0 and int(x.sum()) == 1
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.arange(3)
    with fake_cuda(truth=False, scalar=3.0):
        x = torch.randn(3, device="cuda")
        assert not bool(x.sum() > 0) and float(x.sum()) == 3.0
    # real tensors read their values again afterwards
    assert not bool(torch.zeros(1) > 0) and torch.full((1,), 2.5).item() == 2.5
