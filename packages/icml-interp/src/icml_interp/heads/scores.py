"""Head-type scores of attention patterns: previous-token, duplicate-token, induction, pattern-matching,
relative-position and entropy.

Every score takes ``pattern``, attention probabilities ``(batch, heads, q, k)`` (or ``(heads, q, k)``, a
batch of one), and returns a float tensor ``(heads,)``: the mean of a per-query value over the queries that
count, pooled over the batch (each counted query weighs the same, whatever its row). Position ``i`` is
query ``i`` and key ``i`` (self-attention: ``q == k``). Where no query counts (no repeated token, an
all-False ``query_mask``) the score is NaN, with a ``RuntimeWarning``.

Masks are ``(batch, seq)`` (or ``(seq,)``, the same in every row), bool or 0/1 integers, True = a real
token. ``query_mask`` removes queries from the mean (padding, BOS/CLS, EOS); it never changes which keys a
query's score looks at. ``key_mask`` (where taken) removes keys, as each score says. Token-based scores
compare ``tokens`` for equality only: give padding a value no real token has (e.g. ``-1``) so that it never
counts as an earlier occurrence.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from icml_interp.validation import check_bool, check_finite, check_int, check_tensor

_HALF = (torch.float16, torch.bfloat16)


def check_pattern(pattern, name: str = "pattern") -> torch.Tensor:
    """``pattern``: finite self-attention probabilities ``(batch, heads, q, k)`` or ``(heads, q, k)`` with
    ``q == k``, entries >= 0 and rows summing to at most 1; returned 4-d, half precision as float32."""
    if not isinstance(pattern, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of attention probabilities, got {type(pattern).__name__}"
        )
    if not pattern.is_floating_point():
        raise TypeError(f"{name} must be a real floating-point tensor, got {pattern.dtype}")
    check_tensor(pattern, name, "(batch, heads, q, k) or (heads, q, k)", ndim=(3, 4))
    p = pattern if pattern.ndim == 4 else pattern[None]
    if p.shape[-1] != p.shape[-2]:
        raise ValueError(f"{name} must be self-attention, q == k, got (q, k) = {tuple(p.shape[-2:])}")
    check_finite(p, name)
    tol = 1e-2 if p.dtype in _HALF else 1e-4
    p = p.float() if p.dtype in _HALF else p
    low, top = float(p.min()), float(p.sum(-1).max())
    if low < -tol or top > 1 + tol:
        raise ValueError(
            f"{name} must hold attention probabilities (entries >= 0, rows summing to at most 1), "
            f"got min entry {low:.4g} and max row sum {top:.4g}"
        )
    return p.clamp(min=0)


def _rows(x, name: str, batch: int, seq: int, what: str, like: str = "pattern") -> torch.Tensor:
    """A ``(batch, seq)`` or ``(seq,)`` tensor as ``(batch, seq)`` (the second broadcast over the batch);
    ``like`` names the argument the shape comes from."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor ({what}), got {type(x).__name__}")
    if x.ndim not in (1, 2) or x.shape[-1] != seq or (x.ndim == 2 and x.shape[0] != batch):
        raise ValueError(
            f"{name} must have shape (batch, seq) = ({batch}, {seq}) like {like}, or ({seq},), "
            f"got {tuple(x.shape)}"
        )
    return x.expand(batch, seq)


def check_mask(
    mask, name: str, batch: int, seq: int, device: torch.device | None = None, like: str = "pattern"
) -> torch.Tensor:
    """``mask`` (True or 1 = a real token) as a bool ``(batch, seq)`` tensor on ``device``; ``None`` is all
    True. ``like`` names the argument whose shape it must match."""
    if mask is None:
        return torch.ones(batch, seq, dtype=torch.bool, device=device)
    mask = _rows(mask, name, batch, seq, "a bool mask, True = a real token", like)
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or mask.is_complex():
            raise TypeError(f"{name} must be a bool (or 0/1 integer) tensor, got {mask.dtype}")
        if bool(((mask != 0) & (mask != 1)).any()):
            raise ValueError(f"{name} must hold only 0 and 1 (or True and False)")
        mask = mask != 0
    return mask.to(device)


def _integer_rows(x, name: str, batch: int, seq: int, what: str, device: torch.device) -> torch.Tensor:
    x = _rows(x, name, batch, seq, what)
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} must be an integer tensor ({what}), got {x.dtype}")
    return x.to(device, torch.long)


def _mean(values: torch.Tensor, counted: torch.Tensor, score: str) -> torch.Tensor:
    """Mean of ``values`` ``(batch, heads, q)`` over the ``counted`` queries (``(batch, q)`` or
    ``(batch, heads, q)``), per head; NaN with a warning for a head with none."""
    counted = counted if counted.ndim == 3 else counted[:, None].expand_as(values)
    n = counted.sum((0, 2))
    total = torch.where(counted, values, torch.zeros_like(values)).sum((0, 2))
    if bool((n == 0).any()):
        warnings.warn(
            f"{score}: no query counts for {int((n == 0).sum())} head(s); their score is NaN",
            RuntimeWarning,
            stacklevel=3,
        )
    return torch.where(n > 0, total / n.clamp(min=1), torch.full_like(total, float("nan")))


def _earlier_duplicates(tokens: torch.Tensor) -> torch.Tensor:
    """``dup[b, i, j]``: ``j < i`` and ``tokens[b, j] == tokens[b, i]``, ``(batch, seq, seq)``."""
    seq = tokens.shape[1]
    earlier = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril(-1)
    return (tokens[:, :, None] == tokens[:, None, :]) & earlier


def previous_token_score(pattern: torch.Tensor, *, query_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean attention from each query ``i >= 1`` to key ``i - 1``, ``(heads,)``.

    ``query_mask`` drops queries; query 1 still counts when position 0 (BOS) is masked out, since its
    previous token is BOS: mask query 1 as well to drop it (e.g. the first real token after left padding).
    """
    p = check_pattern(pattern)
    batch, _, seq, _ = p.shape
    counted = check_mask(query_mask, "query_mask", batch, seq, p.device)
    if seq < 2:
        return _mean(
            p[..., 0], torch.zeros(batch, seq, dtype=torch.bool, device=p.device), "previous_token_score"
        )
    return _mean(p.diagonal(-1, -2, -1), counted[:, 1:], "previous_token_score")  # (batch, heads, q - 1)


def duplicate_token_score(
    pattern: torch.Tensor,
    tokens: torch.Tensor,
    *,
    query_mask: torch.Tensor | None = None,
    exclude_current_token: bool = True,
) -> torch.Tensor:
    """Attention mass from each query ``i`` on the earlier occurrences ``j < i`` of its token
    (``tokens[j] == tokens[i]``), averaged over the queries that have one, ``(heads,)``.

    ``exclude_current_token`` (TransformerLens' option of the same name): the row is renormalised without
    its diagonal, i.e. the mass on earlier occurrences divided by the mass on keys other than ``i``, so that
    attention to the current token does not count against the head (a query with no mass off the diagonal
    contributes 0). ``tokens``: ``(batch, seq)`` integer ids (see the module docstring for padding).
    """
    p = check_pattern(pattern)
    batch, _, seq, _ = p.shape
    tokens = _integer_rows(tokens, "tokens", batch, seq, "token ids", p.device)
    counted = check_mask(query_mask, "query_mask", batch, seq, p.device)
    check_bool(exclude_current_token, "exclude_current_token")
    dup = _earlier_duplicates(tokens)  # (batch, q, k)
    mass = (p * dup[:, None].to(p.dtype)).sum(-1)  # (batch, heads, q)
    if exclude_current_token:
        # summed directly: p.sum(-1) - diagonal cancels when a head attends almost only to itself
        eye = torch.eye(seq, dtype=torch.bool, device=p.device)
        off_diagonal = p.masked_fill(eye, 0).sum(-1)
        mass = torch.where(off_diagonal > 0, mass / off_diagonal.clamp(min=1e-30), torch.zeros_like(mass))
    return _mean(mass, counted & dup.any(-1), "duplicate_token_score")


def induction_score(
    pattern: torch.Tensor, tokens: torch.Tensor, *, query_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Causal-LM induction: attention mass from each query ``i`` on the keys ``j + 1`` that follow an
    earlier occurrence ``j < i`` of its token (``tokens[j] == tokens[i]``), averaged over the queries that
    have one, ``(heads,)``.

    This is TransformerLens' induction pattern (the duplicate-token pattern shifted right by one key), so a
    target ``j + 1`` may be ``i`` itself when ``tokens[i - 1] == tokens[i]``. For masked LMs, whose target is
    the aligned token itself, use :func:`pattern_matching_score`.
    """
    p = check_pattern(pattern)
    batch, _, seq, _ = p.shape
    tokens = _integer_rows(tokens, "tokens", batch, seq, "token ids", p.device)
    counted = check_mask(query_mask, "query_mask", batch, seq, p.device)
    dup = _earlier_duplicates(tokens)  # (batch, q, k)
    target = torch.zeros_like(dup)
    target[..., 1:] = dup[..., :-1]  # key j + 1 for each earlier occurrence j
    mass = (p * target[:, None].to(p.dtype)).sum(-1)  # (batch, heads, q)
    return _mean(mass, counted & dup.any(-1), "induction_score")


def repeated_sequence_induction_score(
    pattern: torch.Tensor, half_length: int, *, offset: int = 1
) -> torch.Tensor:
    """Olsson et al.'s induction score on ``[BOS, r_1..r_T, r_1..r_T]``, ``(heads,)``.

    ``offset`` tokens (1: the BOS) precede the first copy, which holds positions ``offset .. offset + T - 1``
    (``T = half_length``); the second copy holds ``offset + T .. offset + 2T - 1``. The score is the mean
    attention from each second-copy query ``i`` to key ``i - T + 1``: the token after ``i``'s first
    occurrence. Positions from ``offset + 2T`` on (an EOS, padding) are ignored.
    """
    p = check_pattern(pattern)
    check_int(half_length, "half_length", minimum=1)
    check_int(offset, "offset", minimum=0)
    batch, _, seq, _ = p.shape
    if offset + 2 * half_length > seq:
        raise ValueError(
            f"offset + 2 * half_length = {offset + 2 * half_length} exceeds the pattern's {seq} positions"
        )
    queries = torch.arange(offset + half_length, offset + 2 * half_length, device=p.device)
    values = p[:, :, queries, queries - half_length + 1]  # (batch, heads, T)
    return _mean(
        values,
        torch.ones(batch, half_length, dtype=torch.bool, device=p.device),
        "repeated_sequence_induction_score",
    )


def pattern_matching_score(
    pattern: torch.Tensor, alignment: torch.Tensor, *, query_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Masked-LM induction (unshifted): mean attention from each query ``i`` to ``alignment[i]``, its aligned
    position in the other repeat copy, over the queries with ``alignment >= 0``, ``(heads,)``.

    ``alignment``: ``(batch, seq)`` integers in ``[-1, seq)``, ``-1`` where a position has no aligned one.
    """
    p = check_pattern(pattern)
    batch, _, seq, _ = p.shape
    alignment = _integer_rows(alignment, "alignment", batch, seq, "aligned positions, -1 for none", p.device)
    if int(alignment.min()) < -1 or int(alignment.max()) >= seq:
        raise ValueError(
            f"alignment must hold positions in [0, {seq}) or -1 (no aligned position), "
            f"got values in [{int(alignment.min())}, {int(alignment.max())}]"
        )
    counted = check_mask(query_mask, "query_mask", batch, seq, p.device) & (alignment >= 0)
    index = alignment.clamp(min=0)[:, None, :, None].expand(-1, p.shape[1], -1, 1)
    values = p.gather(-1, index)[..., 0]  # (batch, heads, q)
    return _mean(values, counted, "pattern_matching_score")


@dataclass(frozen=True)
class RelativePosition:
    """What :func:`relative_position_score` measures per head, each ``(heads,)``: ``std`` of the offset
    ``argmax key - query`` (low: a relative-position head), ``mode`` the most common offset (float, NaN for
    a head with no counted query) and ``mode_fraction`` the share of counted queries at that offset."""

    std: torch.Tensor
    mode: torch.Tensor
    mode_fraction: torch.Tensor


def relative_position_score(
    pattern: torch.Tensor, *, query_mask: torch.Tensor | None = None, key_mask: torch.Tensor | None = None
) -> RelativePosition:
    """The paper's position score: the std over queries (pooled over the batch) of each query's offset
    ``argmax_k pattern[i, k] - i``, with the mode of that offset.

    The argmax runs over the keys ``key_mask`` allows (ties: the first such key); a query counts where
    ``query_mask`` holds and it puts some mass on an allowed key. The std is the population std (``ddof=0``);
    a tie between modes picks the smallest offset.
    """
    p = check_pattern(pattern)
    batch, heads, seq, _ = p.shape
    queries = check_mask(query_mask, "query_mask", batch, seq, p.device)
    keys = check_mask(key_mask, "key_mask", batch, seq, p.device)[:, None, None, :]  # (batch, 1, 1, k)
    allowed = torch.where(keys, p, -1.0)  # masked keys never win the argmax
    offset = (allowed.argmax(-1) - torch.arange(seq, device=p.device)).to(p.dtype)  # (batch, heads, q)
    counted = queries[:, None] & ((p * keys).sum(-1) > 0)  # (batch, heads, q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # warned once below
        mean = _mean(offset, counted, "relative_position_score")
        std = _mean((offset - mean[:, None]).square(), counted, "relative_position_score").sqrt()
    mode = torch.full((heads,), float("nan"), dtype=p.dtype, device=p.device)
    fraction = torch.full((heads,), float("nan"), dtype=p.dtype, device=p.device)
    for h in range(heads):
        seen = offset[:, h][counted[:, h]].long() + seq - 1  # offsets -(seq-1) .. seq-1 as bins 0 .. 2seq-2
        if seen.numel():
            counts = torch.bincount(seen.cpu(), minlength=2 * seq - 1)
            mode[h] = float(int(counts.argmax()) - (seq - 1))
            fraction[h] = float(counts.max()) / seen.numel()
    if bool(mode.isnan().any()):
        warnings.warn(
            f"relative_position_score: no query counts for {int(mode.isnan().sum())} head(s); their score is NaN",
            RuntimeWarning,
            stacklevel=2,
        )
    return RelativePosition(std=std, mode=mode, mode_fraction=fraction)


def attention_entropy(
    pattern: torch.Tensor,
    *,
    query_mask: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
    normalize: bool = True,
    causal: bool | None = None,
) -> torch.Tensor:
    """Mean entropy (nats) of the attention rows, ``(heads,)``; with ``normalize`` each row's entropy is
    divided by log(number of keys its query may attend), so 1 = uniform over those keys.

    The keys query ``i`` may attend are those ``key_mask`` allows and, if ``causal``, ``k <= i``; ``causal``
    ``None`` infers it (true when the pattern's strict upper triangle is all zero). The row is restricted to
    those keys and renormalised. A query counts where ``query_mask`` holds, it may attend at least two keys
    (with one there is no choice to measure) and it puts some mass on them.
    """
    p = check_pattern(pattern)
    batch, _, seq, _ = p.shape
    queries = check_mask(query_mask, "query_mask", batch, seq, p.device)
    keys = check_mask(key_mask, "key_mask", batch, seq, p.device)
    check_bool(normalize, "normalize")
    if causal is None:
        causal = bool((p.triu(1) <= 1e-12).all())
    check_bool(causal, "causal")
    allowed = keys[:, None, :].expand(batch, seq, seq)  # (batch, q, k)
    if causal:
        allowed = allowed & torch.ones(seq, seq, dtype=torch.bool, device=p.device).tril()
    kept = p * allowed[:, None]  # (batch, heads, q, k)
    mass = kept.sum(-1)
    rows = kept / mass.clamp(min=1e-30)[..., None]
    entropy = -torch.xlogy(rows, rows).sum(-1)  # (batch, heads, q)
    n_keys = allowed.sum(-1)  # (batch, q)
    if normalize:
        entropy = entropy / n_keys.clamp(min=2).to(p.dtype).log()[:, None]
    counted = (queries & (n_keys >= 2))[:, None] & (mass > 0)
    return _mean(entropy, counted, "attention_entropy")
