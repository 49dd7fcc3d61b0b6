"""``quantize_model(..., distributed=True)``: the pieces that split one quantization over the ranks of a
``torch.distributed`` process group (``torchrun``), each rank holding the same float model and text.

- Calibration, data-parallel: each rank streams a contiguous shard of the calibration sequences
  (:func:`shard`) and keeps double-double sums of the per-sequence products
  (:func:`~icml_compress.quantize.calibration.hessian_sums`); :func:`reduce_hessians` combines them in
  rank order along a send/recv chain (never a backend float ``SUM``, whose order the backend picks), so
  the Hessians are those of one process (see :func:`~icml_compress.quantize.calibration.pair_value`).
- Layers, sharded: within each calibration group :func:`assign_layers` gives each layer to one rank
  (greedy by ``in_features * out_features``, deterministic); :func:`gather_layers` hands every rank all
  quantized modules and their statistics (``all_gather_object``).

A rank that raises or dies leaves the others blocked in a collective: under ``torchrun`` the agent ends
the job when a worker exits with an error; elsewhere the process group's ``timeout`` ends the wait.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from icml_compress.quantize.calibration import combine_pairs, hessian_sums, pair_value
from icml_compress.validation import check_bool


def process_group(distributed: bool) -> tuple[int, int] | None:
    """``(rank, world_size)`` of the default process group when ``distributed`` is True, else None.

    Raises TypeError for a ``distributed`` that is not a bool and ValueError, naming ``distributed``, when
    no process group is initialized (the command was not run under ``torchrun``, or
    ``torch.distributed.init_process_group`` was not called)."""
    check_bool(distributed, "distributed")
    if not distributed:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "distributed=True needs an initialized torch.distributed process group: run the script under "
            "torchrun (python -m torch.distributed.run) and call torch.distributed.init_process_group first"
        )
    return dist.get_rank(), dist.get_world_size()


def shard(n: int, world_size: int, rank: int) -> slice:
    """The contiguous part of ``n`` items that ``rank`` of ``world_size`` takes: sizes differ by at most
    one, the first ``n % world_size`` ranks one more, in rank order."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def wire_device(device: torch.device) -> torch.device:
    """Where a tensor on ``device`` travels through the default group's backend: on the CUDA device of this
    rank for NCCL alone, on the CPU for a backend without NCCL (gloo), as it is for a mixed one
    (``cpu:gloo,cuda:nccl``)."""
    backend = str(dist.get_backend())
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if "nccl" not in backend:
        return torch.device("cpu")
    return device


def check_same_call(fingerprint: dict) -> None:
    """Raise ValueError on every rank when the ranks' ``fingerprint`` (what must agree: the calibration
    tokens, the config, the layers) differ: a rank given other text or another model would otherwise
    produce a silently wrong model."""
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, fingerprint)
    differ = [r for r, f in enumerate(gathered) if f != gathered[0]]
    if differ:
        keys = sorted(k for k in fingerprint if any(f[k] != gathered[0][k] for f in gathered))
        raise ValueError(
            f"distributed=True needs the same model, config and calibration_texts on every rank; ranks "
            f"{differ} differ from rank 0 in {keys}"
        )


def fingerprint(ids: torch.Tensor, config_dict: dict, linears: dict[str, nn.Linear], given: bool) -> dict:
    """What :func:`check_same_call` compares: the calibration tokens (count and CRC-32), the config (without
    ``device``, which may name each rank's GPU), each layer's name, shape and the CRC-32 of its first weight
    row (a cheap check that every rank loaded the same weights), and whether Hessians were ``given``."""
    layers = []
    for name, lin in linears.items():
        row = lin.weight[0].detach().cpu().contiguous().view(torch.uint8)
        layers.append((name, lin.in_features, lin.out_features, zlib.crc32(row.numpy().tobytes())))
    return {
        "calibration_texts": (ids.numel(), zlib.crc32(ids.cpu().contiguous().numpy().tobytes())),
        "config": {k: v for k, v in config_dict.items() if k != "device"},
        "model": layers,
        "hessians": given,
    }


@torch.no_grad()
def collect_hessians_sharded(
    model: nn.Module, linears: dict[str, nn.Linear], sequences: torch.Tensor, *, progress: bool = False
) -> dict[str, torch.Tensor]:
    """:func:`~icml_compress.quantize.calibration.collect_hessians` with this rank streaming only its
    :func:`shard` of ``sequences`` (every rank holds all of them, at least one each); every rank returns
    the same ``{name: H}``, equal to the single-process one (see :func:`reduce_hessians`)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = sequences[shard(len(sequences), world, rank)]
    sums, owner, tokens = hessian_sums(model, linears, mine, progress=progress)
    means = reduce_hessians(sums, tokens)
    return {name: means[owner[name]] for name in linears}


def reduce_hessians(
    sums: dict[str, tuple[torch.Tensor, torch.Tensor]], tokens: int
) -> dict[str, torch.Tensor]:
    """``{name: H}`` from every rank's double-double ``sums`` (same names, in the same order, on every rank)
    and token count: ``H = (hi + lo) / total tokens``, the pairs combined in rank order.

    A chain: rank ``r`` receives the running pair of ranks ``0 .. r-1`` from rank ``r - 1``, adds its own
    (:func:`~icml_compress.quantize.calibration.combine_pairs`) and sends it on; the last rank rounds the
    pair once, divides by the token count (an integer ``all_reduce``, exact) and broadcasts ``H``. Each rank
    holds one received pair (two ``(in, in)`` float64 tensors) beyond its own at a time. The pairs are
    consumed: each ``H`` is written into its pair's ``hi``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out: dict[str, torch.Tensor] = {}
    count = torch.tensor([tokens], dtype=torch.int64)
    first = next(iter(sums.values()))[0]
    wire = wire_device(first.device)
    count = count.to(wire)
    dist.all_reduce(count)  # integers: exact in any order
    total = int(count.item())
    for name, (hi, lo) in sums.items():
        pair = (hi.to(wire), lo.to(wire))
        if rank > 0:
            acc = (torch.empty_like(pair[0]), torch.empty_like(pair[1]))
            dist.recv(acc[0], rank - 1)
            dist.recv(acc[1], rank - 1)
            combine_pairs(acc, pair)
            pair = acc
        if rank < world - 1:
            dist.send(pair[0], rank + 1)
            dist.send(pair[1], rank + 1)
            H = pair[0]  # overwritten by the broadcast
        else:
            H = pair_value(pair, out=pair[0]).div_(total)
        del pair
        dist.broadcast(H, world - 1)
        out[name] = hi.copy_(H) if H is not hi else hi
    return out


def assign_layers(linears: dict[str, nn.Linear], world_size: int) -> dict[str, int]:
    """``{name: rank}``: each layer to one of ``world_size`` ranks, balanced by cost
    (``in_features * out_features``): the costliest layer first (model order among equals) to the least
    loaded rank (the lowest among equals). The same on every rank."""
    loads = [0] * world_size
    owners: dict[str, int] = {}
    for name, lin in sorted(linears.items(), key=lambda kv: -kv[1].in_features * kv[1].out_features):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        owners[name] = rank
        loads[rank] += lin.in_features * lin.out_features
    return {name: owners[name] for name in linears}


def gather_layers(
    done: dict[str, tuple[nn.Module, dict]], names: Sequence[str]
) -> dict[str, tuple[nn.Module, dict]]:
    """Every rank's quantized ``(module, stats)`` of one group, on every rank, in the order ``names``
    (``all_gather_object``: pickled, so bit for bit; the modules must be on the CPU)."""
    for mod, _ in done.values():
        clear = getattr(mod, "clear_cache", None)
        if callable(clear):
            clear()  # a decoded weight would double what travels
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, done)
    merged: dict[str, tuple[nn.Module, dict]] = {}
    for part in gathered:
        merged.update(part)
    return {name: merged[name] for name in names}


def distributed_record(sequences: int, owners: dict[str, int]) -> dict:
    """``model.icml_quantization["distributed"]``: the world size, the backend, the calibration sequences
    each rank streamed (of ``sequences``; 0 when nothing was calibrated) and the layers each quantized
    (``owners``, from :func:`assign_layers`)."""
    world = dist.get_world_size()
    return {
        "world_size": world,
        "backend": str(dist.get_backend()),
        "sequences_per_rank": [len(range(sequences)[shard(sequences, world, r)]) for r in range(world)],
        "layers_per_rank": [sum(o == r for o in owners.values()) for r in range(world)],
    }
