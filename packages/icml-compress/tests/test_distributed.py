"""``quantize_model(..., distributed=True)`` (docs: proteus-distributed.md): the double-double Hessian sums
that make the data-parallel calibration exact, the sharding helpers, bad input, and ``torchrun`` runs of
``distributed_quantize.py`` (gloo, 1 thread per process): 2 processes against 1 and against no process
group, a rank that dies, ranks given different text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import icml_compress.quantize.model as qm
from icml_compress.quantize import QuantConfig, load_quantized, quantize_model
from icml_compress.quantize.calibration import (
    add_to_pair,
    collect_hessians,
    combine_pairs,
    make_sequences,
    pair_value,
)
from icml_compress.quantize.distributed import assign_layers, shard
from icml_compress.quantize.model import find_linears
from icml_tools.assets import tiny_llama

SCRIPT = Path(__file__).with_name("distributed_quantize.py")
TEARDOWN_ABORT = "terminate called without an active exception"
FAST = {"L": 8, "T": 32, "n_calibration": 4, "seq_len": 32, "n_candidates": 2, "select_rows": 8}


def dd_sum(terms: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The double-double sum of ``terms`` in the given order (the terms are left as they are)."""
    pair = (terms[0].clone(), torch.zeros_like(terms[0]))
    for t in terms[1:]:
        add_to_pair(pair, t.clone())
    return pair


def plain_sum(terms: list[torch.Tensor]) -> torch.Tensor:
    out = terms[0].clone()
    for t in terms[1:]:
        out += t
    return out


# --- the double-double sum -------------------------------------------------------------------------------
def test_double_double_sums_agree_in_any_order_and_partition_where_plain_sums_do_not():
    g = torch.Generator().manual_seed(0)
    n, m = 48, 3000
    # signed terms over 2^-30 .. 2^30: plain float64 sums depend on the order
    terms = torch.randn(n, m, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-30, 31, (n, m), generator=g).double()
    )
    rows = list(terms)
    forward, backward = plain_sum(rows), plain_sum(rows[::-1])
    shards = [rows[:20], rows[20:21], rows[21:40], rows[40:]]  # uneven, one of a single term
    by_shard = plain_sum([plain_sum(s) for s in shards])
    assert (forward != backward).sum() > m // 10 and (
        forward != by_shard
    ).sum() > m // 10  # the test can fail

    results = [pair_value(dd_sum(rows)), pair_value(dd_sum(rows[::-1]))]
    for order in (shards, shards[::-1]):  # partial pairs combined in rank order and in reverse
        acc = dd_sum(order[0])
        for part in order[1:]:
            combine_pairs(acc, dd_sum(part))
        results.append(pair_value(acc))
    perm = torch.randperm(n, generator=g).tolist()
    results.append(pair_value(dd_sum([rows[i] for i in perm])))
    for r in results[1:]:
        assert torch.equal(r, results[0])
    exact = [float(sum(Fraction(v) for v in terms[:, j].tolist())) for j in range(m)]
    assert torch.equal(
        results[0], torch.tensor(exact, dtype=torch.float64)
    )  # the float64 rounding of the exact sum (Fraction)


def test_add_to_pair_is_exact_across_its_slices(monkeypatch):
    import icml_compress.quantize.calibration as calib

    g = torch.Generator().manual_seed(1)
    terms = list(torch.randn(16, 9, 7, generator=g, dtype=torch.float64) * 1e8 + 1)
    whole = pair_value(dd_sum(terms))
    monkeypatch.setitem(calib.PAIR_CHUNK, "cpu", 5)  # 63 elements in slices of 5, the last one of 3
    sliced = pair_value(dd_sum(terms))
    assert torch.equal(whole, sliced)
    exact = [[float(sum(Fraction(t[i, j].item()) for t in terms)) for j in range(7)] for i in range(9)]
    assert torch.equal(whole, torch.tensor(exact, dtype=torch.float64))


def test_collect_hessians_is_the_rounded_exact_sum_over_sequences():
    torch.manual_seed(0)
    model = tiny_llama(0)
    linears = find_linears(model, QuantConfig())
    seqs = make_sequences(torch.randint(0, 256, (512,), generator=torch.Generator().manual_seed(2)), 6, 32)
    name = "model.layers.1.mlp.down_proj"
    H = collect_hessians(model, linears, seqs, progress=False)[name]
    products = []

    def capture(module, args):
        x = args[0].reshape(-1, 128).double()  # (tokens, in)
        products.append(x.T @ x)  # each sequence's own product, as collect_hessians computes it

    hook = linears[name].register_forward_pre_hook(capture)
    with torch.no_grad():
        for s in seqs:
            model(s.unsqueeze(0))
    hook.remove()
    block = [p[:24, :24].tolist() for p in products]
    exact = torch.tensor(
        [[float(sum(Fraction(p[i][j]) for p in block)) for j in range(24)] for i in range(24)],
        dtype=torch.float64,
    )
    assert torch.equal(H[:24, :24], exact / seqs.numel())


# --- sharding helpers ------------------------------------------------------------------------------------
def test_shards_are_contiguous_balanced_and_cover_everything():
    for world in range(1, 9):
        for n in range(world, 40):
            parts = [shard(n, world, r) for r in range(world)]
            assert [i for p in parts for i in range(n)[p]] == list(range(n))
            sizes = [p.stop - p.start for p in parts]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1 and sizes == sorted(sizes, reverse=True)


def test_layers_are_assigned_by_cost_deterministically():
    linears = find_linears(tiny_llama(0, layers=3), QuantConfig())
    cost = {n: lin.in_features * lin.out_features for n, lin in linears.items()}
    for world in (1, 2, 3, 5, 32):
        owners = assign_layers(linears, world)
        assert list(owners) == list(linears) and owners == assign_layers(linears, world)
        loads = [sum(cost[n] for n, r in owners.items() if r == k) for k in range(world)]
        if world <= len(linears):
            assert max(loads) - min(loads) <= max(cost.values())  # greedy: within one layer's cost
        assert sorted(set(owners.values())) == list(range(min(world, len(linears))))


def test_layers_are_balanced_within_each_calibration_group(monkeypatch):
    """Every group ends in a gather (each rank waits for the busiest), so the layers are shared out within
    each group, as the docs say. Rank 0 of 2 with the collectives replaced by local stand-ins and the Hessian
    budget of one block (tiny_llama's 2 blocks: 2 groups). The whole-model assignment gave 22528 / 14336
    weights per group (rank 0 / rank 1, then the reverse); within each group it is 18432 / 18432."""
    import copy

    model = tiny_llama(0)
    linears = find_linears(model, QuantConfig())
    cost = {n: lin.in_features * lin.out_features for n, lin in linears.items()}
    block = [lin for n, lin in linears.items() if ".layers.0." in n]
    monkeypatch.setattr(qm, "HESSIAN_BYTES", sum(8 * lin.in_features**2 for lin in block))
    monkeypatch.setattr(qm, "process_group", lambda distributed: (0, 2))
    monkeypatch.setattr(qm, "check_same_call", lambda fingerprint: None)
    monkeypatch.setattr(
        qm, "collect_hessians_sharded", lambda m, part, seqs, progress=False: collect_hessians(m, part, seqs)
    )
    monkeypatch.setattr(qm, "quantize_linear_trellis", lambda lin, H, config, name: (copy.deepcopy(lin), {}))
    monkeypatch.setattr(qm, "distributed_record", lambda sequences, owners: {})
    groups: list[tuple[list[str], set[str]]] = []

    def gather(done, names):
        groups.append((list(names), set(done)))
        return {n: done.get(n, (copy.deepcopy(linears[n]), {})) for n in names}

    monkeypatch.setattr(qm, "gather_layers", gather)
    ids = torch.randint(0, 256, (1024,), generator=torch.Generator().manual_seed(0))
    quantize_model(model, QuantConfig(**FAST), ids, progress=False, distributed=True)
    assert len(groups) == 2
    for names, mine in groups:
        loads = [0, 0]  # the docs' rule within the group: costliest first to the least loaded (lowest) rank
        expected = set()
        for n in sorted(names, key=lambda n: -cost[n]):
            r = min((0, 1), key=lambda r: (loads[r], r))
            loads[r] += cost[n]
            if r == 0:
                expected.add(n)
        assert mine == expected
        assert loads == [18432, 18432]


# --- bad input ---------------------------------------------------------------------------------------------
def test_bad_input():
    ids = torch.randint(0, 256, (1024,), generator=torch.Generator().manual_seed(0))
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    with pytest.raises(ValueError, match=r"distributed=True .*torchrun.*init_process_group"):
        quantize_model(tiny_llama(0), QuantConfig(**FAST), ids, distributed=True)
    for bad in ("yes", 1, None, 0.0):
        with pytest.raises(TypeError, match="distributed"):
            quantize_model(tiny_llama(0), QuantConfig(**FAST), ids, distributed=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("rank", [0, 1])
def test_fewer_sequences_than_ranks_is_refused_on_every_rank_before_any_work(rank, monkeypatch):
    ids = torch.randint(0, 256, (1024,), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(qm, "process_group", lambda distributed: (rank, 5))

    def no_collective(*args, **kwargs):
        raise AssertionError("a collective was entered")

    monkeypatch.setattr(qm, "check_same_call", no_collective)
    monkeypatch.setattr(qm, "collect_hessians_sharded", no_collective)
    config = QuantConfig(**{**FAST, "n_calibration": 4})
    with pytest.raises(
        ValueError, match=r"at least one calibration sequence per rank: .* 4 sequences .* 5 ranks"
    ):
        quantize_model(tiny_llama(0), config, ids, progress=False, distributed=True)


# --- torchrun -----------------------------------------------------------------------------------------------
def launch(out: Path, nproc: int | None, env: dict | None = None, timeout: float = 300):
    """Run ``distributed_quantize.py`` into ``out``: under torchrun with ``nproc`` processes, or alone
    (``nproc=None``, ``--plain``); one thread per process. Returns the finished process and its seconds."""
    out.mkdir(parents=True, exist_ok=True)
    if nproc is None:
        cmd = [sys.executable, str(SCRIPT), str(out), "--plain"]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            str(SCRIPT),
            str(out),
        ]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    return done, time.perf_counter() - t0


@pytest.mark.slow
def test_two_processes_quantize_exactly_as_one(tmp_path):
    results = {}
    for label, nproc in (("plain", None), ("one", 1), ("two", 2)):
        done, _ = launch(tmp_path / label, nproc)
        if (
            done.returncode != 0
            and TEARDOWN_ABORT in done.stderr
            and (tmp_path / label / "result.json").exists()
        ):
            # a rank aborted in gloo's teardown after every rank's work was done and written (a torch bug
            # met twice in CI, never in about 55 launches on a 2-core machine here): run the job once more
            done, _ = launch(tmp_path / label, nproc)
        assert done.returncode == 0, done.stderr[-3000:]
        results[label] = json.loads((tmp_path / label / "result.json").read_text())
    for method in ("proteus", "rtn"):
        plain = results["plain"][method]
        assert plain["distributed"] is None
        for label in ("one", "two"):
            got = results[label][method]
            assert got["tensors"] == plain["tensors"] and got["packed_hash"] == plain["packed_hash"]
    record = results["two"]["proteus"]["distributed"]
    assert record["world_size"] == 2 and record["backend"] == "gloo"
    assert record["sequences_per_rank"] == [3, 2] and record["layers_per_rank"] == [7, 7]
    assert results["two"]["rtn"]["distributed"]["sequences_per_rank"] == [0, 0]  # RTN calibrates nothing

    single, dist = (
        load_quantized(tmp_path / "plain" / "proteus"),
        load_quantized(tmp_path / "two" / "proteus"),
    )
    assert dist.icml_quantization["distributed"]["world_size"] == 2
    x = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(single(x).logits, dist(x).logits)
        a = single.generate(x, max_new_tokens=6, do_sample=False)
        b = dist.generate(x, max_new_tokens=6, do_sample=False)
    assert a.shape == (1, 18) and torch.equal(a, b)

    # a rank given other calibration text: every rank refuses
    done, _ = launch(tmp_path / "other", 2, {"ICML_TEST_OTHER_TEXT_RANK": "1"})
    assert done.returncode != 0
    assert "differ from rank 0 in ['calibration_texts']" in done.stderr
    assert not (tmp_path / "other" / "result.json").exists()


def test_a_dying_rank_ends_the_job_instead_of_hanging(tmp_path):
    done, seconds = launch(tmp_path, 2, {"ICML_TEST_DIE_RANK": "1"}, timeout=120)
    assert done.returncode != 0 and seconds < 120
    assert "exitcode  : 3" in done.stderr  # torchrun names rank 1's exit status as the root cause
    assert not (tmp_path / "result.json").exists()
