"""SAE quality: fraction of variance unexplained, L0, dead and dense latents, and the downstream loss with the
reconstruction spliced back into the model.

- ``fvu = sum_n ||x_n - x_hat_n||^2 / sum_n ||x_n - mean(x)||^2`` over the evaluation tokens (0 is perfect,
  1 is no better than predicting the mean);
- ``l0``: mean number of nonzero latents per token;
- ``dead_fraction``: latents that never fire on the evaluation tokens; ``dense_fraction``: latents that fire on
  more than ``dense_threshold`` (default 10%) of them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from contextlib import ExitStack

import torch

from icml_interp.sae.model import SAE
from icml_interp.sae.source import ActivationSource, HookTarget, splice, to_tokens
from icml_interp.validation import check_int, check_number, check_token_ids, check_type, eval_mode


def token_batches(
    data, n_tokens: int | None, batch_size: int, d_in: int, name: str = "activations_or_source"
) -> Iterable[torch.Tensor]:
    if n_tokens is not None:
        check_int(n_tokens, "n_tokens", minimum=1)
    check_int(batch_size, "batch_size", minimum=1)
    if isinstance(data, ActivationSource):
        data = data.take(n_tokens)
    elif isinstance(data, torch.Tensor):
        if data.ndim not in (2, 3, 4):
            raise ValueError(
                f"{name} must be activations shaped (n, d), (B, T, D) or (B, C, H, W), got {tuple(data.shape)}"
            )
        data = to_tokens(data)
        if n_tokens is not None:
            data = data[:n_tokens]
    else:
        raise TypeError(
            f"activations_or_source must be a tensor of activations or an ActivationSource, got {type(data).__name__}"
        )
    if data.shape[0] == 0:
        raise ValueError(f"{name} holds no tokens to evaluate on")
    if not data.is_floating_point():
        raise TypeError(f"{name} must hold floating-point activations, got {data.dtype}")
    if data.shape[-1] != d_in:
        raise ValueError(
            f"{name} has width {data.shape[-1]}, but the SAE expects d_in = {d_in} (activation width mismatch)"
        )
    if not bool(torch.isfinite(data).all()):
        raise ValueError(f"{name} must hold finite activations, got NaN or inf")
    return data.split(min(batch_size, data.shape[0]))


@torch.no_grad()
def firing_counts(
    sae: SAE, activations_or_source, *, n_tokens: int | None = None, batch_size: int = 4096
) -> tuple[torch.Tensor, int]:
    """How often each latent fires: ``(counts (d_sae,), n_tokens)``."""
    check_type(sae, "sae", SAE, "an icml_interp.sae.SAE")
    counts = torch.zeros(sae.d_sae, dtype=torch.long)
    total = 0
    for x in token_batches(activations_or_source, n_tokens, batch_size, sae.d_in):
        counts += (sae.encode(x) > 0).sum(0).cpu()
        total += x.shape[0]
    return counts, total


def firing_frequencies(
    sae: SAE, activations_or_source, *, n_tokens: int | None = None, batch_size: int = 4096
) -> torch.Tensor:
    """Fraction of tokens on which each latent fires, ``(d_sae,)``."""
    counts, total = firing_counts(sae, activations_or_source, n_tokens=n_tokens, batch_size=batch_size)
    return counts.double() / total


@torch.no_grad()
def evaluate_sae(
    sae: SAE,
    activations_or_source,
    *,
    n_tokens: int | None = None,
    batch_size: int = 4096,
    dense_threshold: float = 0.1,
) -> dict:
    """``dict(fvu, l0, dead_fraction, dense_fraction, mse, n_tokens)`` on activations ``(..., d_in)`` (any
    layout :func:`~icml_interp.sae.source.to_tokens` understands) or on the first ``n_tokens`` of a source.
    Activations with zero variance (one token, or every token the same) have an undefined ``fvu``: NaN,
    with a ``RuntimeWarning``. Checked: finite floating-point activations of width ``sae.d_in``."""
    check_type(sae, "sae", SAE, "an icml_interp.sae.SAE")
    check_number(dense_threshold, "dense_threshold", minimum=0, maximum=1, open_min=True)
    sq_err = 0.0
    # the variance from sums of x - shift, shift = the first batch's mean: the one-pass sum_sq - |sum_x|^2 / n
    # of raw activations cancels catastrophically when their offset dwarfs their spread
    shift: torch.Tensor | None = None
    sum_x = torch.zeros(sae.d_in, dtype=torch.float64)
    sum_sq = 0.0
    counts = torch.zeros(sae.d_sae, dtype=torch.long)
    nnz = 0
    total = 0
    for x in token_batches(activations_or_source, n_tokens, batch_size, sae.d_in):
        f = sae.encode(x)
        x_hat = sae.decode(f)
        x64 = x.double()
        sq_err += float((x64 - x_hat.double()).pow(2).sum())
        if shift is None:
            shift = x64.mean(0)
        centred = x64 - shift
        sum_x += centred.sum(0).cpu()
        sum_sq += float(centred.pow(2).sum())
        fired = f > 0
        counts += fired.sum(0).cpu()
        nnz += int(fired.sum())
        total += x.shape[0]
    total_var = sum_sq - float(sum_x.pow(2).sum()) / total  # sum_n ||x_n - mean||^2
    if not total_var > 0:
        warnings.warn(
            "activations_or_source has zero variance (every token is the same vector): the fvu "
            "(error / variance) is undefined and reported as NaN",
            RuntimeWarning,
            stacklevel=2,
        )
    freq = counts.double() / total
    return {
        "fvu": sq_err / total_var if total_var > 0 else float("nan"),
        "l0": nnz / total,
        "dead_fraction": float((counts == 0).double().mean()),
        "dense_fraction": float((freq > dense_threshold).double().mean()),
        "mse": sq_err / (total * sae.d_in),
        "n_tokens": total,
    }


def _next_token_ce(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), input_ids[:, 1:].reshape(-1)
    )


@torch.no_grad()
def spliced_loss(
    sae: SAE,
    target,
    inputs: Iterable,
    *,
    loss_fn: Callable | None = None,
    layout: str = "auto",
    forward: Callable | None = None,
) -> dict:
    """Downstream loss with the SAE reconstruction substituted at ``target``, against the clean model and
    zero-ablation of the activation (the usual "CE loss recovered" of SAE evaluations).

    ``target``: a ``(HookedModel, hook_name)`` pair (then ``loss_fn`` defaults to next-token cross-entropy
    of ``input_ids``) or anything :class:`~icml_interp.sae.source.ActivationSource` accepts with a
    ``loss_fn(output, input) -> scalar``. Returns mean losses over ``inputs`` and
    ``loss_increase = spliced - clean`` and ``fraction_recovered = (zero - spliced) / (zero - clean)``.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask. The model is the
    target's (the ``HookedModel``'s model, the pair's model or the bare module) and, where ``forward`` is a
    module or one of its bound methods, that module (a ``HookedModel`` or its method: its model); what another
    ``forward`` runs keeps its mode.
    """
    from icml_interp.hooks import HookedModel

    check_type(sae, "sae", SAE, "an icml_interp.sae.SAE")
    hooked_target = isinstance(target, tuple) and len(target) == 2 and isinstance(target[0], HookedModel)
    if loss_fn is None:
        if not hooked_target:
            raise ValueError("loss_fn is required unless target is a (HookedModel, hook_name) pair")
        loss_fn = _next_token_ce
    elif not callable(loss_fn):
        raise TypeError(
            f"loss_fn must be None or callable(output, input) -> scalar, got {type(loss_fn).__name__}"
        )
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
        raise TypeError(
            f"inputs must be a tensor or an iterable of model inputs, got {type(inputs).__name__}"
        )
    if isinstance(inputs, torch.Tensor) and inputs.ndim == 0:
        raise ValueError("inputs must be a batch of model inputs, got a 0-d tensor")
    inputs = list(inputs.split(1)) if isinstance(inputs, torch.Tensor) else list(inputs)
    if not inputs:
        raise ValueError("inputs is empty: nothing to evaluate the spliced loss on")
    if hooked_target:
        vocab = target[0].d_vocab
        inputs = [check_token_ids(inp, vocab, "inputs") for inp in inputs]
    tgt = HookTarget(target, forward, "output", "target")
    clean = spliced = zero = 0.0
    with ExitStack() as modes:
        for model in tgt.models():
            modes.enter_context(eval_mode(model))
        for inp in inputs:
            clean += float(loss_fn(tgt.run(inp), inp))
            with splice(sae, target, layout=layout, forward=forward) as run:
                spliced += float(loss_fn(run(inp), inp))
            with tgt.patch(torch.zeros_like):
                zero += float(loss_fn(tgt.run(inp), inp))
    n = len(inputs)
    clean, spliced, zero = clean / n, spliced / n, zero / n
    if not all(math.isfinite(v) for v in (clean, spliced, zero)):
        raise ValueError(
            f"loss_fn gave a non-finite loss (clean {clean}, spliced {spliced}, zero-ablated {zero}); "
            "check loss_fn and inputs"
        )
    if zero == clean:
        warnings.warn(
            "zero-ablating target does not change the loss: fraction_recovered is undefined (NaN)",
            RuntimeWarning,
            stacklevel=2,
        )
    return {
        "clean_loss": clean,
        "spliced_loss": spliced,
        "zero_ablation_loss": zero,
        "loss_increase": spliced - clean,
        "fraction_recovered": (zero - spliced) / (zero - clean) if zero != clean else float("nan"),
    }
