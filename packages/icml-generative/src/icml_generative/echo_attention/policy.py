"""The Echo calibration (closed-form least squares) and the per-(layer, head) routing policy.

:class:`EchoCalibrator` accumulates, for each head and non-anchor frame, the normal equations of the
regression of the frame's exact attention output on its anchor's partial outputs and the key groups' mean
values (``2G`` features, one observation per query row and feature channel) in float64, for both variants,
and solves them: the coefficients equal ``torch.linalg.lstsq`` on the stacked design matrix.

:class:`EchoPolicy` holds, for every layer, each head's route (dense, sparse or echo), its Echo variant and
coefficients, the router logits learned in stage two, and the sparse density shared by the sparse heads.
It runs a layer's attention for the processors (:meth:`EchoPolicy.attention`), counts attention FLOPs, fits
the density to a FLOP budget and saves and loads itself (``safetensors`` + a JSON config, written
atomically).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from icml_generative._io import load_module, save_module
from icml_generative.echo_attention.ops import (
    MAX_TOKENS,
    VARIANTS,
    VideoLayout,
    anchor_partials,
    attention_flops,
    echo_attention,
    echo_tables,
    forced_blocks,
    group_means,
    sparse_attention,
)
from icml_generative.validation import check_choice, check_instance, check_int, check_number, check_tensor

ROUTES = ("dense", "sparse", "echo")
_WEIGHTS = "policy.safetensors"  # the weights file in a saved policy's folder, beside config.json


class EchoCalibrator:
    """Closed-form calibration of the Echo coefficients of one attention layer (module docstring).

    ``update(q, k, v)`` adds a batch of ``(B, H, N, D)`` inputs; :meth:`solve` returns ``{"a", "b"}``
    ``(V, H, Q, G)`` for the ``V = 2`` variants (:data:`~icml_generative.echo_attention.ops.VARIANTS`), the
    relative residual ``(V, H)`` of each fit and ``best`` ``(H,)``, the variant index with the lower one.
    """

    def __init__(self, layout: VideoLayout, num_heads: int, anchor_stride: int = 2, ridge: float = 0.0):
        self.layout = check_instance(layout, "layout", VideoLayout)
        if layout.frames < 2:
            raise ValueError(f"layout must have at least 2 frames for the Echo operator, got {layout.frames}")
        self.num_heads = check_int(num_heads, "num_heads", 1, 4096)
        self.anchor_stride = check_int(anchor_stride, "anchor_stride", 1, layout.frames)
        self.ridge = check_number(ridge, "ridge", 0)
        self.tables = [echo_tables(layout, anchor_stride, [v] * num_heads) for v in VARIANTS]
        q_frames, g = len(self.tables[0]["targets"]), layout.key_groups
        shape = (len(VARIANTS), num_heads, q_frames)
        self.gram = torch.zeros(*shape, 2 * g, 2 * g, dtype=torch.float64)
        self.rhs = torch.zeros(*shape, 2 * g, dtype=torch.float64)
        self.yy = torch.zeros(*shape, dtype=torch.float64)
        self.count = 0

    def design(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: int) -> tuple:
        """``(X, y)``: the design ``(B, H, Q, S·D, 2G)`` and the targets ``(B, H, Q, S·D)`` of a batch."""
        layout = self.layout
        tables = self.tables[check_int(variant, "variant", 0, len(VARIANTS) - 1)]
        u = anchor_partials(q, k, v, layout, tables["anchors"]).double()  # (B, H, R, G, S, D)
        vbar = group_means(v, layout).double()  # (B, H, G, D)
        b, h, _, g, s, d = u.shape
        anchor, key = tables["anchor"], tables["key"]  # (H, Q), (H, Q, G)
        heads = torch.arange(h)[:, None, None]
        feats = u.permute(1, 2, 3, 0, 4, 5)[heads, anchor[..., None], key]  # (H, Q, G, B, S, D)
        feats = feats.permute(3, 0, 1, 4, 5, 2).reshape(b, h, anchor.shape[1], s * d, g)
        means = vbar[:, :, None, None, :, :].expand(b, h, anchor.shape[1], s, g, d)
        means = means.permute(0, 1, 2, 3, 5, 4).reshape(b, h, anchor.shape[1], s * d, g)
        x = torch.cat([feats, means], -1)
        exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
        video = exact[:, :, layout.text_tokens :].unflatten(2, (layout.frames, layout.tokens_per_frame))
        y = video[:, :, tables["targets"]].reshape(b, h, anchor.shape[1], s * d)
        return x, y

    @torch.no_grad()
    def update(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.layout.check_qkv(q, k, v)
        if q.shape[1] != self.num_heads:
            raise ValueError(f"q must have num_heads={self.num_heads} heads, got {q.shape[1]}")
        sums = []
        for variant in range(len(VARIANTS)):
            x, y = self.design(q, k, v, variant)
            sums.append(
                (
                    torch.einsum("bhqnf,bhqng->hqfg", x, x),
                    torch.einsum("bhqnf,bhqn->hqf", x, y),
                    y.pow(2).sum((0, 3)),
                )
            )
        if not all(bool(torch.isfinite(t).all()) for t in sum(sums, ())):  # checked before any is added
            raise ValueError(
                "q, k and v are too large: the normal equations of the calibration overflow float64"
            )
        for variant, (gram, rhs, yy) in enumerate(sums):  # the sums stay on the CPU, where solve() runs
            self.gram[variant] += gram.to(self.gram.device)
            self.rhs[variant] += rhs.to(self.rhs.device)
            self.yy[variant] += yy.to(self.yy.device)
        self.count += q.shape[0]

    def solve(self) -> dict[str, torch.Tensor]:
        if self.count == 0:
            raise ValueError("EchoCalibrator.solve needs at least one update() first")
        g = self.layout.key_groups
        eye = torch.eye(2 * g, dtype=torch.float64)
        scale = self.gram.diagonal(dim1=-2, dim2=-1).mean(-1).clamp(min=1e-300)[..., None, None]
        # the normal equations divided by their mean diagonal: a large ridge cannot overflow them
        gram = self.gram / scale + self.ridge * eye
        coef = torch.linalg.lstsq(gram, self.rhs[..., None] / scale).solution[..., 0]  # (V, H, Q, 2G)
        residual = (
            self.yy
            - 2 * (coef * self.rhs).sum(-1)
            + torch.einsum("vhqf,vhqfg,vhqg->vhq", coef, self.gram, coef)
        )
        rel = (residual.clamp(min=0).sum(-1) / self.yy.sum(-1).clamp(min=1e-300)).sqrt()  # (V, H)
        return {
            "a": coef[..., :g].float(),
            "b": coef[..., g:].float(),
            "residual": rel,
            "best": rel.argmin(0),
        }


class EchoPolicy(torch.nn.Module):
    """Routes, Echo coefficients and router logits for ``num_layers`` attention layers of ``num_heads``.

    Args:
        num_layers, num_heads, head_dim: the transformer's self-attention layers.
        layout: the video layout the policy was built for (:class:`VideoLayout`).
        anchor_stride: every ``anchor_stride``-th frame is an Echo anchor (>= 2).
        block_size, neighbor_frames: the sparse operator's key blocks and always-kept neighbour frames.
        density: the kept fraction of key blocks of the sparse heads (top-k), in (0, 1].
        route: the initial route of every head, one of ``"dense"``, ``"sparse"``, ``"echo"``.
    """

    routes: torch.Tensor  # (L, H) route indices into ROUTES (a buffer)
    variants: torch.Tensor  # (L, H) Echo variant indices into VARIANTS (a buffer)

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        head_dim: int,
        layout: VideoLayout,
        *,
        anchor_stride: int = 2,
        block_size: int = 64,
        neighbor_frames: int = 1,
        density: float = 0.5,
        route: str = "dense",
    ):
        super().__init__()
        self.num_layers = check_int(num_layers, "num_layers", 1, 4096)
        self.num_heads = check_int(num_heads, "num_heads", 1, 4096)
        self.head_dim = check_int(head_dim, "head_dim", 1, 65536)
        self.layout = check_instance(layout, "layout", VideoLayout)
        if layout.frames < 2:
            raise ValueError(f"layout must have at least 2 frames for the Echo operator, got {layout.frames}")
        self.anchor_stride = check_int(anchor_stride, "anchor_stride", 2, layout.frames)
        self.block_size = check_int(block_size, "block_size", 1, MAX_TOKENS)
        self.neighbor_frames = check_int(neighbor_frames, "neighbor_frames", 0, MAX_TOKENS)
        self.density = check_number(density, "density", above=0, maximum=1)
        check_choice(route, "route", ROUTES)
        self.tables = echo_tables(layout, anchor_stride, ["same_key"])
        q_frames, g = len(self.tables["targets"]), layout.key_groups
        self.register_buffer(
            "routes", torch.full((num_layers, num_heads), ROUTES.index(route), dtype=torch.int64)
        )
        self.register_buffer("variants", torch.zeros(num_layers, num_heads, dtype=torch.int64))
        self.a = torch.nn.Parameter(torch.ones(num_layers, num_heads, q_frames, g))
        self.b = torch.nn.Parameter(torch.zeros(num_layers, num_heads, q_frames, g))
        self.router_logits = torch.nn.Parameter(torch.zeros(num_layers, num_heads, len(ROUTES)))
        self.mode = "route"  # "route", "mix" (router training: every operator, mixed), "dense", "capture"
        self.mix_weights: torch.Tensor | None = None  # (L, H, 3) in "mix" mode
        self.captured: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = [
            [] for _ in range(num_layers)
        ]

    # ------------------------------------------------------------------ config and persistence
    def config(self) -> dict:
        return {
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
            "layout": [self.layout.frames, self.layout.tokens_per_frame, self.layout.text_tokens],
            "anchor_stride": self.anchor_stride,
            "block_size": self.block_size,
            "neighbor_frames": self.neighbor_frames,
            "density": self.density,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``policy.safetensors`` into the folder ``path`` (atomically: a failed or
        interrupted save leaves an existing folder as it was)."""
        return save_module(path, self, self.config(), weights=_WEIGHTS)

    @classmethod
    def load(cls, path: str | os.PathLike) -> EchoPolicy:
        """The policy :meth:`save` wrote into the folder ``path``, with the saved dtypes and values."""

        def build(cfg: dict) -> EchoPolicy:
            layout = VideoLayout(*cfg.pop("layout"))
            return cls(cfg.pop("num_layers"), cfg.pop("num_heads"), cfg.pop("head_dim"), layout, **cfg)

        return load_module(path, cls, weights=_WEIGHTS, build=build)

    # ------------------------------------------------------------------ routes and FLOPs
    def set_routes(self, routes: torch.Tensor | list) -> None:
        """Set every head's route from an ``(L, H)`` tensor of route indices (0 dense, 1 sparse, 2 echo) or
        nested lists of route names."""
        shape = (self.num_layers, self.num_heads)
        if not isinstance(routes, torch.Tensor):
            if not (
                isinstance(routes, list | tuple)
                and len(routes) == shape[0]
                and all(isinstance(row, list | tuple) and len(row) == shape[1] for row in routes)
            ):
                raise ValueError(f"routes must be {shape[0]} lists of {shape[1]} route names, got {routes!r}")
            routes = torch.tensor(
                [[ROUTES.index(check_choice(r, "routes", ROUTES)) for r in row] for row in routes]
            )
        check_tensor(routes, "routes", shape)
        if routes.is_floating_point() or routes.is_complex() or routes.dtype == torch.bool:
            raise TypeError(f"routes must hold integer route indices, got dtype {routes.dtype}")
        if routes.min() < 0 or routes.max() >= len(ROUTES):
            raise ValueError(f"routes must hold route indices 0..{len(ROUTES) - 1}")
        self.routes.copy_(routes.to(torch.int64))

    def route_names(self) -> list[list[str]]:
        return [[ROUTES[int(r)] for r in row] for row in self.routes]

    def sparse_kept_fraction(self, density: float | None = None) -> float:
        """The kept fraction of query–key pairs of a sparse head at ``density`` (top-k counts do not depend
        on the data: ``max(forced, ceil(density · NB))`` key blocks per query block)."""
        d = self.density if density is None else check_number(density, "density", above=0, maximum=1)
        layout, bs = self.layout, self.block_size
        n = layout.num_tokens
        nb = math.ceil(n / bs)
        forced = forced_blocks(layout, bs, self.neighbor_frames)
        sizes = torch.full((nb,), float(bs))
        sizes[-1] = n - (nb - 1) * bs
        # blocks kept beyond the forced ones are the highest-scoring: count them at the full block size
        # except that the ragged last block may be among them (an upper bound: at most one block smaller)
        count = torch.clamp(forced.sum(-1), min=math.ceil(d * nb)).double()
        forced_keys = (forced.double() * sizes).sum(-1)
        extra = (count - forced.sum(-1)).clamp(min=0) * bs
        keys = torch.minimum(forced_keys + extra, torch.tensor(float(n)))
        return float((keys * sizes).sum()) / (n * n)

    def route_flops(self, route: str, kept: float | None = None) -> float:
        kept = self.sparse_kept_fraction() if kept is None else check_number(kept, "kept", 0, 1)
        return attention_flops(
            route,
            self.layout,
            self.head_dim,
            density=kept,
            anchor_stride=self.anchor_stride,
            block_size=self.block_size,
        )

    def flops(self) -> dict[str, float]:
        """Attention FLOPs of the current routes: ``{"total", "dense", "fraction"}`` (fraction of dense)."""
        per = [self.route_flops(r) for r in ROUTES]
        total = sum(per[int(r)] for r in self.routes.flatten())
        dense = per[0] * self.num_layers * self.num_heads
        return {"total": total, "dense": dense, "fraction": total / dense}

    def fit_density(self, budget: float) -> float:
        """Set the sparse density to the largest top-k count whose FLOPs fit ``budget`` (a fraction of dense
        attention FLOPs, in (0, 1]) with the current routes; returns the FLOP fraction reached. Raises when
        the routes exceed the budget even at the smallest density (the density is then left as it was)."""
        check_number(budget, "budget", above=0, maximum=1)
        nb = math.ceil(self.layout.num_tokens / self.block_size)
        best = None
        density = self.density
        try:
            for count in range(1, nb + 1):
                self.density = count / nb
                if self.flops()["fraction"] <= budget + 1e-12:
                    best = count
            if best is None:
                self.density = 1 / nb
                raise ValueError(
                    f"budget={budget} cannot be met with these routes: {self.flops()['fraction']:.3f} of dense "
                    "FLOPs at the smallest density"
                )
        except BaseException:
            self.density = density  # a failed call leaves the policy as it was
            raise
        self.density = best / nb
        return self.flops()["fraction"]

    # ------------------------------------------------------------------ the operators
    def operator(self, route: str, layer: int, heads: torch.Tensor, q, k, v) -> torch.Tensor:
        """One route's output for the heads ``heads`` of layer ``layer`` (``q, k, v`` already sliced)."""
        if route == "dense":
            return F.scaled_dot_product_attention(q, k, v)
        if route == "sparse":
            out, _ = sparse_attention(
                q,
                k,
                v,
                self.layout,
                block_size=self.block_size,
                density=self.density,
                neighbor_frames=self.neighbor_frames,
            )
            return out
        variants = [VARIANTS[int(i)] for i in self.variants[layer, heads]]
        return echo_attention(
            q,
            k,
            v,
            self.layout,
            anchor_stride=self.anchor_stride,
            variants=variants,
            a=self.a[layer, heads],
            b=self.b[layer, heads],
        )

    def attention(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s self-attention output ``(B, H, N, D)`` under the policy's mode."""
        check_int(layer, "layer", 0, self.num_layers - 1)
        self.layout.check_qkv(q, k, v)
        if q.shape[1] != self.num_heads or q.shape[3] != self.head_dim:
            raise ValueError(
                f"q must have the policy's num_heads={self.num_heads} heads of head_dim={self.head_dim}, got "
                f"{q.shape[1]} of {q.shape[3]}"
            )
        if self.mode in ("dense", "capture"):
            if self.mode == "capture":
                self.captured[layer].append((q.detach(), k.detach(), v.detach()))
            return F.scaled_dot_product_attention(q, k, v)
        all_heads = torch.arange(self.num_heads)
        if self.mode == "mix":
            if self.mix_weights is None:
                raise ValueError("mode 'mix' needs mix_weights (L, H, 3) set first")
            w = self.mix_weights[layer].to(device=q.device, dtype=q.dtype)  # (H, 3)
            outs = torch.stack([self.operator(r, layer, all_heads, q, k, v) for r in ROUTES], -1)
            return (outs * w[None, :, None, None, :]).sum(-1)
        routes = self.routes[layer]
        if bool((routes == 0).all()):
            return F.scaled_dot_product_attention(q, k, v)
        out = torch.empty_like(q)
        for index, route in enumerate(ROUTES):
            heads = (routes == index).nonzero()[:, 0]
            if len(heads):
                sel = heads.to(q.device)
                part = self.operator(route, layer, heads, q[:, sel], k[:, sel], v[:, sel])
                out = out.index_copy(1, sel, part)
        return out
