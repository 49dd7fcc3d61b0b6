"""The three small describers of the ``bedtime-harness`` reproduction, one per modality, trained here.

Each reads its modality and predicts every attribute with its own head (trend 3, seasonality 3, noise 2,
event 4, position 3; the position's loss counts only on series with an event), so it plugs into
:class:`~icml_agents.bedtime.AttributeDescriber` and answers all three tasks the same way.

- :class:`SeriesCNN` (``"array"``): the raw series standardised per series, with a missing-value mask
  channel; three 1-D convolutions, adaptive average pooling to 8 segments, an MLP.
- :class:`PlotCNN` (``"plot"``): the 32×96 rendered plot (:func:`~icml_agents.bedtime.render_plot`); three
  2-D convolutions, adaptive pooling to 4×8, an MLP.
- :class:`TextCNN` (``"text"``): the numeric text (:func:`~icml_agents.bedtime.serialize`, 1 decimal) as
  characters, embedded, three strided 1-D convolutions, adaptive pooling to 8 segments, an MLP: a small
  language-only model of serialized numbers (a character CNN, not a language model).

:func:`train` fits any of them on freshly generated series with Adam (same steps, batch and learning rate
for all three).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from icml_agents.bedtime import (
    ATTRIBUTES,
    AttributeDescriber,
    generate_series,
    random_attributes,
    render_plot,
    serialize,
)

HEADS = {name: len(values) for name, values in ATTRIBUTES.items()}
CHARS = "0123456789-., na"
TEXT_DECIMALS = 1


class _Heads(nn.Module):
    def __init__(self, features: int, hidden: int = 128) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(features, hidden), nn.ReLU())
        self.heads = nn.ModuleDict({k: nn.Linear(hidden, n) for k, n in HEADS.items()})

    def forward(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        z = self.body(h)
        return {k: head(z) for k, head in self.heads.items()}


class _Net(nn.Module, AttributeDescriber):
    modality = "array"
    name = "net"

    def encode(self, series: Sequence[np.ndarray]) -> torch.Tensor:
        raise NotImplementedError

    head: _Heads
    net: nn.Module

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.head(self.trunk(x))

    def predict_proba(self, series: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        self.eval()
        with torch.no_grad():
            logits = self(self.encode(series))
        return {k: torch.softmax(v, dim=1).double().numpy() for k, v in logits.items()}


class SeriesCNN(_Net):
    modality = "array"
    name = "1-D CNN (array)"

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(2, width, 5, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(8),
        )
        self.head = _Heads(width * 8)

    def encode(self, series: Sequence[np.ndarray]) -> torch.Tensor:
        longest = max(len(x) for x in series)
        out = np.zeros((len(series), 2, longest), dtype=np.float32)
        for i, x in enumerate(series):
            ok = ~np.isnan(x)
            mu, sd = x[ok].mean(), x[ok].std() or 1.0
            out[i, 0, : len(x)] = np.where(ok, (np.nan_to_num(x) - mu) / sd, 0.0)
            out[i, 1, : len(x)] = ok
        return torch.from_numpy(out)


class PlotCNN(_Net):
    modality = "plot"
    name = "plot CNN (plot)"

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d((4, 8)),
        )
        self.head = _Heads(2 * width * 32)

    def encode(self, series: Sequence[np.ndarray]) -> torch.Tensor:
        images = np.stack([render_plot(x) for x in series]).astype(np.float32) / 255.0
        return torch.from_numpy(images)[:, None]


class TextCNN(_Net):
    modality = "text"
    name = "character CNN (text)"

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(CHARS) + 1, 16, padding_idx=0)
        self.net = nn.Sequential(
            nn.Conv1d(16, width, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(8),
        )
        self.head = _Heads(width * 8)

    def encode(self, series: Sequence[np.ndarray]) -> torch.Tensor:
        texts = [serialize(x, TEXT_DECIMALS) for x in series]
        longest = max(len(t) for t in texts)
        ids = np.zeros((len(texts), longest), dtype=np.int64)
        for i, t in enumerate(texts):
            ids[i, : len(t)] = [CHARS.index(c) + 1 for c in t]
        return torch.from_numpy(ids)

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.embed(x).transpose(1, 2))


def _labels(attrs: Sequence[Any]) -> dict[str, torch.Tensor]:
    out = {}
    for name, values in ATTRIBUTES.items():
        out[name] = torch.tensor(
            [-100 if getattr(a, name) is None else values.index(getattr(a, name)) for a in attrs]
        )
    return out


def train(
    model: _Net, steps: int, seed: int, batch: int = 64, lr: float = 2e-3, length: int = 120
) -> dict[str, Any]:
    """Fit ``model`` on fresh generated series (``steps`` Adam steps of ``batch``; series from ``seed``)."""
    torch.manual_seed(seed)
    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear, nn.Embedding)):
            module.reset_parameters()
    rng = np.random.default_rng((seed, 17))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    start = time.perf_counter()
    model.train()
    for _ in range(steps):
        attrs = [random_attributes(rng) for _ in range(batch)]
        x = model.encode([generate_series(a, length, rng) for a in attrs])
        logits = model(x)
        labels = _labels(attrs)
        loss = sum(loss_fn(logits[k], labels[k]) for k in ATTRIBUTES)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return {"seconds": time.perf_counter() - start, "loss_last": float(loss.detach())}
