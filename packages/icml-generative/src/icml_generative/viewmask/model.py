"""The multi-view masked-token transformer of ViewMask-1-to-3 and its training objectives.

A sequence is ``[text tokens?][view 0 (the condition)][view 1] ... [view V-1]``, each view an ``h x w`` grid of
tokenizer indices. Every token gets a learned view-index embedding and a 2-D position embedding (row + column,
shared across views); a camera embedding per view and text tokens are optional. Attention is bidirectional
and, by default, full across views: the paper's claim is that cross-view consistency comes from this
self-attention alone. ``attention="independent"`` is the ablation: block-diagonal attention between target
views (each target view sees the text, the condition and itself; the condition sees the text and itself).

The paper's text was not available: the sequence layout, embeddings and objectives below are our design on
MaskGIT (cosine schedule, loss on masked tokens) and masked diffusion (LLaDA's ELBO), as the abstract
describes ("simple random masking", "iterative token unmasking").
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from icml_generative._io import load_module, save_module
from icml_generative.validation import (
    check_choice,
    check_int,
    check_number,
    check_tensor,
    check_trainable_dtype,
    random_device,
)

ATTENTION = ("full", "independent")
OBJECTIVES = ("maskgit", "elbo")


def cosine_schedule(r: torch.Tensor | float) -> torch.Tensor:
    """MaskGIT's masking ratio ``gamma(r) = cos(pi r / 2)`` for ``r`` in [0, 1]: 1 at 0 (all masked), 0 at 1,
    decreasing in between."""
    try:
        r = torch.as_tensor(r, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"r must be a number or a tensor of numbers in [0, 1], got {type(r).__name__}"
        ) from None
    if not bool(((r >= 0) & (r <= 1)).all()):
        raise ValueError("r must lie in [0, 1]")
    return torch.cos(math.pi * r / 2)


def view_attention_mask(
    num_views: int, tokens_per_view: int, prefix: int = 0, attention: str = "full", device: Any = None
) -> torch.Tensor | None:
    """The boolean attention mask (``True`` = may attend) of a sequence of ``prefix`` text tokens then
    ``num_views`` views (the first is the condition); ``None`` for full attention."""
    check_int(num_views, "num_views", 1, 1 << 16)
    check_int(tokens_per_view, "tokens_per_view", 1, 1 << 20)
    check_int(prefix, "prefix", 0, 1 << 20)
    check_choice(attention, "attention", ATTENTION)
    if attention == "full":
        return None
    n = prefix + num_views * tokens_per_view
    group = torch.full((n,), -1, dtype=torch.long, device=device)  # -1: text and condition, seen by all
    group[prefix + tokens_per_view :] = torch.arange(1, num_views, device=device).repeat_interleave(
        tokens_per_view
    )
    shared = group[None, :] < 0
    return shared | (group[:, None] == group[None, :])


def check_model(model: Any, name: str = "model") -> MultiViewTransformer:
    """A :class:`MultiViewTransformer` (or a module that stands in for one: ``mask_id``, ``grid``,
    ``num_views`` and ``check_inputs``), ``TypeError`` otherwise."""
    if not isinstance(model, nn.Module) or not all(
        hasattr(model, a) for a in ("mask_id", "grid", "num_views", "check_inputs")
    ):
        raise TypeError(f"{name} must be a MultiViewTransformer, got {type(model).__name__}")
    return model  # type: ignore[return-value]


def check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


class ViewBackbone(nn.Module):
    """View-index and 2-D position embeddings plus a stack of pre-LN bidirectional transformer blocks over
    ``(B, V, h*w, width)`` view embeddings (and an optional text prefix ``(B, L, width)``)."""

    def __init__(
        self,
        grid: Sequence[int],
        num_views: int,
        width: int = 128,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: int = 4,
        camera_dim: int = 0,
        max_text: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(grid, (tuple, list)) or len(grid) != 2:
            raise ValueError(f"grid must be (rows, columns), got {grid!r}")
        self.grid = (check_int(grid[0], "grid[0]", 1, 256), check_int(grid[1], "grid[1]", 1, 256))
        self.num_views = check_int(num_views, "num_views", 2, 64)
        self.width = check_int(width, "width", 8, 8192)
        self.heads = check_int(heads, "heads", 1, 256)
        if self.width % self.heads:
            raise ValueError(f"heads must divide width ({self.width}), got {heads!r}")
        check_int(depth, "depth", 1, 128)
        check_int(mlp_ratio, "mlp_ratio", 1, 16)
        self.camera_dim = check_int(camera_dim, "camera_dim", 0, 4096)
        self.max_text = check_int(max_text, "max_text", 0, 4096)
        h, w = self.grid
        self.view_embed = nn.Parameter(torch.randn(self.num_views, width) * 0.02)
        self.row_embed = nn.Parameter(torch.randn(h, width) * 0.02)
        self.col_embed = nn.Parameter(torch.randn(w, width) * 0.02)
        self.text_pos = nn.Parameter(torch.randn(self.max_text, width) * 0.02)
        self.camera = nn.Linear(camera_dim, width) if camera_dim else None
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                width,
                heads,
                mlp_ratio * width,
                dropout=0.0,
                activation="gelu",
                batch_first=True,
                norm_first=True,
            )
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(width)

    @property
    def tokens_per_view(self) -> int:
        return self.grid[0] * self.grid[1]

    def position(self) -> torch.Tensor:
        """The 2-D position embedding ``(h*w, width)`` shared by every view."""
        return (self.row_embed[:, None, :] + self.col_embed[None, :, :]).reshape(-1, self.width)

    def forward(
        self,
        x: torch.Tensor,
        views: torch.Tensor,
        attention: str = "full",
        text: torch.Tensor | None = None,
        camera: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x`` ``(B, V', h*w, width)`` for the views ``views`` (long ``(V',)``, the condition first) →
        hidden states of the same shape (the text prefix is dropped from the output)."""
        b, nv, t, _ = x.shape
        x = x + self.view_embed[views][None, :, None, :] + self.position()[None, None]
        if camera is not None:
            if self.camera is None:
                raise ValueError("camera was given but the model was built with camera_dim=0")
            x = x + self.camera(camera)[:, :, None, :]
        seq = x.reshape(b, nv * t, self.width)
        prefix = 0
        if text is not None:
            prefix = text.shape[1]
            seq = torch.cat([text + self.text_pos[:prefix], seq], dim=1)
        mask = view_attention_mask(nv, t, prefix, attention, device=x.device)
        # nn.TransformerEncoderLayer's boolean mask is True where attention is NOT allowed
        blocked = None if mask is None else ~mask
        for block in self.blocks:
            seq = block(seq, src_mask=blocked)
        return self.norm(seq[:, prefix:]).reshape(b, nv, t, self.width)


class MultiViewTransformer(nn.Module):
    """ViewMask's masked-token model over ``[text?][condition view][target views]``.

    Token ids are tokenizer indices in ``[0, codebook_size)``; :attr:`mask_id` (= ``codebook_size``) marks a
    masked target token. Text, when used, is ids in ``[0, text_vocab)`` with :attr:`null_text` as the dropped
    (unconditional) token for classifier-free guidance.
    """

    def __init__(
        self,
        codebook_size: int,
        grid: Sequence[int] = (8, 8),
        num_views: int = 4,
        width: int = 128,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: int = 4,
        attention: str = "full",
        camera_dim: int = 0,
        text_vocab: int = 0,
        max_text: int = 0,
    ) -> None:
        super().__init__()
        self.codebook_size = check_int(codebook_size, "codebook_size", 2, 1 << 18)
        self.attention = check_choice(attention, "attention", ATTENTION)
        self.text_vocab = check_int(text_vocab, "text_vocab", 0, 1 << 20)
        if (self.text_vocab > 0) != (check_int(max_text, "max_text", 0, 4096) > 0):
            raise ValueError("text_vocab and max_text must be both 0 (no text) or both positive")
        self._config = {
            "codebook_size": codebook_size,
            "grid": list(grid) if isinstance(grid, (tuple, list)) else grid,
            "num_views": num_views,
            "width": width,
            "depth": depth,
            "heads": heads,
            "mlp_ratio": mlp_ratio,
            "attention": attention,
            "camera_dim": camera_dim,
            "text_vocab": text_vocab,
            "max_text": max_text,
        }
        self.backbone = ViewBackbone(grid, num_views, width, depth, heads, mlp_ratio, camera_dim, max_text)
        self.token_embed = nn.Embedding(self.codebook_size + 1, width)
        self.text_embed = nn.Embedding(self.text_vocab + 1, width) if self.text_vocab else None
        self.head = nn.Linear(width, self.codebook_size)
        for emb in (self.token_embed, self.text_embed):  # the scale of the position embeddings: both count
            if emb is not None:
                nn.init.normal_(emb.weight, std=0.02)

    @property
    def mask_id(self) -> int:
        return self.codebook_size

    @property
    def null_text(self) -> int:
        return self.text_vocab

    @property
    def grid(self) -> tuple[int, int]:
        return self.backbone.grid

    @property
    def num_views(self) -> int:
        return self.backbone.num_views

    def config(self) -> dict[str, Any]:
        return dict(self._config)

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into the folder ``path`` (atomically)."""
        return save_module(path, self, self.config())

    @classmethod
    def load(cls, path: str | os.PathLike) -> MultiViewTransformer:
        """The model :meth:`save` wrote into the folder ``path``, in eval mode."""
        return load_module(path, cls)

    def check_inputs(
        self,
        condition: Any,
        targets: Any,
        views: Any = None,
        text: Any = None,
        camera: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Validate a batch; returns ``(condition, targets, views)`` with ``views`` the target view indices."""
        h, w = self.grid
        check_tensor(condition, "condition", ("B", h, w))
        check_tensor(targets, "targets", (condition.shape[0], "V", h, w))
        for name, t, top in (
            ("condition", condition, self.codebook_size - 1),
            ("targets", targets, self.mask_id),
        ):
            if t.dtype != torch.long:
                raise TypeError(f"{name} must be a torch.long tensor of token ids, got dtype {t.dtype}")
            if t.numel() and (int(t.min()) < 0 or int(t.max()) > top):
                raise ValueError(
                    f"{name} must hold token ids in [0, {top}], got [{int(t.min())}, {int(t.max())}]"
                )
        if views is None:
            if targets.shape[1] != self.num_views - 1:
                raise ValueError(
                    f"targets must hold num_views - 1 = {self.num_views - 1} target views when views is not "
                    f"given, got {targets.shape[1]}"
                )
            views = torch.arange(1, self.num_views)
        else:
            try:
                views = torch.as_tensor(views)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(f"views must be a sequence of target view indices, got {views!r}") from None
            if (
                views.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
                or views.ndim != 1
                or len(views) != targets.shape[1]
                or len(set(views.tolist())) != len(views)
                or (len(views) and (int(views.min()) < 1 or int(views.max()) >= self.num_views))
            ):
                raise ValueError(
                    f"views must list {targets.shape[1]} distinct target view indices in [1, {self.num_views - 1}], "
                    f"got {views.tolist()}"
                )
            views = views.long()
        if text is not None:
            if self.text_embed is None:
                raise ValueError("text was given but the model was built without text (text_vocab=0)")
            check_tensor(text, "text", (condition.shape[0], "L"))
            if text.dtype != torch.long or not 1 <= text.shape[1] <= self.backbone.max_text:
                raise ValueError(
                    f"text must be torch.long ids shaped (B, L) with 1 <= L <= {self.backbone.max_text}, "
                    f"got {text.dtype} {tuple(text.shape)}"
                )
            if int(text.min()) < 0 or int(text.max()) > self.null_text:
                raise ValueError(f"text must hold ids in [0, {self.null_text}]")
        if camera is not None:
            check_tensor(
                camera,
                "camera",
                (condition.shape[0], 1 + targets.shape[1], self.backbone.camera_dim),
                floating=True,
                finite=True,
            )
            if self.backbone.camera is None:
                raise ValueError("camera was given but the model was built with camera_dim=0")
        return condition, targets, views.to(condition.device)

    def forward(
        self,
        condition: torch.Tensor,
        targets: torch.Tensor,
        views: Sequence[int] | torch.Tensor | None = None,
        text: torch.Tensor | None = None,
        camera: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(B, V, h, w, codebook_size)`` for the target views.

        ``condition``: ``(B, h, w)`` token ids of view 0; ``targets``: ``(B, V, h, w)`` ids with
        :attr:`mask_id` where masked; ``views``: the target views' indices (default ``1 .. num_views-1``);
        ``text``: ``(B, L)`` ids (:attr:`null_text` to drop); ``camera``: ``(B, 1 + V, camera_dim)``.
        """
        condition, targets, view_ids = self.check_inputs(condition, targets, views, text, camera)
        b, nv, h, w = targets.shape
        tokens = torch.cat([condition[:, None], targets], dim=1).reshape(b, nv + 1, h * w)
        x = self.token_embed(tokens)
        prefix = None if text is None or self.text_embed is None else self.text_embed(text)
        all_views = torch.cat([view_ids.new_zeros(1), view_ids])
        hidden = self.backbone(x, all_views, self.attention, prefix, camera)
        return self.head(hidden[:, 1:]).reshape(b, nv, h, w, self.codebook_size)


def mask_targets(
    targets: torch.Tensor, mask_id: int, objective: str = "maskgit", generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random masking of the target tokens ``(B, V, h, w)`` jointly across views ("simple random masking").

    ``"maskgit"``: per sample ``r ~ U(0, 1)``, ``ceil(cos(pi r / 2) * N)`` of its ``N`` target tokens masked
    uniformly at random. ``"elbo"``: per sample ``t ~ U(0, 1)``, every token masked independently with
    probability ``t`` (at least one). Returns ``(masked targets, mask, ratio)`` with ``ratio`` ``(B,)`` the
    masking ratio drawn (``t`` or ``gamma(r)``).
    """
    check_choice(objective, "objective", OBJECTIVES)
    check_tensor(targets, "targets")
    if targets.dtype != torch.long or targets.ndim < 2 or targets.numel() == 0:
        raise ValueError(
            f"targets must be a non-empty torch.long tensor (B, ...) of token ids, got {targets.dtype} "
            f"{tuple(targets.shape)}"
        )
    check_int(mask_id, "mask_id", 0, 1 << 30)
    check_generator(generator)
    b = targets.shape[0]
    flat = targets.reshape(b, -1)
    n = flat.shape[1]
    draw = random_device(generator, "cpu")
    u = torch.rand(b, generator=generator, device=draw).to(targets.device)
    scores = torch.rand(b, n, generator=generator, device=draw).to(targets.device)
    if objective == "maskgit":
        ratio = torch.cos(math.pi * u / 2)
        count = torch.ceil(ratio * n).clamp(1, n)
        rank = scores.argsort(dim=1).argsort(dim=1)
        mask = rank < count[:, None]
    else:
        ratio = u.clamp_min(1e-3)
        mask = scores < ratio[:, None]
        first = scores.argmin(dim=1)  # at least one masked token per sample
        mask[torch.arange(b, device=targets.device), first] = True
    masked = torch.where(mask, torch.full_like(flat, mask_id), flat)
    return masked.reshape(targets.shape), mask.reshape(targets.shape), ratio


def masked_token_loss(
    model: MultiViewTransformer,
    condition: torch.Tensor,
    targets: torch.Tensor,
    objective: str = "maskgit",
    *,
    label_smoothing: float = 0.1,
    text: torch.Tensor | None = None,
    text_dropout: float = 0.1,
    camera: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One training loss on a batch: the target views masked by :func:`mask_targets`, cross-entropy on the
    masked tokens only. ``"maskgit"``: mean over masked tokens (label smoothing ``label_smoothing``);
    ``"elbo"``: the masked-diffusion bound ``E_t[(1/t) sum_masked CE] / N`` (no smoothing). With text, each
    sample's text is replaced by :attr:`~MultiViewTransformer.null_text` with probability ``text_dropout``
    (for classifier-free guidance)."""
    check_model(model)
    check_choice(objective, "objective", OBJECTIVES)
    check_number(label_smoothing, "label_smoothing", 0, below=1)
    check_number(text_dropout, "text_dropout", 0, 1)
    model.check_inputs(condition, targets, None, text, camera)
    if int(targets.max()) >= model.codebook_size:
        raise ValueError("targets must be clean token ids (no mask_id) for training")
    masked, mask, ratio = mask_targets(targets, model.mask_id, objective, generator)
    if text is not None and text_dropout > 0:
        draw = random_device(generator, "cpu")
        drop = torch.rand(text.shape[0], generator=generator, device=draw).to(text.device) < text_dropout
        text = torch.where(drop[:, None], torch.full_like(text, model.null_text), text)
    logits = model(condition, masked, text=text, camera=camera)
    if objective == "maskgit":
        return F.cross_entropy(logits[mask], targets[mask], label_smoothing=label_smoothing)
    ce = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), reduction="none").reshape(mask.shape)
    per_sample = (ce * mask).flatten(1).sum(1) / ratio / mask[0].numel()
    return per_sample.mean()


def warmup_cosine(
    optimizer: torch.optim.Optimizer, warmup: int, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning-rate schedule of :func:`train_viewmask`: linear warm-up over ``warmup`` steps, then cosine
    decay to 0 at ``steps``."""

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def train_viewmask(
    model: MultiViewTransformer,
    condition: torch.Tensor,
    targets: torch.Tensor,
    *,
    objective: str = "maskgit",
    steps: int = 1000,
    batch_size: int = 32,
    lr: float = 1e-3,
    warmup: int = 100,
    weight_decay: float = 0.01,
    label_smoothing: float = 0.1,
    text: torch.Tensor | None = None,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` on ``condition`` ``(N, h, w)`` and ``targets`` ``(N, V, h, w)`` token ids with
    :func:`masked_token_loss` (AdamW, linear warm-up then cosine decay); returns the loss per step and leaves
    the model in eval mode. A model with float16 trainable parameters is refused (``ValueError``: AdamW's
    ``eps`` rounds to 0 in float16 and the weights turn NaN): train in bfloat16, or in float32 under
    ``torch.autocast``. A non-finite loss raises a ``ValueError`` naming the step."""
    check_model(model)
    check_trainable_dtype(model, "model", "train_viewmask")
    check_int(steps, "steps", 1, 10_000_000)
    check_int(batch_size, "batch_size", 1, 1 << 20)
    check_number(lr, "lr", above=0, maximum=1.0)
    check_int(warmup, "warmup", 0, 10_000_000)
    check_number(weight_decay, "weight_decay", 0, 10)
    check_int(seed, "seed", 0, 2**63 - 1)
    for name, t in (("condition", condition), ("targets", targets), ("text", text)):
        if t is not None and (check_tensor(t, name).ndim == 0 or t.shape[0] == 0):
            raise ValueError(f"{name} must hold at least one example, got shape {tuple(t.shape)}")
    if targets.shape[0] != condition.shape[0] or (text is not None and text.shape[0] != condition.shape[0]):
        raise ValueError("condition, targets and text must hold the same number of examples")
    model.check_inputs(condition, targets, None, text)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))

    sched = warmup_cosine(opt, warmup, steps)
    device = next(model.parameters()).device
    losses = []
    model.train()
    try:
        for step in range(steps):
            idx = torch.randint(0, condition.shape[0], (batch_size,), generator=gen)
            loss = masked_token_loss(
                model,
                condition[idx].to(device),
                targets[idx].to(device),
                objective,
                label_smoothing=label_smoothing,
                text=None if text is None else text[idx].to(device),
                generator=gen,
            )
            if not torch.isfinite(loss):
                raise ValueError(
                    f"train_viewmask: the loss became {loss.item()} at step {step}: lower lr ({lr})"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
    finally:
        model.eval()
    return losses
