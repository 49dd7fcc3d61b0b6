"""Calibration: layer-input second moments ``H = E[x x^T]`` collected with forward hooks.

Calibration sequences are streamed through the model one at a time; a hook on each target Linear adds
``x^T x`` (float64) of its input. Layers that read the same tensor (q/k/v, gate/up) share one
accumulator, found on the first sequence by the identity of the input tensor. After the first sequence, each forward pass stops at the last hooked layer. Nothing is written to disk
(QTIP needs precomputed Hessian files of tens of GB). :func:`regularize` adds ``damping * mean(diag H)``
to the diagonal and repairs a matrix that is still not positive definite with a warning (QTIP crashes on
such matrices in ``block_LDL``).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from tqdm.auto import tqdm

from icml_compress.validation import check_bool, check_float_tensor


def encode_texts(texts, tokenizer, name: str = "calibration_texts") -> torch.Tensor:
    """Token ids (1-D int64) of one text, a list of texts (concatenated) or already-encoded ids (``name``:
    how messages call ``texts``)."""
    if tokenizer is not None and not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(
            f"tokenizer must have an encode method (a Hugging Face tokenizer), got {tokenizer!r:.80}"
        )
    if isinstance(texts, torch.Tensor):
        if texts.is_floating_point() or texts.is_complex() or texts.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor of token ids, got {texts.dtype}")
        return texts.reshape(-1).to(torch.int64)
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"{name} must be a str, a list of str or an integer tensor of token ids")
    if tokenizer is None:
        raise ValueError(f"a tokenizer is needed to encode {name} given as text")
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer.encode(text, add_special_tokens=False))
    return torch.tensor(ids, dtype=torch.int64)


def check_token_ids(ids: torch.Tensor, name: str, vocab_size: int | None) -> torch.Tensor:
    """``ids`` (integer token ids, as :func:`encode_texts` returns them), checked to index the model's
    embedding: every id in ``0 .. vocab_size - 1`` (only ``>= 0`` when ``vocab_size`` is None). An id out of
    range would otherwise fail as a bare IndexError deep in the first forward pass."""
    low = ids < 0
    bad = low if vocab_size is None else low | (ids >= vocab_size)
    count = int(bad.sum())
    if count:
        allowed = "0 or more" if vocab_size is None else f"0..{vocab_size - 1} (the model's vocabulary)"
        raise ValueError(
            f"{name} must hold token ids in {allowed}; {count} of {ids.numel()} ids are outside it "
            f"(min {int(ids.min())}, max {int(ids.max())})"
        )
    return ids


def make_sequences(ids: torch.Tensor, n: int, seq_len: int, name: str = "calibration_texts") -> torch.Tensor:
    """Up to ``n`` non-overlapping sequences ``(n', seq_len)`` cut from ``ids``; at least one is needed."""
    count = min(n, ids.numel() // seq_len)
    if count < 1:
        raise ValueError(
            f"calibration text ({name}) is shorter than one sequence: {ids.numel()} tokens < seq_len={seq_len}"
        )
    return ids[: count * seq_len].view(count, seq_len)


@torch.no_grad()
def collect_hessians(
    model: nn.Module, linears: dict[str, nn.Linear], sequences: torch.Tensor, *, progress: bool = True
) -> dict:
    """``{name: H}`` with ``H = E[x x^T]`` (float64, ``(in, in)``) of each Linear's input over all tokens;
    ``progress``: a tqdm bar over the sequences."""
    check_bool(progress, "progress")
    sums: dict[str, torch.Tensor] = {}
    owner: dict[str, str] = {}  # module name -> the name whose accumulator it shares
    last: list = [None, None]  # the previous hooked input tensor (kept alive: no address reuse) and its owner
    counts = {"tokens": 0, "first": True}
    order: list[str] = []  # hooked layers in call order (first sequence): later ones stop after the last

    def hook(name):
        def fn(module, args):
            if counts["first"]:
                order.append(name)  # consecutive layers called on the very same tensor object share H
                owner[name] = last[1] if args[0] is last[0] else name
                last[0], last[1] = args[0], owner[name]
            if owner[name] == name:
                x = args[0].detach().reshape(-1, args[0].shape[-1]).double()  # (tokens, in)
                if name in sums:
                    sums[name].addmm_(x.T, x)
                else:
                    sums[name] = x.T @ x
            if not counts["first"] and name == order[-1]:
                raise _StopForward  # nothing after the last hooked layer is needed

        return fn

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in linears.items()]
    try:
        for seq in tqdm(sequences, desc="calibration", unit="seq", disable=not progress):
            try:
                model(seq.unsqueeze(0))
            except _StopForward:
                pass
            counts["tokens"] += seq.numel()
            counts["first"] = False
            last[0] = None
    finally:
        for h in handles:
            h.remove()
    means = {name: total / counts["tokens"] for name, total in sums.items()}
    return {name: means[owner[name]] for name in linears}  # shared inputs share one tensor


class _StopForward(Exception):
    """Raised by the hook of the last hooked layer to skip the rest of a calibration forward pass."""


def regularize(H: torch.Tensor, damping: float, name: str = "H") -> torch.Tensor:
    """``H + damping * mean(diag H) * I``, symmetrized; if that is not positive definite, more damping is
    added (x10 at a time) with a warning. Returns float64."""
    check_float_tensor(H, name)
    H = H.double()
    H = (H + H.T) / 2
    scale = H.diagonal().mean().clamp_min(1e-12).item()
    eye = torch.eye(H.shape[0], dtype=H.dtype, device=H.device)
    lam = damping
    for _ in range(12):
        Hd = H + lam * scale * eye
        _, info = torch.linalg.cholesky_ex(Hd)
        if info.item() == 0:
            if lam != damping:
                warnings.warn(
                    f"{name} was not positive definite with damping={damping}: repaired with damping={lam:g}",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return Hd
        lam *= 10
    raise ValueError(f"{name} could not be made positive definite (damping up to {lam:g})")
