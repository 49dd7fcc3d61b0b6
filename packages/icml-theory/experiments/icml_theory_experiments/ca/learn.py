"""What networks learn of a cellular automaton's ``k``-step map: data, three architectures, fixed budgets.

Task: from a random state on a 16 x 16 torus (each cell alive with probability 1/2), predict the state after
``k`` steps of a rule; the metric is per-cell accuracy on held-out states. The three architectures see the
same information in the ways the paper compares:

- ``cnn``: a stack of ``k + 1`` circular-padded 3 x 3 convolutions (receptive field ``2k + 3``, enough for the
  ``2k + 1`` window) and a 1 x 1 head, on whole grids;
- ``mlp``: an MLP on the flattened ``(2k + 1)^2`` window of each cell;
- ``transformer``: a 2-layer transformer encoder over the window's cells as tokens (value and position
  embeddings, mean-pooled), one cell per example.

Our own design (the paper's text was not available to us): the grid size, the widths, the optimizer
(Adam, constant learning rate), the budgets and the fresh data per step (no example is seen twice, so the
accuracy measures learnability within the budget, not memorization).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from icml_theory.ca import Rule, simulate

GRID = 16
ARCHS = ("cnn", "mlp", "transformer")


@dataclass(frozen=True)
class Budget:
    """Training budget of one run: optimizer steps, grids per step, learning rate, test grids."""

    steps: int
    grids_per_step: int
    lr: float = 3e-3
    test_grids: int = 64


def make_data(rule: Rule, k: int, grids: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``grids`` random 16 x 16 states (density 1/2) and their states after ``k`` steps (uint8 both)."""
    x0 = (torch.rand(grids, GRID, GRID, generator=gen) < 0.5).to(torch.uint8)
    return x0, simulate(x0, rule, k)


def windows(states: torch.Tensor, k: int) -> torch.Tensor:
    """Every cell's ``(2k + 1)^2`` window on the torus, row-major, as ±1 floats ``(cells, (2k+1)^2)``
    (live = -1, the convention of icml_theory.boolean)."""
    x = 1.0 - 2.0 * states.float()[:, None]  # (B, 1, H, W)
    padded = nn.functional.pad(x, (k, k, k, k), mode="circular")
    patches = nn.functional.unfold(padded, kernel_size=2 * k + 1)  # (B, (2k+1)^2, H*W)
    return patches.transpose(1, 2).reshape(-1, (2 * k + 1) ** 2)


class CNN(nn.Module):
    def __init__(self, k: int, width: int = 32):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 1
        for _ in range(k + 1):
            layers += [nn.Conv2d(channels, width, 3, padding=1, padding_mode="circular"), nn.ReLU()]
            channels = width
        layers += [nn.Conv2d(width, 2 * width, 1), nn.ReLU(), nn.Conv2d(2 * width, 1, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, states: torch.Tensor) -> torch.Tensor:  # (B, H, W) uint8 -> (B*H*W,) logits
        return self.net(1.0 - 2.0 * states.float()[:, None]).reshape(-1)


class MLP(nn.Module):
    def __init__(self, k: int, width: int = 128):
        super().__init__()
        self.k = k
        self.net = nn.Sequential(
            nn.Linear((2 * k + 1) ** 2, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, 1),
        )

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.net(windows(states, self.k)).reshape(-1)


class PatchTransformer(nn.Module):
    def __init__(self, k: int, dim: int = 32, layers: int = 2, heads: int = 4):
        super().__init__()
        self.k = k
        self.value = nn.Linear(1, dim)
        self.position = nn.Parameter(torch.randn((2 * k + 1) ** 2, dim) * 0.02)
        block = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 1)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        tokens = self.value(windows(states, self.k)[..., None]) + self.position  # (cells, (2k+1)^2, dim)
        return self.head(self.encoder(tokens).mean(1)).reshape(-1)


def build(arch: str, k: int) -> nn.Module:
    if arch == "cnn":
        return CNN(k)
    if arch == "mlp":
        return MLP(k)
    if arch == "transformer":
        return PatchTransformer(k)
    raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")


def train_and_test(rule: Rule, k: int, arch: str, budget: Budget, seed: int) -> float:
    """Train ``arch`` on fresh data each step for ``budget.steps`` steps and return the per-cell test
    accuracy. ``seed`` fixes the initialization and the data; the test set depends on the rule and ``k``
    only, so the seeds of one rule are scored on the same states."""
    torch.manual_seed(seed)
    model = build(arch, k)
    opt = torch.optim.Adam(model.parameters(), lr=budget.lr)
    data_gen = torch.Generator().manual_seed(1_000 + seed)
    loss_fn = nn.BCEWithLogitsLoss()
    for _ in range(budget.steps):
        x0, xk = make_data(rule, k, budget.grids_per_step, data_gen)
        loss = loss_fn(model(x0), xk.reshape(-1).float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    x0, xk = make_data(rule, k, budget.test_grids, torch.Generator().manual_seed(999_999))
    with torch.no_grad():
        predicted = (model(x0) > 0).to(torch.uint8)
    return float((predicted == xk.reshape(-1)).float().mean())
