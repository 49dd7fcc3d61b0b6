"""Worker for test_sae_distributed.py: train SAEs with ``train_sae(..., distributed=True)`` under torchrun.

    python -m torch.distributed.run --standalone --nproc-per-node N distributed_sae.py OUT

Each rank gets its row shard of every global batch of a planted-sparse-dictionary data set (rank r: rows
``[r * b, (r + 1) * b)`` of each batch of ``B = N * b`` tokens), trains the four architectures and saves
``{arch: (parameters, log)}``, ``"nan_error"`` (the error of a run where one rank's batch holds a NaN) and
``"empty_error"`` (the error of a run where one rank's shard is empty) to ``OUT.rank<r>``; rank 0 then trains
the same configs in one process (``distributed=False``) on the whole data and saves them to ``OUT.single``. With ``SAE_DIE_AT_BATCH=i``
rank 1 exits with status 3 when its source hands out its i-th batch (a worker that dies mid-training).
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist

from icml_interp.sae import ActivationSource, SAEConfig, train_sae

ARCHS = ("topk", "batchtopk", "relu", "jumprelu")
BATCH, STEPS, DATA_BATCHES = 512, 40, 32  # 40 steps > the 32 initialization batches; the data cycles


def planted_tokens(n: int, d: int = 32, m: int = 96, active: int = 3) -> torch.Tensor:
    """Sums of ``active`` of ``m`` random unit directions with magnitudes in [1, 4], plus an offset."""
    gen = torch.Generator().manual_seed(0)
    dictionary = torch.randn(m, d, generator=gen)
    dictionary /= dictionary.norm(dim=1, keepdim=True)
    idx = torch.rand(n, m, generator=gen).argsort(1)[:, :active]
    codes = torch.zeros(n, m).scatter_(1, idx, torch.rand(n, active, generator=gen) * 3 + 1)
    return codes @ dictionary + 0.3


def config(arch: str) -> SAEConfig:
    return SAEConfig(
        d_in=32,
        d_sae=512,
        architecture=arch,
        k=4,
        batch_size=BATCH,
        total_tokens=BATCH * STEPS,
        lr=3e-3,
        dead_steps=2,  # latents die and AuxK switches on within the run
        seed=1,
    )


def shard(tokens: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rows ``[rank * b, (rank + 1) * b)`` of every batch of ``BATCH`` consecutive tokens."""
    b = BATCH // world
    return tokens.reshape(-1, world, b, tokens.shape[1])[:, rank].reshape(-1, tokens.shape[1])


class DyingSource(ActivationSource):
    """A source whose process exits (status 3, no cleanup) when it hands out its ``die_at``-th batch."""

    die_at = -1

    def batches(self, batch_size, **kwargs):
        for i, batch in enumerate(super().batches(batch_size, **kwargs)):
            if i == self.die_at:
                os._exit(3)
            yield batch


def source(tokens: torch.Tensor) -> ActivationSource:
    # unshuffled: batch s is tokens[s * batch_size : (s + 1) * batch_size] (cycling through the data)
    return DyingSource.from_activations(tokens, shuffle=False, buffer_tokens=1024)


def result(sae, log) -> tuple[dict, dict]:
    logged = {k: v for k, v in log.as_dict().items() if k not in ("seconds", "tokens_per_second")}
    return {k: v.detach().clone() for k, v in sae.state_dict().items()}, logged


def main(out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))  # a stuck collective fails
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens = planted_tokens(BATCH * DATA_BATCHES)
    src = source(shard(tokens, rank, world))
    if rank == 1 and "SAE_DIE_AT_BATCH" in os.environ:
        src.die_at = int(os.environ["SAE_DIE_AT_BATCH"])
    results: dict = {}
    for arch in ARCHS:
        sae, log = train_sae(src, config(arch), progress=False, distributed=True)
        results[arch] = result(sae, log)
    # rank 1's batch for step 35 (after the 32 initialization batches) holds a NaN: every rank must raise
    local = shard(tokens, rank, world)
    bad = torch.cat([local, local])
    if rank == 1:
        bad[35 * (BATCH // world), 0] = float("nan")
    try:
        train_sae(source(bad), config("topk"), progress=False, distributed=True)
        results["nan_error"] = None
    except ValueError as err:
        results["nan_error"] = str(err)
    # rank 1's shard is empty: every rank must raise (before, rank 1 raised alone and rank 0 waited in the
    # next collective)
    try:
        empty = local[:0] if rank == 1 else local
        train_sae(empty, config("topk"), progress=False, distributed=True)
        results["empty_error"] = None
    except ValueError as err:
        results["empty_error"] = str(err)
    torch.save(results, f"{out}.rank{rank}")
    dist.barrier()  # every rank has saved: the group is torn down together
    dist.destroy_process_group()
    if rank != 0:
        # skip the interpreter's teardown: gloo's threads, destroyed there, now and then abort the process
        # ("terminate called without an active exception", about 1 run in 20-60 on 2 cores) after its work
        # is done and saved
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if rank == 0:
        single = {}
        for arch in ARCHS:
            single[arch] = result(*train_sae(source(tokens), config(arch), progress=False))
        torch.save(single, f"{out}.single")


if __name__ == "__main__":
    main(sys.argv[1])
