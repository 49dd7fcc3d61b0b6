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

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.lens import mlp_value_lens
from icml_interp.validation import check_int, check_number

OVERLAP_WEIGHT = 10.0
TOP_TOKENS = 10


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
    answers = [set(int(t) for t in a) for a in answer_tokens]
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
    """Indices of the ``k`` highest scores."""
    check_int(k, "k", minimum=1, maximum=scores.numel())
    return scores.topk(k).indices.tolist()


def random_neurons(d_mlp: int, k: int, *, exclude: Iterable[int] = (), seed: int = 0) -> list[int]:
    """``k`` distinct random neuron indices in ``[0, d_mlp)`` avoiding ``exclude`` (the control set)."""
    pool = torch.tensor(sorted(set(range(d_mlp)) - {int(i) for i in exclude}))
    if check_int(k, "k", minimum=1) > len(pool):
        raise ValueError(f"k must be at most {len(pool)}, the neurons left after exclusion, got {k}")
    perm = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
    return pool[perm[:k]].tolist()


@contextmanager
def scale_mlp_keys(model, neurons: Mapping[int, Sequence[int]], factor: float):
    """Within the context, the keys ``neurons[layer]`` of each block ``layer`` are multiplied by ``factor``
    in every forward pass (``model.generate`` included). ``neurons[layer]`` is a list of indices (the same
    neurons for every prompt) or a ``(batch, k)`` LongTensor (neurons per prompt). Hooks are removed on exit."""
    hooked = wrap(model)
    check_number(factor, "factor")
    hooks = []
    for layer, idx in neurons.items():
        index = idx if isinstance(idx, torch.Tensor) else torch.as_tensor(list(idx), dtype=torch.long)
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
            return torch.where(m, act * factor, act)

        hooks.append((act_name("post", layer), scale))
    with hooked.hooks(hooks):
        yield hooked
