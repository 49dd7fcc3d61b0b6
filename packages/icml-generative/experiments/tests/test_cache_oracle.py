"""The oracle skip rule of the usefulness headroom (:mod:`icml_generative_experiments.cache.oracle`) on a tiny DiT."""

import math

import pytest
import torch

from icml_generative.cache import count_block_forwards, get_cache_stats, remove_navicache
from icml_generative_experiments.cache.oracle import OracleJudgment, apply_oracle_cache, uncached_blocks
from icml_generative_experiments.cache.testbed import (
    DiTTestbedConfig,
    class_tokens,
    sample_flow_euler,
    tiny_dit,
)

torch.set_num_threads(1)
STEPS = 10
TINY = DiTTestbedConfig(size=8, num_layers=3, num_heads=2, head_dim=8, train_steps=2, batch_size=2)


def _inputs():
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(2, TINY.channels, TINY.frames, TINY.size, TINY.size, generator=g)
    cond = class_tokens(torch.arange(2) % 4)
    return noise, cond, torch.zeros_like(cond)


def test_the_oracle_predicts_the_true_change_and_skips_below_the_threshold():
    dit = tiny_dit(TINY).eval()
    blocks = uncached_blocks(dit)
    noise, cond, uncond = _inputs()
    copy_outs: list[torch.Tensor] = []  # the uncached copy's stack output at each decided step (cond pass)
    model_outs: list[torch.Tensor] = []  # the model's last block output at every pass (cond, uncond, ...)
    handles = [
        blocks[-1].register_forward_hook(lambda m, a, o: copy_outs.append(o)),
        dit.transformer_blocks[-1].register_forward_hook(lambda m, a, o: model_outs.append(o)),
    ]
    apply_oracle_cache(dit, blocks, threshold=0.2, alignment_steps=2)
    try:
        with count_block_forwards(dit) as counter:
            sample_flow_euler(dit, noise, cond, uncond, 3.0, STEPS)
        stats = get_cache_stats(dit)
    finally:
        remove_navicache(dit)
        for handle in handles:
            handle.remove()
    assert (
        0 < stats.steps_skipped and counter.full_forwards == 2 * stats.steps_computed
    )  # the copy is not counted
    decided = [r for r in stats.records if not r.forced]
    assert len(copy_outs) == len(decided) > 0  # the copy ran once per decided step, on the cond pass only
    cond_outs = model_outs[0::2]
    last = max(r.step for r in stats.records if r.forced and r.step < decided[0].step)
    for record, true_out in zip(decided, copy_outs, strict=True):
        out_c = cond_outs[last]
        want = (true_out - out_c).abs().mean().item() / (out_c.abs().mean().item() + 1e-12)
        assert record.predicted == pytest.approx(want, rel=1e-12) and math.isnan(record.ratio)
        assert record.computed == (record.predicted >= 0.2)
        if record.computed:  # the model computed the same stack output as its uncached copy
            assert torch.equal(cond_outs[record.step], true_out)
            last = record.step


def test_oracle_thresholds_from_nothing_skipped_to_everything_skipped():
    dit = tiny_dit(TINY).eval()
    blocks = uncached_blocks(dit)
    noise, cond, uncond = _inputs()
    computed = {}
    for threshold in (1e-9, 1e9):
        apply_oracle_cache(dit, blocks, threshold=threshold, alignment_steps=2)
        try:
            sample_flow_euler(dit, noise, cond, uncond, 3.0, STEPS)
            computed[threshold] = get_cache_stats(dit).computed_steps
        finally:
            remove_navicache(dit)
    assert computed[1e-9] == list(range(STEPS))
    assert computed[1e9] == [0, 1, STEPS - 1]


def test_bad_input():
    with pytest.raises(ValueError, match="threshold"):
        OracleJudgment([], threshold=0.0)
    with pytest.raises(ValueError, match="alignment_steps"):
        OracleJudgment([], threshold=0.1, alignment_steps=0)
