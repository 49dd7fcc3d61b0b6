"""Viterbi quantization on the bitshift trellis: exact dynamic programming, batched over tiles.

For a code with values ``c(s)`` (``(2^L, V)``) and a sequence ``x`` of ``T/V`` vectors, Viterbi finds the
trellis path minimizing ``sum_t ||x_t - c(s_t)||^2``. With ``cost_t[s] = ||x_t - c(s)||^2 + min over
predecessors p of s of cost_{t-1}[p]``: the ``2^KV`` predecessors of ``s`` are ``(j << (L-KV)) | (s >> KV)``,
so all states with the same ``q = s >> KV`` share one minimum. Viewing the previous costs as
``(tiles, 2^KV, 2^(L-KV))`` (index ``j, q``) the minimum over ``j`` is one reduction, and its argmin ``j``
(one byte per tile, step and ``q``) is all the back-tracking needs. ``||x||^2`` is dropped from the
costs (it is the same for every state), leaving ``|c(s)|^2 - 2 <x_t, c(s)>``, one matrix product.

Tail-biting (exactly ``K*T`` bits per tile) uses QTIP's two-pass approximation: Viterbi on the tile
rotated by half its length puts the tile's wrap-around point in the middle, where the free path is
settled; the overlap bits of the state there fix the boundary, and a second, constrained Viterbi finds
the best path that starts with ``s_0 >> KV == o`` and ends with ``s_last & (2^(L-KV)-1) == o``. Both
passes are exact under their constraints; only the choice of ``o`` is heuristic.
"""

from __future__ import annotations

import torch

from icml_compress.trellis.bitshift import BitshiftTrellis
from icml_compress.validation import check_bool, check_float_tensor, check_instance, check_int
from icml_kernels.trellis.format import TrellisFormat

BACKPOINTER_BYTES = 1 << 26  # back-pointer memory per chunk of tiles (64 MiB)
COST_ELEMENTS = 1 << 22  # cost-matrix elements per chunk of tiles (16 MiB in float32)


MAX_MAGNITUDE = 1e15  # squared errors of the search, summed over a tile, stay far inside float32


def _check_magnitude(x):
    """Entries small enough that the search's squared errors cannot overflow (quantize a scaled weight)."""
    top = float(x.abs().max())
    if top > MAX_MAGNITUDE:
        raise ValueError(
            f"x must have entries of magnitude at most {MAX_MAGNITUDE:g} (the squared errors of the search "
            f"would overflow float32), got {top:g}: scale the weights first"
        )
    return x


def default_chunk(trellis: BitshiftTrellis, steps: int) -> int:
    """Tiles per Viterbi chunk: bounds the back pointers to 64 MiB and the cost matrix to 2^22 entries."""
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    check_int(steps, "steps", 1)
    groups = 1 << trellis.overlap_bits
    return max(1, min(BACKPOINTER_BYTES // (steps * groups), COST_ELEMENTS // trellis.n_states))


def check_code_values(values: torch.Tensor, trellis: BitshiftTrellis) -> torch.Tensor:
    """``values`` as ``(2^L, V)``; accepts ``(2^L,)`` when ``V == 1``."""
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    check_float_tensor(values, "values")
    if values.dim() == 1 and trellis.V == 1:
        values = values.unsqueeze(-1)
    if tuple(values.shape) != (trellis.n_states, trellis.V):
        raise ValueError(
            f"values must have shape (2^L, V) = ({trellis.n_states}, {trellis.V}), got {tuple(values.shape)}"
        )
    return values


def viterbi(
    x: torch.Tensor,
    values: torch.Tensor,
    trellis: BitshiftTrellis,
    *,
    start_overlap: torch.Tensor | None = None,
    end_overlap: torch.Tensor | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """Optimal trellis paths for a batch of sequences.

    Args:
        x (torch.Tensor): ``(tiles, n)`` finite floats, ``n`` a multiple of ``V`` (any length; a tile of
            the trellis is ``n = T``). Computed in float64 when ``x`` is float64, else float32.
        values (torch.Tensor): the code's value of every state, ``(2^L, V)`` (or ``(2^L,)`` for ``V = 1``).
        trellis (BitshiftTrellis): ``L``, ``K``, ``V``.
        start_overlap, end_overlap (torch.Tensor, Optional): ``(tiles,)`` integers in ``0..2^(L-KV)-1``:
            constrain ``s_0 >> KV`` and ``s_last & (2^(L-KV) - 1)`` to them.
        chunk (int, Optional): tiles per batch (memory bound), default :func:`default_chunk`.

    Returns:
        int64 states ``(tiles, n / V)`` minimizing ``sum_t ||x_t - values[s_t]||^2`` under the constraints.
    """
    _check_magnitude(check_float_tensor(x, "x"))
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    if x.dim() != 2:
        raise ValueError(f"x must have shape (tiles, n), got {tuple(x.shape)}")
    if x.shape[1] % trellis.V:
        raise ValueError(f"x.shape[1] must be a multiple of V={trellis.V}, got {x.shape[1]}")
    values = check_code_values(values, trellis)
    steps = x.shape[1] // trellis.V
    if chunk is None:
        chunk = default_chunk(trellis, steps)
    check_int(chunk, "chunk", 1)
    overlaps = []
    for name, o in (("start_overlap", start_overlap), ("end_overlap", end_overlap)):
        if o is not None:
            if (
                not isinstance(o, torch.Tensor)
                or o.is_floating_point()
                or o.is_complex()
                or o.dtype == torch.bool
                or tuple(o.shape) != (x.shape[0],)
            ):
                raise ValueError(f"{name} must be an integer tensor of shape ({x.shape[0]},)")
            if o.numel() and (o.min() < 0 or o.max() >= 1 << trellis.overlap_bits):
                raise ValueError(f"{name} must lie in 0..{(1 << trellis.overlap_bits) - 1}")
            o = o.to(torch.int64)
        overlaps.append(o)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.to(dtype).reshape(x.shape[0], steps, trellis.V)
    vals = values.to(dtype=dtype, device=x.device)
    out = torch.empty(x.shape[0], steps, dtype=torch.int64, device=x.device)
    for lo in range(0, x.shape[0], chunk):
        hi = min(lo + chunk, x.shape[0])
        start, end = (None if o is None else o[lo:hi] for o in overlaps)
        out[lo:hi] = _viterbi_chunk(xs[lo:hi], vals, trellis, start, end)
    return out


def _viterbi_chunk(xs, vals, trellis: BitshiftTrellis, start, end) -> torch.Tensor:
    """xs ``(B, steps, V)``; vals ``(2^L, V)``; returns states ``(B, steps)``."""
    B, steps, _ = xs.shape
    kv, ob = trellis.kv, trellis.overlap_bits
    R, Q = 1 << kv, 1 << ob  # successors per state; predecessor groups (q = s >> KV)
    sq = vals.pow(2).sum(-1)  # (2^L,)
    c2 = -2 * vals.T.contiguous()  # (V, 2^L)
    cost = _state_costs(sq, xs[:, 0], c2)  # (B, 2^L) = |c|^2 - 2 <x_0, c>
    if start is not None:  # s_0 = (o << KV) | r: only group q = o may start
        allowed = torch.nn.functional.one_hot(start, Q).bool()  # (B, Q)
        cost.view(B, Q, R).masked_fill_(~allowed.unsqueeze(-1), float("inf"))
    back = torch.empty(steps, B, Q, dtype=torch.uint8, device=xs.device)
    for t in range(1, steps):
        best, arg = _min_over_top_bits(cost.view(B, R, Q))  # (B, Q): min over the dropped top bits j
        back[t].copy_(arg)
        cost = _state_costs(sq, xs[:, t], c2)  # (B, 2^L)
        cost.view(B, Q, R).add_(best.unsqueeze(-1))
    states = torch.empty(B, steps, dtype=torch.int64, device=xs.device)
    if end is None:
        final, s = cost.min(-1)
    else:  # s_last = (j << (L-KV)) | o
        final, j = cost.view(B, R, Q).gather(2, end.view(B, 1, 1).expand(B, R, 1)).squeeze(-1).min(-1)  # (B,)
        s = (j << ob) | end
    if not bool(torch.isfinite(final).all()):
        raise ValueError(
            "no trellis path satisfies start_overlap and end_overlap for some tile (a path of "
            f"{steps} steps can join them only when steps * K * V >= L)"
        )
    states[:, -1] = s
    rows = torch.arange(B, device=xs.device)
    for t in range(steps - 1, 0, -1):
        q = s >> kv
        s = (back[t, rows, q].to(torch.int64) << ob) | q
        states[:, t - 1] = s
    return states


def _state_costs(sq: torch.Tensor, x: torch.Tensor, c2: torch.Tensor) -> torch.Tensor:
    """``|c(s)|^2 - 2 <x_b, c(s)>`` for every tile and state, ``(B, 2^L)`` (x ``(B, V)``, c2 ``(V, 2^L)``)."""
    cost = torch.addcmul(sq, x[:, :1], c2[:1])  # an outer product: cheaper than a rank-1 matmul
    for v in range(1, x.shape[1]):
        cost.addcmul_(x[:, v : v + 1], c2[v : v + 1])
    return cost


def _min_over_top_bits(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Minimum and argmin over dimension 1 of ``v (B, R, Q)`` (R a power of two) by a pairwise tree on
    contiguous halves: several times faster on CPU than a strided ``min(dim=1)``. Ties go to the lower
    index, like ``min``."""
    idx = torch.arange(v.shape[1], dtype=torch.uint8, device=v.device).view(1, -1, 1)
    while v.shape[1] > 1:
        h = v.shape[1] // 2
        lo, hi = v[:, :h], v[:, h:]
        take_hi = hi < lo
        v = torch.minimum(lo, hi)
        idx = torch.where(take_hi, idx[:, h:], idx[:, :h])
    return v[:, 0], idx.expand(v.shape[0], 1, v.shape[2])[:, 0]


def quantize_tiles(
    x: torch.Tensor,
    values: torch.Tensor,
    trellis: BitshiftTrellis,
    *,
    tail_biting: bool = True,
    chunk: int | None = None,
) -> torch.Tensor:
    """Trellis-quantize tiles ``(tiles, T)``: int64 states ``(tiles, T/V)``.

    ``tail_biting=True`` (default) returns tail-biting paths (``trellis.pack`` stores them in exactly
    ``K*T`` bits) by the two-pass method of the module docstring; ``False`` the unconstrained optimum,
    whose free-start stream needs ``L - K*V`` more bits.
    """
    _check_magnitude(check_float_tensor(x, "x"))
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    check_bool(tail_biting, "tail_biting")
    if x.dim() != 2 or x.shape[1] != trellis.T:
        raise ValueError(f"x must have shape (tiles, T={trellis.T}), got {tuple(x.shape)}")
    if not tail_biting:
        return viterbi(x, values, trellis, chunk=chunk)
    trellis.check_tail_biting_length()
    half = trellis.steps // 2
    rolled = torch.roll(x, half * trellis.V, dims=1)  # rolled[:, half*V] == x[:, 0]
    first = viterbi(x=rolled, values=values, trellis=trellis, chunk=chunk)
    overlap = first[:, half] >> trellis.kv  # the top overlap bits of the state that emits x[:, 0]
    return viterbi(x, values, trellis, start_overlap=overlap, end_overlap=overlap, chunk=chunk)
