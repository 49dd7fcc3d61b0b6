"""The three attention operators of EchoAttention on ``(B, H, N, D)`` queries, keys and values of a video.

A video sequence holds ``text_tokens`` leading text tokens, then ``frames`` frames of ``tokens_per_frame``
tokens each, frame-major (:class:`VideoLayout`); diffusers' video transformers flatten their latent grid
``(F, H, W)`` this way. The operators:

- dense attention (:func:`dense_attention`, ``scaled_dot_product_attention``);
- the sparse operator (:func:`select_key_blocks`, :func:`sparse_attention`): key blocks of ``block_size``
  tokens per query block chosen by top-k (a fraction ``density`` of the key blocks) or top-p (the smallest
  set holding ``top_p`` of the pooled attention mass) from mean-pooled query and key blocks, always keeping
  the key blocks of the query block's own frame and ``neighbor_frames`` frames on each side, and every text
  block; text query rows attend densely. It runs :func:`icml_kernels.block_sparse_attention` (Triton on
  CUDA, its torch reference on CPU);
- the Echo operator (:func:`echo_attention`): only the *anchor* frames (every ``anchor_stride``-th frame,
  starting at frame 0) are attended exactly; every other query frame ``i`` with anchor ``r`` (the nearest
  anchor at or before it) is built from the anchor's partial outputs ``U_{r j} = P_{r j} V_j``, one per key
  group ``j`` (each frame, and the text as one more group), and the mean value ``v̄_j`` of each group::

      O_i ≈ Σ_j a_{ij} · U_{r, κ(i, j)} + b_{ij} · v̄_j

  with ``κ(i, j) = j`` ("same key frame" variant) or ``κ(i, j) = clamp(j + r − i)`` ("same temporal
  offset": frame ``i`` looking at frame ``j`` is taken to look like the anchor looking at the frame as far
  from it). Calibrated coefficients come from :class:`~icml_generative.echo_attention.EchoCalibrator`
  (closed-form least squares); ``a = 1, b = 0`` copies the anchor's output, exact when frame ``i``'s
  queries equal the anchor's. It runs :func:`icml_kernels.echo_combine`.

The paper's text was not available: the Echo operator above (anchor partial outputs, linear calibration,
the two variants) is our reconstruction from the abstract, labelled so in the docs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from icml_generative.validation import (
    check_choice,
    check_instance,
    check_int,
    check_ints,
    check_number,
    check_tensor,
)

VARIANTS = ("same_key", "same_offset")
MAX_TOKENS = 1 << 22  # far beyond any video DiT's sequence (Wan 2.1 at 720p: 75,600 tokens)


@dataclass(frozen=True)
class VideoLayout:
    """How a sequence of ``text_tokens + frames * tokens_per_frame`` tokens is laid out (text first)."""

    frames: int
    tokens_per_frame: int
    text_tokens: int = 0

    def __post_init__(self) -> None:
        check_int(self.frames, "frames", 1, MAX_TOKENS)
        check_int(self.tokens_per_frame, "tokens_per_frame", 1, MAX_TOKENS)
        check_int(self.text_tokens, "text_tokens", 0, MAX_TOKENS)

    @property
    def video_tokens(self) -> int:
        return self.frames * self.tokens_per_frame

    @property
    def num_tokens(self) -> int:
        return self.text_tokens + self.video_tokens

    @property
    def key_groups(self) -> int:
        """Key groups of the Echo operator: the frames, plus the text as one group when there is text."""
        return self.frames + (1 if self.text_tokens else 0)

    def check_qkv(self, q: object, k: object, v: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q, k, v`` shaped ``(B, H, N, D)`` with ``N == num_tokens``, non-empty and finite, one floating dtype
        and device."""
        q, k, v = _check_attention_inputs(q, k, v, same_shape=True)
        if q.shape[2] != self.num_tokens:
            raise ValueError(
                f"q, k and v hold {q.shape[2]} tokens, but the layout has {self.num_tokens} "
                f"({self.text_tokens} text + {self.frames} frames x {self.tokens_per_frame} tokens); the token "
                "count must divide into frames of tokens_per_frame tokens"
            )
        return q, k, v

    @classmethod
    def from_tokens(cls, num_tokens: int, frames: int, text_tokens: int = 0) -> VideoLayout:
        """The layout of ``num_tokens`` tokens in ``frames`` equal frames after ``text_tokens`` text tokens."""
        check_int(num_tokens, "num_tokens", 1, MAX_TOKENS)
        check_int(frames, "frames", 1, MAX_TOKENS)
        check_int(text_tokens, "text_tokens", 0, num_tokens - 1)
        video = num_tokens - text_tokens
        if video % frames:
            raise ValueError(
                f"the {video} video tokens (num_tokens={num_tokens} minus text_tokens={text_tokens}) do not "
                f"divide into frames={frames} frames of equal size"
            )
        return cls(frames, video // frames, text_tokens)


def _check_heads(x: object, name: str) -> torch.Tensor:
    """A non-empty, finite, floating ``(B, H, N, D)`` tensor."""
    check_tensor(x, name, ("B", "H", "N", "D"), floating=True, finite=True)
    assert isinstance(x, torch.Tensor)
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    return x


def _check_attention_inputs(
    q: object, k: object, v: object, *, same_shape: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q (B, H, Nq, D)``, ``k (B, H, Nk, D)``, ``v (B, H, Nk, Dv)`` (one shape if ``same_shape``): one
    floating dtype and device."""
    q, k, v = _check_heads(q, "q"), _check_heads(k, "k"), _check_heads(v, "v")
    if same_shape and (q.shape != k.shape or k.shape != v.shape):
        raise ValueError(
            f"q, k and v must have the same shape (B, H, N, D), got {tuple(q.shape)}, {tuple(k.shape)} "
            f"and {tuple(v.shape)}"
        )
    if q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3] or k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"q, k and v must be shaped (B, H, Nq, D), (B, H, Nk, D) and (B, H, Nk, Dv), got {tuple(q.shape)}, "
            f"{tuple(k.shape)} and {tuple(v.shape)}"
        )
    if q.dtype != k.dtype or k.dtype != v.dtype or q.device != k.device or k.device != v.device:
        raise TypeError("q, k and v must share one dtype and one device")
    return q, k, v


def _check_overflow(x: torch.Tensor, what: str) -> torch.Tensor:
    """``x``, computed from finite inputs, must be finite: else the inputs were too large for its dtype."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"q, k and v are too large: {what} overflow {x.dtype}")
    return x


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full attention ``softmax(q kᵀ / √D) v`` (``scaled_dot_product_attention``); ``q (B, H, Nq, D)``,
    ``k (B, H, Nk, D)``, ``v (B, H, Nk, Dv)``."""
    _check_attention_inputs(q, k, v)
    return _check_overflow(F.scaled_dot_product_attention(q, k, v), "the attention scores")


# ----------------------------------------------------------------------------------------- sparse


def _block_frames(layout: VideoLayout, block_size: int) -> torch.Tensor:
    """The frame of each block of ``block_size`` tokens (``-1`` for a block that holds any text token); a
    video block straddling two frames belongs to the frame of its middle token."""
    n = layout.num_tokens
    starts = torch.arange(0, n, block_size)
    mids = torch.minimum(starts + block_size // 2, torch.tensor(n - 1))
    frame = (mids - layout.text_tokens).div(layout.tokens_per_frame, rounding_mode="floor")
    return torch.where(starts < layout.text_tokens, torch.tensor(-1), frame)


def forced_blocks(layout: VideoLayout, block_size: int, neighbor_frames: int) -> torch.Tensor:
    """``(NB, NB)`` bool: key blocks every query block keeps (own and neighbouring frames, text; text query
    blocks keep everything)."""
    frame = _block_frames(layout, block_size)
    text = frame < 0
    near = (frame[:, None] - frame[None, :]).abs() <= neighbor_frames
    return near | text[None, :] | text[:, None]


def pooled_block_scores(q: torch.Tensor, k: torch.Tensor, block_size: int) -> torch.Tensor:
    """``(B, H, NB, NB)`` softmax over key blocks of the mean-pooled block scores ``q̄ k̄ᵀ / √D`` (in float32
    at least)."""
    q, k, _ = _check_attention_inputs(q, k, k, same_shape=True)
    check_int(block_size, "block_size", 1, MAX_TOKENS)
    n = q.shape[2]
    nb = math.ceil(n / block_size)
    pad = nb * block_size - n
    dtype = torch.promote_types(q.dtype, torch.float32)

    def pool(x: torch.Tensor) -> torch.Tensor:
        counts = torch.full((nb,), float(block_size), device=x.device, dtype=dtype)
        x = x.to(dtype)
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
            counts[-1] = block_size - pad
        return (x.unflatten(2, (nb, block_size)) / counts[:, None, None]).sum(3)  # divided first: no overflow

    scores = pool(q) @ pool(k).transpose(-1, -2) / math.sqrt(q.shape[-1])
    return _check_overflow(scores, "the pooled block scores").softmax(-1)


def select_key_blocks(
    q: torch.Tensor,
    k: torch.Tensor,
    layout: VideoLayout,
    *,
    block_size: int = 64,
    density: float | None = None,
    top_p: float | None = None,
    neighbor_frames: int = 1,
) -> torch.Tensor:
    """The key blocks each query block attends to, ``(B, H, NB, MAXK)`` int64 padded with ``-1``.

    Exactly one of ``density`` (top-k: ``ceil(density · NB)`` blocks per query block, the forced ones
    counted, at least the forced ones) and ``top_p`` (the forced blocks plus the fewest others, highest
    pooled score first, whose pooled mass reaches ``top_p``) must be given, each in (0, 1].
    """
    check_instance(layout, "layout", VideoLayout)
    layout.check_qkv(q, k, k)
    check_int(block_size, "block_size", 1, MAX_TOKENS)
    check_int(neighbor_frames, "neighbor_frames", 0, MAX_TOKENS)
    if (density is None) == (top_p is None):
        raise ValueError(f"give exactly one of density and top_p, got density={density!r}, top_p={top_p!r}")
    scores = pooled_block_scores(q, k, block_size)
    nb = scores.shape[-1]
    forced = forced_blocks(layout, block_size, neighbor_frames).to(scores.device)
    ranked = scores.masked_fill(forced, 2.0)  # forced blocks rank first (scores are <= 1)
    order = ranked.argsort(dim=-1, descending=True, stable=True)
    n_forced = forced.sum(-1)  # (NB,)
    if density is not None:
        d = check_number(density, "density", above=0, maximum=1)
        count = torch.clamp(n_forced, min=math.ceil(d * nb)).expand(scores.shape[:-1])
    else:
        p = check_number(top_p, "top_p", above=0, maximum=1)
        mass = scores.gather(-1, order).cumsum(-1)
        count = torch.maximum(
            (mass < p - 1e-12).sum(-1) + 1, n_forced.to(mass.device).expand(mass.shape[:-1])
        )
        count = count.clamp(max=nb)
    keep = torch.arange(nb, device=scores.device) < count[..., None]
    index = torch.where(keep, order, torch.full_like(order, -1))
    width = int(count.max())
    return index[..., :width]


def kept_fraction(block_index: torch.Tensor, layout: VideoLayout, block_size: int) -> float:
    """The fraction of the ``N × N`` query–key pairs a block index keeps (tokens, ragged last block counted)."""
    n = layout.num_tokens
    nb = math.ceil(n / block_size)
    sizes = torch.full((nb + 1,), float(block_size), device=block_index.device)
    sizes[nb - 1] = n - (nb - 1) * block_size
    sizes[nb] = 0.0  # the padding index -1 maps here
    keys = sizes[block_index.clamp(min=-1) % (nb + 1)].sum(-1)  # (..., NB) kept keys per query block
    pairs = (keys * sizes[:nb]).sum(-1)
    return float(pairs.mean()) / (n * n)


def sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: VideoLayout,
    *,
    block_size: int = 64,
    density: float | None = None,
    top_p: float | None = None,
    neighbor_frames: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-sparse attention over the key blocks :func:`select_key_blocks` keeps; returns ``(out, index)``."""
    from icml_kernels import block_sparse_attention

    check_instance(layout, "layout", VideoLayout)
    layout.check_qkv(q, k, v)
    index = select_key_blocks(
        q, k, layout, block_size=block_size, density=density, top_p=top_p, neighbor_frames=neighbor_frames
    )
    out = block_sparse_attention(q, k, v, index, block_size=block_size)
    assert isinstance(out, torch.Tensor)  # no lse asked for
    return out, index


# ------------------------------------------------------------------------------------------- echo


def anchor_frames(frames: int, anchor_stride: int) -> list[int]:
    """The anchor frames: ``0, m, 2m, ...`` for ``anchor_stride = m``."""
    check_int(frames, "frames", 1, MAX_TOKENS)
    check_int(anchor_stride, "anchor_stride", 1, MAX_TOKENS)
    return list(range(0, frames, anchor_stride))


def echo_tables(layout: VideoLayout, anchor_stride: int, variants: list[str] | tuple[str, ...]) -> dict:
    """Index tables of the Echo operator for ``H = len(variants)`` heads.

    Returns ``{"anchors": [r...], "targets": [i...] (the non-anchor frames), "anchor": (H, Q) int64 (the
    position of each target's anchor in "anchors"), "key": (H, Q, G) int64}`` where ``key[h, q, j]`` is the
    key group of the anchor's partial output that stands in for key group ``j`` (the text group, last, maps
    to itself).
    """
    for i, variant in enumerate(variants):
        check_choice(variant, f"variants[{i}]", VARIANTS)
    anchors = anchor_frames(layout.frames, anchor_stride)
    targets = [i for i in range(layout.frames) if i % anchor_stride]
    g = layout.key_groups
    h = len(variants)
    anchor = torch.tensor([i // anchor_stride for i in targets], dtype=torch.int64).expand(h, -1).clone()
    key = torch.empty(h, len(targets), g, dtype=torch.int64)
    for head, variant in enumerate(variants):
        for qi, i in enumerate(targets):
            r = anchors[i // anchor_stride]
            for j in range(g):
                if j >= layout.frames or variant == "same_key":
                    key[head, qi, j] = j
                else:
                    key[head, qi, j] = min(max(j + r - i, 0), layout.frames - 1)
    return {"anchors": anchors, "targets": targets, "anchor": anchor, "key": key}


def _group_ids(layout: VideoLayout, device: torch.device) -> torch.Tensor:
    """The key group of every token: text ``G - 1`` (when there is text), frame ``f`` → ``f``."""
    frame = torch.arange(layout.video_tokens, device=device) // layout.tokens_per_frame
    text = torch.full((layout.text_tokens,), layout.frames, device=device)
    return torch.cat([text, frame])


def _frame_rows(x: torch.Tensor, layout: VideoLayout, frames: list[int]) -> torch.Tensor:
    """``x[:, :, tokens of each frame in frames]`` as ``(B, H, len(frames), S, ...)``."""
    video = x[:, :, layout.text_tokens :].unflatten(2, (layout.frames, layout.tokens_per_frame))
    return video[:, :, frames]


def anchor_partials(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: VideoLayout, anchors: list[int]
) -> torch.Tensor:
    """``U (B, H, R, G, S, D)``: each anchor frame's exact attention output split by key group,
    ``U[:, :, r, j] = P_{r j} V_j`` (``Σ_j U[:, :, r, j]`` is the anchor's output). Computed in float32 at
    least."""
    check_instance(layout, "layout", VideoLayout)
    layout.check_qkv(q, k, v)
    check_ints(anchors, "anchors", 0, layout.frames - 1)
    dtype = torch.promote_types(q.dtype, torch.float32)
    t, f, s = layout.text_tokens, layout.frames, layout.tokens_per_frame
    kt = k.to(dtype).transpose(-1, -2)
    vv = v[:, :, t:].to(dtype).unflatten(2, (f, s))  # (B, H, F, S, D)
    parts = []
    for r in anchors:  # one anchor at a time: its (B, H, S, N) probabilities are the largest tensor
        rows = q[:, :, t + r * s : t + (r + 1) * s].to(dtype)
        p = (rows @ kt / math.sqrt(q.shape[-1])).softmax(-1)  # (B, H, S, N)
        video = torch.einsum("bhsjt,bhjtd->bhjsd", p[..., t:].unflatten(-1, (f, s)), vv)  # (B, H, F, S, D)
        if t:
            video = torch.cat([video, (p[..., :t] @ v[:, :, :t].to(dtype))[:, :, None]], 2)
        parts.append(video)
    return _check_overflow(torch.stack(parts, 2), "the anchor frames' attention scores")


def group_means(v: torch.Tensor, layout: VideoLayout) -> torch.Tensor:
    """``v̄ (B, H, G, D)``: the mean value vector of each key group (in float32 at least)."""
    check_instance(layout, "layout", VideoLayout)
    _check_heads(v, "v")
    if v.shape[2] != layout.num_tokens:
        raise ValueError(f"v holds {v.shape[2]} tokens, but the layout has {layout.num_tokens}")
    dtype = torch.promote_types(v.dtype, torch.float32)
    groups = F.one_hot(_group_ids(layout, v.device), layout.key_groups).to(dtype)
    weights = groups / groups.sum(0)  # each group's tokens weighted 1 / size: a mean that cannot overflow
    return torch.einsum("bhnd,ng->bhgd", v.to(dtype), weights)


def echo_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: VideoLayout,
    *,
    anchor_stride: int = 2,
    variants: list[str] | tuple[str, ...] | None = None,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
) -> torch.Tensor:
    """The Echo operator (module docstring): anchors exact, other frames echoed from their anchor.

    ``variants``: one per head (default all ``"same_key"``); ``a, b``: ``(H, Q, G)`` coefficients for the
    ``Q`` non-anchor frames (default ``a = 1, b = 0``, the anchor's output copied). Text query rows are
    attended densely. Returns ``(B, H, N, D)`` in ``q``'s dtype.
    """
    from icml_kernels import echo_combine

    check_instance(layout, "layout", VideoLayout)
    layout.check_qkv(q, k, v)
    h = q.shape[1]
    if variants is not None and not isinstance(variants, list | tuple):
        raise TypeError(
            f"variants must be a list of variant names, one per head, got {type(variants).__name__}"
        )
    variants = ["same_key"] * h if variants is None else list(variants)
    if len(variants) != h:
        raise ValueError(f"variants must name one variant per head ({h}), got {len(variants)}")
    tables = echo_tables(layout, anchor_stride, variants)
    anchors, targets = tables["anchors"], tables["targets"]
    shape = (h, len(targets), layout.key_groups)
    a = _coefficients(a, "a", shape, 1.0, q)
    b = _coefficients(b, "b", shape, 0.0, q)
    u = anchor_partials(q, k, v, layout, anchors)
    out = torch.empty_like(q)
    if layout.text_tokens:
        t = layout.text_tokens
        out[:, :, :t] = F.scaled_dot_product_attention(q[:, :, :t], k, v)
    video = out[:, :, layout.text_tokens :].unflatten(2, (layout.frames, layout.tokens_per_frame))
    video[:, :, anchors] = u.sum(3).to(q.dtype)
    if targets:
        vbar = group_means(v, layout)
        dev = q.device
        echoed = echo_combine(
            u, vbar, a.to(u.dtype), b.to(u.dtype), tables["anchor"].to(dev), tables["key"].to(dev)
        )
        video[:, :, targets] = echoed.to(q.dtype)
    return out


def _coefficients(
    value: torch.Tensor | None, name: str, shape: tuple[int, ...], default: float, like: torch.Tensor
) -> torch.Tensor:
    if value is None:
        return torch.full(shape, default, device=like.device)
    check_tensor(value, name, shape, floating=True, finite=True)
    return value.to(like.device)


# ------------------------------------------------------------------------------- measurement


def frame_block_similarity(
    q: torch.Tensor,
    k: torch.Tensor,
    layout: VideoLayout,
    *,
    anchor_stride: int = 2,
    variant: str = "same_key",
) -> torch.Tensor:
    """``(H,)``: per head, the mean over non-anchor query frames ``i`` (and the batch) of the cosine
    similarity between frame ``i``'s attention row block ``P_{i, ·}`` and its anchor's ``P_{r, κ(i, ·)}``
    (the video key frames, in the variant's correspondence; text keys excluded). 1 for a head whose frames
    all attend like their anchor. ``nan`` entries never occur: a layout without non-anchor frames raises."""
    check_choice(variant, "variant", VARIANTS)
    check_instance(layout, "layout", VideoLayout)
    layout.check_qkv(q, k, k)
    tables = echo_tables(layout, anchor_stride, [variant])
    anchors, targets = tables["anchors"], tables["targets"]
    if not targets:
        raise ValueError(
            f"anchor_stride={anchor_stride} makes every one of the {layout.frames} frames an anchor"
        )
    dtype = torch.promote_types(q.dtype, torch.float32)
    scores = _check_overflow(q.to(dtype) @ k.to(dtype).transpose(-1, -2), "the attention scores")
    p = (scores / math.sqrt(q.shape[-1])).softmax(-1)[:, :, layout.text_tokens :, layout.text_tokens :]
    p = p.unflatten(3, (layout.frames, layout.tokens_per_frame))  # (B, H, Nv, F, S)
    p = p.unflatten(2, (layout.frames, layout.tokens_per_frame))  # (B, H, F, S, F, S)
    key = tables["key"][0, :, : layout.frames]  # (Q, F)
    sims = []
    for qi, i in enumerate(targets):
        r = anchors[i // anchor_stride]
        mine = p[:, :, i]
        theirs = p[:, :, r][:, :, :, key[qi]]
        sims.append(F.cosine_similarity(mine.flatten(2), theirs.flatten(2), dim=-1))  # (B, H)
    return torch.stack(sims).mean((0, 1))


def attention_flops(
    route: str,
    layout: VideoLayout,
    head_dim: int,
    *,
    density: float = 1.0,
    anchor_stride: int = 2,
    block_size: int = 64,
) -> float:
    """Floating-point operations of one head's attention (multiply-adds count two) for a route.

    - ``"dense"``: ``4 N² D`` (``QKᵀ`` and ``PV``).
    - ``"sparse"``: ``4 · density · N² · D`` plus the pooled block scores ``2 NB² D`` and the pooling
      ``2 N D``; ``density`` is the kept fraction of query–key pairs (:func:`kept_fraction`).
    - ``"echo"``: the anchors' and text rows' exact attention ``4 (R S + T) N D``, the combination
      ``4 Q S G D`` and the group means ``N D``.
    """
    check_choice(route, "route", ("dense", "sparse", "echo"))
    check_instance(layout, "layout", VideoLayout)
    check_int(head_dim, "head_dim", 1, MAX_TOKENS)
    check_number(density, "density", 0, 1)
    check_int(anchor_stride, "anchor_stride", 1, MAX_TOKENS)
    check_int(block_size, "block_size", 1, MAX_TOKENS)
    n = layout.num_tokens
    if route == "dense":
        return 4.0 * n * n * head_dim
    if route == "sparse":
        nb = math.ceil(n / block_size)
        return 4.0 * density * n * n * head_dim + 2.0 * nb * nb * head_dim + 2.0 * n * head_dim
    r = len(anchor_frames(layout.frames, anchor_stride))
    s, g = layout.tokens_per_frame, layout.key_groups
    rows = r * s + layout.text_tokens
    return 4.0 * rows * n * head_dim + 4.0 * (layout.frames - r) * s * g * head_dim + n * head_dim
