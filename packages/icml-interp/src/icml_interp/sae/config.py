"""The SAE configuration: architecture, sparsity, dead-latent handling and the training schedule."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

ARCHITECTURES = ("topk", "batchtopk", "relu", "jumprelu")
NORMALIZATIONS = ("expected_average_only_in", "none")
B_DEC_INITS = ("geometric_median", "mean", "zeros")


def _positive_int(name: str, value, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def _nonneg_float(name: str, value, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")


@dataclass
class SAEConfig:
    """What to train. Defaults follow OpenAI's TopK recipe (Gao et al. 2024) and sparsify.

    d_in, d_sae
        activation width and dictionary size (``d_sae = expansion * d_in``).
    architecture
        ``"topk"``: the ``k`` largest ReLU pre-activations per token (Gao et al. 2024);
        ``"batchtopk"``: the ``k * batch`` largest over the whole batch while training (k is the *average* L0,
        Bussmann et al. 2024); at inference a JumpReLU with the threshold estimated while training (an EMA,
        rate ``threshold_lr``, of the smallest kept activation), so outputs never depend on the batch;
        ``"relu"``: ReLU with an L1 penalty ``l1_coefficient * sum |f|`` (Bricken et al. 2023);
        ``"jumprelu"``: ``f = pre * 1[pre > theta]`` with a learned per-latent threshold, trained with a
        straight-through rectangle-kernel estimator (bandwidth ``jumprelu_bandwidth``) and an L0 penalty
        ``l0_coefficient * sum 1[pre > theta]`` (Rajamanoharan et al. 2024).
    k
        active latents per token (topk, batchtopk); must be <= d_sae.
    aux_k, aux_coefficient, dead_steps
        AuxK (Gao et al. 2024): a latent is dead if it has not fired for ``dead_steps`` optimizer steps; the
        ``aux_k`` largest pre-activations of dead latents (default ``d_in // 2``) reconstruct the residual
        ``x - x_hat``; the loss adds ``aux_coefficient * min(n_dead / aux_k, 1) * FVU(residual)``. ``aux_k=0``
        or ``aux_coefficient=0`` switches AuxK off. Used by topk and batchtopk.
    lr, batch_size, total_tokens, lr_warmup_steps, lr_decay_fraction
        Adam with ``lr`` (default ``2e-4 / sqrt(d_sae / 2**14)``, Gao et al.'s scaling law), linear warmup and
        a linear decay to 0 over the last ``lr_decay_fraction`` of the steps; ``batch_size`` tokens per step,
        ``total_tokens // batch_size`` steps.
    normalize_activations
        ``"expected_average_only_in"``: train on ``x * s`` with ``s = sqrt(d_in) / E||x||`` (estimated on the
        first batches; SAELens' name); the trained SAE is then rescaled so that it works in the caller's units
        (see :class:`~icml_interp.sae.model.SAE`). ``"none"``: train on ``x`` as given.
    b_dec_init
        ``"geometric_median"`` (Weiszfeld iterations), ``"mean"`` or ``"zeros"`` of the first batches.
    seed
        initial weights and the data order of a source built without its own seed.
    """

    d_in: int
    d_sae: int
    architecture: str = "topk"
    k: int = 32
    l1_coefficient: float = 0.3
    l0_coefficient: float = 1e-2
    jumprelu_init_threshold: float = 0.5
    jumprelu_bandwidth: float = 0.1
    threshold_lr: float = 0.01
    aux_k: int | None = None
    aux_coefficient: float = 1 / 32
    dead_steps: int = 100
    lr: float | None = None
    batch_size: int = 4096
    total_tokens: int = 2_000_000
    lr_warmup_steps: int = 0
    lr_decay_fraction: float = 0.2
    normalize_activations: str = "expected_average_only_in"
    b_dec_init: str = "geometric_median"
    seed: int = 0

    def __post_init__(self):
        _positive_int("d_in", self.d_in)
        _positive_int("d_sae", self.d_sae)
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {self.architecture!r}")
        _positive_int("k", self.k)
        if self.architecture in ("topk", "batchtopk") and self.k > self.d_sae:
            raise ValueError(f"k must be <= d_sae (the dictionary has {self.d_sae} latents), got k={self.k}")
        for name in ("l1_coefficient", "l0_coefficient", "aux_coefficient", "threshold_lr"):
            _nonneg_float(name, getattr(self, name))
        _nonneg_float("jumprelu_init_threshold", self.jumprelu_init_threshold, positive=True)
        _nonneg_float("jumprelu_bandwidth", self.jumprelu_bandwidth, positive=True)
        if self.aux_k is not None:
            _positive_int("aux_k", self.aux_k, allow_zero=True)
            if self.aux_k > self.d_sae:
                raise ValueError(f"aux_k must be <= d_sae ({self.d_sae}), got {self.aux_k}")
        _positive_int("dead_steps", self.dead_steps)
        if self.lr is not None:
            _nonneg_float("lr", self.lr, positive=True)
        _positive_int("batch_size", self.batch_size)
        _positive_int("total_tokens", self.total_tokens)
        _positive_int("lr_warmup_steps", self.lr_warmup_steps, allow_zero=True)
        _nonneg_float("lr_decay_fraction", self.lr_decay_fraction)
        if self.lr_decay_fraction > 1:
            raise ValueError(f"lr_decay_fraction must lie in [0, 1], got {self.lr_decay_fraction}")
        if self.normalize_activations not in NORMALIZATIONS:
            raise ValueError(
                f"normalize_activations must be one of {NORMALIZATIONS}, got {self.normalize_activations!r}"
            )
        if self.b_dec_init not in B_DEC_INITS:
            raise ValueError(f"b_dec_init must be one of {B_DEC_INITS}, got {self.b_dec_init!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {self.seed!r}")

    # ------------------------------------------------------------------ derived values
    @property
    def effective_aux_k(self) -> int:
        """The number of dead latents AuxK uses (0: AuxK off)."""
        if self.architecture not in ("topk", "batchtopk") or self.aux_coefficient == 0:
            return 0
        return min(self.d_in // 2, self.d_sae) if self.aux_k is None else self.aux_k

    @property
    def effective_lr(self) -> float:
        return self.lr if self.lr is not None else 2e-4 / math.sqrt(self.d_sae / 2**14)

    @property
    def steps(self) -> int:
        return max(1, self.total_tokens // self.batch_size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SAEConfig:
        """The config from :meth:`to_dict`'s output; unknown keys raise (a typo must not pass silently)."""
        if not isinstance(data, dict):
            raise TypeError(f"data must be a dict, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown SAEConfig keys {unknown}; known: {sorted(known)}")
        return cls(**data)
