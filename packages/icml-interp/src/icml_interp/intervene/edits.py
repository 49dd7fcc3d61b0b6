"""Latent edits (``Add``, ``Scale``, ``Clamp``) and the ``intervene`` context manager.

Layouts of the hooked module's output are those of ``icml_interp.sae.ActivationSource``: ``"bchw"``
(B, C, H, W) → tokens (B·H·W, C); ``"bhwc"``; ``"btd"`` (B, T, D) → tokens (B·T, D); ``"nd"`` tokens as they
are; ``"auto"`` picks by the number of dimensions (4 → bchw, 3 → btd, 2 → nd). A module returning a tuple
(Hugging Face style) has its first element edited.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from icml_interp.sae.source import LAYOUTS, from_tokens, resolve_layout, to_tokens
from icml_interp.validation import (
    check_choice,
    check_d_in,
    check_finite,
    check_sae_like,
    check_tensor,
    check_type,
)


def _latent_index(latents, d_sae: int | None = None) -> torch.Tensor:
    if isinstance(latents, torch.Tensor):
        idx = latents.flatten()
        if idx.dtype == torch.bool:
            idx = idx.nonzero().flatten()
        elif idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"latents must hold integer indices, got dtype {idx.dtype}")
        idx = idx.long()
    elif isinstance(latents, Sequence) and not isinstance(latents, str):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in latents):
            raise TypeError(f"latents must be a sequence of ints, got {latents!r}")
        idx = torch.tensor(list(latents), dtype=torch.long)
    elif isinstance(latents, int) and not isinstance(latents, bool):
        idx = torch.tensor([latents])
    else:
        raise TypeError(
            f"latents must be an int, a sequence of ints or an index tensor, got {type(latents).__name__}"
        )
    if idx.numel() == 0:
        raise ValueError("latents must name at least one latent")
    if int(idx.min()) < 0:
        raise ValueError(f"latents must be indices >= 0, got {idx.tolist()}")
    if idx.unique().numel() != idx.numel():
        # an indexed write with a repeated index keeps one of the values (which one torch leaves undefined):
        # Add([1, 1], amount=[1, 5]) gave latent 1 a +5, neither +6 nor an error
        raise ValueError(f"latents must be distinct indices (each latent edited once), got {idx.tolist()}")
    if d_sae is not None and (int(idx.min()) < 0 or int(idx.max()) >= d_sae):
        raise ValueError(f"latents must lie in [0, {d_sae}) for this SAE, got {idx.tolist()}")
    return idx


@dataclass
class LatentEdit:
    """Base class: ``__call__(f)`` returns the edited codes for the rows selected by the mask."""

    latents: object

    def __post_init__(self):
        _latent_index(self.latents)  # the latents are checked when the edit is made, their range when applied

    def index(self, d_sae: int) -> torch.Tensor:
        return _latent_index(self.latents, d_sae)

    def edited(self, chosen: torch.Tensor, idx: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """The new codes of the chosen latents ``chosen = f[:, idx]``."""
        raise NotImplementedError  # pragma: no cover - abstract

    def __call__(self, f: torch.Tensor) -> torch.Tensor:
        idx = self.index(f.shape[-1])
        out = f.clone()
        out[:, idx] = self.edited(f[:, idx], idx, f)
        return out


@dataclass
class Add(LatentEdit):
    """``f_j ← f_j + amount_j`` (``amount`` a number or one value per latent)."""

    amount: float | torch.Tensor = 1.0

    def __post_init__(self):
        super().__post_init__()
        _check_value(self.amount, "amount")

    def edited(self, chosen, idx, f):
        return chosen + _per_latent(self.amount, idx, "amount", f)


@dataclass
class Scale(LatentEdit):
    """``f_j ← factor_j · f_j``."""

    factor: float | torch.Tensor = 0.0

    def __post_init__(self):
        super().__post_init__()
        _check_value(self.factor, "factor")

    def edited(self, chosen, idx, f):
        return chosen * _per_latent(self.factor, idx, "factor", f)


@dataclass
class Clamp(LatentEdit):
    """``f_j ← value_j``; ``value`` a number, one value per chosen latent, or a full ``(d_sae,)`` vector (e.g.
    :func:`reference_mean` of a reference cohort) from which the chosen latents' entries are taken (a tensor
    of length d_sae is always read as such a full vector)."""

    value: float | torch.Tensor = 0.0

    def __post_init__(self):
        super().__post_init__()
        _check_value(self.value, "value")

    def edited(self, chosen, idx, f):
        value = self.value
        if isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel() == f.shape[-1]:
            value = value[idx]
        return _per_latent(value, idx, "value", f).expand_as(chosen)


def _check_value(value, name: str) -> None:
    """An edit's number: a finite real number, or a non-empty finite real tensor of at most one dimension."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a number or a tensor, got {type(value).__name__}")
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"{name} must be a real tensor, got {value.dtype}")
        if value.ndim > 1 or value.numel() == 0:
            raise ValueError(
                f"{name} must be a number or a 1-d tensor of per-latent values, got {tuple(value.shape)}"
            )
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite")
    elif not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


def _per_latent(value, idx: torch.Tensor, name: str, f: torch.Tensor) -> torch.Tensor:
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a number or a tensor, got {type(value).__name__}")
    v = torch.as_tensor(value, dtype=f.dtype, device=f.device)
    if isinstance(value, (int, float)) and not bool(torch.isfinite(v).all()):
        raise ValueError(f"{name} = {value!r} overflows the codes' dtype {f.dtype}")
    if v.dim() == 0:
        v = v.expand(idx.numel())
    if v.shape != (idx.numel(),):
        raise ValueError(
            f"{name} must be a number or hold one value per chosen latent ({idx.numel()}), got shape {tuple(v.shape)}"
        )
    if not torch.isfinite(v).all():
        raise ValueError(f"{name} must be finite")
    return v


def reference_mean(codes: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean latent code ``(d_sae,)`` over tokens ``codes`` (n_tokens, d_sae), optionally only rows where ``mask``."""
    check_tensor(codes, "codes", "(n_tokens, d_sae)", ndim=2)
    if not codes.is_floating_point():
        raise TypeError(f"codes must be a floating-point tensor, got {codes.dtype}")
    check_finite(codes, "codes")
    if mask is not None:
        mask = _as_mask(mask).flatten().bool()
        if mask.numel() != codes.shape[0]:
            raise ValueError(f"mask must have one entry per token ({codes.shape[0]}), got {mask.numel()}")
        if not mask.any():
            raise ValueError("mask selects no tokens")
        codes = codes[mask]
    return codes.double().mean(0).to(codes.dtype)  # in float64: a float32 sum of huge codes would overflow


def _as_mask(mask) -> torch.Tensor:
    """``mask`` (a tensor, array or nested list of bools or numbers) as a tensor, checked."""
    try:
        m = torch.as_tensor(mask)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"mask must be a bool tensor (or array) or None, got {type(mask).__name__}") from None
    if m.is_complex():
        raise TypeError(f"mask must be a bool or real tensor, got {m.dtype}")
    if m.is_floating_point():
        if not bool(torch.isfinite(m).all()):
            raise ValueError("mask must not hold NaN or inf")
    return m


def _token_mask(mask: torch.Tensor, h: torch.Tensor, layout: str) -> torch.Tensor:
    """The mask as one bool per token; a conv mask of another spatial size is resized (nearest)."""
    m = _as_mask(mask).to(h.device)
    if m.numel() == 0:
        raise ValueError(f"mask must not be empty, got shape {tuple(m.shape)}")
    if layout in ("bchw", "bhwc"):
        b, hh, ww = (h.shape[0], *h.shape[2:]) if layout == "bchw" else h.shape[:3]
        if m.dim() == 2:
            m = m.unsqueeze(0).expand(b, *m.shape)
        if m.dim() != 3 or m.shape[0] != b:
            raise ValueError(
                f"mask must be (H, W) or (B, H, W) with B = {b} for feature maps, got {tuple(m.shape)}"
            )
        if m.shape[1:] != (hh, ww):
            m = F.interpolate(m[:, None].float(), size=(hh, ww), mode="nearest")[:, 0]
        return m.reshape(-1) > 0.5 if m.dtype.is_floating_point else m.reshape(-1).bool()
    lead = h.shape[:-1]
    if m.shape != lead:
        raise ValueError(f"mask must have shape {tuple(lead)} (one entry per token), got {tuple(m.shape)}")
    return m.reshape(-1).bool()


def apply_edit(
    h: torch.Tensor, sae, edit: LatentEdit, *, mask: torch.Tensor | None = None, layout: str = "auto"
) -> torch.Tensor:
    """The edited activation ``h + decode(edit(f)) − decode(f)`` (``f = sae.encode(h)``), only where ``mask``."""
    check_type(edit, "edit", LatentEdit, "an Add, Scale or Clamp")
    check_choice(layout, "layout", LAYOUTS)
    check_type(h, "h", torch.Tensor, "a tensor")
    check_sae_like(sae)
    if not h.is_floating_point():
        raise TypeError(f"h must be a floating-point tensor, got {h.dtype}")
    check_finite(h.to(sae.W_dec.dtype), "h (in the SAE's dtype)")
    layout = resolve_layout(h, layout, "h")
    tokens = to_tokens(h, layout)
    check_d_in(tokens.shape[-1], getattr(sae, "d_in", None) or sae.W_dec.shape[1], "h")
    rows = torch.arange(tokens.shape[0], device=h.device)
    if mask is not None:
        rows = _token_mask(mask, h, layout).nonzero().flatten()
        if rows.numel() == 0:
            return h
    f = sae.encode(tokens[rows])
    delta = sae.decode(edit(f)) - sae.decode(f)  # = (f' - f) @ W_dec: the error term is kept
    out = tokens.clone()
    out[rows] = tokens[rows] + delta.to(tokens.dtype)
    return from_tokens(out, h, layout)


@contextmanager
def intervene(
    module: nn.Module, sae, edit: LatentEdit, *, mask: torch.Tensor | None = None, layout: str = "auto"
) -> Iterator[nn.Module]:
    """While inside, ``module``'s output ``h`` is replaced by :func:`apply_edit`; the hook is removed on exit,
    also when the body raises.

    ``mask``: bool (H, W) or (B, H, W) for feature maps (resized by nearest neighbour if needed), (B, T) for
    hidden states, (N,) for tokens; ``None`` edits every token.
    """
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    check_type(edit, "edit", LatentEdit, "an Add, Scale or Clamp")
    check_choice(layout, "layout", LAYOUTS)
    check_sae_like(sae)
    if mask is not None:
        _as_mask(mask)
    try:
        edit.index(sae.W_dec.shape[0])  # validate the latents before any forward pass
    except ValueError as err:
        raise ValueError(f"edit {edit!r} does not fit sae: {err}") from None

    def hook(mod, args, output):
        if isinstance(output, tuple):
            return (apply_edit(output[0], sae, edit, mask=mask, layout=layout), *output[1:])
        return apply_edit(output, sae, edit, mask=mask, layout=layout)

    handle = module.register_forward_hook(hook)
    try:
        yield module
    finally:
        handle.remove()
