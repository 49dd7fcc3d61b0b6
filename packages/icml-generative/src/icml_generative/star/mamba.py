"""A pure-torch Mamba (selective state-space) block and its bidirectional wrapper, for CPU and any device.

The mixer is Mamba-1's (Gu & Dao 2023): ``in_proj`` to ``(x, gate)``, a causal depthwise convolution and
SiLU on ``x``, input-dependent ``Δ, B, C`` from ``x_proj``/``dt_proj``, the selective scan

    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,     y_t = C_t · h_t + D x_t,

with ``A = −exp(A_log)`` diagonal per channel and state, then ``y · SiLU(gate)`` and ``out_proj``.
``mamba-ssm`` computes the scan in a CUDA kernel; here :func:`selective_scan` computes it as a parallel
prefix scan in ``log2 L`` tensor operations and :func:`selective_scan_reference` step by step (the
recurrence the tests compare the parallel scan with). On CPU the step-by-step loop is the faster of the two
at the lengths of audio latents (measured, 16 × 256 channels × 16 states, forward + backward: 12 ms
sequential, 49 ms parallel at L = 32; 0.23 s and 0.26 s at L = 1000), so ``scan="auto"`` takes the
sequential loop on CPU and the parallel scan on other devices, where the loop's ``L`` kernel launches
dominate.

:class:`BiMamba` is the bidirectional block STAR-VAE puts between its convolutional stages: a pre-norm
residual block whose mixer is a forward Mamba plus a second Mamba run on the time-reversed sequence (their
outputs summed), as in Vision Mamba's bidirectional layers. The paper gives no further detail; this layout
is ours.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from icml_generative.validation import check_choice, check_int, check_model_input, check_number, check_tensor

SCANS = ("auto", "parallel", "sequential")


def _check_scan_inputs(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
) -> None:
    check_tensor(u, "u", ("batch", "channels", "length"), floating=True)
    batch, channels, length = u.shape
    check_tensor(delta, "delta", (batch, channels, length), floating=True)
    check_tensor(A, "A", (channels, "state"), floating=True)
    check_tensor(B, "B", (batch, A.shape[1], length), floating=True)
    check_tensor(C, "C", (batch, A.shape[1], length), floating=True)
    if D is not None:
        check_tensor(D, "D", (channels,), floating=True)
    named = {"u": u, "delta": delta, "A": A, "B": B, "C": C, **({} if D is None else {"D": D})}
    if len({t.dtype for t in named.values()}) > 1:
        dtypes = ", ".join(f"{k} {t.dtype}" for k, t in named.items())
        raise TypeError(f"u, delta, A, B, C and D must share one dtype, got {dtypes}")


def selective_scan_reference(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
) -> torch.Tensor:
    """The selective scan step by step: ``u, delta (batch, channels, L)``, ``A (channels, state)``,
    ``B, C (batch, state, L)``, ``D (channels,)``; returns ``y (batch, channels, L)``. The reference for
    :func:`selective_scan`."""
    _check_scan_inputs(u, delta, A, B, C, D)
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for t in range(u.shape[2]):
        decay = torch.exp(delta[:, :, t, None] * A)  # (b, d, n)
        h = decay * h + delta[:, :, t, None] * B[:, None, :, t] * u[:, :, t, None]
        ys.append((h * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=2) if ys else u.new_zeros(u.shape)
    return y if D is None else y + D[None, :, None] * u


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
) -> torch.Tensor:
    """The selective scan of :func:`selective_scan_reference` as a parallel prefix scan (Hillis & Steele
    doubling, ``ceil(log2 L)`` steps) of the associative map ``(a, b) ∘ (a', b') = (a a', a' b + b')`` over the
    pairs ``(exp(Δ_t A), Δ_t B_t x_t)``. Only products of decays ``<= 1`` are formed, so it is as stable as
    the recurrence. Memory: two ``(batch, channels, state, L)`` tensors per step."""
    _check_scan_inputs(u, delta, A, B, C, D)
    decay = torch.exp(delta[:, :, None, :] * A[None, :, :, None])  # (b, d, n, l)
    h = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]  # (b, d, n, l)
    k, length = 1, u.shape[2]
    while k < length:
        h = torch.cat([h[..., :k], h[..., k:] + decay[..., k:] * h[..., :-k]], dim=-1)
        decay = torch.cat([decay[..., :k], decay[..., k:] * decay[..., :-k]], dim=-1)
        k *= 2
    y = torch.einsum("bdnl,bnl->bdl", h, C)
    return y if D is None else y + D[None, :, None] * u


class Mamba(nn.Module):
    """Mamba-1's mixer on ``(batch, length, d_model)``: ``d_inner = expand · d_model`` channels, ``d_state``
    states each, a causal depthwise convolution of width ``d_conv``, ``dt_rank = ceil(d_model / 16)`` by
    default; initialization as mamba-ssm (``A_log = log(1..d_state)``, ``Δ`` bias giving Δ in
    ``[dt_min, dt_max]`` log-uniformly). ``scan``: ``"parallel"`` (:func:`selective_scan`), ``"sequential"``
    (:func:`selective_scan_reference`) or ``"auto"`` (sequential on CPU, parallel elsewhere)."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        dt_rank: int | None = None,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        scan: str = "auto",
    ) -> None:
        super().__init__()
        d_model = check_int(d_model, "d_model", 1, 2**16)
        self.d_state = check_int(d_state, "d_state", 1, 1024)
        d_conv = check_int(d_conv, "d_conv", 1, 64)
        self.d_inner = check_int(expand, "expand", 1, 16) * d_model
        self.dt_rank = math.ceil(d_model / 16) if dt_rank is None else check_int(dt_rank, "dt_rank", 1, 2**16)
        dt_min = check_number(dt_min, "dt_min", above=0)
        dt_max = check_number(dt_max, "dt_max", above=0)
        if dt_min > dt_max:
            raise ValueError(f"dt_min ({dt_min}) must not exceed dt_max ({dt_max})")
        self.scan = check_choice(scan, "scan", SCANS)
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner, bias=False)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, d_conv, groups=self.d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + 2 * self.d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner)
        with torch.no_grad():
            dt = torch.exp(
                torch.rand(self.d_inner) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
            )
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
        # in the default dtype, as every other parameter: diffusers' from_pretrained(torch_dtype=...,
        # low_cpu_mem_usage=False) builds the model under that default and copies the weights into it, so a
        # float32 A_log stayed float32 in a bfloat16 model and its forward refused bfloat16 input
        self.A_log = nn.Parameter(
            torch.log(torch.arange(1, self.d_state + 1).float())
            .to(torch.get_default_dtype())
            .repeat(self.d_inner, 1)
        )
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        check_model_input(hidden, "hidden", self, ("batch", "length", self.in_proj.in_features))
        length = hidden.shape[1]
        x, gate = self.in_proj(hidden).chunk(2, dim=-1)  # (b, l, d_inner) each
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :length])  # causal: (b, d_inner, l)
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt)).transpose(1, 2)  # (b, d_inner, l)
        A = -torch.exp(self.A_log.float()).to(x.dtype)
        B, C = B.transpose(1, 2), C.transpose(1, 2)  # (b, n, l)
        if self.scan == "parallel" or (self.scan == "auto" and x.device.type != "cpu"):
            y = selective_scan(x, delta, A, B, C, self.D.to(x.dtype))
        else:
            y = selective_scan_reference(x, delta, A, B, C, self.D.to(x.dtype))
        return self.out_proj(y.transpose(1, 2) * F.silu(gate))


class BiMamba(nn.Module):
    """A bidirectional Mamba block on ``(batch, length, d_model)``: ``x + fwd(LN(x)) + flip(bwd(flip(LN(x))))``
    with two independent :class:`Mamba` mixers (keyword arguments go to both)."""

    def __init__(self, d_model: int, **mamba_kwargs) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(check_int(d_model, "d_model", 1, 2**16))
        self.forward_mixer = Mamba(d_model, **mamba_kwargs)
        self.backward_mixer = Mamba(d_model, **mamba_kwargs)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        check_model_input(hidden, "hidden", self, ("batch", "length", self.norm.normalized_shape[0]))
        x = self.norm(hidden)
        return hidden + self.forward_mixer(x) + self.backward_mixer(x.flip(1)).flip(1)
