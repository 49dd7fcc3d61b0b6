"""The Viterbi of 2026-12-04 (minima only, back-tracking recomputes; worker processes; several codes per
call) returns bit-identical paths to the one it replaced, frozen below as the reference."""

from __future__ import annotations

import os
import sys
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_compress.proteus.codes import make_code
from icml_compress.trellis import BitshiftTrellis, default_chunk, quantize_tiles, viterbi

CODES = [("1mad", 1), ("3inst", 1), ("mulbal", 1), ("hyb", 2), ("lut", 1), ("lut", 2)]


# --- the Viterbi until 2026-12-04 (a back-pointer byte per predecessor group and step), frozen ---------
def reference_viterbi(x, values, trellis, start=None, end=None):
    B, steps = x.shape[0], x.shape[1] // trellis.V
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.to(dtype).reshape(B, steps, trellis.V)
    vals = values.to(dtype).reshape(trellis.n_states, trellis.V)
    kv, ob = trellis.kv, trellis.overlap_bits
    R, Q = 1 << kv, 1 << ob
    sq = vals.pow(2).sum(-1)
    c2 = -2 * vals.T.contiguous()

    def state_costs(xt):
        cost = torch.addcmul(sq, xt[:, :1], c2[:1])
        for v in range(1, xt.shape[1]):
            cost.addcmul_(xt[:, v : v + 1], c2[v : v + 1])
        return cost

    def min_over_top_bits(v):
        idx = torch.arange(v.shape[1], dtype=torch.uint8).view(1, -1, 1)
        while v.shape[1] > 1:
            h = v.shape[1] // 2
            lo, hi = v[:, :h], v[:, h:]
            take_hi = hi < lo
            v = torch.minimum(lo, hi)
            idx = torch.where(take_hi, idx[:, h:], idx[:, :h])
        return v[:, 0], idx.expand(v.shape[0], 1, v.shape[2])[:, 0]

    cost = state_costs(xs[:, 0])
    if start is not None:
        allowed = torch.nn.functional.one_hot(start, Q).bool()
        cost.view(B, Q, R).masked_fill_(~allowed.unsqueeze(-1), float("inf"))
    back = torch.empty(steps, B, Q, dtype=torch.uint8)
    for t in range(1, steps):
        best, arg = min_over_top_bits(cost.view(B, R, Q))
        back[t].copy_(arg)
        cost = state_costs(xs[:, t])
        cost.view(B, Q, R).add_(best.unsqueeze(-1))
    states = torch.empty(B, steps, dtype=torch.int64)
    if end is None:
        _, s = cost.min(-1)
    else:
        _, j = cost.view(B, R, Q).gather(2, end.view(B, 1, 1).expand(B, R, 1)).squeeze(-1).min(-1)
        s = (j << ob) | end
    states[:, -1] = s
    rows = torch.arange(B)
    for t in range(steps - 1, 0, -1):
        q = s >> kv
        s = (back[t, rows, q].to(torch.int64) << ob) | q
        states[:, t - 1] = s
    return states


def reference_quantize_tiles(x, values, trellis, tail_biting=True):
    if not tail_biting:
        return reference_viterbi(x, values, trellis)
    half = trellis.steps // 2
    first = reference_viterbi(torch.roll(x, half * trellis.V, dims=1), values, trellis)
    o = first[:, half] >> trellis.kv
    return reference_viterbi(x, values, trellis, o, o)


# --- the checks ------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    code=st.sampled_from(CODES),
    L=st.sampled_from([8, 10, 12]),
    tiles=st.integers(1, 5),
    steps=st.sampled_from([8, 16, 24]),
    tail_biting=st.booleans(),
    float64=st.booleans(),
    ties=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_same_states_and_packed_words_as_the_reference(
    code, L, tiles, steps, tail_biting, float64, ties, seed
):
    """Every code, L in {8, 10, 12}, with and without tail-biting, float32 and float64, and inputs rounded
    to a coarse grid (exact ties between predecessors, where only the tie rule decides)."""
    name, V = code
    trellis = BitshiftTrellis(L, 2, V, steps * V)
    values = make_code(name, L, V, seed=seed % 7).values()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tiles, trellis.T, generator=gen, dtype=torch.float64 if float64 else torch.float32)
    if ties:
        x, values = (x * 2).round() / 2, (values * 2).round() / 2
    got = quantize_tiles(x, values, trellis, tail_biting=tail_biting, chunk=2, workers=1)
    want = reference_quantize_tiles(x, values, trellis, tail_biting)
    assert torch.equal(got, want)
    if tail_biting and trellis.T * trellis.K % 32 == 0:
        assert torch.equal(trellis.pack(got), trellis.pack(want))


def test_several_codes_in_one_call_equal_one_call_per_code():
    trellis = BitshiftTrellis(10, 2, 1, 32)
    values = torch.stack([make_code("mulbal", 10).values(), make_code("1mad", 10).values()])
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1))
    got = quantize_tiles(x, values, trellis, chunk=4)  # two tiles of each code per chunk
    for g in range(2):
        assert torch.equal(got[g], quantize_tiles(x[g], values[g], trellis))


def test_worker_processes_return_the_same_paths(monkeypatch):
    import importlib

    vmod = importlib.import_module("icml_compress.trellis.viterbi")
    sent = []
    real = vmod._run_in_pool

    def spy(fn, tasks, workers):
        sent.append((fn.__name__, len(tasks)))
        return real(fn, tasks, workers)

    monkeypatch.setattr(vmod, "_run_in_pool", spy)
    trellis = BitshiftTrellis(10, 2, 1, 64)
    values = make_code("mulbal", 10).values()
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(2))  # enough work for 3 workers
    one = quantize_tiles(x, values, trellis, chunk=16, workers=1)
    assert sent == []
    assert torch.equal(quantize_tiles(x, values, trellis, chunk=16, workers=2), one)
    assert torch.equal(
        viterbi(x, values, trellis, chunk=16, workers=3), viterbi(x, values, trellis, workers=1)
    )
    grouped = torch.stack([values, -values])
    both = quantize_tiles(torch.stack([x, x]), grouped, trellis, chunk=16, workers=2)
    assert torch.equal(both[0], one)
    assert sent == [("_tail_biting_task", 2), ("_viterbi_task", 3), ("_tail_biting_task", 2)]
    assert torch.get_num_threads() == 1  # the caller's threads are back (the tests run on one)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks and reads /proc")
def test_workers_exit_with_a_parent_that_skips_atexit():
    """A forked child (as icml-repro runs a reproduction) ends with os._exit: no atexit handler stops its
    pool, so the workers must notice that their parent is gone. The child also must not use the pool it
    inherited from its parent (that pool's threads did not survive the fork: a task would wait for ever)."""
    import importlib
    import select

    vmod = importlib.import_module("icml_compress.trellis.viterbi")
    trellis = BitshiftTrellis(10, 2, 1, 64)
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(2))  # enough work to pool
    values = make_code("1mad", 10).values()
    want = quantize_tiles(x, values, trellis, chunk=16, workers=2)  # the parent's own pool of 2
    parents = set(vmod._POOL[2]._processes)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: quantize with a pool of 2, report its workers, end without atexit
        try:
            same = torch.equal(quantize_tiles(x, values, trellis, chunk=16, workers=2), want)
            pids = " ".join(str(p) for p in vmod._POOL[2]._processes)
            os.write(write, f"{int(same)} {pids}\n".encode())
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)
    assert ready, "the forked child did not answer within 60 s (it waits on the parent's pool?)"
    with os.fdopen(read) as f:  # one line: the workers hold the pipe open while they live
        same, *workers = (int(p) for p in f.readline().split())
    os.waitpid(pid, 0)
    assert same == 1 and len(workers) == 2 and not parents & set(workers)

    def alive(p: int) -> bool:
        try:
            with open(f"/proc/{p}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in workers)
    assert all(alive(p) for p in parents)  # the parent's pool is untouched


def test_parallel_viterbi_hands_the_threads_over_and_back():
    from icml_compress.trellis import parallel_viterbi
    from icml_compress.trellis.viterbi import default_workers

    before = torch.get_num_threads()
    with parallel_viterbi(3) as n:
        assert n == 3 and default_workers() == 3 and torch.get_num_threads() == 1
        with parallel_viterbi(2):
            assert default_workers() == 2
        assert default_workers() == 3
    assert torch.get_num_threads() == before and default_workers() == before
    with pytest.raises(ValueError, match="workers"), parallel_viterbi(0):
        pass


def test_parallel_viterbi_blocks_of_two_python_threads_overlap_without_crossing():
    """This thread enters, B enters, this thread leaves, B leaves: B keeps one torch thread and its own
    worker count until it leaves, and the count before (2 here) is back in this thread, in B and in a new
    thread."""
    import threading

    from icml_compress.trellis import parallel_viterbi
    from icml_compress.trellis.viterbi import default_workers

    torch.set_num_threads(2)  # the autouse fixture restores its count afterwards
    b_in, a_out = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def b() -> None:
        with parallel_viterbi(3):
            b_in.set()
            a_out.wait()
            seen["workers"], seen["threads"] = default_workers(), torch.get_num_threads()
        seen["after"] = torch.get_num_threads()

    other = threading.Thread(target=b)
    with parallel_viterbi(2):
        other.start()
        b_in.wait()
    a_out.set()
    other.join()
    fresh: dict[str, int] = {}
    t = threading.Thread(target=lambda: fresh.setdefault("threads", torch.get_num_threads()))
    t.start()
    t.join()
    assert seen == {"workers": 3, "threads": 1, "after": 2}
    assert torch.get_num_threads() == 2 and fresh["threads"] == 2


def test_float64_on_request_equals_a_float64_input():
    trellis = BitshiftTrellis(10, 2, 1, 32)
    values = make_code("mulbal", 10).values()
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(3))
    asked = viterbi(x, values, trellis, dtype=torch.float64)
    assert torch.equal(asked, viterbi(x.double(), values, trellis))
    assert torch.equal(viterbi(x.double(), values, trellis, dtype=torch.float32), viterbi(x, values, trellis))


def test_default_chunk_bounds_the_stored_minima_by_device():
    trellis = BitshiftTrellis(10, 2, 1, 64)
    per_tile = 4 * (64 * 256 + 2 * 1024)
    assert default_chunk(trellis, 64) == (1 << 25) // per_tile
    assert default_chunk(trellis, 64, "cuda") == (1 << 30) // per_tile


def test_bad_new_arguments_raise():
    trellis = BitshiftTrellis(8, 2, 1, 8)
    values = make_code("mulbal", 8).values()
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="dtype"):
        viterbi(x, values, trellis, dtype=torch.float16)
    with pytest.raises(ValueError, match="workers"):
        viterbi(x, values, trellis, workers=0)
    with pytest.raises(ValueError, match="x must have shape"):
        viterbi(x, torch.stack([values, values]), trellis)  # two codes need x (2, tiles, n)
    with pytest.raises(ValueError, match="values"):
        quantize_tiles(torch.randn(3, 2, 8), torch.stack([values, values]), trellis)
