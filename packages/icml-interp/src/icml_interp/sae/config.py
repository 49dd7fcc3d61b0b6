"""The SAE configuration: architecture, sparsity, dead-latent handling and the training schedule."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from icml_interp.validation import check_choice, check_int, check_number, check_type

ARCHITECTURES = ("topk", "batchtopk", "relu", "jumprelu")
NORMALIZATIONS = ("expected_average_only_in", "none")
B_DEC_INITS = ("geometric_median", "mean", "zeros")


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
        ``aux_k`` largest pre-activations of dead latents (default ``min(d_in // 2, d_sae)``) reconstruct the
        residual ``x - x_hat``; the loss adds ``aux_coefficient * min(n_dead / aux_k, 1) * FVU(residual)``.
        ``aux_k=0`` or ``aux_coefficient=0`` switches AuxK off. Used by topk and batchtopk.
    lr, batch_size, total_tokens, lr_warmup_steps, lr_decay_fraction
        Adam with ``lr`` (default ``2e-4 / sqrt(d_sae / 2**14)``, Gao et al.'s scaling law), linear warmup and
        a linear decay to 0 over the last ``lr_decay_fraction`` of the steps; ``batch_size`` tokens per step,
        ``total_tokens // batch_size`` steps. Checked: ``batch_size >= 2`` (the FVU divides by the batch's
        variance, which one token does not have) and ``total_tokens >= batch_size`` (at least one full step).
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
        for name in ("d_in", "d_sae", "k", "dead_steps", "batch_size", "total_tokens"):
            check_int(getattr(self, name), name, minimum=1)
        if self.batch_size < 2:
            raise ValueError(
                f"batch_size must be >= 2 (the FVU loss divides by the variance of a batch's tokens, which a "
                f"single token does not have), got {self.batch_size}"
            )
        if self.total_tokens < self.batch_size:
            raise ValueError(
                f"total_tokens must be >= batch_size (training runs total_tokens // batch_size steps), got "
                f"total_tokens={self.total_tokens} and batch_size={self.batch_size}"
            )
        check_int(self.lr_warmup_steps, "lr_warmup_steps", minimum=0)
        check_int(self.seed, "seed")
        if self.aux_k is not None:
            check_int(self.aux_k, "aux_k", minimum=0, maximum=self.d_sae)
        check_choice(self.architecture, "architecture", ARCHITECTURES)
        if self.architecture in ("topk", "batchtopk") and self.k > self.d_sae:
            raise ValueError(f"k must be <= d_sae (the dictionary has {self.d_sae} latents), got k={self.k}")
        for name in ("l1_coefficient", "l0_coefficient", "aux_coefficient", "threshold_lr"):
            check_number(getattr(self, name), name, minimum=0)
        positive = ["jumprelu_init_threshold", "jumprelu_bandwidth"] + ([] if self.lr is None else ["lr"])
        for name in positive:
            check_number(getattr(self, name), name, minimum=0, open_min=True)
        check_number(self.lr_decay_fraction, "lr_decay_fraction", minimum=0, maximum=1)
        check_choice(self.normalize_activations, "normalize_activations", NORMALIZATIONS)
        check_choice(self.b_dec_init, "b_dec_init", B_DEC_INITS)

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
        return self.total_tokens // self.batch_size  # >= 1: total_tokens >= batch_size is checked

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SAEConfig:
        """The config from :meth:`to_dict`'s output; unknown keys raise (a typo must not pass silently)."""
        check_type(data, "data", dict, "a dict")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown SAEConfig keys {unknown}; known: {sorted(known)}")
        return cls(**data)
