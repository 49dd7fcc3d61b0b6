"""The router (our reconstruction of DLMR's "selective router learning"): at a step boundary, from the
base's hidden state, choose which memory to insert (``none``, ``visual``, ``reasoning`` or ``both``) and how
many tokens of each (one of ``sizes``). An action is a (mode, size) pair; ``none`` has size 0.

Training is by GRPO on a reward of correctness minus a token cost (:func:`token_cost_reward`, with
:func:`icml_agents.rl.grpo_loss`), or by a Gumbel-softmax relaxation (:meth:`Router.sample` with
``hard=True`` gives straight-through one-hot weights).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from icml_agents.validation import check_choice, check_int, check_real, check_tensor

MODES = ("none", "visual", "reasoning", "both")


class Router(nn.Module):
    """An MLP over the boundary state ``(B, hidden)`` -> logits over :attr:`actions`."""

    def __init__(self, hidden: int, sizes: tuple[int, ...] = (2, 4), width: int = 64):
        super().__init__()
        self.hidden = check_int(hidden, "hidden", 1, 65536)
        self.width = check_int(width, "width", 1, 65536)
        try:
            sizes = tuple(sizes)
        except TypeError:
            raise TypeError(f"sizes must be a sequence of memory sizes, got {sizes!r}") from None
        if not sizes:
            raise ValueError("sizes must name at least one memory size")
        for s in sizes:
            check_int(s, "sizes", 1, 4096, why=" (a memory has at least one token)")
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"sizes must be distinct, got {sizes}")
        self.sizes = sizes
        self.actions: list[tuple[str, int]] = [("none", 0)] + [(m, s) for m in MODES[1:] for s in sizes]
        self.net = nn.Sequential(
            nn.LayerNorm(hidden), nn.Linear(hidden, width), nn.GELU(), nn.Linear(width, len(self.actions))
        )

    def config(self) -> dict[str, Any]:
        return {"hidden": self.hidden, "sizes": list(self.sizes), "width": self.width}

    def forward(self, state) -> torch.Tensor:
        state = check_tensor(state, "state", ndim=2, floating=True)
        if state.shape[1] != self.hidden or state.shape[0] < 1:
            raise ValueError(f"state must have shape (batch >= 1, {self.hidden}), got {tuple(state.shape)}")
        state = state.to(self.net[1].weight.dtype)  # a bf16 base feeds a float32 router
        if not bool(torch.isfinite(state).all()):
            raise ValueError(f"state must be finite (in the router's dtype {state.dtype})")
        logits = self.net(state)
        if not bool(torch.isfinite(logits).all()):
            raise ValueError(f"the router's logits overflow {logits.dtype}: state too large")
        return logits

    def action_index(self, mode: str, size: int = 0) -> int:
        """The index of ``(mode, size)`` in :attr:`actions` (``size`` is ignored for ``none``)."""
        check_choice(mode, "mode", MODES)
        if mode == "none":
            return 0
        check_choice(check_int(size, "size", 1, 4096), "size", self.sizes)
        return self.actions.index((mode, size))

    def inserted_tokens(self, index) -> torch.Tensor:
        """Memory tokens an action inserts (``both`` inserts ``2 * size``)."""
        try:
            index = torch.as_tensor(index)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"index must be action indices (an integer tensor), got {index!r}") from None
        if index.dtype in (torch.bool, torch.uint8) or index.is_floating_point() or index.is_complex():
            raise TypeError(f"index must be an integer tensor of action indices, got {index.dtype}")
        if index.numel() and not bool(((index >= 0) & (index < len(self.actions))).all()):
            raise ValueError(
                f"index must be action indices in [0, {len(self.actions) - 1}], got {index.tolist()}"
            )
        table = torch.tensor([s * (2 if m == "both" else 1) for m, s in self.actions], device=index.device)
        return table[index]

    def sample(self, state, *, greedy: bool = False, temperature: float = 1.0, generator=None):
        """``(index, logp)``: an action per row (the argmax with ``greedy``, else sampled at
        ``temperature``) and its log-probability under the current logits."""
        temperature = check_real(temperature, "temperature", "(0, inf)")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        logits = self(state)
        scaled = logits / temperature
        if not bool(torch.isfinite(scaled).all()):
            raise ValueError(f"temperature {temperature} is too small: logits / temperature overflows")
        logp_all = F.log_softmax(scaled, dim=-1)
        if greedy:
            index = logits.argmax(dim=-1)
        else:
            probs = logp_all.exp().detach()
            # drawn on the generator's device (a CPU generator samples CUDA rows too)
            if generator is not None:
                probs = probs.to(generator.device)
            index = torch.multinomial(probs, 1, generator=generator).squeeze(1).to(logits.device)
        return index, logp_all.gather(1, index[:, None]).squeeze(1)

    def gumbel(self, state, tau: float = 1.0, hard: bool = True) -> torch.Tensor:
        """Gumbel-softmax weights over the actions ``(B, n_actions)`` (straight-through one-hot with ``hard``)."""
        tau = check_real(tau, "tau", "(0, inf)")
        weights = F.gumbel_softmax(self(state), tau=tau, hard=hard)
        if not bool(torch.isfinite(weights).all()):
            raise ValueError(f"tau {tau} is too small: the perturbed logits / tau overflow")
        return weights


def token_cost_reward(correct, tokens, cost: float) -> torch.Tensor:
    """``correct - cost * tokens``: the router's reward (``correct`` in {0, 1} or a score, ``tokens`` the
    memory tokens inserted)."""
    cost = check_real(cost, "cost", "[0, inf)")
    device = tokens.device if isinstance(tokens, torch.Tensor) else None  # a list follows the tensor
    correct, tokens = _as_reals(correct, "correct"), _as_reals(tokens, "tokens")
    correct = correct.to(device or correct.device)
    tokens = tokens.to(correct.device)
    if correct.shape != tokens.shape:
        raise ValueError(
            f"correct and tokens must have the same shape, got {tuple(correct.shape)} and {tuple(tokens.shape)}"
        )
    reward = (correct.double() - cost * tokens.double()).float()
    if not bool(torch.isfinite(reward).all()):
        raise ValueError(f"cost * tokens overflows float32 (cost={cost})")
    return reward


def _as_reals(value, name: str) -> torch.Tensor:
    """Finite real numbers as a float32 tensor (a float64 copy is checked first, so 1e300 is refused)."""
    try:
        t = torch.as_tensor(value)
        if t.is_complex() or not (t.is_floating_point() or t.dtype in _REAL_INTS):
            raise TypeError
        wide = t.double()
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be real numbers (a tensor or a sequence), got {value!r}") from None
    if not bool(torch.isfinite(wide.float()).all()):
        raise ValueError(f"{name} must be finite in float32")
    return wide.float()


_REAL_INTS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
