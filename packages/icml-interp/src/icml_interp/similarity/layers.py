"""Layers of models of different depths: per-text representations of every layer, depth buckets, and
layer matching by normalised depth (Wolfram & Schein: layers at similar relative depths are similar)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from icml_interp.hooks import HookedModel
from icml_interp.steering.contrastive import right_padded
from icml_interp.validation import check_bool, check_choice, check_indices, check_int, eval_mode

POOLINGS = ("mean", "last")
MAX_LAYERS = 100_000  # a bound on layer counts, so that a mistyped huge count fails instead of looping


def bucket_names(buckets: int) -> tuple[str, ...]:
    """``("early", "middle", "late")`` for 3 buckets, ``("early", "late")`` for 2, ``("all",)`` for 1,
    else ``("bucket0", "bucket1", ...)``."""
    named = {1: ("all",), 2: ("early", "late"), 3: ("early", "middle", "late")}
    return named.get(buckets, tuple(f"bucket{b}" for b in range(buckets)))


def depth_buckets(n_layers: int, buckets: int = 3) -> dict[str, list[int]]:
    """The layers ``0 .. n_layers - 1`` grouped by normalised depth into ``buckets`` equal parts (thirds:
    ``{"early": [...], "middle": [...], "late": [...]}``; names from :func:`bucket_names`).

    Layer ``l``'s depth is the centre of its slice of the network, ``(l + 1/2) / n_layers``, and it goes
    to bucket ``floor(depth * buckets)``: 30 layers give 10 + 10 + 10, 4 layers give [0], [1, 2], [3].
    ``n_layers`` counts the representations compared (with :func:`layer_representations`, the embeddings
    are layer 0); it must be at least ``buckets`` so that no bucket is empty.
    """
    buckets = check_int(buckets, "buckets", minimum=1, maximum=MAX_LAYERS)
    n_layers = check_int(n_layers, "n_layers", minimum=1, maximum=MAX_LAYERS)
    if n_layers < buckets:
        raise ValueError(f"n_layers must be at least buckets = {buckets} (no empty bucket), got {n_layers}")
    groups: list[list[int]] = [[] for _ in range(buckets)]
    for layer in range(n_layers):
        groups[((2 * layer + 1) * buckets) // (2 * n_layers)].append(layer)  # floor((l + 1/2) / n * buckets)
    return dict(zip(bucket_names(buckets), groups, strict=True))


def _nearest(i: int, n_from: int, n_to: int) -> int:
    """The layer of an ``n_to``-layer model nearest in normalised depth ``i / (n_from - 1)`` to layer ``i``
    of an ``n_from``-layer model (halves round up; a single layer sits at depth 1/2)."""
    if n_from == 1:
        return n_to // 2
    return (2 * i * (n_to - 1) + (n_from - 1)) // (2 * (n_from - 1))


def match_layers_by_depth(n_a: int, n_b: int) -> list[tuple[int, int]]:
    """Pairs ``(layer of A, layer of B)`` at the same normalised depth, one per layer of the model with fewer
    layers (both if equal): its layer ``i`` has depth ``i / (n - 1)`` (first at 0, last at 1) and is
    matched with the other model's layer nearest in depth (ties to the deeper). 4 and 8 layers give
    ``[(0, 0), (1, 2), (2, 5), (3, 7)]``. Sorted by A's layer."""
    n_a = check_int(n_a, "n_a", minimum=1, maximum=MAX_LAYERS)
    n_b = check_int(n_b, "n_b", minimum=1, maximum=MAX_LAYERS)
    if n_a <= n_b:
        return [(i, _nearest(i, n_a, n_b)) for i in range(n_a)]
    return [(_nearest(j, n_b, n_a), j) for j in range(n_b)]


def _token_ids(texts, tokenizer, vocab: int, max_length: int | None) -> list[torch.Tensor]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence) or len(texts) == 0:
        raise TypeError(
            f"texts must be a non-empty list of strings (or of token-id lists), got {texts!r:.80}"
        )
    rows = []
    for i, text in enumerate(texts):
        if isinstance(text, str):
            if tokenizer is None or not callable(tokenizer):
                raise TypeError(
                    f"tokenizer must be a callable tokenizer (texts[{i}] is a string), "
                    f"got {type(tokenizer).__name__}"
                )
            try:
                ids = tokenizer(text)["input_ids"]
            except (TypeError, KeyError, IndexError) as err:
                raise TypeError(
                    f"tokenizer must map a string to {{'input_ids': [token ids]}} (texts[{i}]): {err}"
                ) from None
        elif isinstance(text, torch.Tensor) and text.ndim == 1 and not text.is_floating_point():
            ids = text.tolist()
        else:
            ids = text
        if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)):
            raise TypeError(
                f"texts[{i}] must be a string or a list of int token ids, got {type(text).__name__}"
            )
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise TypeError(f"texts[{i}] must tokenize to int token ids, got {ids!r:.80}")
        ids = list(ids)[:max_length]
        if not ids:
            raise ValueError(f"texts[{i}] has no tokens")
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"texts[{i}] holds token ids outside the model's vocabulary [0, {vocab})")
        rows.append(torch.tensor(ids, dtype=torch.long))
    return rows


def layer_representations(
    model,
    tokenizer,
    texts,
    pooling: str = "mean",
    batch_size: int = 16,
    layers=None,
    max_length: int | None = None,
    progress: bool = False,
) -> list[np.ndarray]:
    """One representation per text and layer of a Hugging Face causal LM: a list over layers of float32
    arrays ``(n_texts, d_model)``, texts in the given order.

    The model runs with ``output_hidden_states=True`` on right-padded batches with an attention mask (causal
    attention never lets a real token see the padding after it, so a text's representation does not depend
    on its batch). Entry 0 is the embeddings (GPT-2: token + position embeddings), entry ``l`` the residual
    stream after block ``l - 1``; following Hugging Face, the last entry has the final norm applied. So the
    list has ``n_layers + 1`` entries (``layers``: indices into it, negative allowed, default all).

    ``pooling``: ``"mean"`` averages a text's token positions (padding excluded), ``"last"`` takes its last
    token. ``texts``: strings, tokenized by ``tokenizer(text)["input_ids"]`` (special tokens as the
    tokenizer adds them by default), or token-id lists (``tokenizer`` may then be None); each is cut to its
    first ``max_length`` tokens if given. ``model`` may be a :class:`~icml_interp.hooks.HookedModel`. The
    model runs in eval mode, without gradients, on its own device; its mode is restored afterwards.
    """
    inner = model.model if isinstance(model, HookedModel) else model
    if not isinstance(inner, nn.Module) or not callable(getattr(inner, "get_input_embeddings", None)):
        raise TypeError(
            f"model must be a Hugging Face causal LM (a torch.nn.Module), got {type(model).__name__}"
        )
    pooling = check_choice(pooling, "pooling", POOLINGS)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if max_length is not None:
        max_length = check_int(max_length, "max_length", minimum=1)
    progress = check_bool(progress, "progress")
    if layers is not None and (
        isinstance(layers, (str, bytes, bool)) or not isinstance(layers, (int, Sequence))
    ):
        raise TypeError(f"layers must be None, an int or a list of ints, got {layers!r}")
    lm = cast(Any, inner)  # a Hugging Face causal LM
    rows = _token_ids(texts, tokenizer, lm.get_input_embeddings().num_embeddings, max_length)
    config = getattr(lm, "config", None)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    longest = max(range(len(rows)), key=lambda i: len(rows[i]))
    if isinstance(limit, int) and len(rows[longest]) > limit:
        raise ValueError(
            f"texts[{longest}] has {len(rows[longest])} tokens, more than the model's {limit} positions; "
            "pass max_length"
        )
    device = next(inner.parameters()).device
    # similar lengths share a batch: less padding
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    starts = range(0, len(rows), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="layer representations", unit="batch")
    pooled: list[list[torch.Tensor]] = []
    keep: list[int] = []
    with eval_mode(inner):  # every submodule's training flag is restored afterwards
        for start in starts:
            chunk = order[start : start + batch_size]
            batch, mask = right_padded([rows[i] for i in chunk])
            with torch.inference_mode():
                out = inner(
                    input_ids=batch.to(device), attention_mask=mask.to(device), output_hidden_states=True
                )
            states = getattr(out, "hidden_states", None)
            if not states:
                raise TypeError("model returned no hidden_states: it must be a Hugging Face causal LM")
            if not pooled:  # the first batch tells how many hidden states there are
                chosen = check_indices(layers, len(states), "layers")
                keep = list(range(len(states))) if chosen is None else chosen
                if not keep:
                    raise ValueError("layers must name at least one layer (or be None: all)")
            pooled.append([_pool(states[layer], mask.to(states[layer].device), pooling) for layer in keep])
    inverse = np.argsort(order)
    return [
        np.ascontiguousarray(torch.cat([p[k] for p in pooled]).cpu().numpy()[inverse])
        for k in range(len(keep))
    ]


def _pool(h: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """``(batch, d)`` float32 from hidden states ``(batch, seq, d)`` and a right-padding mask
    ``(batch, seq)``."""
    h = h.float()
    if pooling == "last":
        return h[torch.arange(len(h), device=h.device), mask.sum(1) - 1]
    weights = mask.to(h.dtype)[..., None]
    return (h * weights).sum(1) / weights.sum(1)
