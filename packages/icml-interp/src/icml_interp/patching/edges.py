"""Edge attribution patching (EAP, Syed et al. 2023; EAP-IG, Hanna et al. 2024), exact edge patching, neuron
attribution, and circuit selection by a faithfulness threshold, on any :class:`HookedModel`.

The graph is the residual-stream graph of EAP-IG. Senders write to the stream: ``input`` (the token
embeddings), every attention head ``a{L}.h{H}`` (its slice of the output projection applied to its ``hook_z``
slice) and every MLP ``m{L}``. Receivers read from it: every head's query, key and value input
``a{L}.h{H}.q`` / ``.k`` / ``.v`` (key and value per key-value head in grouped-query models), every MLP's
input ``m{L}``, and the final norm's input ``logits``. An edge joins a sender to every receiver after it.

Patching the edge ``u -> v`` runs the clean input with receiver ``v`` reading ``x + (u_corrupt - u_clean)``
where ``x`` is its clean input, everything else clean (for a head, only that head's projection of the
normalized input changes). EAP estimates every edge's effect ``M(patched) - M(clean)`` at once, to first
order: ``(u_corrupt - u_clean) . dM/dx_v``, summed over positions and averaged over prompts, from two forward
passes and one backward pass. EAP-IG replaces the gradient with its mean over ``steps`` inputs interpolated
between the clean and corrupt embeddings (midpoints ``(k + 1/2) / steps``); the scores of the edges leaving
``input`` then sum to ``M(corrupt) - M(clean)`` as ``steps`` grows (completeness), which EAP's do not.

A circuit is a set of edges; evaluating it runs the clean input with every edge outside it patched from the
corrupt run (each receiver reads its current input minus, for each sender outside the circuit, the
difference between that sender's current and corrupt outputs). Faithfulness is
``(M(circuit) - M(corrupt)) / (M(clean) - M(corrupt))``: 1 for the whole graph, 0 for the empty one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from icml_interp.hooks import act_name, wrap
from icml_interp.hooks.arch import get_module
from icml_interp.hooks.hooked import HookedModel, split_fused_qkv
from icml_interp.patching.activation import check_pair
from icml_interp.patching.result import Metric, check_layers, check_metric, logits_width, metric_value
from icml_interp.validation import check_bool, check_choice, check_int, check_number, eval_mode

METHODS = ("eap", "eap-ig")


# ---------------------------------------------------------------------------------------------- the graph
@dataclass(frozen=True)
class Graph:
    """Senders, receivers and which (sender, receiver) pairs are edges, for one model."""

    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    sender_layer: tuple[float, ...]  # input: -1; heads: their layer L; MLPs: L + 0.5
    receiver_layer: tuple[float, ...]  # heads: L, MLP: L + 0.5 (L in parallel blocks), logits: n_layers
    n_layers: int
    n_heads: int
    n_kv_heads: int

    @property
    def mask(self) -> torch.Tensor:
        """``(n_senders, n_receivers)`` bool: which pairs are edges (the sender is upstream of the receiver)."""
        return torch.tensor(self.sender_layer)[:, None] < torch.tensor(self.receiver_layer)[None, :]

    @property
    def n_edges(self) -> int:
        return int(self.mask.sum())


def build_graph(model) -> Graph:
    """The residual-stream graph of ``model`` (a :class:`HookedModel` or a mapped Hugging Face model)."""
    hooked = wrap(model)
    n, h, kv = hooked.n_layers, hooked.n_heads, hooked.n_kv_heads
    senders, s_layer = ["input"], [-1.0]
    receivers: list[str] = []
    r_layer: list[float] = []
    mlp_at = 0.0 if hooked.parallel else 0.5  # a parallel block's MLP does not read its own heads
    for layer in range(n):
        senders += [f"a{layer}.h{i}" for i in range(h)] + [f"m{layer}"]
        s_layer += [float(layer)] * h + [layer + 0.5]
        for which, count in (("q", h), ("k", kv), ("v", kv)):
            receivers += [f"a{layer}.h{i}.{which}" for i in range(count)]
            r_layer += [float(layer)] * count
        receivers.append(f"m{layer}")
        r_layer.append(layer + mlp_at)
    receivers.append("logits")
    r_layer.append(float(n))
    # parallel blocks: the MLP reads resid_pre, so its own layer's heads (at `layer`) are not upstream
    return Graph(tuple(senders), tuple(receivers), tuple(s_layer), tuple(r_layer), n, h, kv)


@dataclass
class EdgeScores:
    """Scores of the edges: ``scores[i, j]`` for sender ``graph.senders[i]`` and receiver ``graph.receivers[j]``,
    for the pairs where ``scored`` is true (0 elsewhere: not an edge, or not measured); float32 on the CPU,
    like ``scored``, whatever the model's device. ``clean`` and ``corrupt`` are the metric's values; a score
    estimates ``M(edge patched) - M(clean)``."""

    graph: Graph
    scores: torch.Tensor
    clean: float
    corrupt: float
    method: str
    steps: int = 1
    scored: torch.Tensor | None = None  # default: every edge of the graph

    def __post_init__(self):
        if self.scored is None:
            self.scored = self.graph.mask

    def edges(self, k: int | None = None, *, absolute: bool = True) -> list[tuple[str, str, float]]:
        """The edges ``(sender, receiver, score)`` sorted by ``|score|`` (or by score, ``absolute=False``),
        the ``k`` first (default: all)."""
        if k is not None:
            check_int(k, "k", minimum=0)
        check_bool(absolute, "absolute")
        assert self.scored is not None
        order = _edge_order(self.scores, self.scored, absolute)
        if k is not None:
            order = order[:k]
        n_r = len(self.graph.receivers)
        return [
            (self.graph.senders[i // n_r], self.graph.receivers[i % n_r], float(self.scores.flatten()[i]))
            for i in order.tolist()
        ]

    def to_rows(self) -> list[dict]:
        """One dict per edge (sender, receiver, score), sorted by ``|score|``."""
        return [{"sender": s, "receiver": r, "score": v} for s, r, v in self.edges()]

    def node_scores(self) -> dict[str, float]:
        """Each sender's summed absolute edge score (a node ranking from the edge scores)."""
        total = self.scores.abs().sum(1)
        return dict(zip(self.graph.senders, total.tolist(), strict=True))


def _edge_order(scores: torch.Tensor, mask: torch.Tensor, absolute: bool) -> torch.Tensor:
    key = scores.abs() if absolute else scores
    key = torch.where(mask, key, torch.full_like(key, -math.inf)).flatten()
    order = torch.argsort(key, descending=True, stable=True)
    return order[: int(mask.sum())]


# ------------------------------------------------------------------------------------- model plumbing
def _attn(hooked: HookedModel, layer: int) -> nn.Module:
    return get_module(hooked.blocks[layer], hooked.spec.attn)


def _norm(hooked: HookedModel, layer: int, which: str) -> nn.Module:
    path = getattr(hooked.spec, which)
    if path is None:
        raise ValueError(
            f"edge attribution needs the block norms in the architecture map ({which} is None for "
            f"{type(hooked.model).__name__})"
        )
    return get_module(hooked.blocks[layer], path)


def _head_weights(hooked: HookedModel, layer: int) -> torch.Tensor:
    """The output projection as ``(heads, d_head, d_model)``: what each head writes per unit of ``hook_z``."""
    module = get_module(_attn(hooked, layer), hooked.spec.o_proj)
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    io = weight.T if isinstance(module, nn.Linear) else weight  # GPT-2's Conv1D stores (in, out)
    return io.reshape(hooked.n_heads, hooked.d_head, hooked.d_model)


def _qkv(hooked: HookedModel, layer: int, normed: torch.Tensor) -> list[torch.Tensor]:
    """Per-head ``[q, k, v]`` (``(..., heads, d_head)``, as ``hook_q/k/v``) from ln1's output ``normed``,
    through the query / key norms where the spec maps them (Qwen 3: ``hook_q`` / ``hook_k`` are their outputs).
    Modules are called through ``.forward`` here: their hooks (ours included) must not fire again."""
    attn, spec = _attn(hooked, layer), hooked.spec
    if spec.qkv == "separate":
        counts = (hooked.n_heads, hooked.n_kv_heads, hooked.n_kv_heads)
        out = []
        for i, (path, count) in enumerate(zip(spec.qkv_modules, counts, strict=True)):
            proj = get_module(attn, path).forward(normed)
            norm = get_module(attn, spec.qk_norm[i]).forward if spec.qk_norm and i < 2 else None
            if norm is not None and spec.qk_norm_layout == "flat":
                proj = norm(proj)
            proj = proj.unflatten(-1, (count, hooked.d_head))
            if norm is not None and spec.qk_norm_layout == "bshd":
                proj = norm(proj)
            elif norm is not None and spec.qk_norm_layout == "bhsd":
                proj = norm(proj.transpose(-3, -2)).transpose(-3, -2)
            out.append(proj)
        return out
    out = get_module(attn, spec.qkv_modules[0]).forward(normed)
    return split_fused_qkv(out, spec.qkv, hooked.n_heads, hooked.d_head)


def _mid_name(hooked: HookedModel, layer: int) -> str:
    """The hook whose activation is the MLP's norm input (resid_mid, or resid_pre in parallel blocks)."""
    return act_name("resid_pre" if hooked.parallel else "resid_mid", layer)


def _cache_names(hooked: HookedModel) -> list[str]:
    names = ["hook_embed"]
    for layer in range(hooked.n_layers):
        names += [act_name(c, layer) for c in ("resid_pre", "z", "mlp_out")]
        if not hooked.parallel:
            names.append(act_name("resid_mid", layer))
    names.append(act_name("resid_post", hooked.n_layers - 1))
    return names


def _sender_outputs(hooked: HookedModel, cache) -> torch.Tensor:
    """Every sender's output ``(n_senders, batch, seq, d_model)`` from a cache of :func:`_cache_names`."""
    outs = [cache["hook_embed"]]
    for layer in range(hooked.n_layers):
        z = cache[act_name("z", layer)]  # (b, s, h, dh)
        heads = torch.einsum("bshd,hdm->hbsm", z, _head_weights(hooked, layer).to(z.dtype))
        outs += [*heads, cache[act_name("mlp_out", layer)]]
    return torch.stack(outs).float()


def _receiver_grads(hooked: HookedModel, ids: torch.Tensor, metric: Metric, embed: torch.Tensor | None):
    """``dM/dx_v`` for every receiver ``(n_receivers, batch, seq, d_model)`` and the metric, from one forward
    and backward pass of ``ids`` (its embeddings replaced by ``embed`` when given)."""
    n = hooked.n_layers
    names = []
    for layer in range(n):
        names += [act_name(c, layer) for c in ("q", "k", "v", "ln2_normalized")]
    names.append(act_name("resid_post", n - 1))
    inputs = [act_name("resid_pre", layer) for layer in range(n)] + [
        _mid_name(hooked, layer) for layer in range(n)
    ]
    hooks = []
    if embed is not None:
        hooks.append(("hook_embed", lambda act, hook: embed.to(act.dtype).detach().requires_grad_()))
    else:
        hooks.append(
            ("hook_embed", lambda act, hook: act if act.requires_grad else act.detach().requires_grad_())
        )
    with torch.enable_grad():
        logits, cache = hooked.run_with_cache(ids, sorted(set(names + inputs)), grad=True, fwd_hooks=hooks)
        value = metric(logits)
        if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.requires_grad):
            raise ValueError(
                "metric must return a scalar tensor that depends on the logits (attribution differentiates "
                f"it), got {value!r}"
            )
        grads = torch.autograd.grad(value, [cache[name] for name in names], allow_unused=True)
    g = {
        name: (torch.zeros_like(cache[name]) if gr is None else gr)
        for name, gr in zip(names, grads, strict=True)
    }
    out = []
    for layer in range(n):
        x = cache[act_name("resid_pre", layer)].detach()
        counts = (hooked.n_heads, hooked.n_kv_heads, hooked.n_kv_heads)
        copies = x.unsqueeze(0).repeat(sum(counts), *([1] * x.ndim)).requires_grad_()
        with torch.enable_grad():
            qkv = _qkv(hooked, layer, _norm(hooked, layer, "ln1").forward(copies))
            outputs, grad_outputs, start = [], [], 0
            for which, count, proj in zip("qkv", counts, qkv, strict=True):
                gw = g[act_name(which, layer)]  # (b, s, count, dh)
                select = torch.zeros(count, 1, 1, count, 1, dtype=gw.dtype, device=gw.device)
                select[torch.arange(count), 0, 0, torch.arange(count)] = 1
                outputs.append(proj[start : start + count])
                grad_outputs.append(gw.unsqueeze(0) * select)
                start += count
            (per_head,) = torch.autograd.grad(outputs, [copies], grad_outputs)
        out += list(per_head)
        xm = cache[_mid_name(hooked, layer)].detach().requires_grad_()
        with torch.enable_grad():
            normed = _norm(hooked, layer, "ln2").forward(xm)
            (gm,) = torch.autograd.grad([normed], [xm], [g[act_name("ln2_normalized", layer)]])
        out.append(gm)
    out.append(g[act_name("resid_post", n - 1)])
    return torch.stack(out).float(), float(value.detach())


def _check_common(model, clean_ids, corrupt_ids, metric):
    hooked = wrap(model)
    clean, corrupt = check_pair(hooked, clean_ids, corrupt_ids)
    check_metric(metric, clean.shape[0], clean.shape[1], logits_width(hooked))
    spec, name = hooked.spec, type(hooked.model).__name__
    for which in ("ln1", "ln2"):
        if getattr(spec, which) is None:
            raise ValueError(
                f"edge attribution needs the block norms in the architecture map ({which} is None for "
                f"{name}): add ln1/ln2 paths to its ArchSpec"
            )
    # the graph's head senders are slices of the output projection added to the stream as they are: a norm
    # after it breaks that (the query / key receivers are recomputed through a mapped qk_norm, see _qkv)
    attn = _attn(hooked, 0)
    attn_out = get_module(hooked.blocks[0], spec.attn_out) if spec.attn_out else attn
    if attn_out is not attn and attn_out is not get_module(attn, spec.o_proj):
        raise ValueError(
            f"edge attribution needs attention outputs that are the sum of the heads' outputs; {name} norms "
            f"its attention output ({spec.attn_out}) before adding it to the stream"
        )
    return hooked, clean, corrupt


# ------------------------------------------------------------------------------------------- attribution
def edge_attribution_patching(
    model,
    clean_ids: torch.Tensor,
    corrupt_ids: torch.Tensor,
    metric: Metric,
    *,
    method: str = "eap-ig",
    steps: int = 5,
) -> EdgeScores:
    """Scores of every edge of :func:`build_graph`'s graph: EAP (``method="eap"``: the gradient at the clean
    input) or EAP-IG (``"eap-ig"``: its mean over ``steps`` interpolated inputs; Hanna et al. use 5).

    ``metric`` maps logits ``(n_prompts, seq, vocab)`` to a scalar tensor (see :func:`logit_diff`); clean and
    corrupt token ids have the same shape. Costs ``steps`` forward and backward passes plus two forward passes.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask (and transformers'
    gradient checkpointing, which runs in training mode only, stays off: its reentrant variant would leave the
    cached activations out of the backward pass).
    """
    hooked, clean, corrupt = _check_common(model, clean_ids, corrupt_ids, metric)
    check_choice(method, "method", METHODS)
    check_int(steps, "steps", minimum=1, maximum=10_000)
    graph = build_graph(hooked)
    names = _cache_names(hooked)
    with eval_mode(hooked.model):
        with torch.no_grad():
            clean_logits, clean_cache = hooked.run_with_cache(clean, names)
            corrupt_logits, corrupt_cache = hooked.run_with_cache(corrupt, names)
            delta = _sender_outputs(hooked, corrupt_cache) - _sender_outputs(hooked, clean_cache)
        if method == "eap":
            grads, _ = _receiver_grads(hooked, clean, metric, None)
            used = 1
        else:
            e0, e1 = clean_cache["hook_embed"], corrupt_cache["hook_embed"]
            grads = torch.zeros(len(graph.receivers), *delta.shape[1:], device=delta.device)
            for k in range(steps):
                alpha = (k + 0.5) / steps
                g, _ = _receiver_grads(hooked, clean, metric, e0 + alpha * (e1 - e0))
                grads += g / steps
            used = steps
    scores = torch.einsum("ubsd,vbsd->uv", delta.double(), grads.double())  # M is a mean over prompts
    # on the CPU, with the graph's masks (as edge_patching's scores)
    scores = torch.where(graph.mask, scores.float().cpu(), torch.zeros((), dtype=torch.float32))
    return EdgeScores(
        graph, scores, metric_value(metric, clean_logits), metric_value(metric, corrupt_logits), method, used
    )


@dataclass
class NeuronScores:
    """Attribution of every MLP neuron (``mlp.hook_post`` unit): ``scores[layer, neuron]`` estimates
    ``M(neuron patched from corrupt) - M(clean)``, summed over positions, averaged over prompts."""

    scores: torch.Tensor
    layers: list[int]
    clean: float
    corrupt: float
    method: str

    def top(self, k: int = 10, *, absolute: bool = True) -> list[tuple[int, int, float]]:
        """The ``k`` neurons ``(layer, neuron, score)`` with the largest ``|score|`` (or score)."""
        check_int(k, "k", minimum=0)
        check_bool(absolute, "absolute")
        key = (self.scores.abs() if absolute else self.scores).flatten()
        order = torch.argsort(key, descending=True, stable=True)[:k].tolist()
        width = self.scores.shape[1]
        return [(self.layers[i // width], i % width, float(self.scores.flatten()[i])) for i in order]


def neuron_attribution_patching(
    model,
    clean_ids: torch.Tensor,
    corrupt_ids: torch.Tensor,
    metric: Metric,
    *,
    layers=None,
    method: str = "eap-ig",
    steps: int = 5,
) -> NeuronScores:
    """EAP / EAP-IG scores of the MLP neurons of ``layers`` (default: all): ``(post_corrupt - post_clean) *
    dM/dpost`` per neuron, the gradient at the clean input (``"eap"``) or averaged over ``steps``
    interpolated inputs (``"eap-ig"``).

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask (and transformers'
    gradient checkpointing, which runs in training mode only, stays off: its reentrant variant would leave the
    cached activations out of the backward pass)."""
    hooked = wrap(model)
    clean, corrupt = check_pair(hooked, clean_ids, corrupt_ids)
    check_metric(metric, clean.shape[0], clean.shape[1], logits_width(hooked))
    layers = check_layers(layers, hooked.n_layers)
    check_choice(method, "method", METHODS)
    check_int(steps, "steps", minimum=1, maximum=10_000)
    names = [act_name("post", layer) for layer in layers]
    with eval_mode(hooked.model):
        with torch.no_grad():
            clean_logits, clean_cache = hooked.run_with_cache(clean, [*names, "hook_embed"])
            corrupt_logits, corrupt_cache = hooked.run_with_cache(corrupt, [*names, "hook_embed"])
        e0, e1 = clean_cache["hook_embed"], corrupt_cache["hook_embed"]
        alphas = [0.0] if method == "eap" else [(k + 0.5) / steps for k in range(steps)]
        total = [torch.zeros_like(clean_cache[name]).float() for name in names]
        for alpha in alphas:
            embed = e0 + alpha * (e1 - e0)
            with torch.enable_grad():
                logits, cache = hooked.run_with_cache(
                    clean,
                    names,
                    grad=True,
                    fwd_hooks=[
                        ("hook_embed", lambda act, hook, e=embed: e.to(act.dtype).detach().requires_grad_())
                    ],
                )
                value = metric(logits)
                if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.requires_grad):
                    raise ValueError(
                        f"metric must return a scalar tensor that depends on the logits, got {value!r}"
                    )
                grads = torch.autograd.grad(value, [cache[n] for n in names], allow_unused=True)
            for i, gr in enumerate(grads):
                if gr is not None:
                    total[i] += gr.float() / len(alphas)
    scores = torch.stack(
        [
            ((corrupt_cache[n].float() - clean_cache[n].float()) * g).sum((0, 1))  # g has M's 1/n_prompts
            for n, g in zip(names, total, strict=True)
        ]
    )
    return NeuronScores(
        scores, layers, metric_value(metric, clean_logits), metric_value(metric, corrupt_logits), method
    )


# ---------------------------------------------------------------------------------- exact and circuits
def _edge_mask_from(graph: Graph, edges) -> torch.Tensor:
    """A circuit given as a bool mask ``(n_senders, n_receivers)`` or a list of ``(sender, receiver)`` pairs."""
    if isinstance(edges, torch.Tensor):
        if edges.dtype != torch.bool or edges.shape != graph.mask.shape:
            raise ValueError(
                f"edges must be a bool mask shaped {tuple(graph.mask.shape)} (senders x receivers) or a list "
                f"of (sender, receiver) names, got {edges.dtype} {tuple(edges.shape)}"
            )
        return edges & graph.mask
    if isinstance(edges, (str, bytes)) or not isinstance(edges, (list, tuple, set, frozenset)):
        raise TypeError(f"edges must be a bool mask or a list of (sender, receiver) pairs, got {edges!r}")
    s_index = {s: i for i, s in enumerate(graph.senders)}
    r_index = {r: i for i, r in enumerate(graph.receivers)}
    mask = torch.zeros_like(graph.mask)
    for pair in edges:
        if not (isinstance(pair, tuple) and len(pair) >= 2):
            raise TypeError(f"edges must hold (sender, receiver) pairs, got {pair!r}")
        s, r = pair[0], pair[1]
        if s not in s_index or r not in r_index or not graph.mask[s_index[s], r_index[r]]:
            raise ValueError(
                f"edges: ({s!r}, {r!r}) is not an edge of this model's graph (senders like 'input', 'a0.h1', "
                "'m0'; receivers like 'a1.h0.q', 'm1', 'logits'; the sender must come first)"
            )
        mask[s_index[s], r_index[r]] = True
    return mask


def _receiver_hooks(hooked: HookedModel, correction):
    """Forward hooks that feed each receiver ``v`` the input ``x_v - correction(v, x_v, run)``: ``run`` holds
    the activations of this pass recorded so far; ``correction`` returns ``(rows, batch, seq, d_model)`` or
    ``None`` (no change). Attention receivers are recomputed per head from ln1, the MLP from ln2, the logits
    from the final norm."""
    graph_r = build_graph(hooked).receivers
    index = {r: i for i, r in enumerate(graph_r)}
    run: dict[str, torch.Tensor] = {}
    hooks = []

    def record(act, hook):
        run[hook.name] = act
        return None

    for name in _cache_names(hooked):
        hooks.append((name, record))
    n, counts = hooked.n_layers, {"q": hooked.n_heads, "k": hooked.n_kv_heads, "v": hooked.n_kv_heads}
    for layer in range(n):
        for w, which in enumerate("qkv"):

            def head_hook(act, hook, layer=layer, w=w, which=which):
                x = run[act_name("resid_pre", layer)]
                ids = [index[f"a{layer}.h{i}.{which}"] for i in range(counts[which])]
                corr = correction(ids, run)
                if corr is None:
                    return None
                xs = x.unsqueeze(0) - corr.to(x.dtype)  # (heads, b, s, d)
                proj = _qkv(hooked, layer, _norm(hooked, layer, "ln1").forward(xs))[
                    w
                ]  # (heads, b, s, heads, dh)
                pick = torch.arange(counts[which])
                return proj[pick, :, :, pick].permute(1, 2, 0, 3).to(act.dtype)

            hooks.append((act_name(which, layer), head_hook))

        def mlp_hook(act, hook, layer=layer):
            corr = correction([index[f"m{layer}"]], run)
            if corr is None:
                return None
            x = run[_mid_name(hooked, layer)]
            return _norm(hooked, layer, "ln2").forward(x - corr[0].to(x.dtype)).to(act.dtype)

        hooks.append((act_name("ln2_normalized", layer), mlp_hook))

    def logits_hook(act, hook):
        corr = correction([index["logits"]], run)
        if corr is None:
            return None
        x = run[act_name("resid_post", n - 1)]
        return hooked.final_norm.forward(x - corr[0].to(x.dtype)).to(act.dtype)

    hooks.append(("ln_final.hook_normalized", logits_hook))
    return hooks


def _current_senders(hooked: HookedModel, run: dict[str, torch.Tensor], upto: int) -> torch.Tensor:
    """The outputs of the first ``upto`` senders in this pass (those recorded so far)."""
    outs = [run["hook_embed"]]
    for layer in range(hooked.n_layers):
        if len(outs) >= upto:
            break
        z = run[act_name("z", layer)]
        outs += [*torch.einsum("bshd,hdm->hbsm", z, _head_weights(hooked, layer).to(z.dtype))]
        if len(outs) < upto:
            outs.append(run[act_name("mlp_out", layer)])
    return torch.stack(outs[:upto]).float()


def evaluate_circuit(
    model, clean_ids: torch.Tensor, corrupt_ids: torch.Tensor, metric: Metric, edges
) -> float:
    """The metric of the clean input with every edge outside ``edges`` patched from the corrupt input.

    ``edges``: a bool mask ``(n_senders, n_receivers)`` over :func:`build_graph`'s graph or a list of
    ``(sender, receiver)`` names. The whole graph gives ``M(clean)``, no edge ``M(corrupt)`` (up to rounding).

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask.
    """
    hooked, clean, corrupt = _check_common(model, clean_ids, corrupt_ids, metric)
    graph = build_graph(hooked)
    outside = graph.mask & ~_edge_mask_from(graph, edges)
    with torch.no_grad(), eval_mode(hooked.model):
        _, corrupt_cache = hooked.run_with_cache(corrupt, _cache_names(hooked))
        corrupt_out = _sender_outputs(hooked, corrupt_cache)
        upstream = [int(graph.mask[:, j].sum()) for j in range(len(graph.receivers))]  # senders precede

        def correction(ids, run):
            rows = outside[:, ids]  # (senders, rows)
            if not rows.any():
                return None
            k = max(upstream[j] for j in ids)
            diff = _current_senders(hooked, run, k) - corrupt_out[:k]
            return torch.einsum("ur,ubsd->rbsd", rows[:k].to(diff.device, torch.float32), diff)

        logits = hooked.run_with_hooks(clean, _receiver_hooks(hooked, correction))
    return metric_value(metric, logits)


def edge_patching(
    model,
    clean_ids: torch.Tensor,
    corrupt_ids: torch.Tensor,
    metric: Metric,
    *,
    edges=None,
) -> EdgeScores:
    """Exact edge patching: ``M(edge patched) - M(clean)`` for every edge (or those of ``edges``), one forward
    pass per edge. The reference EAP approximates; exhaustive and slow on large graphs.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask."""
    hooked, clean, corrupt = _check_common(model, clean_ids, corrupt_ids, metric)
    graph = build_graph(hooked)
    chosen = graph.mask if edges is None else _edge_mask_from(graph, edges)
    names = _cache_names(hooked)
    with torch.no_grad(), eval_mode(hooked.model):
        clean_logits, clean_cache = hooked.run_with_cache(clean, names)
        corrupt_logits, corrupt_cache = hooked.run_with_cache(corrupt, names)
        delta = _sender_outputs(hooked, corrupt_cache) - _sender_outputs(hooked, clean_cache)
        clean_value = metric_value(metric, clean_logits)
        scores = torch.zeros(graph.mask.shape)
        for u, v in chosen.nonzero().tolist():

            def correction(ids, run, u=u, v=v):
                if v not in ids:
                    return None
                out = torch.zeros(len(ids), *delta.shape[1:], device=delta.device)
                out[ids.index(v)] = -delta[u]
                return out

            logits = hooked.run_with_hooks(clean, _receiver_hooks(hooked, correction))
            scores[u, v] = metric_value(metric, logits) - clean_value
    return EdgeScores(
        graph, scores, clean_value, metric_value(metric, corrupt_logits), "exact", scored=chosen
    )


@dataclass
class Circuit:
    """The smallest top-scored edge set whose faithfulness reaches ``threshold``, and the searched curve."""

    edges: list[tuple[str, str, float]]
    faithfulness: float
    threshold: float
    n_edges_total: int
    curve: list[tuple[int, float]] = field(default_factory=list)  # (edges kept, faithfulness), as evaluated

    @property
    def fraction(self) -> float:
        """The fraction of the graph's edges the circuit keeps."""
        return len(self.edges) / max(self.n_edges_total, 1)


def faithfulness(value: float, clean: float, corrupt: float) -> float:
    """``(value - corrupt) / (clean - corrupt)``; clean and corrupt must differ (else nothing is measured)."""
    for v, name in ((value, "value"), (clean, "clean"), (corrupt, "corrupt")):
        check_number(v, name)
    if clean == corrupt:
        raise ValueError(
            f"clean and corrupt are equal ({clean!r}): the corrupt input does not move the metric, so "
            "faithfulness is undefined; choose a corrupt input (or metric) that changes it"
        )
    return (value - corrupt) / (clean - corrupt)


def find_circuit(
    model,
    clean_ids: torch.Tensor,
    corrupt_ids: torch.Tensor,
    metric: Metric,
    scores: EdgeScores,
    *,
    threshold: float = 0.8,
    absolute: bool = True,
) -> Circuit:
    """Binary search over the number of top-scored edges (by ``|score|``, or by score) for the smallest edge set
    whose faithfulness is at least ``threshold`` (assumes faithfulness grows with the number of edges, as
    in the papers' selection; the evaluated points are in ``Circuit.curve``).

    Runs the model in eval mode (each :func:`evaluate_circuit`); every submodule's mode is restored."""
    hooked = wrap(model)
    if not isinstance(scores, EdgeScores):
        raise TypeError(
            f"scores must be an EdgeScores (from edge_attribution_patching), got {type(scores).__name__}"
        )
    graph = build_graph(hooked)
    if scores.graph != graph:
        raise ValueError("scores must come from this model's graph (its senders and receivers differ)")
    assert scores.scored is not None
    if not torch.equal(scores.scored, graph.mask):
        raise ValueError(
            "scores must score every edge of the graph (edge_attribution_patching, or edge_patching with "
            "edges=None): a circuit searched over a subset would report the subset's faithfulness as 1"
        )
    check_number(threshold, "threshold", minimum=0.0, maximum=1.0)
    check_bool(absolute, "absolute")
    assert scores.scored is not None
    order = _edge_order(scores.scores, scores.scored, absolute)
    total = len(order)
    clean_v = evaluate_circuit(hooked, clean_ids, corrupt_ids, metric, graph.mask)
    corrupt_v = evaluate_circuit(hooked, clean_ids, corrupt_ids, metric, torch.zeros_like(graph.mask))
    curve: dict[int, float] = {}

    def faith(k: int) -> float:
        if k not in curve:
            mask = torch.zeros(graph.mask.numel(), dtype=torch.bool)
            mask[order[:k]] = True
            value = evaluate_circuit(hooked, clean_ids, corrupt_ids, metric, mask.view_as(graph.mask))
            curve[k] = faithfulness(value, clean_v, corrupt_v)
        return curve[k]

    lo, hi = 0, total  # faith(hi) = 1 >= threshold
    curve[total] = 1.0
    curve[0] = 0.0
    if threshold <= 0:
        hi = 0  # the empty circuit already reaches it
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if faith(mid) >= threshold:
            hi = mid
        else:
            lo = mid
    n_r = len(graph.receivers)
    kept = [
        (graph.senders[i // n_r], graph.receivers[i % n_r], float(scores.scores.flatten()[i]))
        for i in order[:hi].tolist()
    ]
    return Circuit(kept, curve[hi], float(threshold), total, sorted(curve.items()))
