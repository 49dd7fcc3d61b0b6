"""Device checks on a faked CUDA device (the root conftest's ``fake_cuda``): what the library builds itself
must land on the device of the user's tensors. Shapes and devices are checked; fake tensors hold no values."""

from __future__ import annotations

import pytest
import torch

from icml_agents.dlmr import Router, load_memories, save_memories, token_cost_reward
from icml_agents.rl import compute_advantages, grpo_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_grpo_loss_takes_cpu_advantages_and_mask_with_cuda_logp(fake_cuda):
    # the docs' ten lines: advantages from a list of rewards are a CPU tensor
    advantages = compute_advantages([1.0, 0.0, 0.5, 0.5], 2)[0].float()
    mask = torch.ones(4, 3)
    with fake_cuda():
        logp = torch.randn(4, 3, device="cuda")
        loss, _ = grpo_loss(logp, logp.detach(), advantages, mask)
        assert loss.device.type == "cuda" and loss.shape == ()


def test_token_cost_reward_follows_the_tokens_device(fake_cuda):
    with fake_cuda():
        tokens = torch.full((2,), 4.0, device="cuda")
        for correct in ([1.0, 0.0], torch.ones(2)):
            reward = token_cost_reward(correct, tokens, 0.05)
            assert reward.device.type == "cuda" and reward.shape == (2,)


def test_memories_saved_on_a_gpu_load_on_a_cpu_machine(tmp_path, monkeypatch):
    import torch.serialization as serialization

    router = Router(8)
    with monkeypatch.context() as patch:  # what torch.save writes for a router trained on cuda:0
        patch.setattr(serialization, "location_tag", lambda storage: "cuda:0")
        save_memories(tmp_path / "m.pt", router=router)
    loaded = load_memories(tmp_path / "m.pt")["router"]
    for (name, a), b in zip(router.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b) and b.device.type == "cpu", name
