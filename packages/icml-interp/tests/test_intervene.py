"""Latent interventions keep the SAE error term, respect masks and always remove their hook."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from icml_interp.intervene import Add, Clamp, Scale, apply_edit, intervene, reference_mean


class LinearSAE(nn.Module):
    """A ReLU SAE with random weights: enough to test edits (they never look inside the SAE)."""

    def __init__(self, d_in=6, d_sae=10, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W_enc = torch.randn(d_in, d_sae, generator=g)
        self.b_enc = torch.randn(d_sae, generator=g) * 0.1
        self.W_dec = torch.randn(d_sae, d_in, generator=g)
        self.b_dec = torch.randn(d_in, generator=g)

    def encode(self, x):
        return torch.relu((x - self.b_dec) @ self.W_enc + self.b_enc)

    def decode(self, f):
        return f @ self.W_dec + self.b_dec


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.head = nn.Conv2d(6, 2, 1)

    def forward(self, x):
        return self.head(self.conv(x))


def test_edit_equals_error_preserving_formula():
    sae = LinearSAE()
    h = torch.randn(2, 6, 4, 5)
    tokens = h.permute(0, 2, 3, 1).reshape(-1, 6)
    f = sae.encode(tokens)
    for edit in (Add([1, 3], 2.0), Scale([0, 2], 3.0), Clamp([4], 0.7)):
        f_new = edit(f)
        expected = tokens + (f_new - f) @ sae.W_dec  # h' = h + (f' - f) W_dec
        got = apply_edit(h, sae, edit).permute(0, 2, 3, 1).reshape(-1, 6)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        untouched = [j for j in range(10) if j not in edit.index(10).tolist()]
        torch.testing.assert_close(f_new[:, untouched], f[:, untouched])
    # the error term is kept: a no-op edit changes nothing even though the SAE reconstructs badly
    torch.testing.assert_close(apply_edit(h, sae, Scale([0], 1.0)), h)


def test_edit_values():
    f = torch.tensor([[1.0, 2.0, 3.0], [0.0, 4.0, 0.5]])
    torch.testing.assert_close(Add([1], 1.5)(f), torch.tensor([[1.0, 3.5, 3.0], [0.0, 5.5, 0.5]]))
    torch.testing.assert_close(
        Scale([0, 2], torch.tensor([2.0, 0.0]))(f), torch.tensor([[2.0, 2.0, 0.0], [0.0, 4.0, 0.0]])
    )
    # Clamp with a full reference vector takes the chosen latents' entries
    torch.testing.assert_close(
        Clamp([2], torch.tensor([9.0, 8.0, 7.0]))(f), torch.tensor([[1.0, 2.0, 7.0], [0.0, 4.0, 7.0]])
    )
    # ... also when every latent is chosen, in any order
    torch.testing.assert_close(
        Clamp([2, 0, 1], torch.tensor([9.0, 8.0, 7.0]))(f), torch.tensor([[9.0, 8.0, 7.0], [9.0, 8.0, 7.0]])
    )


def test_mask_restricts_edit_and_is_resized():
    sae = LinearSAE()
    h = torch.randn(2, 6, 4, 4)
    mask = torch.zeros(2, 4, 4, dtype=torch.bool)
    mask[0, 1, 2] = True
    out = apply_edit(h, sae, Add([0, 1, 2], 5.0), mask=mask)
    changed = (out - h).abs().sum(1) > 1e-6  # (B, H, W)
    assert torch.equal(changed, mask)
    big = mask.repeat_interleave(2, 1).repeat_interleave(2, 2)  # (2, 8, 8) at twice the resolution
    torch.testing.assert_close(apply_edit(h, sae, Add([0, 1, 2], 5.0), mask=big), out)
    # an empty mask is a no-op
    torch.testing.assert_close(apply_edit(h, sae, Add([0], 5.0), mask=torch.zeros(4, 4, dtype=torch.bool)), h)


def test_context_manager_changes_output_and_removes_hook_even_on_error():
    torch.manual_seed(0)
    net, sae = Net().eval(), LinearSAE()
    x = torch.randn(3, 1, 5, 5)
    clean = net(x)
    with intervene(net.conv, sae, Clamp([0, 1, 2], 3.0)):
        steered = net(x)
    assert (steered - clean).abs().max() > 1e-3
    torch.testing.assert_close(net(x), clean)
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(net.conv, sae, Scale([0], 0.0)):
            raise RuntimeError("boom")
    assert not net.conv._forward_hooks
    torch.testing.assert_close(net(x), clean)


def test_tuple_output_and_sequence_layout():
    sae = LinearSAE()

    class TupleMod(nn.Module):
        def forward(self, x):
            return (x * 1.0, "aux")

    mod = TupleMod()
    h = torch.randn(2, 3, 6)
    with intervene(mod, sae, Add([2], 1.0), mask=torch.tensor([[True, False, False], [False, False, True]])):
        out, aux = mod(h)
    assert aux == "aux"
    changed = (out - h).abs().sum(-1) > 1e-6
    assert changed.tolist() == [[True, False, False], [False, False, True]]


def test_reference_mean():
    codes = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0]])
    torch.testing.assert_close(reference_mean(codes), torch.tensor([3.0, 2.0]))
    torch.testing.assert_close(
        reference_mean(codes, torch.tensor([True, False, True])), torch.tensor([3.0, 2.0])
    )
    torch.testing.assert_close(
        reference_mean(codes, torch.tensor([False, True, False])), torch.tensor([3.0, 2.0])
    )
    with pytest.raises(ValueError, match="selects no tokens"):
        reference_mean(codes, torch.zeros(3, dtype=torch.bool))


def test_bad_input():
    sae, net = LinearSAE(), Net()
    with pytest.raises(ValueError, match="latents must lie in"):
        Add([10], 1.0)(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="latents must lie in"):
        with intervene(net.conv, sae, Add([42], 1.0)):
            pass
    with pytest.raises(TypeError, match="latents must"):
        Add("a", 1.0)(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="at least one latent"):
        Add([], 1.0)(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="one value per chosen latent"):
        Add([0, 1], torch.ones(3))(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="finite"):
        Clamp([0], float("nan"))(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="does not match the SAE's d_in"):
        apply_edit(torch.randn(2, 5, 3, 3), sae, Add([0], 1.0))
    with pytest.raises(ValueError, match="layout must be one of"):
        apply_edit(torch.randn(2, 6, 3, 3), sae, Add([0], 1.0), layout="nchw")
    with pytest.raises(ValueError, match="mask must be"):
        apply_edit(torch.randn(2, 6, 3, 3), sae, Add([0], 1.0), mask=torch.ones(3, 2, 3, 3))
    with pytest.raises(TypeError, match="edit must be"):
        apply_edit(torch.randn(2, 6, 3, 3), sae, lambda f: f)
    with pytest.raises(TypeError, match="module must be"):
        with intervene("conv", sae, Add([0], 1.0)):
            pass


def test_repeated_latents_are_rejected():
    # A latent named twice was written twice by one indexed assignment, which keeps one of the values (torch
    # leaves which one undefined): Add([1, 1], amount=[1, 5]) gave latent 1 a +5 (neither +6 nor an error),
    # Clamp([2, 2], [0, 3]) clamped it to 3.
    f = torch.zeros(2, 4)
    for make in (
        lambda: Add([1, 1], torch.tensor([1.0, 5.0])),
        lambda: Add(torch.tensor([3, 0, 3]), 1.0),
        lambda: Scale([0, 2, 0], 2.0),
        lambda: Clamp([2, 2], torch.tensor([0.0, 3.0])),
    ):
        with pytest.raises(ValueError, match="latents must be distinct"):
            make()(f)  # raised when the edit is made (before: applied, one value kept)
    # distinct latents, and a bool mask (distinct by construction), still work
    torch.testing.assert_close(
        Add(torch.tensor([False, True, False, True]), 2.0)(f)[0], torch.tensor([0.0, 2, 0, 2])
    )
