"""Steering vectors from contrastive pairs and steered generation (as used by the Cylindrical Representation
Hypothesis, Gao et al. 2026, and its baselines).

A *contrastive pair* is two token sequences that differ in one concept: the same question answered without
and with the concept (CRH's ``"User: q\\nAssistant: resp"`` prompts). :func:`last_token_activations` reads the
residual stream at each sequence's last token; :func:`difference_vectors` gives the per-pair differences
``d_i = act(with_i) - act(without_i)`` the cylinder decomposition (:mod:`icml_interp.crh`) works on;
:func:`steering_vector` turns them into one direction, by the difference of means (CRH's central axis, CAA),
the first principal component of the differences (RepE-style) or a logistic-regression probe.

:func:`generate_steered` generates with ``scale * vector`` added at one layer, either at every position of every
forward pass (``positions="all"``) or during the prompt's forward pass only (``"prefill"``, CRH's setting: the
generated tokens are not steered), and :func:`scale_sweep` repeats it over scales.

Sequences may have different lengths: activations are read from right-padded batches (causal attention never
lets a real token see the padding, so each sequence's activations are its own), generation runs on
left-padded batches with an attention mask (Hugging Face's convention; exact for the Llama and GPT-2 families).

Our choices: the pairs are read and steered at the same hook, ``blocks.L.hook_resid_post`` by default (CRH's
code reads ``hidden_states[L+1]``, the output of block ``L``, and adds at the input of block ``L``; pass
``component="resid_pre"`` to :func:`generate_steered` for the latter); the PCA and probe directions are scaled
to the length of the mean difference's projection on them, so that scales mean the same for all methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from icml_interp.hooks import wrap
from icml_interp.steering.vectors import add_steering_vector, check_vector, steering_hook_name
from icml_interp.validation import (
    check_choice,
    check_finite,
    check_int,
    check_number,
    check_tensor,
    check_token_sequences,
    eval_mode,
)

METHODS = ("mean", "pca", "probe")


def default_layers(model) -> tuple[int, int]:
    """CRH's default layers: ``floor(n_layers / 2)`` and ``floor(3 n_layers / 4)``."""
    n = wrap(model).n_layers
    return n // 2, (3 * n) // 4


def right_padded(
    rows: Sequence[torch.Tensor], device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """1-d token-id tensors as one right-padded ``(batch, longest)`` batch and its attention mask, both on
    ``device`` (default: the CPU): causal attention never lets a real token see the padding after it, so each
    row's outputs are its own."""
    batch = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long, device=device)
    mask = torch.zeros_like(batch)
    for i, r in enumerate(rows):
        batch[i, : len(r)], mask[i, : len(r)] = r, 1
    return batch, mask


def last_token_activations(
    model, sequences, layer: int, *, component: str = "resid_post", batch_size: int = 32
) -> torch.Tensor:
    """The activation at ``blocks.layer.hook_<component>`` of each sequence's last token, ``(n, d_model)``
    float32. ``sequences``: a ``(batch, seq)`` LongTensor or a list of token-id sequences of any lengths.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the activations it
    gathers are compared (pairs, mean differences), where in training mode each pass would draw its own
    dropout mask."""
    hooked = wrap(model)
    rows = check_token_sequences(sequences, hooked.d_vocab, "sequences")
    name = steering_hook_name(hooked, component, layer)
    check_int(batch_size, "batch_size", minimum=1)
    out = []
    with torch.no_grad(), eval_mode(hooked.model):
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            lengths = torch.tensor([len(s) for s in chunk])
            batch, mask = right_padded(chunk, hooked.embed.weight.device)
            _, cache = hooked.run_with_cache(batch, [name], attention_mask=mask)
            out.append(cache[name][torch.arange(len(chunk)), lengths - 1].float())
    return torch.cat(out)


def difference_vectors(
    model, positive, negative, layer: int, *, component: str = "resid_post", batch_size: int = 32
) -> torch.Tensor:
    """Per-pair differences ``act(positive[i]) - act(negative[i])`` at the last token, ``(n, d_model)``:
    ``positive[i]`` carries the concept, ``negative[i]`` is the same sample without it.

    Runs the model in eval mode (:func:`last_token_activations`); every submodule's mode is restored."""
    hooked = wrap(model)
    pos = check_token_sequences(positive, hooked.d_vocab, "positive")
    neg = check_token_sequences(negative, hooked.d_vocab, "negative")
    if len(pos) != len(neg):
        raise ValueError(
            f"positive and negative must hold the same number of sequences (one pair each), got {len(pos)} "
            f"and {len(neg)}"
        )
    kw: dict[str, Any] = {"component": component, "batch_size": batch_size}
    return last_token_activations(hooked, pos, layer, **kw) - last_token_activations(hooked, neg, layer, **kw)


def _probe_direction(pos: torch.Tensor, neg: torch.Tensor, l2: float, steps: int) -> torch.Tensor:
    """Weight vector of an L2-regularised logistic regression separating ``pos`` (1) from ``neg`` (0),
    fitted by L-BFGS on standardised features and mapped back to the raw coordinates."""
    x = torch.cat([pos, neg]).double()
    y = torch.cat([torch.ones(len(pos), device=x.device), torch.zeros(len(neg), device=x.device)]).double()
    mu, sd = x.mean(0), x.std(0).clamp_min(1e-8)
    z = (x - mu) / sd
    w = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, device=x.device, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y) + l2 * (w @ w)
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach() / sd


def direction_from_activations(
    positive_acts: torch.Tensor,
    negative_acts: torch.Tensor,
    method: str = "mean",
    *,
    probe_l2: float = 1e-3,
    probe_steps: int = 200,
) -> torch.Tensor:
    """A steering vector ``(d,)`` from activations ``(n_pos, d)`` with the concept and ``(n_neg, d)``
    without it.

    ``"mean"``: ``mean(positive) - mean(negative)`` (the sets may differ in size). ``"pca"``: the first
    principal component of the centred per-pair differences (the sets must pair up). ``"probe"``: the weight
    vector of a logistic regression (L2 penalty ``probe_l2`` on standardised features). The PCA and probe
    directions point towards the concept and have the length of the mean difference's projection on them.
    """
    check_choice(method, "method", METHODS)
    pos = check_tensor(positive_acts, "positive_acts", "(n, d)", ndim=2)
    neg = check_tensor(negative_acts, "negative_acts", "(n, d)", ndim=2)
    if pos.shape[1] != neg.shape[1] or 0 in pos.shape or 0 in neg.shape:
        raise ValueError(
            f"positive_acts and negative_acts must be non-empty with the same width, got {tuple(pos.shape)} "
            f"and {tuple(neg.shape)}"
        )
    check_finite(pos, "positive_acts")
    check_finite(neg, "negative_acts")
    pos, neg = pos.double(), neg.double()  # float64 inside: large activations do not overflow the means
    mean_diff = pos.mean(0) - neg.mean(0)
    if method == "mean":
        return _as_float32(mean_diff)
    if method == "pca":
        if pos.shape != neg.shape:
            raise ValueError(
                f"method='pca' works on per-pair differences: positive_acts and negative_acts must have the "
                f"same shape, got {tuple(pos.shape)} and {tuple(neg.shape)}"
            )
        diffs = pos - neg
        if len(diffs) < 2:
            raise ValueError("method='pca' needs at least 2 pairs")
        try:
            direction = torch.linalg.svd(diffs - diffs.mean(0), full_matrices=False)[2][0]
        except torch.linalg.LinAlgError as err:
            raise ValueError(
                f"positive_acts - negative_acts could not be decomposed ({err}); rescale them"
            ) from None
    else:
        check_number(probe_l2, "probe_l2", minimum=0.0)
        check_int(probe_steps, "probe_steps", minimum=1)
        w = _probe_direction(pos, neg, float(probe_l2), probe_steps)
        if not bool(torch.isfinite(w).all()) or float(w.norm()) == 0:
            raise ValueError("the probe found no direction (the two sets are identical?)")
        direction = w / w.norm()
    projection = float(mean_diff @ direction)
    if projection < 0:
        direction, projection = -direction, -projection
    return _as_float32(direction * projection)


def _as_float32(v: torch.Tensor) -> torch.Tensor:
    out = v.float()
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            "positive_acts and negative_acts differ by more than float32 can hold; rescale the activations"
        )
    return out


def steering_vector(
    model,
    positive,
    negative,
    layer: int,
    *,
    method: str = "mean",
    component: str = "resid_post",
    batch_size: int = 32,
) -> torch.Tensor:
    """A ``(d_model,)`` steering vector at ``blocks.layer.hook_<component>`` from sequences with (``positive``)
    and without (``negative``) the concept, read at their last tokens (see :func:`direction_from_activations`
    for ``method``).

    Runs the model in eval mode (:func:`last_token_activations`); every submodule's mode is restored."""
    check_choice(method, "method", METHODS)
    hooked = wrap(model)
    kw: dict[str, Any] = {"component": component, "batch_size": batch_size}
    pos = last_token_activations(
        hooked, check_token_sequences(positive, hooked.d_vocab, "positive"), layer, **kw
    )
    neg = last_token_activations(
        hooked, check_token_sequences(negative, hooked.d_vocab, "negative"), layer, **kw
    )
    return direction_from_activations(pos, neg, method)


def generate_steered(
    model,
    prompts,
    vector: torch.Tensor,
    layer: int,
    scale: float = 1.0,
    *,
    positions: str = "prefill",
    component: str = "resid_post",
    max_new_tokens: int = 32,
    pad_token_id: int = 0,
    batch_size: int = 16,
    **generate_kwargs,
) -> list[torch.Tensor]:
    """Generate from each prompt with ``scale * vector`` added at ``blocks.layer.hook_<component>``; returns
    the new tokens of each prompt (1-d LongTensors, cut after an end-of-sequence token if one was generated).

    ``positions="prefill"`` steers the prompt's forward pass only (CRH); ``"all"`` every position of every
    pass, generated tokens included. ``vector`` is ``(d_model,)`` or ``(n_prompts, d_model)``, one per prompt
    (e.g. :meth:`icml_interp.crh.Cylinder.penalty_vectors`). Greedy decoding unless ``generate_kwargs`` say
    otherwise; ``scale=0`` attaches no hook at all. With ``num_return_sequences=r`` the list holds ``r``
    continuations per prompt, prompt ``i``'s at ``i*r`` to ``i*r + r - 1`` (Hugging Face's order), each steered
    by its prompt's vector (also under beam search).

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the continuations are
    compared across scales and with the unsteered model, where in training mode every decoding pass would draw
    its own dropout mask."""
    hooked = wrap(model)
    rows = check_token_sequences(prompts, hooked.d_vocab, "prompts")
    check_choice(positions, "positions", ("prefill", "all"))
    scale = check_number(scale, "scale")
    check_int(max_new_tokens, "max_new_tokens", minimum=1)
    check_int(pad_token_id, "pad_token_id", minimum=0, maximum=hooked.d_vocab - 1)
    check_int(batch_size, "batch_size", minimum=1)
    cfg = hooked.model.config
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    longest = max(len(r) for r in rows)
    if isinstance(limit, int) and longest + max_new_tokens > limit:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} plus the longest prompt ({longest} tokens) exceeds the model's "
            f"{limit} positions"
        )
    check_vector(vector, hooked.d_model)
    dtype = hooked.embed.weight.dtype
    if not bool(torch.isfinite(scale * vector.to(torch.float64)).all()) or not bool(
        torch.isfinite((scale * vector.to(torch.float64)).to(dtype)).all()
    ):
        raise ValueError(f"scale * vector overflows the model's dtype {dtype} (scale={scale:g}); lower scale")
    if vector.ndim == 2 and vector.shape[0] != len(rows):
        raise ValueError(f"vector must hold one row per prompt ({len(rows)}), got {vector.shape[0]}")
    generate_kwargs.setdefault("do_sample", False)
    # generate repeats each prompt's row max(num_beams, num_return_sequences) times, consecutively
    # (transformers' _expand_inputs_for_generation); a per-prompt vector must follow its prompt's copies
    config = generate_kwargs.get("generation_config") or getattr(hooked.model, "generation_config", None)
    copies = max(
        int(generate_kwargs.get("num_beams", getattr(config, "num_beams", None) or 1)),
        int(generate_kwargs.get("num_return_sequences", getattr(config, "num_return_sequences", None) or 1)),
    )
    eos = getattr(getattr(hooked.model, "generation_config", None), "eos_token_id", None)
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    out: list[torch.Tensor] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        width = max(len(s) for s in chunk)
        device = hooked.embed.weight.device  # transformers' generate takes ids on the model's device
        batch = torch.full((len(chunk), width), pad_token_id, dtype=torch.long, device=device)
        mask = torch.zeros(len(chunk), width, dtype=torch.long, device=device)
        for i, s in enumerate(chunk):
            batch[i, width - len(s) :], mask[i, width - len(s) :] = s, 1  # left padding for generation
        kwargs = {
            "attention_mask": mask,
            "max_new_tokens": max_new_tokens,
            "pad_token_id": pad_token_id,
            **generate_kwargs,
        }
        with torch.no_grad(), eval_mode(hooked.model):
            if scale == 0:
                gen = hooked.generate(batch, **kwargs)
            else:
                rows_vector = vector[start : start + batch_size] if vector.ndim == 2 else vector
                if rows_vector.ndim == 2 and copies > 1:  # generate's batch holds each prompt `copies` times
                    rows_vector = rows_vector.repeat_interleave(copies, 0)
                with add_steering_vector(
                    hooked, layer, rows_vector, scale, component=component, positions=positions
                ):
                    gen = hooked.generate(batch, **kwargs)
        for row in gen[:, width:]:
            ends = [i for i, t in enumerate(row.tolist()) if t in eos_ids]
            out.append(row[: ends[0] + 1] if ends else row)
    return out


def scale_sweep(
    model, prompts, vector: torch.Tensor, layer: int, scales, **kwargs
) -> list[list[torch.Tensor]]:
    """:func:`generate_steered` at each of ``scales``: ``result[k][i]`` is prompt ``i``'s continuation at
    ``scales[k]``.

    Runs the model in eval mode (:func:`generate_steered`); every submodule's mode is restored."""
    if isinstance(scales, torch.Tensor):
        scales = scales.tolist()
    if isinstance(scales, (str, bytes)) or not isinstance(scales, Sequence) or len(scales) == 0:
        raise TypeError(f"scales must be a non-empty list of numbers, got {scales!r}")
    values = [check_number(s, "scales") for s in scales]
    return [generate_steered(model, prompts, vector, layer, s, **kwargs) for s in values]
