"""A one-layer, attention-only transformer with one-hot token and position inputs, with named hook points.

Each input is the concatenation of a one-hot token and a one-hot position (dimension ``n_states + context``,
not learned). Head ``h`` has ``W_Q, W_K, W_V`` of shape ``(d_in, d_head)`` and ``W_O`` of shape
``(d_head, n_states)``; the logits are the sum of the heads' outputs (no residual path, no MLP, no norm),
so every piece of information about the past reaches the output through attention. Small initial weights
(``init_scale``) give the plateaus of the stage-wise dynamics.

Hook points follow the names of TransformerLens and of :mod:`icml_interp.hooks` (the interpretability core):
``hook_embed``, ``blocks.0.attn.hook_q/k/v`` ``(batch, seq, heads, d_head)``, ``blocks.0.attn.hook_attn_scores``
and ``blocks.0.attn.hook_pattern`` ``(batch, heads, seq_q, seq_k)``, ``blocks.0.attn.hook_z`` and
``blocks.0.hook_attn_out`` (the logits, ``(batch, seq, n_states)``). Each is an identity module, so plain torch
forward hooks on ``model.get_submodule(name)`` read and replace them; :meth:`run_with_cache` and
:meth:`run_with_hooks` do it for a list of names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import ExitStack

import torch
from torch import nn

from icml_theory.validation import check_int, check_real, check_seed


class HookPoint(nn.Identity):
    """An identity module whose name in the model is a hook name."""


class _Attention(nn.Module):
    def __init__(self, d_in: int, d_head: int, heads: int, n_out: int):
        super().__init__()
        self.W_Q = nn.Parameter(torch.zeros(heads, d_in, d_head))
        self.W_K = nn.Parameter(torch.zeros(heads, d_in, d_head))
        self.W_V = nn.Parameter(torch.zeros(heads, d_in, d_head))
        self.W_O = nn.Parameter(torch.zeros(heads, d_head, n_out))
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.hook_q(torch.einsum("bsd,hde->bshe", x, self.W_Q))
        k = self.hook_k(torch.einsum("bsd,hde->bshe", x, self.W_K))
        v = self.hook_v(torch.einsum("bsd,hde->bshe", x, self.W_V))
        seq = x.shape[1]
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(q.shape[-1])
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        scores = self.hook_attn_scores(scores.masked_fill(~causal, float("-inf")))
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
        z = self.hook_z(torch.einsum("bhqk,bkhe->bqhe", pattern, v))
        return torch.einsum("bqhe,heo->bqo", z, self.W_O)


class _Block(nn.Module):
    def __init__(self, attn: _Attention):
        super().__init__()
        self.attn = attn
        self.hook_attn_out = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_attn_out(self.attn(x))


HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]


class AttentionOnlyTransformer(nn.Module):
    """One attention layer with ``heads`` heads on one-hot tokens and positions; returns next-token logits.

    ``d_head`` defaults to ``n_states + context`` (the input dimension: every position pattern and value map
    is reachable). Weights start i.i.d. normal with standard deviation ``init_scale`` (drawn with ``seed``).
    """

    def __init__(
        self,
        n_states: int,
        context: int,
        heads: int,
        d_head: int | None = None,
        init_scale: float = 0.05,
        seed: int = 0,
    ):
        super().__init__()
        self.n_states = check_int(n_states, "n_states", minimum=2)
        self.context = check_int(context, "context", minimum=1)
        self.heads = check_int(heads, "heads", minimum=1)
        self.d_in = self.n_states + self.context
        self.d_head = self.d_in if d_head is None else check_int(d_head, "d_head", minimum=1)
        self.init_scale = check_real(init_scale, "init_scale", "(0, inf)")
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([_Block(_Attention(self.d_in, self.d_head, self.heads, self.n_states))])
        generator = torch.Generator().manual_seed(check_seed(seed))
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * self.init_scale)

    @property
    def attn(self) -> _Attention:
        return self.blocks[0].attn  # type: ignore[return-value]

    def embed(self, tokens) -> torch.Tensor:
        """One-hot token and position, concatenated: ``(batch, seq, n_states + context)``."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(
                f"tokens must be an int64 tensor of shape (batch, seq), got {type(tokens).__name__}"
            )
        if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.context:
            raise ValueError(
                f"tokens must have shape (batch, seq) with 1 <= seq <= context = {self.context}, "
                f"got {tuple(tokens.shape)}"
            )
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.n_states):
            raise ValueError(
                f"tokens must lie in [0, {self.n_states}), got {int(tokens.min())}..{int(tokens.max())}"
            )
        seq = tokens.shape[1]
        dtype = self.attn.W_Q.dtype
        tok = nn.functional.one_hot(tokens.long(), self.n_states).to(dtype)
        pos = torch.eye(self.context, dtype=dtype, device=tokens.device)[:seq].expand(tokens.shape[0], -1, -1)
        return torch.cat([tok, pos], dim=-1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(batch, seq, n_states)``: position ``q`` predicts token ``q + 1``."""
        return self.blocks[0](self.hook_embed(self.embed(tokens)))

    # ------------------------------------------------------------------ hooks
    @property
    def hook_names(self) -> list[str]:
        """Every hook name, in the order of the forward pass."""
        return [name for name, m in self.named_modules() if isinstance(m, HookPoint)]

    def _points(self, names: Iterable[str] | str | None, argument: str) -> list[str]:
        known = self.hook_names
        if names is None:
            return known
        wanted = [names] if isinstance(names, str) else list(names)
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise ValueError(f"{argument} holds unknown hook names {unknown}; known: {known}")
        return wanted

    def run_with_hooks(
        self, tokens: torch.Tensor, fwd_hooks: Iterable[tuple[str, HookFn]] = ()
    ) -> torch.Tensor:
        """The logits with ``fn(activation, name)`` called at each named point; a returned tensor replaces
        the activation. The hooks are removed afterwards, also when the forward pass raises."""
        with ExitStack() as stack:
            for name, fn in fwd_hooks:
                (point,) = self._points(name, "fwd_hooks")
                if not callable(fn):
                    raise TypeError(f"the hook for {name!r} must be callable, got {type(fn).__name__}")

                def hook(module, args, output, fn=fn, name=point):
                    return fn(output, name)

                stack.callback(self.get_submodule(point).register_forward_hook(hook).remove)
            return self(tokens)

    def run_with_cache(
        self, tokens: torch.Tensor, names_filter: Iterable[str] | str | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The logits and the activations at ``names_filter`` (all hook points when None), detached."""
        cache: dict[str, torch.Tensor] = {}

        def save(activation: torch.Tensor, name: str) -> None:
            cache[name] = activation.detach()

        logits = self.run_with_hooks(tokens, [(n, save) for n in self._points(names_filter, "names_filter")])
        return logits, cache


def lag_mass(pattern: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Attention mass per head and lag, ``(heads, seq)``: column ``j`` is lag ``j + 1`` (the query position
    itself is lag 1: position ``q`` predicts token ``q + 1`` from token ``q + 1 - lag``), averaged over the
    batch and the query positions ``q >= start``. Each row sums to 1 (causal attention puts no mass beyond
    the sequence start)."""
    if not isinstance(pattern, torch.Tensor) or pattern.ndim != 4 or pattern.shape[-1] != pattern.shape[-2]:
        raise ValueError(
            "pattern must be an attention pattern tensor of shape (batch, heads, seq, seq), got "
            f"{tuple(pattern.shape) if isinstance(pattern, torch.Tensor) else type(pattern).__name__}"
        )
    seq = pattern.shape[-1]
    start = check_int(start, "start", minimum=0, maximum=seq - 1)
    queries = torch.arange(start, seq, device=pattern.device)
    lags = torch.arange(seq, device=pattern.device)
    keys = queries[:, None] - lags[None, :]  # (queries, lags): key position of each lag
    valid = keys >= 0
    picked = pattern[:, :, queries[:, None], keys.clamp(min=0)] * valid  # (batch, heads, queries, lags)
    return picked.mean(dim=(0, 2))
