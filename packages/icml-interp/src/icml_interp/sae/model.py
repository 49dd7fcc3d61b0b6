"""The sparse autoencoder: ``f = act((x - b_dec) W_enc + b_enc)``, ``x_hat = f W_dec + b_dec``.

Shapes: ``W_enc (d_in, d_sae)``, ``b_enc (d_sae,)``, ``W_dec (d_sae, d_in)``, ``b_dec (d_in,)``, and for the
JumpReLU forms ``threshold (d_sae,)`` -- the tensor names and layout of SAELens 6, so a saved folder loads there.

Units. :meth:`SAE.encode`, :meth:`SAE.decode` and ``sae(x)`` work in the caller's units: the activations as
the hooked module produced them. When training normalized the inputs (``x * s``, ``s = sqrt(d_in) / E||x||``),
:func:`~icml_interp.sae.train.train_sae` rescales the trained SAE afterwards (:meth:`SAE.fold_input_scale`):
``b_dec``, ``b_enc`` and ``threshold`` are divided by ``s`` and ``W_enc``, ``W_dec`` stay as they are. The
encoder then gives ``f = f_normalized / s`` -- the same latents fire, with activations in the caller's units
-- and the decoder rows keep unit norm in the caller's units, so a latent's activation is the length of what
it writes into the activation space, and an edit ``h' = h + (f' - f) W_dec`` of a hooked activation ``h``
(with ``f = sae.encode(h)``) is exact in the caller's units. No normalization happens at inference time.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from icml_interp.sae.config import SAEConfig
from icml_interp.validation import check_activations, check_finite, check_int, check_number, check_type


class _JumpReLUFn(torch.autograd.Function):
    """``pre * 1[pre > theta]``; the threshold gets the rectangle-kernel pseudo-derivative
    ``-(theta / eps) K((pre - theta) / eps)`` (Rajamanoharan et al. 2024)."""

    @staticmethod
    def forward(ctx, pre, threshold, bandwidth):
        ctx.save_for_backward(pre, threshold)
        ctx.bandwidth = bandwidth
        return pre * (pre > threshold).to(pre.dtype)

    @staticmethod
    def backward(ctx, grad):
        pre, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        window = (((pre - threshold) / eps).abs() < 0.5).to(pre.dtype)
        grad_threshold = (-(threshold / eps) * window * grad).sum(dim=0)
        return (pre > threshold).to(pre.dtype) * grad, grad_threshold, None


class _StepFn(torch.autograd.Function):
    """``1[pre > theta]`` (the L0 count); only the threshold gets a pseudo-derivative."""

    @staticmethod
    def forward(ctx, pre, threshold, bandwidth):
        ctx.save_for_backward(pre, threshold)
        ctx.bandwidth = bandwidth
        return (pre > threshold).to(pre.dtype)

    @staticmethod
    def backward(ctx, grad):
        pre, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        window = (((pre - threshold) / eps).abs() < 0.5).to(pre.dtype)
        return None, (-(1.0 / eps) * window * grad).sum(dim=0), None


def topk_activation(pre: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` largest entries of ``pre`` along the last dimension, ReLU'd; zeros elsewhere. Checked: ``pre`` is
    a non-empty finite floating-point tensor and ``k`` an int in ``[1, pre.shape[-1]]``."""
    check_type(pre, "pre", torch.Tensor, "a torch.Tensor")
    if pre.ndim == 0 or pre.shape[-1] == 0:
        raise ValueError(f"pre must be a tensor shaped (..., d_sae) with d_sae >= 1, got {tuple(pre.shape)}")
    if not pre.is_floating_point():
        raise TypeError(f"pre must be a floating-point tensor, got {pre.dtype}")
    check_finite(pre, "pre")
    check_int(k, "k", minimum=1, maximum=pre.shape[-1])
    return _topk(pre, k)


def _topk(pre: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`topk_activation` without its checks: the SAE's own pre-activations (from checked input)."""
    if pre.numel() == 0:  # no tokens: nothing to select
        return torch.zeros_like(pre)
    values, indices = torch.topk(pre, k=k, dim=-1, sorted=False)
    return torch.zeros_like(pre).scatter_(-1, indices, values.relu())


class SAE(nn.Module):
    """A sparse autoencoder of one of four architectures (see :class:`~icml_interp.sae.config.SAEConfig`).

    ``encode`` never depends on the other rows of the batch: a BatchTopK SAE encodes with its estimated
    threshold (a JumpReLU), its batch-wide top-k is used only inside :func:`~icml_interp.sae.train.train_sae`.
    """

    def __init__(self, cfg: SAEConfig):
        super().__init__()
        check_type(cfg, "cfg", SAEConfig, "an SAEConfig")
        self.cfg = cfg
        d_in, d_sae = cfg.d_in, cfg.d_sae
        gen = torch.Generator().manual_seed(cfg.seed)
        w_dec = torch.randn(d_sae, d_in, generator=gen)
        w_dec /= w_dec.norm(dim=-1, keepdim=True)
        self.W_dec = nn.Parameter(w_dec)  # (d_sae, d_in), unit-norm rows
        self.W_enc = nn.Parameter(w_dec.T.clone().contiguous())  # (d_in, d_sae)
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        if cfg.architecture == "jumprelu":
            self.threshold = nn.Parameter(torch.full((d_sae,), float(cfg.jumprelu_init_threshold)))
        elif cfg.architecture == "batchtopk":
            # estimated while training (EMA of the smallest kept activation); 0 until the first step
            self.register_buffer("threshold", torch.zeros(d_sae))
        # what training recorded (input scale, tokens seen, ...); saved in cfg.json
        self.info: dict = {}

    @property
    def d_in(self) -> int:
        return self.cfg.d_in

    @property
    def d_sae(self) -> int:
        return self.cfg.d_sae

    @property
    def architecture(self) -> str:
        return self.cfg.architecture

    # ------------------------------------------------------------------ inference
    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder pre-activations ``(x - b_dec) W_enc + b_enc``, shape ``(..., d_sae)``."""
        x = check_activations(x, "x", self.d_in, f"d_in = {self.d_in}, the SAE's activation width")
        x = check_finite(x.to(self.W_enc.dtype), "x (in the SAE's dtype)")
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """The inference nonlinearity (batch independent) applied to pre-activations."""
        arch = self.cfg.architecture
        if arch == "topk":
            return _topk(pre, self.cfg.k)
        if arch == "relu":
            return pre.relu()
        return pre.relu() * (pre > self.threshold).to(pre.dtype)  # jumprelu, batchtopk (SAELens' JumpReLU)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latent activations ``(..., d_sae)`` of activations ``x (..., d_in)`` in the caller's units."""
        return self.activate(self.pre_acts(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``f W_dec + b_dec``, shape ``(..., d_in)``."""
        f = check_activations(f, "f", self.d_sae, f"d_sae = {self.d_sae}, the number of latents")
        f = check_finite(f.to(self.W_enc.dtype), "f (in the SAE's dtype)")
        return f @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction ``decode(encode(x))`` (``x`` checked once; the latents are the SAE's own)."""
        return self.encode(x) @ self.W_dec + self.b_dec

    # ------------------------------------------------------------------ training pieces
    def encode_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f, pre)`` for a batch ``x (batch, d_in)`` as used while training: BatchTopK keeps the
        ``k * batch`` largest activations of the batch and updates its threshold estimate; JumpReLU passes
        the straight-through estimator to its threshold."""
        pre = self.pre_acts(x)  # (batch, d_sae)
        arch = self.cfg.architecture
        if arch == "batchtopk":
            relu = pre.relu()
            n_keep = min(self.cfg.k * relu.shape[0], relu.numel())
            values, indices = torch.topk(relu.flatten(), n_keep, sorted=False)
            f = torch.zeros_like(relu).flatten().scatter_(0, indices, values).view_as(relu)
            with torch.no_grad():
                positive = values[values > 0]
                if positive.numel():
                    self._track_threshold(positive.min())
            return f, pre
        if arch == "jumprelu":
            return _JumpReLUFn.apply(pre, self.threshold, self.cfg.jumprelu_bandwidth), pre
        return self.activate(pre), pre

    @torch.no_grad()
    def _track_threshold(self, smallest: torch.Tensor) -> None:
        """BatchTopK's threshold estimate after a step whose smallest kept activation was ``smallest``: that
        value at the first step, then an EMA with rate ``threshold_lr``."""
        if bool((self.threshold == 0).all()):
            self.threshold.fill_(smallest)
        else:
            lr = self.cfg.threshold_lr
            self.threshold.mul_(1 - lr).add_(lr * smallest)

    def l0_surrogate(self, pre: torch.Tensor) -> torch.Tensor:
        """Mean over tokens of ``sum_j 1[pre_j > theta_j]`` with the threshold's pseudo-derivative (JumpReLU)."""
        return _StepFn.apply(pre, self.threshold, self.cfg.jumprelu_bandwidth).sum(-1).mean()

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Rescale the decoder rows to unit norm."""
        self.W_dec.div_(self.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12))

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Project out of ``W_dec.grad`` the component parallel to each (unit-norm) decoder row, so that a
        step moves rows along the sphere to first order (the renormalization then fixes the rest)."""
        if self.W_dec.grad is None:
            return
        parallel = (self.W_dec.grad * self.W_dec).sum(-1, keepdim=True)  # (d_sae, 1)
        self.W_dec.grad.sub_(parallel * self.W_dec)

    @torch.no_grad()
    def fold_input_scale(self, scale: float) -> None:
        """Make an SAE trained on ``x * scale`` work on ``x``: divide ``b_dec``, ``b_enc`` and ``threshold`` by
        ``scale`` (then ``encode(x) = encode_trained(x * scale) / scale`` and ``decode`` returns ``x``'s units)."""
        scale = check_number(scale, "scale", minimum=0, open_min=True)
        self.b_dec.div_(scale)
        self.b_enc.div_(scale)
        if hasattr(self, "threshold"):
            self.threshold.div_(scale)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write a SAELens-compatible folder (``cfg.json`` + ``sae_weights.safetensors``); see
        :func:`icml_interp.sae.io.save_sae`."""
        from icml_interp.sae.io import save_sae

        return save_sae(self, path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> SAE:
        """Load a folder written by :meth:`save` (or a SAELens topk / jumprelu / standard folder)."""
        from icml_interp.sae.io import load_sae

        return load_sae(path, device=device)

    def extra_repr(self) -> str:
        extra = f", k={self.cfg.k}" if self.cfg.architecture in ("topk", "batchtopk") else ""
        return f"architecture={self.cfg.architecture!r}, d_in={self.d_in}, d_sae={self.d_sae}{extra}"
