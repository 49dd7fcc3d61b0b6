"""A TeaCache-style baseline (Liu et al., CVPR 2025): an offline polynomial on the modulated input's change.

TeaCache predicts the block stack's relative output change from the relative L1 change of the first
block's timestep-modulated input, ``r_t = mean|m_t − m_{t−1}| / mean|m_{t−1}|``, through a polynomial
fitted offline per model, accumulates ``Σ poly(r_t)`` and skips while it stays below the threshold. The
calibration is the step NaviCache removes: run the model with ``TeaCacheConfig(calibrate=True)`` (nothing
is skipped, pairs ``(r_t, relative output change)`` are recorded), then fit the polynomial with
:func:`fit_teacache_coefficients`.

``m_t`` for a Wan block is ``norm1(x)·(1 + scale) + shift`` with the block's own modulation (its first
self-attention input); for a DiT block (``BasicTransformerBlock`` with adaLN-Zero, as in
``DiTTransformer2DModel``) the same quantity from its timestep-and-class modulation
(:func:`dit_modulated_input`, our equivalent of the Wan indicator); for other blocks the block input
itself (pass ``modulated_input`` to change it).
Skipping reuses the whole stack's residual, as in our NaviCache hook.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml_generative.cache.hooks import CacheStats, StackPolicy, apply_stack_cache, mean_abs
from icml_generative.validation import check_cache_schedule, check_instance, check_int


def wan_modulated_input(block: torch.nn.Module, x: torch.Tensor, args, kwargs) -> torch.Tensor:
    """The modulated input of a Wan block's self-attention; the plain input for other blocks."""
    temb = kwargs.get("temb", args[2] if len(args) > 2 else None)
    if temb is None or not hasattr(block, "scale_shift_table") or temb.ndim != 3:
        return x
    shift, scale = (block.scale_shift_table + temb.float()).chunk(6, dim=1)[:2]
    return block.get_submodule("norm1")(x.float()) * (1 + scale) + shift


def dit_modulated_input(block: torch.nn.Module, x: torch.Tensor, args, kwargs) -> torch.Tensor:
    """The modulated input of a DiT block's self-attention (diffusers' ``BasicTransformerBlock`` with
    ``norm_type="ada_norm_zero"``, as in ``DiTTransformer2DModel``): ``norm1(x)·(1 + scale_msa) + shift_msa``
    with the block's own timestep-and-class adaLN-Zero modulation, the DiT equivalent of Wan's; the plain
    input for other blocks."""
    from diffusers.models.normalization import AdaLayerNormZero

    timestep = kwargs.get("timestep", args[4] if len(args) > 4 else None)
    labels = kwargs.get("class_labels", args[6] if len(args) > 6 else None)
    norm = getattr(block, "norm1", None)
    if not isinstance(norm, AdaLayerNormZero) or timestep is None:
        return x
    return norm(x, timestep, labels, hidden_dtype=x.dtype)[0].float()


def modulated_input(block: torch.nn.Module, x: torch.Tensor, args, kwargs) -> torch.Tensor:
    """TeaCache's indicator source for any block: Wan's or DiT's modulated input, else the block input."""
    if hasattr(block, "scale_shift_table"):
        return wan_modulated_input(block, x, args, kwargs)
    return dit_modulated_input(block, x, args, kwargs)


@dataclass
class TeaCacheConfig:
    """Configuration of :func:`apply_teacache`.

    Args:
        threshold: skip while the accumulated ``poly(r_t)`` is below it (> 0).
        coefficients: the polynomial, highest degree first (``numpy.polyval`` order); required unless
            ``calibrate``.
        alignment_steps: steps always computed at the start; None: 20% of the schedule.
        num_inference_steps: the schedule's length in model calls per generation and context,
            the denoising loop's length (``pipe.num_timesteps`` after a call; 2n-1 for n Heun or KDPM2
            steps, fewer than n for img2img with ``strength`` < 1); None when the cache context carries it.
        calibrate: compute every step and record calibration pairs.
        modulated_input: ``f(block, x, args, kwargs) -> tensor``, the indicator's source.
    """

    threshold: float = 0.1
    coefficients: Sequence[float] | None = None
    alignment_steps: int | None = None
    num_inference_steps: int | None = None
    calibrate: bool = False
    modulated_input: Callable = modulated_input

    def __post_init__(self) -> None:
        check_cache_schedule(self.threshold, self.alignment_steps, self.num_inference_steps)
        if not isinstance(self.calibrate, bool):
            raise ValueError(f"calibrate must be True or False, got {self.calibrate!r}")
        if not callable(self.modulated_input):
            raise TypeError(
                "modulated_input must be callable as f(block, x, args, kwargs), "
                f"got {type(self.modulated_input).__name__}"
            )
        if self.coefficients is None and not self.calibrate:
            raise ValueError(
                "coefficients are required (they are model-specific): run once with calibrate=True "
                "and fit them with fit_teacache_coefficients"
            )
        if self.coefficients is not None:
            try:
                coefficients = (
                    np.asarray(self.coefficients)
                    if isinstance(self.coefficients, (list, tuple, np.ndarray))
                    else None
                )
            except ValueError:  # ragged
                coefficients = None
            if coefficients is None or coefficients.ndim != 1 or coefficients.dtype.kind not in "iuf":
                raise ValueError(
                    f"coefficients must be a non-empty list of finite numbers, got {self.coefficients!r}"
                )
            self.coefficients = [float(c) for c in coefficients]
            if not self.coefficients or not all(math.isfinite(c) for c in self.coefficients):
                raise ValueError(
                    f"coefficients must be a non-empty list of finite numbers, got {self.coefficients}"
                )


class TeaCachePolicy(StackPolicy):
    name = "TeaCache"

    def __init__(self, config: TeaCacheConfig) -> None:
        super().__init__(
            config.threshold, config.alignment_steps, config.num_inference_steps, config.calibrate
        )
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.previous: torch.Tensor | None = None
        self.rel_in = math.nan
        self.accumulated = 0.0

    def start_step(self, ctx, x, step, block, args, kwargs) -> None:
        m = self.config.modulated_input(block, x, args, kwargs)
        if self.previous is not None and self.previous.shape != m.shape:
            self.rel_in = math.nan  # the input's shape changed: no comparison (the step is computed)
        elif self.previous is not None:
            self.rel_in = mean_abs(m - self.previous) / (mean_abs(self.previous) + 1e-12)
        self.previous = m

    def predict(self, ctx, x, step) -> tuple[float, float]:
        assert self.config.coefficients is not None, "required unless calibrating; calibration never skips"
        self.accumulated += float(np.polyval(self.config.coefficients, self.rel_in))
        return self.accumulated, math.nan

    def on_compute(self) -> None:
        self.accumulated = 0.0

    def measure(self, ctx, x, out, step, aligning, sigma) -> None:
        if self.calibrate and ctx.last_compute_step == step - 1 and math.isfinite(self.rel_in):
            rel_out = mean_abs(out - ctx.out_last) / (mean_abs(ctx.out_last) + 1e-12)
            self.shared.stats.calibration.append((self.rel_in, rel_out))


def apply_teacache(module: torch.nn.Module, config: TeaCacheConfig) -> None:
    """Apply the TeaCache-style baseline (remove it with :func:`~icml_generative.cache.remove_navicache`)."""
    config = check_instance(config, "config", TeaCacheConfig)
    apply_stack_cache(module, TeaCachePolicy(config), config=config)


def fit_teacache_coefficients(stats: Sequence[CacheStats], degree: int = 4) -> list[float]:
    """Least-squares polynomial from the calibration pairs of one or more calibration runs."""
    check_int(degree, "degree", 0)
    if not isinstance(stats, (list, tuple)) or not all(isinstance(s, CacheStats) for s in stats):
        raise TypeError(
            f"stats must be a list of CacheStats (get_cache_stats of calibration runs), got {stats!r}"
        )
    pairs = [p for s in stats for p in s.calibration]
    if not all(
        isinstance(p, (tuple, list))
        and len(p) == 2
        and all(isinstance(v, (int, float)) and math.isfinite(v) for v in p)
        for p in pairs
    ):
        raise ValueError(
            "stats must hold calibration pairs of two finite numbers (input change, output change)"
        )
    if len(pairs) <= degree:
        raise ValueError(
            f"need more than degree={degree} calibration pairs, got {len(pairs)}: run the model "
            "with TeaCacheConfig(calibrate=True) first"
        )
    x, y = np.array(pairs).T
    coefficients = np.polyfit(x, y, degree).tolist()
    if not all(math.isfinite(c) for c in coefficients):
        warnings.warn(
            f"fit_teacache_coefficients: the degree-{degree} fit overflowed (calibration values too large)",
            RuntimeWarning,
            stacklevel=2,
        )
    return coefficients
