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
from dataclasses import dataclass
from typing import Any

import torch

from icml_interp.hooks import act_name, wrap
from icml_interp.lens import mlp_value_lens
from icml_interp.patching.result import check_metric, metric_value
from icml_interp.validation import check_finite, check_int, check_number, check_tensor, eval_mode

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

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the keys and scores would be one sample of it.
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
    with torch.no_grad(), eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(ids, [act_name("post", layer)])
    keys = cache["post", layer][:, position]  # (n, d_mlp)
    top, _ = mlp_value_lens(hooked, layer, top_k=top_tokens)  # (d_mlp, top_tokens)
    overlap = torch.stack(
        [torch.isin(top, torch.tensor(sorted(a), device=top.device)).sum(-1) / len(a) for a in answers]
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
        device = hooked.mlp_values(layer).device  # the block's keys are there
        mask = torch.zeros(*index.shape[:-1], hooked.d_mlp, dtype=torch.bool, device=device)
        mask.scatter_(-1, index.to(device), True)  # (d_mlp,) or (batch, d_mlp)

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


@dataclass(frozen=True)
class KeyScalingTest:
    """One factor of :func:`key_scaling_test`: the metric's change when the tested neurons' keys are scaled
    (``observed``) against its change for each random neuron set of the same size (``null``), both relative to
    the unscaled model (``base``)."""

    factor: float
    base: float
    observed: float
    null: torch.Tensor  # (n_random,)

    @property
    def p_lower(self) -> float:
        """One-sided permutation p-value for "scaling lowers the metric more than random sets do":
        ``(1 + #{null <= observed}) / (n_random + 1)``."""
        return (1 + int((self.null <= self.observed).sum())) / (self.null.numel() + 1)

    @property
    def p_upper(self) -> float:
        """One-sided permutation p-value for "scaling raises the metric more than random sets do"."""
        return (1 + int((self.null >= self.observed).sum())) / (self.null.numel() + 1)

    def quantile(self, q: float) -> float:
        """The null's ``q``-quantile (linear interpolation, ``torch.quantile``)."""
        return float(torch.quantile(self.null, check_number(q, "q", minimum=0.0, maximum=1.0)))


def _neuron_lists(neurons, d_mlp: int, n_layers: int) -> dict[int, list[int]]:
    """``neurons`` as ``{layer: sorted distinct indices}``, checked (one set for every prompt)."""
    if not isinstance(neurons, Mapping) or not neurons:
        raise TypeError(f"neurons must be a non-empty {{layer: neuron indices}} mapping, got {neurons!r}")
    out = {}
    for layer, idx in neurons.items():
        check_int(layer, "neurons (layer key)", minimum=0, maximum=n_layers - 1)
        if (
            isinstance(idx, torch.Tensor)
            and idx.ndim == 1
            and not (idx.is_floating_point() or idx.is_complex())
        ):
            idx = idx.tolist()
        if not isinstance(idx, (list, tuple, range)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in idx
        ):
            raise TypeError(
                f"neurons[{layer}] must be a list of int indices (one set for every prompt), got {idx!r}"
            )
        if not idx or min(idx) < 0 or max(idx) >= d_mlp or len(set(idx)) != len(idx):
            raise ValueError(
                f"neurons[{layer}] must be a non-empty list of distinct indices in [0, {d_mlp}), got {idx!r}"
            )
        if len(idx) >= d_mlp:
            raise ValueError(f"neurons[{layer}] must leave some of the {d_mlp} neurons for the random sets")
        out[layer] = sorted(idx)
    return out


def key_scaling_test(
    model,
    input_ids: torch.Tensor,
    neurons: Mapping[int, Sequence[int]],
    metric,
    *,
    factors: Sequence[float] = (0.0, 2.0),
    n_random: int = 200,
    seed: int = 0,
) -> dict[float, KeyScalingTest]:
    """Permutation test of MLP-key scaling: is scaling ``neurons`` beyond what random neuron sets do?

    For each factor, the change of ``metric`` (a callable ``logits -> scalar``, such as
    :func:`~icml_interp.patching.logit_margin`) on ``input_ids`` when the keys ``neurons[layer]`` are scaled,
    against the same change for ``n_random`` random sets with the same number of neurons in each layer, drawn
    from the other neurons of that layer (seeded; the same sets for every factor, so factors are paired).
    Returns ``{factor: KeyScalingTest}``; its ``p_lower`` / ``p_upper`` are the one-sided permutation p-values
    and ``quantile(q)`` the null's quantiles. Judge on a continuous metric (a logit margin) rather than on
    argmax accuracy, whose flips depend on which items sit at the decision boundary.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask.
    """
    hooked = wrap(model)
    ids = hooked.token_ids(input_ids)
    tested = _neuron_lists(neurons, hooked.d_mlp, hooked.n_layers)
    check_metric(metric, ids.shape[0], ids.shape[1], hooked.d_vocab)
    if isinstance(factors, (str, bytes)) or not isinstance(factors, Sequence) or not factors:
        raise TypeError(f"factors must be a non-empty sequence of numbers, got {factors!r}")
    scales = [check_number(f, "factors") for f in factors]
    if len(set(scales)) != len(scales):
        raise ValueError(f"factors must be distinct, got {list(factors)!r}")
    check_int(n_random, "n_random", minimum=1, maximum=100_000)
    check_int(seed, "seed", minimum=0, maximum=2**63 - 1)
    gen = torch.Generator().manual_seed(seed)
    sets = [
        {
            layer: random_neurons(
                hooked.d_mlp, len(idx), exclude=idx, seed=int(torch.randint(2**62, (1,), generator=gen))
            )
            for layer, idx in tested.items()
        }
        for _ in range(n_random)
    ]

    def value(chosen, factor) -> float:
        with torch.no_grad(), scale_mlp_keys(hooked, chosen, factor) as scaled:
            return metric_value(metric, scaled(ids))

    out = {}
    with torch.no_grad(), eval_mode(hooked.model):
        base = metric_value(metric, hooked(ids))
        for factor in scales:
            observed = value(tested, factor) - base
            null = torch.tensor([value(s, factor) - base for s in sets], dtype=torch.float64)
            out[factor] = KeyScalingTest(factor=factor, base=base, observed=observed, null=null)
    return out
