"""Port equivalence (issue 24, item 4): our ``level="model"`` NaviCache with the released settings makes the same
skip decisions, and gives the same outputs, as a direct transcription of the authors' released rule.

The released rule is ``navicache_forward`` with its state from ``_configure_navicache`` in
``HelloZicky/NaviCache``, file ``NaviCache4Wan2.1/navicache_generate.py`` (Apache-2.0; read at commit
3987f30f4f4aece62c2326b5bf1e269895ae8f28), and its command-line defaults: ``--navicache_thresh 0.05``,
``--navicache_align_steps 10``, ``--navicache_process_noise 0.05``, ``--navicache_measurement_noise 0.05``,
50 sampling steps (Wan 2.1 t2v), guidance 5, shift 5; the README's Wan 2.1 presets are thresholds 0.07 /
0.05 / 0.04. :class:`ReleasedNaviCache` below transcribes that function line by line on top of an uncached
model: the same state variables (a forward counter over cond/uncond pairs, the accumulated error, the
ratio and its uncertainty, the previous and prior raw inputs, the cond and uncond outputs and residuals),
the same order of operations and the same tensor arithmetic (``torch.cat([...flatten()]).abs().mean()``
over the per-sample latents, float32 0-d tensors); it does not import anything from
``icml_generative.cache``. Like the release it is never reset between generations (the release keeps its
state on the model across calls and only wraps the forward counter), so two generations run back to back.

The model is a tiny random Wan 2.1-style transformer (three blocks, from ``test_cache.py``), sampled by the
flow-matching Euler sampler with classifier-free guidance (cond then uncond at each step, each in its cache
context, as diffusers' ``WanPipeline`` calls the transformer). The thresholds are the "mid" preset (on this
model the presets skip nothing) and three larger ones that skip 12-35 of the 50 steps (measured: 0.1 / 0.2 / 0.5
give 38 / 19 / 15 computed steps on the first generation, 32 / 19 / 15 on the second), so both decisions are
exercised.
"""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from icml_generative.cache import NaviCacheConfig, apply_navicache, get_cache_stats, remove_navicache


def _load_test_cache():
    """The tiny Wan model and the sampler of test_cache.py (the tests folder is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "icml_generative_test_cache_for_port", Path(__file__).with_name("test_cache.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helpers = _load_test_cache()
torch.set_num_threads(1)

# the released settings (Wan 2.1 t2v defaults of navicache_generate.py)
SAMPLE_STEPS, ALIGN_STEPS, PROCESS_NOISE, MEASUREMENT_NOISE = 50, 10, 0.05, 0.05
GUIDE_SCALE, SHIFT = 5.0, 5.0
RELEASED_PRESETS = {"slow": 0.04, "mid": 0.05, "fast": 0.07}  # the README's Wan 2.1 thresholds
# The release computes E and the ratio in float32 0-d tensors, we in Python floats (float64): measured on the
# cases below, E differs by at most 2.2e-7 and the ratio by 1.6e-7 relative; tolerance 10x that.
RATIO_RTOL = 2e-6
# measured: |E - threshold| / threshold >= 5.4e-3 at every decided step of every case below (a margin of 1e-3
# is asserted), far above that rounding, so the decisions cannot differ by rounding alone
DECISION_MARGIN = 1e-3


class ReleasedNaviCache(torch.nn.Module):
    """The released ``navicache_forward`` (Wan 2.1) around an uncached ``model``, transcribed.

    ``self.log`` gets one entry per cond forward: ``(step, computed, accumulated error compared with the
    threshold or None on a forced step, prediction ratio used or None)``.
    """

    def __init__(self, model, sample_steps, thresh, align_steps, process_noise, measurement_noise):
        super().__init__()
        self.model = model
        # _configure_navicache(model, args)
        self.forward_count = 0
        self.num_forwards = sample_steps * 2
        self.thresh = thresh
        self.align_forwards = align_steps * 2
        self.cutoff_forwards = sample_steps * 2 - 2
        self.accumulated_error = 0
        self.should_compute_pair = True
        self.prediction_ratio = None
        self.state_ratio = 0.0
        self.uncertainty = 1.0
        self.process_noise = process_noise
        self.measurement_noise = measurement_noise
        self.previous_raw_cond_input = None
        self.previous_raw_cond_output = None
        self.previous_raw_uncond_output = None
        self.prior_raw_cond_input = None
        self.cond_residual = None
        self.uncond_residual = None
        self.log: list[tuple[int, bool, float | None, float | None]] = []

    def forward(self, hidden_states, timestep, encoder_hidden_states, return_dict=False):
        x = list(hidden_states.unbind(0))  # the release takes a list of per-sample latents
        raw_input = [u.clone() for u in x]
        is_cond = self.forward_count % 2 == 0
        step = self.forward_count // 2
        compared = ratio_used = None
        if is_cond:
            if self.forward_count < self.align_forwards or self.forward_count >= self.cutoff_forwards:
                self.should_compute_pair = True
                self.accumulated_error = 0
            elif self.previous_raw_cond_input is not None and self.previous_raw_cond_output is not None:
                raw_input_change = (
                    torch.cat(
                        [
                            (u - v).flatten()
                            for u, v in zip(raw_input, self.previous_raw_cond_input, strict=True)
                        ]
                    )
                    .abs()
                    .mean()
                )
                if self.state_ratio is not None:
                    self.prediction_ratio = self.state_ratio
                if self.prediction_ratio is not None:
                    output_norm = torch.cat([u.flatten() for u in self.previous_raw_cond_output]).abs().mean()
                    pred_change = self.prediction_ratio * (raw_input_change / output_norm)
                    self.accumulated_error += pred_change
                    compared, ratio_used = float(self.accumulated_error), float(self.prediction_ratio)
                    if self.accumulated_error < self.thresh:
                        self.should_compute_pair = False
                    else:
                        self.should_compute_pair = True
                        self.accumulated_error = 0
                else:
                    self.should_compute_pair = True
            else:
                self.should_compute_pair = True
            self.previous_raw_cond_input = [u.clone() for u in raw_input]
            self.log.append((step, self.should_compute_pair, compared, ratio_used))

        if is_cond and not self.should_compute_pair and self.previous_raw_cond_output is not None:
            self._count()
            return (
                torch.stack([(u + v).float() for u, v in zip(raw_input, self.cond_residual, strict=True)]),
            )
        if not is_cond and not self.should_compute_pair and self.previous_raw_uncond_output is not None:
            self._count()
            return (
                torch.stack([(u + v).float() for u, v in zip(raw_input, self.uncond_residual, strict=True)]),
            )

        out = self.model(
            hidden_states, timestep=timestep, encoder_hidden_states=encoder_hidden_states, return_dict=False
        )[0]
        output = list(out.unbind(0))
        if is_cond:
            if self.previous_raw_cond_output is not None:
                output_change = (
                    torch.cat(
                        [
                            (u - v).flatten()
                            for u, v in zip(output, self.previous_raw_cond_output, strict=True)
                        ]
                    )
                    .abs()
                    .mean()
                )
                if self.prior_raw_cond_input is not None:
                    input_change = (
                        torch.cat(
                            [
                                (u - v).flatten()
                                for u, v in zip(
                                    self.previous_raw_cond_input, self.prior_raw_cond_input, strict=True
                                )
                            ]
                        )
                        .abs()
                        .mean()
                    )
                    z = output_change / (input_change + 1e-8)
                    is_warmup = self.forward_count < self.align_forwards
                    if self.state_ratio is None or is_warmup:
                        self.state_ratio = z
                        self.uncertainty = 1.0
                    else:
                        self.uncertainty = self.uncertainty + self.process_noise
                        gain = self.uncertainty / (self.uncertainty + self.measurement_noise + 1e-8)
                        self.state_ratio = self.state_ratio + gain * (z - self.state_ratio)
                        self.uncertainty = (1 - gain) * self.uncertainty
                    self.prediction_ratio = self.state_ratio
            self.prior_raw_cond_input = self.previous_raw_cond_input
            self.previous_raw_cond_output = [u.clone() for u in output]
            self.cond_residual = [u - v for u, v in zip(output, raw_input, strict=True)]
        else:
            self.previous_raw_uncond_output = [u.clone() for u in output]
            self.uncond_residual = [u - v for u, v in zip(output, raw_input, strict=True)]
        self._count()
        return (torch.stack([u.float() for u in output]),)

    def _count(self) -> None:
        self.forward_count += 1
        if self.forward_count >= self.num_forwards:
            self.forward_count = 0


@pytest.fixture(scope="module")
def wan():
    return helpers.tiny_wan().eval()


def _generate(model, seed):
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(2, helpers.CHANNELS, helpers.FRAMES, helpers.SIZE, helpers.SIZE, generator=g)
    cond = helpers.class_tokens(torch.tensor([0, 1]))
    uncond = torch.zeros_like(cond)
    return helpers.sample_flow_euler(model, noise, cond, uncond, GUIDE_SCALE, SAMPLE_STEPS, shift=SHIFT)


@pytest.mark.parametrize("threshold", [RELEASED_PRESETS["mid"], 0.1, 0.2, 0.5])
def test_model_level_navicache_equals_the_released_rule(wan, threshold):
    released = ReleasedNaviCache(wan, SAMPLE_STEPS, threshold, ALIGN_STEPS, PROCESS_NOISE, MEASUREMENT_NOISE)
    config = NaviCacheConfig(
        threshold=threshold,
        alignment_steps=ALIGN_STEPS,
        process_noise=PROCESS_NOISE,
        measurement_noise=MEASUREMENT_NOISE,
        level="model",
    )
    for generation, seed in enumerate((0, 1)):  # the release is not reset between generations
        theirs = _generate(released, seed)
        log = released.log[generation * SAMPLE_STEPS : (generation + 1) * SAMPLE_STEPS]
        apply_navicache(wan, config)
        try:
            ours = _generate(wan, seed)
            stats = get_cache_stats(wan)
        finally:
            remove_navicache(wan)
        assert [r.step for r in stats.records] == [step for step, *_ in log] == list(range(SAMPLE_STEPS))
        assert [r.computed for r in stats.records] == [computed for _, computed, *_ in log]
        for record, (_, _, compared, ratio) in zip(stats.records, log, strict=True):
            if compared is None:  # forced: the alignment steps and the last step
                assert record.forced and math.isnan(record.predicted)
                assert record.step < ALIGN_STEPS or record.step == SAMPLE_STEPS - 1
            else:
                assert record.predicted == pytest.approx(compared, rel=RATIO_RTOL)
                assert record.ratio == pytest.approx(ratio, rel=RATIO_RTOL)
                assert (
                    abs(record.predicted - threshold) / threshold > DECISION_MARGIN
                )  # not at a rounding edge
        assert torch.equal(ours, theirs)  # same decisions, same residuals: the same clips, bit for bit
        assert stats.full_forwards == {"cond": stats.steps_computed, "uncond": stats.steps_computed}
        if threshold > 0.07:
            assert 0 < stats.steps_skipped < SAMPLE_STEPS - ALIGN_STEPS - 1  # both decisions occur
        else:  # the released presets skip nothing on this random model
            assert stats.steps_skipped == 0


def test_the_presets_are_the_released_settings():
    for ours, theirs in (("quality", "slow"), ("balanced", "mid"), ("fast", "fast")):
        config = NaviCacheConfig.preset(ours, level="model")
        assert config.threshold == RELEASED_PRESETS[theirs] and config.state == "ratio"
        assert (config.process_noise, config.measurement_noise) == (PROCESS_NOISE, MEASUREMENT_NOISE)
    # alignment over the first 20 % of the schedule: 10 of the release's 50 steps
    assert math.ceil(0.2 * SAMPLE_STEPS) == ALIGN_STEPS
