"""What :func:`~icml_interp.sae.train.train_sae` needs from ``torch.distributed`` to train one SAE on several
processes (``distributed=True``): the global batch's statistics, the global BatchTopK threshold, the first
batches in the order one process would have read them, and errors that every rank raises together (a rank
that raised alone would leave the others waiting in a collective until the launcher tears the job down).

Rank ``r`` holds rows ``[r * b, (r + 1) * b)`` of every global batch of ``B = world * b`` tokens. Every
collective here is entered by all ranks in the same order: each decision that changes the control flow is
taken on values every rank has received from the same collective.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from icml_interp.sae.model import SAE


class Ranks:
    """This process's place in the default process group, with the reductions training uses."""

    def __init__(self, world: int, rank: int):
        self.world, self.rank = world, rank

    @classmethod
    def joined(cls, batch_size: int) -> Ranks:
        """The default process group, checked for ``train_sae(..., distributed=True)`` with the global
        ``batch_size``; ``ValueError`` without a group or when the world size does not divide the batch."""
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "distributed=True trains across the processes of torch.distributed's default process group, "
                "but none is initialized: launch with torchrun and call "
                "torch.distributed.init_process_group() before train_sae (or pass distributed=False)"
            )
        world, rank = dist.get_world_size(), dist.get_rank()
        if batch_size % world:
            raise ValueError(
                f"cfg.batch_size={batch_size} must be divisible by the world size {world}: with "
                "distributed=True batch_size is the global batch, and each process takes "
                "batch_size // world_size tokens per step"
            )
        return cls(world, rank)

    # ------------------------------------------------------------------ collectives
    def sum(self, t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(out)
        return out

    def min_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t)

    def gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """``t`` of every rank (same shape on all), by rank."""
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t.contiguous())
        return out

    def broadcast_float(self, value: float) -> float:
        """Rank 0's ``value`` on every rank (a scalar that the ranks computed from the same data, made
        bit-identical also where their thread counts would round a reduction differently)."""
        t = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(t, src=0)
        return float(t)

    def raise_if_any(self, message: str | None, *, anyone: bool | None = None) -> None:
        """Raise ``ValueError`` on every rank when any rank has a ``message`` (the messages of all ranks,
        with their rank). ``anyone``: whether some rank has one, if already known from a collective."""
        if anyone is None:
            anyone = bool(self.sum(torch.tensor([message is not None], dtype=torch.int64)))
        if not anyone:
            return
        messages: list[str | None] = [None] * self.world
        dist.all_gather_object(messages, message)
        raise ValueError(
            "; ".join(f"rank {r} of {self.world}: {m}" for r, m in enumerate(messages) if m is not None)
        )

    # ------------------------------------------------------------------ the global batch
    def interleave(self, local: torch.Tensor, n_batches: int) -> torch.Tensor:
        """The rows of ``n_batches`` consecutive global batches in one process's order (step 0 rank 0, step 0
        rank 1, ..., step 1 rank 0, ...) from each rank's ``local (n_batches * b, ...)`` rows."""
        stacked = torch.stack(self.gather(local))  # (world, n_batches * b, ...)
        per_step = stacked.reshape(self.world, n_batches, -1, *local.shape[1:])
        return per_step.transpose(0, 1).reshape(-1, *local.shape[1:])

    def spread(
        self, x: torch.Tensor | None, d_in: int, message: str | None = None
    ) -> tuple[int, torch.Tensor, float] | None:
        """``(tokens, sum ||x - mean||^2, sum ||x||^2)`` over the global batch whose rows on this rank are
        ``x (b, d_in)``; None on every rank when some rank has no batch (``x`` None: its source ran out) and no rank a bad one.
        ``message``: this rank's batch is bad (raised on every rank). The spread is combined from each
        rank's own mean and spread (Chan et al.'s parallel variance, in float64), not from ``sum x^2``
        minus ``n mean^2``, which would cancel catastrophically for activations far from the origin."""
        row = torch.zeros(5 + d_in, dtype=torch.float64)
        if x is not None:
            row[0] = 1
            if message is not None:
                row[1] = 1
            elif x.shape[0]:
                row[2] = x.shape[0]
                row[3] = float((x - x.mean(0)).pow(2).sum())
                row[4] = float(torch.linalg.vector_norm(x)) ** 2
                row[5:] = x.sum(0, dtype=torch.float64)
        rows = torch.stack(self.gather(row))  # (world, 5 + d_in)
        # a bad batch raises even where another rank ran out in the same step: its error is not lost
        self.raise_if_any(message, anyone=bool(rows[:, 1].any()))
        if bool((rows[:, 0] == 0).any()):
            return None
        counts, sums = rows[:, 2], rows[:, 5:]
        n = int(counts.sum())
        mean = sums.sum(0) / n
        held = counts > 0
        between = (counts[held, None] * (sums[held] / counts[held, None] - mean).pow(2)).sum()
        spread = rows[:, 3].sum() + between
        return n, spread.to(torch.float32), float(rows[:, 4].sum())


def batchtopk_train(sae: SAE, x: torch.Tensor, ranks: Ranks) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`SAE.encode_train` of a BatchTopK SAE over the global batch: ``(f, pre)`` for this rank's rows
    ``x (b, d_in)``, keeping the ``k * B`` largest ReLU activations of the whole global batch of ``B`` tokens.

    Each rank's ``min(k * B, b * d_sae)`` largest values hold every value of the global top ``k * B`` that is
    on that rank; gathering them gives the global ``(k * B)``-th largest value ``t``, and a rank keeps its
    activations ``>= t``: the same set as one process's ``topk`` (up to ties at ``t``, which ``topk`` breaks
    arbitrarily). With fewer than ``k * B`` positive activations ``t = 0`` and every positive one is kept,
    as ``topk`` then keeps them all. The threshold estimate gets the smallest kept positive activation (``t``
    itself, or the global minimum positive one when ``t = 0``), so it stays identical on every rank."""
    pre = sae.pre_acts(x)  # (b, d_sae)
    relu = pre.relu()
    n_total = x.shape[0] * ranks.world
    n_keep = min(sae.cfg.k * n_total, n_total * sae.d_sae)
    candidates = relu.detach().flatten().topk(min(n_keep, relu.numel()), sorted=False).values
    pool = torch.cat(ranks.gather(candidates))  # (world * candidates,)
    t = pool.kthvalue(pool.numel() - n_keep + 1).values  # the n_keep-th largest of the global batch
    cut = bool(t > 0)  # else fewer than k * B activations are positive: topk keeps them all
    f = relu.masked_fill(relu < t, 0.0) if cut else relu
    with torch.no_grad():
        if cut:
            smallest = t
        else:
            positive = relu[relu > 0]
            local = positive.min() if positive.numel() else relu.new_tensor(float("inf"))
            smallest = local.clone()
            dist.all_reduce(smallest, op=dist.ReduceOp.MIN)
        if bool(torch.isfinite(smallest)):
            sae._track_threshold(smallest)
    return f, pre
