"""Viterbi quantization on the bitshift trellis: exact dynamic programming, batched over tiles (and codes).

For a code with values ``c(s)`` (``(2^L, V)``) and a sequence ``x`` of ``T/V`` vectors, Viterbi finds the
trellis path minimizing ``sum_t ||x_t - c(s_t)||^2``. With ``cost_t[s] = ||x_t - c(s)||^2 + min over
predecessors p of s of cost_{t-1}[p]``: the ``2^KV`` predecessors of ``s`` are ``(j << (L-KV)) | (s >> KV)``,
so all states with the same ``q = s >> KV`` share one minimum ``m_t[q]``. Viewing the previous costs as
``(tiles, 2^KV, 2^(L-KV))`` (index ``j, q``) that minimum is a pairwise tree of ``torch.minimum`` over
``j``. ``||x||^2`` is dropped from the costs (it is the same for every state), leaving
``|c(s)|^2 - 2 <x_t, c(s)>`` (``torch.addcmul``, one fused multiply-add per state and weight).

The forward pass keeps only the minima ``m_t`` (``2^(L-KV)`` per tile and step, a quarter of the costs at
``K*V = 2``), no arg-minimum: back-tracking recomputes, for the state ``s_t`` it has reached, the ``2^KV``
candidate costs ``cost_{t-1}[(j << (L-KV)) | q]`` from ``m_{t-1}`` and the code with the same operations
(so the same floating-point numbers) and picks ``j`` by the same pairwise tree, ties to the lower half.
That is ``2^KV`` numbers per tile and step instead of an arg-minimum over all ``2^L`` states at every step
(the forward pass until 2026-12-04, which stored one back-pointer byte per ``q``); the paths are
bit-identical to it (tested against a frozen copy).

The batch is processed in chunks of tiles (:func:`default_chunk`: the stored minima within 32 MiB on the
CPU, the largest chunk that measured fastest on this project's machine, and 1 GiB on CUDA); every operation
is a torch operation on the device of ``x``. On the CPU a large enough call is cut into one part per worker
process (:func:`viterbi`'s ``workers``, :func:`parallel_viterbi`): the steps are small operations that
torch's intra-op threads speed up by only 1.2-1.3x on 2 cores, and Python threads hold each other up on the
GIL. Several codes can quantize their own tiles in one call (``values`` ``(G, 2^L, V)``, ``x``
``(G, tiles, n)``): Proteus' candidate selection runs its pool as one batch.

Tail-biting (exactly ``K*T`` bits per tile) uses QTIP's two-pass approximation: Viterbi on the tile
rotated by half its length puts the tile's wrap-around point in the middle, where the free path is
settled; the overlap bits of the state there fix the boundary, and a second, constrained Viterbi finds
the best path that starts with ``s_0 >> KV == o`` and ends with ``s_last & (2^(L-KV)-1) == o``. Both
passes are exact under their constraints; only the choice of ``o`` is heuristic.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import multiprocessing
import os
import sys
import threading
import time

import numpy as np
import torch

from icml_compress.trellis.bitshift import BitshiftTrellis
from icml_compress.validation import check_bool, check_float_tensor, check_instance, check_int
from icml_kernels.trellis.format import TrellisFormat

CHUNK_BYTES = {"cpu": 1 << 25, "cuda": 1 << 30}  # stored minima per chunk: 32 MiB on the CPU, 1 GiB on CUDA
DTYPES = (torch.float32, torch.float64)
START_METHOD = "fork" if sys.platform.startswith("linux") else "spawn"  # the worker pool's (see _pool)

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


def default_chunk(trellis: BitshiftTrellis, steps: int, device: torch.device | str | None = None) -> int:
    """Tiles per Viterbi chunk: the stored minima (``steps * 2^(L-KV)`` float32 per tile) within 32 MiB on
    the CPU (the fastest of 4-64 MiB measured on this project's 2-core machine) and 1 GiB on CUDA
    (``device``; default the CPU)."""
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    check_int(steps, "steps", 1)
    kind = "cpu" if device is None else torch.device(device).type
    per_tile = 4 * (steps * (1 << trellis.overlap_bits) + 2 * trellis.n_states)
    return max(1, CHUNK_BYTES.get(kind, CHUNK_BYTES["cuda"]) // per_tile)


def check_code_values(values: torch.Tensor, trellis: BitshiftTrellis) -> torch.Tensor:
    """``values`` as ``(2^L, V)`` or a stack of codes ``(G, 2^L, V)``; accepts ``(2^L,)`` and
    ``(G, 2^L)`` when ``V == 1``."""
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    check_float_tensor(values, "values")
    if trellis.V == 1 and values.dim() in (1, 2) and values.shape[-1] == trellis.n_states:
        values = values.unsqueeze(-1)
    if values.dim() not in (2, 3) or tuple(values.shape[-2:]) != (trellis.n_states, trellis.V):
        raise ValueError(
            f"values must have shape (2^L, V) = ({trellis.n_states}, {trellis.V}) or (codes, 2^L, V), "
            f"got {tuple(values.shape)}"
        )
    return values


def _check_overlap(o, name: str, shape: tuple[int, ...], trellis: BitshiftTrellis, device: torch.device):
    if o is None:
        return None
    if (
        not isinstance(o, torch.Tensor)
        or o.is_floating_point()
        or o.is_complex()
        or o.dtype == torch.bool
        or tuple(o.shape) != shape
    ):
        raise ValueError(f"{name} must be an integer tensor of shape {shape}")
    if not ((o >= 0) & (o < 1 << trellis.overlap_bits)).all():  # one read of the data
        raise ValueError(f"{name} must lie in 0..{(1 << trellis.overlap_bits) - 1}")
    return o.to(device=device, dtype=torch.int64)


def check_dtype(dtype, x: torch.Tensor) -> torch.dtype:
    """The search's dtype: ``dtype`` (float32 or float64), or by default float64 for float64 ``x``, else
    float32."""
    if dtype is None:
        return torch.float64 if x.dtype == torch.float64 else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be torch.float32, torch.float64 or None, got {dtype!r}")
    return dtype


def viterbi(
    x: torch.Tensor,
    values: torch.Tensor,
    trellis: BitshiftTrellis,
    *,
    start_overlap: torch.Tensor | None = None,
    end_overlap: torch.Tensor | None = None,
    chunk: int | None = None,
    dtype: torch.dtype | None = None,
    workers: int | None = None,
) -> torch.Tensor:
    """Optimal trellis paths for a batch of sequences, on the device of ``x``.

    Args:
        x (torch.Tensor): ``(tiles, n)`` finite floats, ``n`` a multiple of ``V`` (any length; a tile of
            the trellis is ``n = T``); ``(G, tiles, n)`` with ``G`` codes in ``values``, code ``g``
            quantizing ``x[g]``.
        values (torch.Tensor): the code's value of every state, ``(2^L, V)`` (or ``(2^L,)`` for ``V = 1``),
            or ``(G, 2^L, V)``; moved to the device of ``x``.
        trellis (BitshiftTrellis): ``L``, ``K``, ``V``.
        start_overlap, end_overlap (torch.Tensor, Optional): integers in ``0..2^(L-KV)-1`` of the shape
            of ``x`` without its last dimension: constrain ``s_0 >> KV`` and ``s_last & (2^(L-KV) - 1)``;
            moved to the device of ``x``.
        chunk (int, Optional): tiles per batch (memory bound), default :func:`default_chunk`.
        dtype (torch.dtype, Optional): the search's float type, float32 or float64; default float64 when
            ``x`` is float64, else float32.
        workers (int, Optional): CPU worker processes (one torch thread each); default
            :func:`default_workers` (``torch.get_num_threads()``), so the Viterbi uses the cores torch is
            told to use. A CPU call with more than one worker and enough work (:data:`POOL_STATES`) cuts the
            tiles into one part per worker and runs them in a process pool started on first use and kept
            for later calls (forked on Linux; spawned elsewhere, where a script needs a ``__main__``
            guard), inside :func:`parallel_viterbi`. Ignored on CUDA. The paths do not depend on it.

    Returns:
        int64 states ``(..., n / V)`` minimizing ``sum_t ||x_t - values[s_t]||^2`` under the constraints.
    """
    workers, handover = _handover(x, workers, trellis)
    with handover:
        return _viterbi(x, values, trellis, start_overlap, end_overlap, chunk, dtype, workers)


POOL_STATES = 1 << 16  # tiles per worker x 2^L from which a CPU call goes to the worker processes


def _pooled(x: torch.Tensor, workers: int, trellis) -> bool:
    """Whether a call on ``x`` goes to the worker processes: on the CPU, with more than one worker, when each
    worker's share makes every step's operations at least :data:`POOL_STATES` numbers (64 tiles at
    L = 10). Below that the steps' small operations cost their dispatch whatever their size, and splitting
    the tiles saves nothing (measured at L = 8: 256 tiles of 256 on 2 workers 82 ms, in the caller 71 ms).
    Decided before the checks that read ``x``, so that they too run inside :func:`parallel_viterbi`."""
    if x.device.type != "cpu" or workers == 1 or x.dim() < 2 or x.shape[-2] < 2 or x.shape[-1] == 0:
        return False
    states = trellis.n_states if isinstance(trellis, TrellisFormat) else 1 << 10
    return x.numel() // x.shape[-1] // workers * states >= POOL_STATES


def _handover(x, workers: int | None, trellis):
    """``(workers, context)``: the worker count (``None``: :func:`default_workers`) and the block a call runs
    in, :func:`parallel_viterbi` when it goes to the worker processes (:func:`_pooled`), else nothing."""
    check_instance(x, "x", torch.Tensor, "torch.Tensor")
    workers = default_workers() if workers is None else workers
    check_int(workers, "workers", 1)
    pooled = _pooled(x, workers, trellis)
    return workers, parallel_viterbi(workers) if pooled else contextlib.nullcontext()


def _viterbi(x, values, trellis, start_overlap, end_overlap, chunk, dtype, workers: int) -> torch.Tensor:
    """:func:`viterbi` after ``workers`` is resolved (inside :func:`parallel_viterbi` when pooled)."""
    _check_magnitude(check_float_tensor(x, "x"))
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    values = check_code_values(values, trellis)
    grouped = values.dim() == 3
    if x.dim() != (3 if grouped else 2) or (grouped and x.shape[0] != values.shape[0]):
        want = f"({values.shape[0]}, tiles, n), one row per code of values" if grouped else "(tiles, n)"
        raise ValueError(f"x must have shape {want}, got x {tuple(x.shape)}, values {tuple(values.shape)}")
    if x.shape[-1] % trellis.V:
        raise ValueError(f"x.shape[-1] must be a multiple of V={trellis.V}, got {x.shape[-1]}")
    steps = x.shape[-1] // trellis.V
    if chunk is None:
        chunk = default_chunk(trellis, steps, x.device)
    check_int(chunk, "chunk", 1)
    dtype = check_dtype(dtype, x)
    start, end = (
        _check_overlap(o, n, tuple(x.shape[:-1]), trellis, x.device)
        for o, n in ((start_overlap, "start_overlap"), (end_overlap, "end_overlap"))
    )
    xs = x.to(dtype).reshape(-1 if grouped else 1, x.shape[-2], steps, trellis.V)  # (G, tiles, steps, V)
    vals = values.to(dtype=dtype, device=x.device).reshape(-1, trellis.n_states, trellis.V)
    G, tiles = xs.shape[0], xs.shape[1]
    per = max(1, chunk // G)  # tiles of every code per chunk
    if not _pooled(x, workers, trellis):
        out = _viterbi_chunks(xs, vals, trellis, start, end, per)
    else:  # one part per worker, each cut into chunks there
        bounds = _parts(tiles, workers)
        s, e = (None if o is None else o.reshape(G, tiles) for o in (start, end))
        v, params = vals.numpy(), _params(trellis)
        args = [
            (
                xs[:, lo:hi].numpy(),
                v,
                params,
                per,
                *(None if o is None else o[:, lo:hi].numpy() for o in (s, e)),
            )
            for lo, hi in bounds
        ]
        out = torch.cat(_run_in_pool(_viterbi_task, args, workers), dim=1)
    return out if grouped else out[0]


def _parts(tiles: int, workers: int) -> list[tuple[int, int]]:
    """``tiles`` cut into one contiguous part per worker (at most one per tile), sizes differing by one."""
    parts = min(workers, tiles)
    return [(i * tiles // parts, (i + 1) * tiles // parts) for i in range(parts)]


def _viterbi_chunks(xs, vals, trellis: BitshiftTrellis, start, end, per: int) -> torch.Tensor:
    """:func:`_viterbi_chunk` over chunks of ``per`` tiles of every code: states ``(G, tiles, steps)``."""
    G, tiles, steps, _ = xs.shape
    out = torch.empty(G, tiles, steps, dtype=torch.int64, device=xs.device)
    for lo in range(0, tiles, per):
        hi = min(lo + per, tiles)
        s, e = (None if o is None else o.reshape(G, tiles)[:, lo:hi] for o in (start, end))
        out[:, lo:hi] = _viterbi_chunk(xs[:, lo:hi], vals, trellis, s, e)
    return out


def _viterbi_chunk(xs, vals, trellis: BitshiftTrellis, start, end) -> torch.Tensor:
    """xs ``(G, B, steps, V)``; vals ``(G, 2^L, V)``; start/end ``(G, B)`` or None; states ``(G, B, steps)``."""
    G, B, steps, _ = xs.shape
    kv, ob = trellis.kv, trellis.overlap_bits
    R, Q, N = 1 << kv, 1 << ob, trellis.n_states  # successors per state; predecessor groups (q = s >> KV)
    rows = G * B
    sq = vals.pow(2).sum(-1).unsqueeze(1)  # (G, 1, 2^L)
    c2 = -2 * vals.transpose(1, 2).unsqueeze(2)  # (G, V, 1, 2^L)
    cost = _state_costs(sq, xs[:, :, 0], c2).view(rows, N)  # |c|^2 - 2 <x_0, c>
    blocked = None
    if start is not None:  # s_0 = (o << KV) | r: only group q = o may start
        blocked = ~torch.nn.functional.one_hot(start.reshape(rows), Q).bool()  # (rows, Q)
        cost.view(rows, Q, R).masked_fill_(blocked.unsqueeze(-1), float("inf"))
    minima = torch.empty(max(steps - 1, 0), rows, Q, dtype=xs.dtype, device=xs.device)
    for t in range(1, steps):
        _min_over_top_bits(cost.view(rows, R, Q), minima[t - 1])
        cost = _state_costs(sq, xs[:, :, t], c2).view(rows, N)
        cost.view(rows, Q, R).add_(minima[t - 1].unsqueeze(-1))
    if end is None:
        final, s = cost.min(-1)
    else:  # s_last = (j << (L-KV)) | o
        e = end.reshape(rows)
        final, j = cost.view(rows, R, Q).gather(2, e.view(rows, 1, 1).expand(rows, R, 1)).squeeze(-1).min(-1)
        s = (j << ob) | e
    if not bool(torch.isfinite(final).all()):
        raise ValueError(
            "no trellis path satisfies start_overlap and end_overlap for some tile (a path of "
            f"{steps} steps can join them only when steps * K * V >= L)"
        )
    states = torch.empty(rows, steps, dtype=torch.int64, device=xs.device)
    states[:, -1] = s
    code = torch.arange(G, device=xs.device).repeat_interleave(B).unsqueeze(-1)  # (rows, 1): each row's code
    top = torch.arange(R, device=xs.device) << ob  # the dropped top bits j of a predecessor
    sq_rows, c2_rows = sq[:, 0], c2[:, :, 0]  # (G, 2^L), (G, V, 2^L)
    x_rows = xs.reshape(rows, steps, -1)
    for t in range(steps - 1, 0, -1):  # recompute cost_{t-1} at the predecessors of s_t, pick the best
        q = s >> kv
        prev = top | q.unsqueeze(-1)  # (rows, R)
        c = torch.addcmul(sq_rows[code, prev], x_rows[:, t - 1, :1], c2_rows[code, 0, prev])
        for v in range(1, x_rows.shape[-1]):
            c.addcmul_(x_rows[:, t - 1, v : v + 1], c2_rows[code, v, prev])
        if t > 1:
            c.add_(minima[t - 2].gather(1, prev >> kv))
        elif blocked is not None:
            c.masked_fill_(blocked.gather(1, prev >> kv), float("inf"))
        s = (_argmin_tree(c) << ob) | q
        states[:, t - 1] = s
    return states.view(G, B, steps)


_HANDED = threading.local()  # .counts: the worker counts of this thread's open parallel_viterbi blocks
# torch.set_num_threads sets the calling thread's count and the one new threads start with: the first block
# to open (in any Python thread) saves the count, the last to close restores it ({"open": blocks open,
# "threads": the saved count})
_HANDOVER = {"open": 0, "threads": 0}
_HANDOVER_LOCK = threading.Lock()


def _handed() -> list[int]:
    counts = getattr(_HANDED, "counts", None)
    if counts is None:
        counts = _HANDED.counts = []
    return counts


def default_workers() -> int:
    """The worker processes :func:`viterbi` uses when not told: inside :func:`parallel_viterbi` (of this
    Python thread), its count; else ``torch.get_num_threads()``."""
    handed = _handed()
    return handed[-1] if handed else torch.get_num_threads()


@contextlib.contextmanager
def parallel_viterbi(workers: int | None = None):
    """Hand this process's cores to the Viterbi worker processes for the block: inside, torch runs on one
    thread here (restored on exit) and :func:`viterbi`/:func:`quantize_tiles` use ``workers`` processes
    (default: ``torch.get_num_threads()`` on entry).

    Why: after each parallel operation the caller's idle OpenMP threads spin for a while (libgomp's
    default), on the cores the workers need; measured on 2 cores, the workers' throughput fell by 7-10 %
    when the caller kept 2 threads. Both functions enter this block around their own worker calls;
    :func:`~icml_compress.quantize.model.quantize_model` enters it around each layer's quantization on the
    CPU, so the rotations and LDLQ products between Viterbi calls run on one thread too. Yields the count.
    """
    n = torch.get_num_threads() if workers is None else workers
    check_int(n, "workers", 1)
    handed = _handed()
    with _HANDOVER_LOCK:
        threads = torch.get_num_threads()
        if _HANDOVER["open"] == 0:
            _HANDOVER["threads"] = threads
        _HANDOVER["open"] += 1
        torch.set_num_threads(1)
    handed.append(n)
    try:
        yield n
    finally:
        handed.pop()
        with _HANDOVER_LOCK:
            _HANDOVER["open"] -= 1
            # the last block gives back the count saved by the first (torch's default for new threads too);
            # any other gives this thread back its count on entry, as a nested block always did
            torch.set_num_threads(_HANDOVER["threads"] if _HANDOVER["open"] == 0 else threads)


def _handover_after_fork() -> None:
    """In a forked child only the forking thread's blocks can close: count those alone (another thread's
    block would never restore the count), under a fresh lock (one held at the fork is never released)."""
    global _HANDOVER_LOCK
    _HANDOVER_LOCK = threading.Lock()
    _HANDOVER["open"] = len(_handed())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_handover_after_fork)


_POOL: dict[int, concurrent.futures.ProcessPoolExecutor] = {}  # the worker processes, by count
_POOL_LOCK = threading.Lock()


def _forget_pools_after_fork() -> None:
    """In a forked child: the parent's pools are the parent's (their threads did not survive the fork, so a
    task sent to one would wait for ever); the child starts its own on first use."""
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_after_fork)


def _pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """The process pool of ``workers`` workers (one torch thread each), started on first use; a pool of
    another size is shut down first. Forked on Linux (as torch's DataLoader workers: quick, and a script
    needs no ``__main__`` guard), spawned elsewhere (a script then needs ``if __name__ == "__main__":``, as
    for a DataLoader with workers)."""
    with _POOL_LOCK:
        if workers not in _POOL:
            for old in _POOL.values():
                old.shutdown(wait=False, cancel_futures=True)
            _POOL.clear()
            _POOL[workers] = concurrent.futures.ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context(START_METHOD),
                initializer=_start_worker,
                initargs=(os.getpid(),),
            )
        return _POOL[workers]


def _start_worker(parent: int) -> None:
    """A worker's setup: one torch thread, and an exit as soon as ``parent`` (the process that started the
    pool) is gone. A parent that ends with ``os._exit`` (a forked child, such as a reproduction run by
    ``icml-repro``) runs no atexit handler, so :func:`_shutdown_pool` cannot stop its workers; without the
    watch they would wait on their queue for ever."""
    torch.set_num_threads(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="viterbi-worker-parent-watch", daemon=True).start()


@atexit.register
def _shutdown_pool() -> None:
    """Stop the worker processes (at exit, before the interpreter tears its modules down)."""
    with _POOL_LOCK:
        for pool in _POOL.values():
            pool.shutdown(wait=True)
        _POOL.clear()


def _run_in_pool(fn, tasks: list[tuple], workers: int) -> list[torch.Tensor]:
    """``fn(*task)`` of every task in the worker processes, results as tensors. Tasks hold numpy arrays
    (no shared-memory handles to leak), trellis parameters and plain values; a broken pool is dropped, so
    the next call starts afresh."""
    pool = _pool(workers)
    try:
        futures = [pool.submit(fn, *task) for task in tasks]
        return [torch.from_numpy(f.result()) for f in futures]
    except concurrent.futures.process.BrokenProcessPool:
        with _POOL_LOCK:
            _POOL.pop(workers, None)
        raise


def _params(trellis: BitshiftTrellis) -> tuple[int, int, int, int]:
    return (trellis.L, trellis.K, trellis.V, trellis.T)


def _viterbi_task(xs: np.ndarray, vals: np.ndarray, params, per: int, start, end) -> np.ndarray:
    """One worker's part of a :func:`viterbi` call."""
    trellis = BitshiftTrellis(*params)
    start, end = (None if o is None else torch.from_numpy(o) for o in (start, end))
    return _viterbi_chunks(torch.from_numpy(xs), torch.from_numpy(vals), trellis, start, end, per).numpy()


def _tail_biting_task(x: np.ndarray, values: np.ndarray, params, chunk: int) -> np.ndarray:
    """One worker's part of a :func:`quantize_tiles` call: both passes of its tiles."""
    return _two_passes(torch.from_numpy(x), torch.from_numpy(values), BitshiftTrellis(*params), chunk).numpy()


def _state_costs(sq: torch.Tensor, x: torch.Tensor, c2: torch.Tensor) -> torch.Tensor:
    """``|c(s)|^2 - 2 <x_b, c(s)>`` for every tile and state, ``(G, B, 2^L)`` (sq ``(G, 1, 2^L)``, x
    ``(G, B, V)``, c2 ``(G, V, 1, 2^L)``): one multiply-add per weight of the vector."""
    cost = torch.addcmul(sq, x[..., :1], c2[:, 0])  # an outer product: cheaper than a rank-1 matmul
    for v in range(1, x.shape[-1]):
        cost.addcmul_(x[..., v : v + 1], c2[:, v])
    return cost


def _min_over_top_bits(v: torch.Tensor, out: torch.Tensor) -> None:
    """``out (B, Q)`` = minimum over dimension 1 of ``v (B, R, Q)`` (R a power of two) by a pairwise tree
    on contiguous halves: several times faster on CPU than a strided ``min(dim=1)``."""
    while v.shape[1] > 2:
        h = v.shape[1] // 2
        v = torch.minimum(v[:, :h], v[:, h:])
    torch.minimum(v[:, 0], v[:, 1], out=out)


def _argmin_tree(c: torch.Tensor) -> torch.Tensor:
    """Arg-minimum over the last dimension of ``c (B, R)`` by the pairwise tree of :func:`_min_over_top_bits`
    (halves compared with a strict ``<``: a tie goes to the lower half), int64 ``(B,)``."""
    idx = torch.arange(c.shape[1], device=c.device).expand_as(c)
    while c.shape[1] > 1:
        h = c.shape[1] // 2
        take_hi = c[:, h:] < c[:, :h]
        idx = torch.where(take_hi, idx[:, h:], idx[:, :h])
        c = torch.minimum(c[:, :h], c[:, h:])
    return idx[:, 0]


def quantize_tiles(
    x: torch.Tensor,
    values: torch.Tensor,
    trellis: BitshiftTrellis,
    *,
    tail_biting: bool = True,
    chunk: int | None = None,
    dtype: torch.dtype | None = None,
    workers: int | None = None,
) -> torch.Tensor:
    """Trellis-quantize tiles ``(tiles, T)`` (or ``(G, tiles, T)`` with ``G`` codes ``(G, 2^L, V)``): int64
    states ``(..., T/V)``, on the device of ``x`` (``chunk``, ``dtype``, ``workers``: as :func:`viterbi`).

    ``tail_biting=True`` (default) returns tail-biting paths (``trellis.pack`` stores them in exactly
    ``K*T`` bits) by the two-pass method of the module docstring; ``False`` the unconstrained optimum,
    whose free-start stream needs ``L - K*V`` more bits.
    """
    workers, handover = _handover(x, workers, trellis)
    with handover:
        return _quantize_tiles(x, values, trellis, tail_biting, chunk, dtype, workers)


def _quantize_tiles(x, values, trellis, tail_biting, chunk, dtype, workers: int) -> torch.Tensor:
    """:func:`quantize_tiles` after ``workers`` is resolved (inside :func:`parallel_viterbi` when pooled)."""
    _check_magnitude(check_float_tensor(x, "x"))
    check_instance(trellis, "trellis", TrellisFormat, "BitshiftTrellis")
    check_bool(tail_biting, "tail_biting")
    grouped = check_code_values(values, trellis).dim() == 3
    if x.dim() != (3 if grouped else 2) or x.shape[-1] != trellis.T:
        want = "(codes of values, tiles, T" if grouped else "(tiles, T"
        raise ValueError(
            f"x must have shape {want}={trellis.T}), got x {tuple(x.shape)}, values {tuple(values.shape)}"
        )
    if not tail_biting:
        return viterbi(x, values, trellis, chunk=chunk, dtype=dtype, workers=workers)
    trellis.check_tail_biting_length()
    if chunk is None:
        chunk = default_chunk(trellis, trellis.steps, x.device)
    check_int(chunk, "chunk", 1)
    xs = x.to(check_dtype(dtype, x))
    if not _pooled(x, workers, trellis):
        return _two_passes(xs, values, trellis, chunk)
    # one part per worker, both passes there (one round trip per call, not one per pass)
    v, params = values.to("cpu", xs.dtype).numpy(), _params(trellis)
    args = [(xs[..., lo:hi, :].numpy(), v, params, chunk) for lo, hi in _parts(x.shape[-2], workers)]
    return torch.cat(_run_in_pool(_tail_biting_task, args, workers), dim=-2)


def _two_passes(x: torch.Tensor, values: torch.Tensor, trellis: BitshiftTrellis, chunk: int) -> torch.Tensor:
    """Tail-biting paths of ``x`` by the two passes of the module docstring, in this process."""
    half = trellis.steps // 2
    rolled = torch.roll(x, half * trellis.V, dims=-1)  # rolled[..., half*V] == x[..., 0]
    first = viterbi(rolled, values, trellis, chunk=chunk, workers=1)
    overlap = first[..., half] >> trellis.kv  # the top overlap bits of the state that emits x[..., 0]
    return viterbi(x, values, trellis, start_overlap=overlap, end_overlap=overlap, chunk=chunk, workers=1)
