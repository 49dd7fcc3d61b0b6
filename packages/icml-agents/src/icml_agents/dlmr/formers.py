"""Memory formers: learned queries read a context through a small transformer (our reconstruction of DLMR's
"latent memory construction", after VisMem's query builder and memory former; the paper's text was not
available).

:class:`MemoryFormer` is the shared block. The context (projected to the former's width), an optional
boundary state and the learned queries are concatenated, each with a learned segment embedding, and run
through a pre-LN transformer encoder in which context positions cannot attend to the queries (VisMem's
mask; the boundary state is both a context position and a shift of every query, as a query builder would
make the queries depend on it); the last positions, projected to the base model's embedding width and rescaled to ``target_norm``
(the base's mean input-embedding norm, so that the frozen model sees inputs of the scale it was trained on),
are the memory tokens. A prefix of ``n`` tokens is a valid smaller memory: training draws ``n`` so that the
router can choose how many tokens to insert.

* :class:`VisualMemory`: image-token hidden states and the boundary state -> visual memory tokens.
* :class:`ReasoningMemory`: a recurrent state of ``slots`` vectors, updated from the hidden states of each
  generated segment (:meth:`ReasoningMemory.write`), read out into memory tokens given the boundary state.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from icml_agents.validation import check_int, check_real, check_tensor


def _check_width(width: int, heads: int) -> None:
    if width % heads:
        raise ValueError(f"width must be divisible by heads, got width={width}, heads={heads}")


def _check_sizes(hidden, embed_dim, max_tokens) -> None:
    check_int(hidden, "hidden", 1, 65536)
    check_int(embed_dim, "embed_dim", 1, 65536)
    check_int(max_tokens, "max_tokens", 1, 4096)


def _as_input(x: torch.Tensor, like: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` in the dtype of the parameter ``like`` (a bf16 base feeds float32 memories), and finite there."""
    x = x.to(like.dtype)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite (in the memory's dtype {like.dtype})")
    return x


class _Overflow(ValueError):
    """Outputs that overflow their dtype; a memory raises it again naming its own arguments."""


def _finite_output(y: torch.Tensor, names: str) -> torch.Tensor:
    if not bool(torch.isfinite(y).all()):
        raise _Overflow(f"the memory tokens overflow {y.dtype}: {names} too large")
    return y


def _renamed(call, names: str) -> torch.Tensor:
    """``call()`` (a former's forward), its overflow reported under the caller's argument ``names``."""
    try:
        return call()
    except _Overflow as err:
        raise ValueError(f"{err} ({names} too large)") from None


def _check_context(former: MemoryFormer, context, context_mask, state, names=("context", "context_mask")):
    """A former's inputs, checked under the caller's argument names and cast to the former's dtype."""
    c, m = names
    context = check_tensor(context, c, ndim=3, floating=True)
    if context.shape[-1] != former.d_in or context.shape[0] < 1:
        raise ValueError(f"{c} must have shape (batch >= 1, N, {former.d_in}), got {tuple(context.shape)}")
    batch, length = context.shape[:2]
    context = _as_input(context, former.proj_in.weight, c)
    if context_mask is None:
        context_mask = torch.ones(batch, length, dtype=torch.bool, device=context.device)
    else:
        context_mask = check_tensor(context_mask, m, (batch, length)).bool()
    if state is not None:
        state = check_tensor(state, "state", (batch, former.d_in), floating=True)
        state = _as_input(state, former.proj_in.weight, "state")
    elif not bool(context_mask.any(dim=1).all()):  # nothing to attend to: NaN in torch's fast path
        raise ValueError(f"{m} must mark at least one position in every row when no state is given")
    return context, context_mask, state


class MemoryFormer(nn.Module):
    """Learned queries + a pre-LN transformer: ``context`` ``(B, N, d_in)`` (with an optional boolean
    ``context_mask`` ``(B, N)``, True for real positions) and an optional ``state`` ``(B, d_in)`` ->
    ``(B, n_tokens, d_out)``."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        n_tokens: int,
        *,
        width: int = 64,
        layers: int = 2,
        heads: int = 4,
        target_norm: float | None = None,
    ):
        super().__init__()
        self.d_in = check_int(d_in, "d_in", 1, 65536)
        self.d_out = check_int(d_out, "d_out", 1, 65536)
        self.n_tokens = check_int(n_tokens, "n_tokens", 1, 4096)
        self.width = check_int(width, "width", 1, 65536)
        self.layers = check_int(layers, "layers", 1, 64)
        self.heads = check_int(heads, "heads", 1, 256)
        _check_width(width, heads)
        self.target_norm = None if target_norm is None else check_real(target_norm, "target_norm", "(0, inf)")
        self.proj_in = nn.Linear(d_in, width)
        self.proj_state = nn.Linear(
            d_in, width
        )  # the boundary state also moves the queries (a query builder)
        self.queries = nn.Parameter(torch.randn(n_tokens, width) * 0.02)
        self.segment = nn.Parameter(torch.randn(3, width) * 0.02)  # context, state, query
        layer = nn.TransformerEncoderLayer(
            width, heads, 2 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.proj_out = nn.Linear(width, d_out)

    def config(self) -> dict[str, Any]:
        return {
            "d_in": self.d_in,
            "d_out": self.d_out,
            "n_tokens": self.n_tokens,
            "width": self.width,
            "layers": self.layers,
            "heads": self.heads,
            "target_norm": self.target_norm,
        }

    def encode(
        self,
        parts: list[torch.Tensor],
        masks: list[torch.Tensor],
        n_tokens: int | None,
        shift=None,
        queries=None,
    ) -> torch.Tensor:
        """Run the encoder on ``parts`` (already at the former's width) followed by the queries (the learned
        ones moved by ``shift`` ``(B, width)``, or the given ``queries`` ``(B, n, width)``), and return the
        first ``n_tokens`` query outputs at the former's width (after the final LayerNorm for learned queries;
        the raw residual stream for given ones, so that a recurrent state passes through unchanged when
        nothing is written)."""
        batch = parts[0].shape[0]
        if queries is None:
            n = self.n_tokens if n_tokens is None else check_int(n_tokens, "n_tokens", 1, self.n_tokens)
            q = (self.queries + self.segment[2]).expand(batch, -1, -1)
            if shift is not None:
                q = q + shift[:, None]
        else:
            q, n = queries, queries.shape[1]
        x = torch.cat([*parts, q], dim=1)
        keep = torch.cat([*masks, torch.ones(batch, q.shape[1], dtype=torch.bool, device=x.device)], dim=1)
        n_ctx = x.shape[1] - q.shape[1]
        # context positions cannot attend to the queries; queries attend to everything (VisMem's mask)
        block = torch.zeros(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device)
        block[:n_ctx, n_ctx:] = True
        h = self.encoder(x, mask=block, src_key_padding_mask=~keep)[:, n_ctx : n_ctx + n]
        return h if queries is not None else self.norm(h)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        y = self.proj_out(h)
        if self.target_norm is not None:
            y = y * (self.target_norm / y.norm(dim=-1, keepdim=True).clamp_min(1e-6))
        return y

    def forward(self, context, context_mask=None, state=None, n_tokens: int | None = None) -> torch.Tensor:
        context, context_mask, state = _check_context(self, context, context_mask, state)
        batch = context.shape[0]
        parts = [self.proj_in(context) + self.segment[0]]
        masks = [context_mask]
        shift = None
        if state is not None:
            parts.append(self.proj_in(state)[:, None] + self.segment[1])
            masks.append(torch.ones(batch, 1, dtype=torch.bool, device=context.device))
            shift = self.proj_state(state)
        out = self.project(self.encode(parts, masks, n_tokens, shift))
        return _finite_output(out, "context, state or target_norm")


class VisualMemory(nn.Module):
    """Visual memory: image-token hidden states ``(B, N, hidden)`` and the boundary state ``(B, hidden)`` ->
    ``(B, n, embed_dim)`` tokens for the base's input embeddings."""

    def __init__(self, hidden: int, embed_dim: int, max_tokens: int, **former: Any):
        super().__init__()
        _check_sizes(hidden, embed_dim, max_tokens)
        self.former = MemoryFormer(hidden, embed_dim, max_tokens, **former)

    @property
    def max_tokens(self) -> int:
        return self.former.n_tokens

    def config(self) -> dict[str, Any]:
        return self.former.config()

    def forward(self, image_hidden, state, image_mask=None, n_tokens: int | None = None) -> torch.Tensor:
        _check_context(self.former, image_hidden, image_mask, state, ("image_hidden", "image_mask"))
        return _renamed(
            lambda: self.former(image_hidden, image_mask, state, n_tokens),
            "image_hidden, state or target_norm",
        )


class ReasoningMemory(nn.Module):
    """Reasoning memory: a recurrent state of ``slots`` vectors. :meth:`write` summarizes a generated
    segment's hidden states into one vector (a former with one learned query) and pushes it into the state,
    first in, first out: the oldest summary drops out, so the state holds the last ``slots`` segments.
    :meth:`forward` reads ``n`` memory tokens out of the state (with recency embeddings) given the boundary
    state."""

    def __init__(self, hidden: int, embed_dim: int, max_tokens: int, slots: int = 8, **former: Any):
        super().__init__()
        _check_sizes(hidden, embed_dim, max_tokens)
        self.slots = check_int(slots, "slots", 1, 4096)
        width = check_int(former.get("width", 64), "width", 1, 65536)
        writer = {k: v for k, v in former.items() if k != "target_norm"}
        self.writer = MemoryFormer(hidden, width, 1, **writer)
        self.reader = MemoryFormer(width, embed_dim, max_tokens, **former)
        self.reader_state = nn.Linear(hidden, width)  # the boundary state at the reader's width
        self.initial = nn.Parameter(torch.randn(self.slots, width) * 0.02)
        self.slot_position = nn.Parameter(torch.randn(self.slots, width) * 0.02)

    @property
    def max_tokens(self) -> int:
        return self.reader.n_tokens

    def config(self) -> dict[str, Any]:
        cfg = self.reader.config()
        return {**cfg, "d_in": self.writer.d_in, "slots": self.slots}

    def init_state(self, batch: int) -> torch.Tensor:
        """The empty memory ``(batch, slots, width)``."""
        check_int(batch, "batch", 1, 2**31)
        return self.initial.expand(batch, -1, -1)

    def _check_slots(self, slots) -> torch.Tensor:
        slots = check_tensor(slots, "slots", ndim=3, floating=True)
        if tuple(slots.shape[1:]) != (self.slots, self.reader.width) or slots.shape[0] < 1:
            raise ValueError(
                f"slots must have shape (batch >= 1, {self.slots}, {self.reader.width}), got {tuple(slots.shape)}"
            )
        return _as_input(slots, self.initial, "slots")

    def write(self, slots, segment_hidden, segment_mask=None) -> torch.Tensor:
        """The state after reading one segment ``(B, T, hidden)``; rows whose mask is all False keep their
        state."""
        slots = self._check_slots(slots)
        w = self.writer
        seg = check_tensor(segment_hidden, "segment_hidden", ndim=3, floating=True)
        if seg.shape[0] != slots.shape[0] or seg.shape[-1] != w.d_in:
            raise ValueError(
                f"segment_hidden must have shape ({slots.shape[0]}, T, {w.d_in}), got {tuple(seg.shape)}"
            )
        batch, length = seg.shape[:2]
        if segment_mask is None:
            segment_mask = torch.ones(batch, length, dtype=torch.bool, device=seg.device)
        else:
            segment_mask = check_tensor(segment_mask, "segment_mask", (batch, length)).bool()
        seg = _as_input(seg, w.proj_in.weight, "segment_hidden")
        empty = ~segment_mask.any(dim=1)
        # (B, 1, width): one learned query over the segment; an empty row reads its padding (a former
        # needs something to attend to) and keeps its state below
        summary = _renamed(lambda: w(seg, segment_mask | empty[:, None]), "segment_hidden")
        new = torch.cat([slots[:, 1:], summary], dim=1)  # first in, first out
        return torch.where(empty[:, None, None], slots, new)

    def forward(self, slots, state, n_tokens: int | None = None) -> torch.Tensor:
        slots = self._check_slots(slots)
        r = self.reader
        state = check_tensor(state, "state", (slots.shape[0], self.writer.d_in), floating=True)
        state = _as_input(state, self.reader_state.weight, "state")
        read = _finite_output(self.reader_state(state), "state")
        return _renamed(
            lambda: r(slots + self.slot_position, None, read, n_tokens), "slots, state or target_norm"
        )


def _check_path(path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return Path(path)


_SAVED_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def save_memories(path: str | os.PathLike[str], **modules: nn.Module) -> Path:
    """Save formers and routers (each with a ``config()``) to one file, atomically: the file is written
    next to ``path`` and moved into place, so a failure leaves ``path`` as it was. Each module's parameter
    dtype is recorded (its parameters must share one) and restored by :func:`load_memories`."""
    from icml_agents.dlmr.router import Router

    target = _check_path(path)
    if target.is_dir():
        raise ValueError(f"path must name a file, not a folder, got {str(path)!r}")
    if not target.parent.is_dir():
        raise ValueError(f"path must be in an existing folder, got {str(path)!r}")
    if not modules:
        raise ValueError("modules must name at least one module to save")
    payload = {}
    for name, m in modules.items():
        # these classes exactly: load_memories rebuilds them by name
        if type(m) not in (VisualMemory, ReasoningMemory, Router):
            raise TypeError(
                f"{name} must be a VisualMemory, ReasoningMemory or Router, got {type(m).__name__}"
            )
        dtypes = {p.dtype for p in m.parameters()}
        if len(dtypes) > 1:
            raise ValueError(
                f"{name} must have its parameters in one dtype, got {sorted(str(d) for d in dtypes)}"
            )
        dtype = str(dtypes.pop() if dtypes else torch.float32).removeprefix("torch.")
        if dtype not in _SAVED_DTYPES:
            raise ValueError(f"{name} must have parameters in one of {sorted(_SAVED_DTYPES)}, got {dtype}")
        payload[name] = {
            "class": type(m).__name__,
            "config": m.config(),  # type: ignore[operator]
            "state": m.state_dict(),
            "dtype": dtype,
        }
    tmp = target.with_name(target.name + ".tmp")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def load_memories(path: str | os.PathLike[str]) -> dict[str, nn.Module]:
    """Load what :func:`save_memories` wrote: ``{name: module}`` in eval mode, each in the parameter dtype
    it was saved in (float32 for files written before the dtype was recorded)."""
    from icml_agents.dlmr.router import Router

    classes: dict[str, Any] = {
        "VisualMemory": VisualMemory,
        "ReasoningMemory": ReasoningMemory,
        "Router": Router,
    }
    target = _check_path(path)
    if not target.is_file():
        raise ValueError(f"path must be an existing file written by save_memories, got {str(path)!r}")
    out: dict[str, nn.Module] = {}
    try:
        payload = torch.load(target, weights_only=True, map_location="cpu")  # saved on a GPU too
        for name, entry in payload.items():
            cfg = dict(entry["config"])
            cls = classes[entry["class"]]
            if cls is Router:
                module: nn.Module = Router(**cfg)
            else:
                d_in, d_out, n = cfg.pop("d_in"), cfg.pop("d_out"), cfg.pop("n_tokens")
                module = cls(d_in, d_out, n, **cfg)
            dtype = _SAVED_DTYPES[entry.get("dtype", "float32")]
            module.to(dtype).load_state_dict(entry["state"])
            out[name] = module.eval()
    except (
        pickle.UnpicklingError,
        EOFError,
        RuntimeError,
        LookupError,
        AttributeError,
        TypeError,
        ValueError,
    ) as err:
        raise ValueError(
            f"path is not a file written by save_memories: {str(path)!r} ({type(err).__name__}: {err})"
        ) from None
    return out
