"""Head scores of a model: attention patterns from one hooked forward pass, every pattern score per
``(layer, head)``, and the paper's copy score."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from icml_interp.heads.scores import (
    attention_entropy,
    check_mask,
    duplicate_token_score,
    induction_score,
    pattern_matching_score,
    previous_token_score,
    relative_position_score,
)
from icml_interp.hooks import HookedModel, act_name, wrap
from icml_interp.hooks.arch import get_module
from icml_interp.validation import check_bool, check_choice, check_indices, check_int, check_type, eval_mode

SCORE_NAMES = (
    "previous_token",
    "duplicate_token",
    "induction",
    "pattern_matching",
    "relative_position",
    "entropy",
    "copy",
)
# the entries relative_position adds to HeadScores.scores besides its std ("relative_position")
_RELATIVE_EXTRA = ("relative_position_mode", "relative_position_mode_fraction")


def _prepare(model, input_ids, attention_mask, layers) -> tuple[HookedModel, torch.Tensor, Any, list[int]]:
    """The hooked model, ``input_ids`` ``(batch, seq)`` on its device, the bool attention mask (or None)
    and the layers (all when None)."""
    hooked = wrap(model)
    ids = hooked.token_ids(input_ids).to(hooked.embed.weight.device)
    mask = None
    if attention_mask is not None:
        batch, seq = ids.shape
        mask = check_mask(attention_mask, "attention_mask", batch, seq, ids.device, like="input_ids")
        if not bool(mask.any(-1).all()):
            raise ValueError("attention_mask must keep at least one token in every row")
    if layers is None:
        chosen = list(range(hooked.n_layers))
    else:
        chosen = check_indices(layers, hooked.n_layers, "layers")
        if not chosen:
            raise ValueError("layers must name at least one layer")
    return hooked, ids, mask, chosen


def _run(hooked: HookedModel, ids, mask, layers: list[int], shorts: Sequence[str]) -> dict[str, torch.Tensor]:
    """One forward pass caching ``shorts`` (e.g. ``"pattern"``, ``"z"``) at ``layers``, each stacked
    ``(layers, ...)``, with the model in eval mode (every submodule's mode restored afterwards)."""
    names = [act_name(short, layer) for short in shorts for layer in layers]
    kwargs: dict[str, Any] = {} if mask is None else {"attention_mask": mask.long()}
    with eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(ids, names, **kwargs)
    return {short: cache.stack(short, layers) for short in shorts}


def attention_patterns(
    model, input_ids: torch.Tensor, *, layers=None, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention probabilities ``(layers, batch, heads, q, k)`` of one forward pass (``blocks.L.attn.
    hook_pattern``, i.e. eager attention). ``model``: a Hugging Face causal LM or a :class:`HookedModel`;
    ``layers``: ints (negative from the end), default all.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the patterns of later layers would be one sample of it."""
    hooked, ids, mask, chosen = _prepare(model, input_ids, attention_mask, layers)
    return _run(hooked, ids, mask, chosen, ["pattern"])["pattern"]


def _output_weights(hooked: HookedModel, layer: int) -> torch.Tensor:
    """Each head's slice of the attention output projection, ``(heads, d_head, d_model)``: head ``h``
    writes ``z[..., h, :] @ W[h]`` (the projection's bias is shared by all heads and left out)."""
    o_proj = get_module(get_module(hooked.blocks[layer], hooked.spec.attn), hooked.spec.o_proj)
    weight = getattr(o_proj, "weight", None)
    width = hooked.n_heads * hooked.d_head
    if isinstance(o_proj, nn.Linear) and isinstance(weight, torch.Tensor):
        w = weight.T  # nn.Linear stores (d_model, heads * d_head)
    elif hasattr(o_proj, "nf") and isinstance(weight, torch.Tensor) and weight.shape[0] == width:
        w = weight  # GPT-2's Conv1D stores (heads * d_head, d_model)
    else:
        raise TypeError(
            f"model: the output projection of layer {layer} is a {type(o_proj).__name__}, "
            "expected nn.Linear or transformers' Conv1D"
        )
    return w.reshape(hooked.n_heads, hooked.d_head, -1)


def _post_norm(hooked: HookedModel, layer: int) -> tuple[torch.Tensor, float, Any] | None:
    """The RMSNorm that block ``layer`` applies to its attention output before adding it to the stream
    (Gemma 2 / 3, OLMo 2: the spec's ``attn_out``) as ``(weight, eps, bias)``: its per-channel weight
    ``(d_model,)`` with the spec's ``norm_weight_offset`` (Gemma: ``1 + weight``) in float32, as those norms
    compute, its ``eps``, and the output projection's bias (None without one), part of the norm's input; None
    where the heads' outputs reach the stream as they are."""
    spec = hooked.spec
    if spec.attn_out is None:
        return None
    block = hooked.blocks[layer]
    attn = get_module(block, spec.attn)
    o_proj, norm = get_module(attn, spec.o_proj), get_module(block, spec.attn_out)
    if norm is attn or norm is o_proj:  # ESM: the output projection itself
        return None
    weight = getattr(norm, "weight", None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if (
        isinstance(norm, nn.LayerNorm)
        or not isinstance(eps, float)
        or not isinstance(weight, torch.Tensor)
        or tuple(weight.shape) != (hooked.d_model,)
    ):
        raise TypeError(
            f"model: copy_score supports an RMSNorm of the attention output (Gemma 2 / 3, OLMo 2); layer "
            f"{layer}'s {spec.attn_out} is a {type(norm).__name__}"
        )
    return spec.norm_weight_offset + weight.float(), eps, getattr(o_proj, "bias", None)


def _positions(positions, batch: int, seq: int, device) -> torch.Tensor:
    """``positions`` (None: all; an int or ints, negative from the end, in every row; or a bool
    ``(batch, seq)`` mask) as a bool ``(batch, seq)`` mask."""
    if positions is None:
        return torch.ones(batch, seq, dtype=torch.bool, device=device)
    if isinstance(positions, torch.Tensor):
        if positions.dtype != torch.bool:
            raise TypeError(
                f"positions must be None, ints or a bool (batch, seq) mask, got {positions.dtype}"
            )
        return check_mask(positions, "positions", batch, seq, device, like="input_ids")
    chosen = check_indices(positions, seq, "positions")
    if not chosen:
        raise ValueError("positions must name at least one position")
    mask = torch.zeros(batch, seq, dtype=torch.bool, device=device)
    mask[:, chosen] = True
    return mask


def _copy_scores(
    hooked: HookedModel,
    ids: torch.Tensor,
    patterns: torch.Tensor,
    zs: torch.Tensor,
    layers: list[int],
    queries: torch.Tensor,
    real: torch.Tensor,
) -> torch.Tensor:
    """The copy score ``(layers, heads)`` from cached ``patterns`` ``(layers, batch, heads, q, k)`` and
    ``zs`` ``(layers, batch, q, heads, d_head)``, over the ``queries`` ``(batch, q)``; ``real`` marks the
    tokens of each sequence."""
    vocab = hooked.d_vocab
    present = torch.zeros(ids.shape[0], vocab, dtype=torch.bool, device=ids.device)
    present[torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(ids)[real], ids[real]] = True
    rows, cols = queries.nonzero(as_tuple=True)  # the counted (batch, query) pairs
    if rows.numel() == 0:
        warnings.warn("copy_score: no query counts; every score is NaN", RuntimeWarning, stacklevel=3)
        return torch.full((len(layers), hooked.n_heads), float("nan"))
    chunk = max(1, 2**22 // (hooked.n_heads * vocab))  # queries per unembedding: a bounded (n, heads, vocab)
    out = torch.zeros(len(layers), hooked.n_heads, dtype=torch.float64)
    with torch.no_grad():
        for li, layer in enumerate(layers):
            w_o = _output_weights(hooked, layer)  # (heads, d_head, d_model)
            post = _post_norm(hooked, layer)
            keys = torch.where(real[:, None, None, :], patterns[li], -1.0)  # pad keys never win the argmax
            for start in range(0, rows.numel(), chunk):
                b, i = rows[start : start + chunk], cols[start : start + chunk]
                head_out = torch.einsum(
                    "nhd,hdm->nhm", zs[li, b, i].to(w_o.dtype), w_o
                )  # (n, heads, d_model)
                if post is not None:  # the head's share of the normed attention output the stream gets
                    weight, eps, bias = post
                    total = head_out.float().sum(1, keepdim=True)  # (n, 1, d_model): the norm's input
                    total = total if bias is None else total + bias.float()
                    rms = (total.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # (n, 1, 1)
                    head_out = (head_out.float() / rms * weight).to(head_out.dtype)
                probs = hooked.lens(head_out).float().softmax(-1)  # (n, heads, vocab)
                probs = (probs - probs.mean(-1, keepdim=True)).relu()
                source = keys[b, :, i].argmax(-1)  # (n, heads): the most attended key
                token = ids[b[:, None], source]  # (n, heads)
                numerator = probs.gather(-1, token[..., None])[..., 0]
                denominator = (probs * present[b][:, None]).sum(-1)
                score = torch.where(denominator > 0, numerator / denominator.clamp(min=1e-30), 0.0)
                out[li] += score.sum(0).double().cpu()
    return (out / rows.numel()).float()


def copy_score(
    model,
    input_ids: torch.Tensor,
    *,
    layers=None,
    positions=None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The paper's copy score per head, ``(layers, heads)`` (Kesten-Pomeranz et al. 2026, as their code
    computes it, paraphrased in the research notes; not TransformerLens' OV-circuit copying score).

    For each query position: the head's output there (its ``hook_z`` slice times its slice of the output
    projection, without the shared bias) is passed through the final norm and the unembedding (and the final
    logit softcap, as :meth:`HookedModel.lens`); the probabilities over the vocabulary minus their mean,
    ReLU'd, give ``p``. The value is ``p`` of the token at the head's most attended key divided by the sum of
    ``p`` over the distinct tokens of the sequence (0 where that sum is 0: the head promotes no token of the
    sequence). The score is the mean over the queries, pooled over the batch.

    Where a block norms its attention output before adding it to the stream (Gemma 2 / 3, OLMo 2), the head's
    output is first turned into its share of what the stream gets, as the forward pass computes it: divided
    by that norm's RMS of the whole attention output at the token (every head and the bias, ``eps``
    included) and multiplied by the norm's weight (Gemma: ``1 + weight``). The shares of the heads and of the
    bias sum to ``hook_attn_out``. The norm's weight changes which tokens the head promotes; the RMS is a
    positive per-token factor, which the final norm removes only where the head's output is large next to
    that norm's ``eps`` (not in a freshly initialised OLMo 2, whose head outputs have RMS ~1e-4 against an
    ``eps`` of 1e-5 on the mean square).

    ``positions``: the queries that count (None: every real token; ints, negative from the end; or a bool
    ``(batch, seq)`` mask, e.g. the masked positions); ``attention_mask`` ``(batch, seq)`` marks the real
    tokens (padding counts neither as a query, a key nor a token of the sequence).

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the scores would be one sample of it.
    """
    hooked, ids, mask, chosen = _prepare(model, input_ids, attention_mask, layers)
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask
    queries = _positions(positions, ids.shape[0], ids.shape[1], ids.device) & real
    cached = _run(hooked, ids, mask, chosen, ["pattern", "z"])
    return _copy_scores(hooked, ids, cached["pattern"], cached["z"], chosen, queries, real)


@dataclass(frozen=True)
class HeadScores:
    """Scores per head: ``scores[name]`` is ``(len(layers), heads)``, row ``r`` for model layer
    ``layers[r]``. ``relative_position`` is the std of the argmax offset (low: a relative-position head)
    and comes with ``relative_position_mode`` and ``relative_position_mode_fraction``."""

    scores: dict[str, torch.Tensor]
    layers: tuple[int, ...]

    def __getitem__(self, name: str) -> torch.Tensor:
        check_choice(name, "name", tuple(self.scores))
        return self.scores[name]

    def top(self, name: str, k: int = 5, largest: bool = True) -> list[tuple[int, int, float]]:
        """The ``k`` heads with the largest (or smallest) ``name`` score as ``(layer, head, value)``, best
        first; NaN scores are left out."""
        values = self[name]
        check_int(k, "k", minimum=1)
        check_bool(largest, "largest")
        flat = values.flatten().double()
        finite = (~flat.isnan()).nonzero()[:, 0]
        order = finite[flat[finite].argsort(descending=largest, stable=True)][:k]
        heads = values.shape[1]
        return [(self.layers[int(j) // heads], int(j) % heads, float(flat[j])) for j in order]

    def to_rows(self) -> list[dict[str, float | int]]:
        """A tidy table: one dict per ``(layer, head)`` with ``layer``, ``head`` and every score."""
        heads = next(iter(self.scores.values())).shape[1] if self.scores else 0
        return [
            {"layer": layer, "head": h, **{name: float(v[r, h]) for name, v in self.scores.items()}}
            for r, layer in enumerate(self.layers)
            for h in range(heads)
        ]


def head_scores(
    model,
    input_ids: torch.Tensor,
    *,
    tokens: torch.Tensor | None = None,
    alignment: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    query_mask: torch.Tensor | None = None,
    layers=None,
    scores: Sequence[str] | None = None,
) -> HeadScores:
    """Every head score of :mod:`icml_interp.heads.scores` (and optionally the copy score) for each
    ``(layer, head)``, from one forward pass.

    ``scores`` names some of :data:`SCORE_NAMES`; None means every one that applies except ``copy``
    (``pattern_matching`` applies only with ``alignment``). ``tokens`` (for ``duplicate_token`` and
    ``induction``) defaults to ``input_ids``. ``attention_mask`` ``(batch, seq)`` marks real tokens: padding
    counts neither as a query nor as a key of ``relative_position``/``entropy``, nor as a token occurrence.
    ``query_mask`` (same shape) drops further queries from every score (e.g. BOS, or all but the masked
    positions). ``layers``: ints, default all. Padding queries drop out of
    :func:`repeated_sequence_induction_score`'s layout, which is therefore not computed here.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the scores would be one sample of it.
    """
    hooked, ids, mask, chosen = _prepare(model, input_ids, attention_mask, layers)
    batch, seq = ids.shape
    if scores is None:
        names = [n for n in SCORE_NAMES if n != "copy" and (n != "pattern_matching" or alignment is not None)]
    else:
        if isinstance(scores, str) or not isinstance(scores, Sequence) or not scores:
            raise TypeError(
                f"scores must be None or a non-empty list of names from {SCORE_NAMES}, got {scores!r}"
            )
        names = [check_choice(n, "scores", SCORE_NAMES) for n in scores]
        if "pattern_matching" in names and alignment is None:
            raise ValueError("scores: pattern_matching needs alignment (the aligned position of each query)")
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask
    queries = real & check_mask(query_mask, "query_mask", batch, seq, ids.device, like="input_ids")
    if tokens is None:
        tokens = ids
    else:
        check_type(tokens, "tokens", torch.Tensor, "a (batch, seq) integer tensor of token ids")
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"tokens must be an integer tensor of token ids, got {tokens.dtype}")
        if tuple(tokens.shape) not in ((batch, seq), (seq,)):
            raise ValueError(
                f"tokens must have shape {(batch, seq)} like input_ids, got {tuple(tokens.shape)}"
            )
        tokens = tokens.to(ids.device).expand(batch, seq)
    tokens = tokens.masked_fill(~real, -1)  # padding is never an occurrence of a real token

    cached = _run(hooked, ids, mask, chosen, ["pattern", "z"] if "copy" in names else ["pattern"])
    stacked = cached["pattern"]  # (layers, batch, heads, q, k)
    n_layers, heads = len(chosen), stacked.shape[2]
    pattern = stacked.permute(1, 0, 2, 3, 4).reshape(
        batch, n_layers * heads, seq, seq
    )  # layers x heads as heads

    def grid(values: torch.Tensor) -> torch.Tensor:
        return values.reshape(n_layers, heads).float().cpu()

    out: dict[str, torch.Tensor] = {}
    for name in names:
        if name == "previous_token":
            out[name] = grid(previous_token_score(pattern, query_mask=queries))
        elif name == "duplicate_token":
            out[name] = grid(duplicate_token_score(pattern, tokens, query_mask=queries))
        elif name == "induction":
            out[name] = grid(induction_score(pattern, tokens, query_mask=queries))
        elif name == "pattern_matching":
            assert alignment is not None  # checked above
            out[name] = grid(pattern_matching_score(pattern, alignment, query_mask=queries))
        elif name == "relative_position":
            rp = relative_position_score(pattern, query_mask=queries, key_mask=real)
            out[name] = grid(rp.std)
            out[_RELATIVE_EXTRA[0]], out[_RELATIVE_EXTRA[1]] = grid(rp.mode), grid(rp.mode_fraction)
        elif name == "entropy":
            out[name] = grid(attention_entropy(pattern, query_mask=queries, key_mask=real))
        else:  # copy
            out[name] = _copy_scores(hooked, ids, stacked, cached["z"], chosen, queries, real)
    return HeadScores(scores=out, layers=tuple(chosen))
