"""The oracle skip rule of the usefulness headroom (issue 24): NaviCache's skip decision with the true error.

At each step that may be skipped, an uncached copy of the block stack runs on the current input, and the step
is skipped while the true relative change of the stack's output since the last computed step,
``mean|out_t − out_c| / mean|out_c|``, stays below the threshold: the quantity NaviCache and EasyCache estimate,
known exactly. Same hooks, alignment steps, last step and cond/uncond pairing as NaviCache
(:func:`icml_generative.cache.hooks.apply_stack_cache`); the copy's blocks are outside the model, so
``count_block_forwards`` does not count them (an oracle, not a method). Remove it with
:func:`icml_generative.cache.remove_navicache`.
"""

from __future__ import annotations

import copy
import math

import torch

from icml_generative.cache.hooks import (
    ContextState,
    StackPolicy,
    apply_stack_cache,
    find_transformer_blocks,
    mean_abs,
)
from icml_generative.validation import check_cache_schedule


class OracleJudgment(StackPolicy):
    """Skip while the true relative change of the stack's output (from ``blocks``, uncached) is below the
    threshold."""

    name = "Oracle"

    def __init__(
        self,
        blocks: list[torch.nn.Module],
        threshold: float,
        alignment_steps: int | None = None,
        num_inference_steps: int | None = None,
    ) -> None:
        check_cache_schedule(threshold, alignment_steps, num_inference_steps)
        super().__init__(threshold, alignment_steps, num_inference_steps)
        self.blocks = blocks
        self._call: tuple[tuple, dict] = ((), {})

    def start_step(self, ctx: ContextState, x: torch.Tensor, step: int, block, args, kwargs) -> None:
        # the head block's other arguments (timestep, class labels, ...): every block of the stack gets them
        self._call = (tuple(args[1:]), {k: v for k, v in kwargs.items() if k != "hidden_states"})

    @torch.no_grad()
    def predict(self, ctx: ContextState, x: torch.Tensor, step: int) -> tuple[float, float]:
        assert ctx.out_last is not None, "predictions follow a computed step"
        rest, kwargs = self._call
        h = x
        for block in self.blocks:
            h = block(h, *rest, **kwargs)
            h = h[0] if isinstance(h, (tuple, list)) else h
        return mean_abs(h - ctx.out_last) / (mean_abs(ctx.out_last) + 1e-12), math.nan


def uncached_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """A deep copy of ``model``'s block stack, for :func:`apply_oracle_cache` (copy it before any cache is applied)."""
    return [block for _, block in find_transformer_blocks(copy.deepcopy(model), "uncached_blocks", "model")]


def apply_oracle_cache(
    model: torch.nn.Module,
    blocks: list[torch.nn.Module],
    threshold: float,
    alignment_steps: int | None = None,
) -> None:
    """Apply the oracle skip rule to ``model`` at the block level, judging with ``blocks`` (:func:`uncached_blocks`)."""
    apply_stack_cache(model, OracleJudgment(blocks, threshold, alignment_steps), "blocks")
