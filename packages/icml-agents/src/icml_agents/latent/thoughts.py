"""How a latent thought is built from the model's last position: its final hidden state ``h`` (Coconut), the
probability-weighted input embedding of its prediction (Soft-Thinking), or LT-Tuning's Context-Prediction-Fusion
of the two.

Every builder is called as ``thought(hidden, logits, embedding_weight)`` with ``hidden`` ``(B, D)``, ``logits``
``(B, V)`` and the input-embedding matrix ``(V, D)``, and returns the ``(B, D)`` input embeddings of the next
position. The fusion is our reconstruction (the paper's text was not available): see
:class:`ContextPredictionFusion`.
"""

from __future__ import annotations

import torch
from torch import nn

from icml_agents.validation import at_least_float32, check_choice, check_int, check_real, check_tensor

MAX_TOP_K = 1_000_000


def _check_finite(value: torch.Tensor, name: str) -> None:
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite")


def _check_inputs(hidden, logits, embedding_weight) -> None:
    check_tensor(hidden, "hidden", ndim=2, floating=True)
    check_tensor(logits, "logits", ndim=2, floating=True)
    check_tensor(embedding_weight, "embedding_weight", ndim=2, floating=True)
    _check_finite(hidden, "hidden")
    if hidden.shape[0] != logits.shape[0]:
        raise ValueError(
            f"hidden and logits must have one row per sequence, got {hidden.shape[0]} and {logits.shape[0]}"
        )
    if logits.shape[1] != embedding_weight.shape[0]:
        raise ValueError(
            f"logits must have one column per row of embedding_weight ({embedding_weight.shape[0]}), "
            f"got {logits.shape[1]}"
        )
    if hidden.shape[1] != embedding_weight.shape[1]:
        raise ValueError(
            f"hidden must have the embedding width {embedding_weight.shape[1]}, got {hidden.shape[1]}"
        )


def _in_dtype_of(thought: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
    out = thought.to(embedding_weight.dtype)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"the thought overflows embedding_weight's dtype {embedding_weight.dtype}")
    return out


def _check_top_k(top_k) -> int | None:
    return None if top_k is None else check_int(top_k, "top_k", 1, MAX_TOP_K)


def soft_embedding(
    logits: torch.Tensor, embedding_weight: torch.Tensor, top_k: int | None = None, temperature: float = 1.0
) -> torch.Tensor:
    """``Σ_v p_v E[v]`` with ``p = softmax(logits / temperature)`` restricted to the ``top_k`` most likely tokens
    and renormalised over them (all tokens when ``top_k`` is None). With ``top_k=1`` this is the embedding of
    the greedy token. ``logits`` ``(B, V)``, ``embedding_weight`` ``(V, D)``; returns ``(B, D)``."""
    check_tensor(logits, "logits", ndim=2, floating=True)
    check_tensor(embedding_weight, "embedding_weight", ndim=2, floating=True)
    if logits.shape[1] != embedding_weight.shape[0]:
        raise ValueError(
            f"logits must have one column per row of embedding_weight ({embedding_weight.shape[0]}), "
            f"got {logits.shape[1]}"
        )
    top_k = _check_top_k(top_k)
    temperature = check_real(temperature, "temperature", "(0, inf)")
    _check_finite(logits, "logits")
    _check_finite(embedding_weight, "embedding_weight")
    dtype = torch.promote_types(torch.promote_types(logits.dtype, embedding_weight.dtype), torch.float32)
    z = logits.to(dtype) / temperature
    if not bool(torch.isfinite(z).all()):  # a tiny temperature overflows (or rounds to 0 in the dtype)
        raise ValueError(
            f"temperature {temperature} is too small for these logits: logits / temperature overflows"
        )
    weight = embedding_weight.to(dtype)  # float32 at least, float64 kept (its range does not fit float32)
    if top_k is not None and top_k < z.shape[1]:
        values, index = z.topk(top_k, dim=-1)
        probs = torch.softmax(values, dim=-1)
        return torch.einsum("bk,bkd->bd", probs, weight[index]).to(embedding_weight.dtype)
    return (torch.softmax(z, dim=-1) @ weight).to(embedding_weight.dtype)


class HiddenThought:
    """Coconut's continuous thought: the last-layer hidden state of the previous position, fed back as is."""

    def __call__(
        self, hidden: torch.Tensor, logits: torch.Tensor, embedding_weight: torch.Tensor
    ) -> torch.Tensor:
        _check_inputs(hidden, logits, embedding_weight)
        return _in_dtype_of(hidden, embedding_weight)

    def __repr__(self) -> str:
        return "HiddenThought()"


class SoftThought:
    """Soft-Thinking's concept token (training-free): the probability-weighted input embedding of the
    prediction, over the ``top_k`` most likely tokens, at ``temperature``."""

    def __init__(self, top_k: int | None = None, temperature: float = 1.0):
        self.top_k = _check_top_k(top_k)
        self.temperature = check_real(temperature, "temperature", "(0, inf)")

    def __call__(
        self, hidden: torch.Tensor, logits: torch.Tensor, embedding_weight: torch.Tensor
    ) -> torch.Tensor:
        _check_inputs(hidden, logits, embedding_weight)
        return soft_embedding(logits, embedding_weight, self.top_k, self.temperature)

    def __repr__(self) -> str:
        return f"SoftThought(top_k={self.top_k}, temperature={self.temperature})"


class ContextPredictionFusion(nn.Module):
    """LT-Tuning's Context-Prediction-Fusion (our reconstruction of the mechanism the abstract names).

    ``e_ctx = n̄ · u / ‖u‖`` with ``u = W · LayerNorm(h)`` (``W`` starts at the identity), rescaled to the mean
    norm ``n̄`` of the input embeddings, which removes the hidden-state / input-embedding scale mismatch of
    untied models; ``e_pred`` is the top-``k`` probability-weighted input embedding (:func:`soft_embedding`);
    the latent input is ``α · e_ctx + (1 − α) · e_pred`` with ``α = σ(a)``, a learned scalar (``gate="scalar"``)
    or a per-position gate from ``h`` (``gate="mlp"``). ``forward(..., alpha=a)`` fixes ``α`` (1 gives
    ``e_ctx``, 0 gives ``e_pred``).

    The fusion may be cast to any float dtype (``.to(torch.bfloat16)``): ``hidden`` is fed to it in its
    parameters' dtype, the norms and the mixture are computed in float32 at least, and the thought is
    returned in ``embedding_weight``'s dtype.
    """

    def __init__(
        self,
        hidden_size: int,
        top_k: int | None = 8,
        temperature: float = 1.0,
        gate: str = "scalar",
        alpha_init: float = 0.5,
    ):
        super().__init__()
        hidden_size = check_int(hidden_size, "hidden_size", 1, 1 << 20)
        self.top_k = _check_top_k(top_k)
        self.temperature = check_real(temperature, "temperature", "(0, inf)")
        self.gate = check_choice(gate, "gate", ("scalar", "mlp"))
        alpha_init = check_real(alpha_init, "alpha_init", "(0, 1)")
        self.norm = nn.LayerNorm(hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        with torch.no_grad():
            self.proj.weight.copy_(torch.eye(hidden_size))
            self.proj.bias.zero_()
        logit = float(torch.logit(torch.tensor(alpha_init)))
        if gate == "scalar":
            self.gate_logit = nn.Parameter(torch.tensor(logit))
        else:
            last = nn.Linear(16, 1)
            with torch.no_grad():
                last.weight.zero_()
                last.bias.fill_(logit)
            self.gate_mlp = nn.Sequential(nn.Linear(hidden_size, 16), nn.Tanh(), last)

    def alpha(self, hidden: torch.Tensor) -> torch.Tensor:
        """The gate ``α`` per row, ``(B, 1)``, in the fusion's parameter dtype (float32 at least)."""
        if self.gate == "scalar":
            return torch.sigmoid(at_least_float32(self.gate_logit)).expand(hidden.shape[0], 1)
        return torch.sigmoid(at_least_float32(self.gate_mlp(hidden.to(self.proj.weight.dtype))))

    def context(self, hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        """``e_ctx``: the projected hidden state at the mean input-embedding norm, ``(B, D)``, float32 at
        least (the LayerNorm and projection run in the fusion's parameter dtype, the rescaling in float32 at
        least)."""
        dtype = self.proj.weight.dtype
        u = at_least_float32(self.proj(self.norm(hidden.to(dtype))))
        if not bool(torch.isfinite(u).all()):
            raise ValueError(
                f"hidden is too large for the fusion: its LayerNorm and projection overflow {dtype}"
            )
        target = embedding_weight.detach().float().norm(dim=-1).mean()
        if not bool(torch.isfinite(target)):
            raise ValueError("embedding_weight must be finite with row norms that fit in float32")
        return u / u.norm(dim=-1, keepdim=True).clamp_min(1e-12) * target

    def forward(
        self,
        hidden: torch.Tensor,
        logits: torch.Tensor,
        embedding_weight: torch.Tensor,
        alpha: float | None = None,
    ) -> torch.Tensor:
        _check_inputs(hidden, logits, embedding_weight)
        if hidden.shape[1] != self.proj.in_features:
            raise ValueError(f"hidden must have width {self.proj.in_features}, got {hidden.shape[1]}")
        e_ctx = self.context(hidden, embedding_weight)
        e_pred = soft_embedding(logits, embedding_weight.float(), self.top_k, self.temperature)
        a = self.alpha(hidden) if alpha is None else check_real(alpha, "alpha", "[0, 1]")
        return _in_dtype_of(a * e_ctx + (1 - a) * e_pred, embedding_weight)
