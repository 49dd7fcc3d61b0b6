"""Helpers for running diffusers' own caches beside ours: MagCache's calibration and a compute counter.

diffusers' First-Block Cache (``apply_first_block_cache``) and MagCache (``apply_mag_cache``) work on
any transformer whose block class is in diffusers' ``TransformerBlockRegistry`` (Wan's is). MagCache
needs per-model magnitude ratios; diffusers' ``calibrate=True`` mode prints them, and
:func:`calibrate_mag_ratios` computes the same quantity (the mean over tokens of
``‖r_t‖ / ‖r_{t−1}‖`` for the block stack's residual ``r``, 1 at the first step) and returns it. The
residual is that of the stack's hidden states (the image / video tokens), read where each block class
takes and returns them (diffusers' block registry, as the cache hooks do): Flux, SD3 and HunyuanVideo
blocks return ``(encoder_hidden_states, hidden_states)``, whose text stream is not the residual.
:func:`count_block_forwards` counts the transformer blocks actually evaluated (a block call in which any of
its ``Linear`` layers runs), so that every method's cost is measured the same way (a First-Block-Cache skip
still runs its first block), fused QKV projections or not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import contextmanager

import torch

from icml_generative.cache.hooks import BlockIO, find_transformer_blocks
from icml_generative.validation import check_choice, check_int


def calibrate_mag_ratios(
    model: torch.nn.Module, run: Callable[[], object], num_inference_steps: int, calls_per_step: int = 1
) -> list[float]:
    """MagCache's magnitude ratios for ``model``, averaged over the sampling runs that ``run()`` performs.

    ``run`` must call the model ``calls_per_step`` times per step (2 with CFG; the first call of each
    step is used) for a whole number of runs of ``num_inference_steps`` steps, with no cache applied.
    """
    blocks = find_transformer_blocks(model, "calibrate_mag_ratios", "model")
    if not callable(run):
        raise TypeError(f"run must be callable as run(), got {type(run).__name__}")
    check_int(num_inference_steps, "num_inference_steps", 2)
    check_choice(check_int(calls_per_step, "calls_per_step"), "calls_per_step", (1, 2))
    head, tail = BlockIO(blocks[0][1]), BlockIO(blocks[-1][1])
    inputs: list[torch.Tensor] = []
    residuals: list[torch.Tensor] = []

    def pre(module, args, kwargs):
        inputs.append(head.hidden(args, kwargs))

    def post(module, args, kwargs, output):
        out = tail.output_hidden(output)
        if out.shape != inputs[-1].shape:
            raise ValueError(
                f"calibrate_mag_ratios: the last block of model returned hidden states of shape "
                f"{tuple(out.shape)}, the first block took {tuple(inputs[-1].shape)}: the stack's residual is "
                "undefined"
            )
        residuals.append((out - inputs[-1]).float())

    handles = [
        blocks[0][1].register_forward_pre_hook(pre, with_kwargs=True),
        blocks[-1][1].register_forward_hook(post, with_kwargs=True),
    ]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    used = residuals[::calls_per_step]
    if not used or len(used) % num_inference_steps:
        raise ValueError(
            f"run() made {len(used)} calls per context (calls_per_step={calls_per_step}), not a positive "
            f"multiple of num_inference_steps={num_inference_steps}"
        )
    runs = torch.stack(
        [
            torch.tensor(_ratios(used[i : i + num_inference_steps]))
            for i in range(0, len(used), num_inference_steps)
        ]
    )
    return runs.mean(0).tolist()


def _ratios(residuals: list[torch.Tensor]) -> list[float]:
    out = [1.0]
    for prev, cur in itertools.pairwise(residuals):
        out.append((cur.norm(dim=-1) / (prev.norm(dim=-1) + 1e-8)).mean().item())
    return out


class BlockCounter:
    """Counts evaluated transformer blocks; ``full_forwards`` divides by the number of blocks."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks = 0

    @property
    def full_forwards(self) -> float:
        return self.blocks / self.num_blocks


def _counted_linears(block: torch.nn.Module):
    """The block's modules in order, without those under a ``norm*`` child or a ``MultiheadAttention``."""
    excluded = [
        n + "."
        for n, m in block.named_modules()
        if n and (n.split(".")[-1].startswith("norm") or isinstance(m, torch.nn.MultiheadAttention))
    ]
    for n, m in block.named_modules():
        if not any(n.startswith(prefix) for prefix in excluded):
            yield m


@contextmanager
def count_block_forwards(model: torch.nn.Module):
    """Count the blocks of ``model`` that really run, whatever cache is applied: a block is counted once per
    call in which any ``Linear`` inside it runs (a skipped block, whose call returns a cached output, runs
    none).

    Every ``Linear`` of the block is watched, not a fixed one, so the count does not depend on which
    projections the block uses: after diffusers' ``fuse_qkv_projections()`` the attention calls ``to_qkv``
    (``to_kv`` for cross-attention) and no longer ``to_q``. Linears inside a block's normalisation modules
    (``norm*``: adaLN conditioning embeddings, which ``DiTTransformer2DModel`` also calls from its output
    head through ``transformer_blocks[0].norm1.emb``) and inside ``torch.nn.MultiheadAttention`` (whose
    projections are used without calling them) are passed over, and a Linear counts only while its block is
    being called."""
    blocks = find_transformer_blocks(model, "count_block_forwards", "model")
    counter = BlockCounter(len(blocks))
    handles = []
    for name, block in blocks:
        linears = [m for m in _counted_linears(block) if isinstance(m, torch.nn.Linear)]
        if not linears:
            raise ValueError(f"count_block_forwards: block {name} of model has no torch.nn.Linear to count")
        armed = [False]  # the block is being called and none of its Linears has run yet

        def arm(*_, armed=armed):
            armed[0] = True

        def disarm(*_, armed=armed):
            armed[0] = False

        def ran(*_, armed=armed):
            if armed[0]:
                armed[0] = False
                counter.blocks += 1

        handles.append(block.register_forward_pre_hook(arm))
        handles.append(block.register_forward_hook(disarm, always_call=True))
        handles.extend(linear.register_forward_pre_hook(ran) for linear in linears)
    try:
        yield counter
    finally:
        for h in handles:
            h.remove()
