"""The ``epc-depth`` testbed: scikit-learn's digits and deep tanh MLPs (fixed in
``packages/icml-theory/docs/predictive-coding.md`` before the first full run)."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

WIDTH = 64
TEST_FRACTION = 0.3
SPLIT_SEED = 0
HIDDEN_GAIN = 5 / 3  # tanh's gain: keeps a 20-layer tanh stack trainable by backprop


def digits(dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test): 8×8 digits scaled to [0, 1], a stratified 70/30 split."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x / 16.0, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    as_x = lambda a: torch.tensor(np.asarray(a), dtype=dtype)  # noqa: E731
    return as_x(x_tr), torch.tensor(y_tr), as_x(x_te), torch.tensor(y_te)


def mlp(depth: int, seed: int, width: int = WIDTH, dtype=torch.float32) -> nn.Sequential:
    """A ``depth``-layer tanh MLP 64 → width → … → 10: each hidden layer ``Linear + Tanh`` is one PC layer,
    the output layer is linear. Xavier-normal weights (gain 5/3 on hidden layers, 1 on the output), zero
    biases, drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [64] + [width] * (depth - 1)
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers.append(nn.Sequential(_linear(fan_in, fan_out, HIDDEN_GAIN, gen), nn.Tanh()))
    layers.append(_linear(sizes[-1], 10, 1.0, gen))
    return nn.Sequential(*layers).to(dtype)


def _linear(fan_in: int, fan_out: int, gain: float, gen: torch.Generator) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    std = gain * (2.0 / (fan_in + fan_out)) ** 0.5
    with torch.no_grad():
        layer.weight.copy_(torch.randn(fan_out, fan_in, generator=gen) * std)
        layer.bias.zero_()
    return layer


def accuracy(trainer, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((trainer.predict(x).argmax(1) == y).double().mean())
