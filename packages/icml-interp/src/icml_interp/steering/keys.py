"""MLP-key scaling (Yan et al. 2026, "perplexity paradox" / Anchor–Adapter, Sec. on bidirectional steering).

The *keys* of an MLP are the inputs of its down projection (``blocks.L.mlp.hook_post``; act(gate)·up in a
gated MLP); key ``i`` scales value vector ``i`` (row ``i`` of the down projection). A neuron's score for a
prompt with answer tokens ``A`` is::

    score_i = |key_i at the last prompt token| * (1 + 10 * overlap_i),
    overlap_i = |top-10 lens tokens of value_i ∩ A| / |A|

as in the authors' ``steering.py``. Scaling the keys of the top-scored neurons by a factor (0 suppresses,
2 amplifies) during the forward passes, generation included, steers the behaviour those neurons carry;
random neurons at the same layer are the control.

Our choices where the paper leaves room: :func:`neuron_scores` averages the per-prompt scores over a batch of
prompts (the authors score one prompt at a time); scaling applies at every position of every forward pass
(prompt and generated tokens), as in the authors' hook.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.lens import mlp_value_lens
from icml_interp.validation import check_finite, check_int, check_number, check_tensor

OVERLAP_WEIGHT = 10.0
TOP_TOKENS = 10
_POOL_LIMIT = 1 << 22  # random_neurons lists the candidate neurons up to this many


def neuron_scores(
    model,
    input_ids: torch.Tensor,
    layer: int,
    answer_tokens: Sequence[Iterable[int]],
    *,
    top_tokens: int = TOP_TOKENS,
    position: int = -1,
) -> dict[str, torch.Tensor]:
    """Scores of every neuron of block ``layer``'s MLP for prompts ``input_ids`` ``(n, seq)``.

    ``answer_tokens[j]`` holds the answer's token ids for prompt ``j``. Returns ``{"score": (d_mlp,),
    "key": (n, d_mlp) keys at ``position``, "overlap": (n, d_mlp)}``; the score is the mean over prompts of
    ``|key| * (1 + 10 * overlap)``.
    """
    hooked = wrap(model)
    ids = hooked.token_ids(input_ids)
    check_int(layer, "layer", minimum=0, maximum=hooked.n_layers - 1)
    check_int(top_tokens, "top_tokens", minimum=1, maximum=hooked.d_vocab)
    check_int(position, "position", minimum=-ids.shape[1], maximum=ids.shape[1] - 1)
    if isinstance(answer_tokens, (str, bytes, torch.Tensor)) or not isinstance(answer_tokens, Sequence):
        raise TypeError(
            f"answer_tokens must be a list with one list of token ids per prompt, got {type(answer_tokens).__name__}"
        )
    answers = []
    for a in answer_tokens:
        items = a.tolist() if isinstance(a, torch.Tensor) and a.ndim == 1 else a
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise TypeError(f"answer_tokens must hold one list of int token ids per prompt, got {a!r}")
        items = list(items)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            raise TypeError(f"answer_tokens must hold int token ids, got {a!r}")
        answers.append(set(items))
    if len(answers) != ids.shape[0] or any(not a for a in answers):
        raise ValueError(
            f"answer_tokens must hold one non-empty set of token ids per prompt ({ids.shape[0]}), "
            f"got {len(answers)}"
        )
    with torch.no_grad():
        _, cache = hooked.run_with_cache(ids, [act_name("post", layer)])
    keys = cache["post", layer][:, position]  # (n, d_mlp)
    top, _ = mlp_value_lens(hooked, layer, top_k=top_tokens)  # (d_mlp, top_tokens)
    overlap = torch.stack(
        [torch.isin(top, torch.tensor(sorted(a))).sum(-1) / len(a) for a in answers]
    ).float()
    score = (keys.abs() * (1 + OVERLAP_WEIGHT * overlap)).mean(0)
    return {"score": score, "key": keys, "overlap": overlap}


def top_neurons(scores: torch.Tensor, k: int = 10) -> list[int]:
    """Indices of the ``k`` highest scores (``scores`` a finite 1-d tensor)."""
    check_tensor(scores, "scores", "(d_mlp,)", ndim=1)
    if scores.is_complex() or scores.dtype == torch.bool:
        raise TypeError(f"scores must be a real tensor, got {scores.dtype}")
    check_finite(scores, "scores")
    check_int(k, "k", minimum=1, maximum=scores.numel())
    return scores.topk(k).indices.tolist()


def random_neurons(d_mlp: int, k: int, *, exclude: Iterable[int] = (), seed: int = 0) -> list[int]:
    """``k`` distinct random neuron indices in ``[0, d_mlp)`` avoiding ``exclude`` (the control set)."""
    check_int(d_mlp, "d_mlp", minimum=1, maximum=2**63 - 1)
    check_int(seed, "seed", minimum=0, maximum=2**63 - 1)
    given: Any = exclude
    if isinstance(given, torch.Tensor):
        given = given.tolist() if given.ndim == 1 and not given.is_floating_point() else None
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise TypeError(f"exclude must be an iterable of int neuron indices, got {exclude!r}")
    exclude = list(given)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in exclude):
        raise TypeError(f"exclude must hold int neuron indices, got {exclude!r}")
    excluded = {i for i in exclude if 0 <= i < d_mlp}
    left = d_mlp - len(excluded)
    if check_int(k, "k", minimum=1) > left:
        raise ValueError(f"k must be at most {left}, the neurons left after exclusion, got {k}")
    gen = torch.Generator().manual_seed(seed)
    if d_mlp > _POOL_LIMIT:  # too many neurons to list: draw until k distinct, non-excluded ones
        chosen: list[int] = []
        while len(chosen) < k:
            i = int(torch.randint(d_mlp, (1,), generator=gen))
            if i not in excluded and i not in chosen:
                chosen.append(i)
        return chosen
    pool = torch.tensor(sorted(set(range(d_mlp)) - excluded), dtype=torch.long)
    perm = torch.randperm(len(pool), generator=gen)
    return pool[perm[:k]].tolist()


@contextmanager
def scale_mlp_keys(model, neurons: Mapping[int, Sequence[int]], factor: float):
    """Within the context, the keys ``neurons[layer]`` of each block ``layer`` are multiplied by ``factor``
    in every forward pass (``model.generate`` included). ``neurons[layer]`` is a list of indices (the same
    neurons for every prompt) or a ``(batch, k)`` LongTensor (neurons per prompt). Hooks are removed on exit."""
    hooked = wrap(model)
    check_number(factor, "factor")
    if not isinstance(neurons, Mapping) or not neurons:
        raise TypeError(f"neurons must be a non-empty {{layer: neuron indices}} mapping, got {neurons!r}")
    hooks = []
    for layer, idx in neurons.items():
        check_int(layer, "neurons (layer key)", minimum=0, maximum=hooked.n_layers - 1)
        if isinstance(idx, torch.Tensor):
            if idx.dtype.is_floating_point or idx.is_complex() or idx.dtype == torch.bool:
                raise TypeError(f"neurons[{layer}] must hold integer indices, got dtype {idx.dtype}")
            index = idx.long()
        elif isinstance(idx, (list, tuple, range)) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in idx
        ):
            index = torch.tensor(list(idx), dtype=torch.long)
        else:
            raise TypeError(f"neurons[{layer}] must be a list of int indices or a LongTensor, got {idx!r}")
        if index.ndim not in (1, 2) or index.numel() == 0 or index.min() < 0 or index.max() >= hooked.d_mlp:
            raise ValueError(
                f"neurons[{layer}] must be a non-empty list of indices in [0, {hooked.d_mlp}) "
                "(or a (batch, k) tensor of per-prompt indices)"
            )
        mask = torch.zeros(*index.shape[:-1], hooked.d_mlp, dtype=torch.bool)
        mask.scatter_(-1, index, True)  # (d_mlp,) or (batch, d_mlp)

        def scale(act, hook, mask=mask):
            if mask.ndim == 2 and mask.shape[0] != act.shape[0]:
                raise ValueError(
                    f"per-prompt neurons were given for {mask.shape[0]} prompts, the batch has {act.shape[0]}"
                )
            m = mask if mask.ndim == 1 else mask[:, None, :]  # broadcast over positions
            out = torch.where(m, act * factor, act)
            if not bool(torch.isfinite(out).all()) and bool(torch.isfinite(act).all()):
                raise ValueError(
                    f"factor={factor:g} makes the MLP keys overflow {act.dtype}; use a smaller factor"
                )
            return out

        hooks.append((act_name("post", layer), scale))
    with hooked.hooks(hooks):
        yield hooked
