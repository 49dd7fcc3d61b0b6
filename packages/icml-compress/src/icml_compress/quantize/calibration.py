"""Calibration: layer-input second moments ``H = E[x x^T]`` collected with forward hooks.

Calibration sequences are streamed through the model one at a time; a hook on each target Linear adds
``x^T x`` (float64) of its input to a double-double sum (:func:`add_to_pair`), so the result is the
float64 rounding of the exact sum whatever the order or grouping of the terms (what lets
``quantize_model(distributed=True)`` reduce per-rank partial sums to the single-process Hessians).
Layers that read the same tensor (q/k/v, gate/up) share one accumulator, found on the first sequence by
the identity of the input tensor. After the first sequence, each forward pass stops at the last hooked
layer. Nothing is written to disk (QTIP needs precomputed Hessian files of tens of GB). :func:`regularize`
adds ``damping * mean(diag H)`` to the diagonal and repairs a matrix that is still not positive definite
with a warning (QTIP crashes on such matrices in ``block_LDL``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

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


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode for the block; on leaving it (a raise too) every submodule gets back its own
    ``training`` flag (``model.train(was)`` would flatten a mix, e.g. frozen parts a user keeps in eval)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


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
    ``progress``: a tqdm bar over the sequences. Each ``H`` is the float64 rounding of the exact sum of the
    per-sequence products, divided by the token count (see :func:`pair_value` for the one caveat)."""
    sums, owner, tokens = hessian_sums(model, linears, sequences, progress=progress)
    return hessian_means(sums, owner, tokens, linears)


@torch.no_grad()
def hessian_sums(
    model: nn.Module, linears: dict[str, nn.Linear], sequences: torch.Tensor, *, progress: bool = True
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], dict[str, str], int]:
    """The sums behind :func:`collect_hessians`: ``(sums, owner, tokens)`` with ``sums[name]`` the
    double-double ``(hi, lo)`` sum of ``x^T x`` over ``sequences`` (float64 ``(in, in)`` each, one per input
    tensor: ``owner`` maps every layer to the name holding its sum) and ``tokens`` the tokens summed over.
    Each sequence's product is computed on its own (``G = x^T x``, not accumulated into the running sum by
    the product) and added with :func:`add_to_pair`."""
    check_bool(progress, "progress")
    sums: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    products: dict[tuple, torch.Tensor] = {}  # scratch for each sequence's x^T x, by size and device
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
                    key = (x.shape[1], x.device)  # one product buffer per size: no page faults per sequence
                    if key not in products:
                        products[key] = torch.empty_like(sums[name][0])
                    add_to_pair(sums[name], torch.mm(x.T, x, out=products[key]))  # this sequence's own G
                else:
                    G = x.T @ x  # (in, in)
                    sums[name] = (G, torch.zeros_like(G))
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
    return sums, owner, int(counts["tokens"])


def hessian_means(
    sums: dict[str, tuple[torch.Tensor, torch.Tensor]],
    owner: dict[str, str],
    tokens: int,
    linears: dict[str, nn.Linear],
) -> dict[str, torch.Tensor]:
    """``{name: H}`` for every layer of ``linears`` from :func:`hessian_sums`' ``(sums, owner, tokens)``:
    each pair rounded once (:func:`pair_value`) and divided by ``tokens``; layers sharing an input share one
    tensor. The pairs are consumed (their ``hi`` becomes the mean: no second copy)."""
    means = {name: pair_value(pair, out=pair[0]).div_(tokens) for name, pair in sums.items()}
    return {name: means[owner[name]] for name in linears}


#: elements per step of :func:`add_to_pair`: on the CPU five 1 MiB slices stay in cache through the seven
#: operations (measured, one thread, (1536, 1536): 6 ms a sequence, 17 ms unsliced, 24 ms for the product of
#: 256 tokens itself); elsewhere slices only bound the scratch memory.
PAIR_CHUNK = {"cpu": 1 << 17}
PAIR_CHUNK_OTHER = 1 << 24


def add_to_pair(pair: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> None:
    """``pair += x`` for a double-double sum ``pair = (hi, lo)`` (contiguous float64 tensors of ``x``'s
    shape, updated in place): Knuth's TwoSum adds ``x`` to ``hi`` and carries the rounding error of that
    addition, exactly, into ``lo``::

        s = hi + x;  bp = s - hi;  err = (hi - (s - bp)) + (x - bp);  hi = s;  lo += err

    ``x`` is overwritten (used as scratch). Every operation is a separate IEEE float64 addition (no fused
    multiply-add can contract them), so the result is the same on every device and thread count; it is
    computed slice by slice (:data:`PAIR_CHUNK`). Two partial sums combine the same way:
    ``add_to_pair(a, b_hi)`` then ``a_lo += b_lo`` (:func:`combine_pairs`)."""
    h, lo, g = (t.view(-1) for t in (*pair, x))
    n = h.numel()
    step = PAIR_CHUNK.get(h.device.type, PAIR_CHUNK_OTHER)
    s_buf, bp_buf = (
        torch.empty(min(step, n), dtype=h.dtype, device=h.device),
        torch.empty(min(step, n), dtype=h.dtype, device=h.device),
    )
    for i in range(0, n, step):
        j = min(i + step, n)
        hi, low, xs, s, bp = h[i:j], lo[i:j], g[i:j], s_buf[: j - i], bp_buf[: j - i]
        torch.add(hi, xs, out=s)  # s = hi + x
        torch.sub(s, hi, out=bp)  # bp = s - hi
        xs.sub_(bp)  # x - bp
        torch.sub(s, bp, out=bp)  # s - bp
        hi.sub_(bp).add_(xs)  # err = (hi - (s - bp)) + (x - bp)
        low.add_(hi)  # lo += err
        hi.copy_(s)  # hi = s


def combine_pairs(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> None:
    """``a += b`` for two double-double sums (``a`` updated in place, ``b``'s ``hi`` used as scratch)."""
    add_to_pair(a, b[0])
    a[1].add_(b[1])


def pair_value(pair: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """``hi + lo`` rounded once to float64 (into ``out`` if given).

    For a pair built by :func:`add_to_pair`/:func:`combine_pairs` from ``n`` terms, ``hi + lo`` differs
    from the exact sum by at most about ``n^2 2^-107`` times the largest partial sum in magnitude (the
    TwoSum steps are exact; only the additions into ``lo`` round): below ``2^-93`` of it for 128 terms.
    So the value is the float64 rounding of the exact sum, the same whatever the order or grouping of the
    terms, except where that exact sum lies within this tiny margin of a float64 rounding boundary (the
    midpoint between two neighbouring float64 numbers); there two orders may differ by one unit in the last
    place."""
    return torch.add(pair[0], pair[1], out=out) if out is not None else pair[0] + pair[1]


class _StopForward(Exception):
    """Raised by the hook of the last hooked layer to skip the rest of a calibration forward pass."""


def regularize(H: torch.Tensor, damping: float, name: str = "H") -> torch.Tensor:
    """``H + damping * mean(diag H) * I``, symmetrized; if that is not positive definite, more damping is
    added (x10 at a time) with a warning. Returns float64."""
    check_float_tensor(H, name)
    H = H.double()
    H = (H + H.T) / 2
    mean = H.diagonal().mean().item()
    scale = mean if mean > 0 else 1e-12  # relative damping: the result scales with H, however small
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
