"""``train_sae(source, cfg)``: Adam on the reconstruction loss plus the architecture's sparsity term.

Per step (a batch of ``cfg.batch_size`` tokens, in normalized units when ``normalize_activations`` is on):

- reconstruction: ``FVU = sum ||x - x_hat||^2 / sum ||x - mean_batch(x)||^2``, which does not depend on the
  activation scale (sparsify's choice; SAELens sums squared errors instead);
- relu: ``+ l1_coefficient * mean_tokens(sum_j |f_j|) / sqrt(mean_tokens ||x - mean||^2)`` and jumprelu:
  ``+ l0_coefficient * mean_tokens(L0)`` (with the straight-through threshold gradient). Dividing the L1
  term by the activation spread so that it is scale-free like FVU is our own choice;
- topk / batchtopk: ``+ aux_coefficient * min(n_dead / aux_k, 1) * AuxK`` where AuxK is the FVU of
  reconstructing the (detached) residual ``x - x_hat`` from the ``aux_k`` largest pre-activations of the dead
  latents, as a fraction of the batch's input variance (Gao et al. 2024; normalized as in sparsify);
- decoder: the gradient component parallel to each unit-norm decoder row is removed before the Adam step and
  the rows are renormalized after it; TopK and BatchTopK decode through ``embedding_bag`` (a sparse decode:
  ``k`` rows per token instead of a dense ``(batch, d_sae) @ (d_sae, d_in)`` product).

Initialization (first batches): the input scale ``s = sqrt(d_in) / mean ||x||`` and ``b_dec`` = geometric median
(Weiszfeld), mean or zeros; ``W_enc = W_dec^T`` with random unit decoder rows, ``b_enc = 0``.

Checked (the FVU divides by the batch's variance, so a batch of identical tokens would make it 0 / 0 or a
ratio of rounding errors, and every parameter NaN or garbage after one step): activations with NaN or inf
raise ``ValueError`` (the first batches before training, every later batch when it arrives); first batches
whose tokens are all the same vector (relative variance below ``MIN_RELATIVE_VARIANCE``: constant
activations) raise ``ValueError``; a later batch of identical tokens is skipped (no step, a warning at the
end), and a source that yields only such batches raises; a non-finite loss (training diverged) raises
``ValueError`` naming ``cfg.lr``.

``distributed=True`` (under ``torchrun``): one SAE across the processes of the default process group, wrapped
in ``DistributedDataParallel``; each process reads its own shard and takes ``batch_size // world_size``
tokens per step, and every batch-wide quantity above (the FVU's spread, the penalties' means, AuxK's dead
latents, BatchTopK's top ``k * batch_size``, the initialization) is reduced over the global batch, so that
the result equals one process's training on the same global batches up to float rounding
(:mod:`icml_interp.sae._distributed`; ``docs/sae-distributed.md``).

Checkpoints (``checkpoint=path, checkpoint_every=n``): every ``n`` steps the whole training state -- the SAE in
training units, Adam's moments, the learning-rate schedule's position, the step, the dead-latent counters, the
log so far, the input scale and how many batches were read -- is written to one file (a temporary file
beside it, then ``os.replace``: a failed save leaves the earlier checkpoint whole). ``resume_from=path``
continues from it: the source is read again from its start and the batches the checkpoint consumed are
skipped (not trained on), and the last of them must match the checkpoint's SHA-256 fingerprint (a different
source, seed or buffer raises ``ValueError``). Training draws no random numbers beyond the SAE's seeded
initialization and the source's seeded shuffle, so the resumed run equals the uninterrupted one bit for bit.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from icml_interp.sae._distributed import Ranks, batchtopk_train
from icml_interp.sae.config import SAEConfig
from icml_interp.sae.model import SAE
from icml_interp.sae.source import ActivationSource
from icml_interp.validation import check_bool, check_int, check_number, check_tensor, check_type

INIT_TOKENS = 16384  # tokens used to estimate the input scale and the decoder bias
# A batch whose variance sum ||x - mean||^2 is at most this fraction of sum ||x||^2 holds (up to float32
# rounding, relative spread ~ 4e-6) one vector repeated: its FVU is 0 / 0 or a ratio of rounding errors.
MIN_RELATIVE_VARIANCE = (32 * torch.finfo(torch.float32).eps) ** 2


@dataclass
class TrainLog:
    """Per-step training record (lists indexed by step) and run totals.

    ``died`` and ``revived`` follow every latent over the whole run (whatever ``log_every``): ``died`` the
    latents that were dead at some step by the ``cfg.dead_steps`` rule (no firing in the last ``dead_steps``
    steps), ``revived`` those of them that fired again at a later step (sorted latent indices)."""

    step: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    fvu: list[float] = field(default_factory=list)
    l0: list[float] = field(default_factory=list)
    dead_fraction: list[float] = field(default_factory=list)
    aux_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    died: list[int] = field(default_factory=list)
    revived: list[int] = field(default_factory=list)
    scaling_factor: float = 1.0
    seconds: float = 0.0
    tokens_per_second: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    CURVES = ("loss", "fvu", "l0", "dead_fraction")

    def plot(self, path=None, *, title: str = "SAE training"):
        """The training curves (loss, FVU, L0, dead-latent fraction against the step; loss and FVU on a log
        scale where positive) as one matplotlib figure, saved as PNG if ``path``; returns the figure.
        Needs matplotlib (``pip install 'icml-interp[plot]'``)."""
        if not self.step:
            raise ValueError("TrainLog.plot: the log has no steps (train with log_every >= 1)")
        if not isinstance(title, str):
            raise TypeError(f"title must be a str, got {type(title).__name__}")
        try:
            from matplotlib.figure import (
                Figure,
            )  # not pyplot: the caller's backend and figures are left alone
        except ImportError:
            raise ImportError("TrainLog.plot needs matplotlib: pip install 'icml-interp[plot]'") from None
        fig = Figure(figsize=(9, 6))
        axes = fig.subplots(2, 2, sharex=True)
        for ax, name in zip(axes.flat, self.CURVES, strict=True):
            values = getattr(self, name)
            ax.plot(self.step[: len(values)], values, lw=1)
            ax.set_title(name)
            if name in ("loss", "fvu") and values and min(values) > 0:
                ax.set_yscale("log")
        for ax in axes[1]:
            ax.set_xlabel("step")
        fig.suptitle(title)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
        return fig


def geometric_median(x: torch.Tensor, *, max_iter: int = 100, tol: float = 1e-6) -> torch.Tensor:
    """The point minimizing the sum of Euclidean distances to the rows of ``x (n, d)`` (Weiszfeld's algorithm,
    started at the mean, in float64). Checked: ``x`` is a non-empty 2-d tensor of finite values."""
    check_tensor(x, "x", "(n, d)", ndim=2)
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64)):
        raise TypeError(f"x must be a real tensor, got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x must hold finite values, got NaN or inf")
    check_int(max_iter, "max_iter", minimum=1)
    tol = check_number(tol, "tol", minimum=0)
    pts = x.double()
    # work in units of the largest |x| so that squares and sums cannot overflow (the median is scale-equivariant)
    unit = float(pts.abs().max()) or 1.0
    pts = pts / unit
    y = pts.mean(0)
    scale = float(pts.std(0, correction=0).norm()) or 1.0
    for _ in range(max_iter):
        weights = 1.0 / (pts - y).norm(dim=1).clamp_min(1e-12 * scale)
        y_new = (weights[:, None] * pts).sum(0) / weights.sum()
        done = float((y_new - y).norm()) <= tol * scale
        y = y_new
        if done:
            break
    y = y * unit
    return y.to(x.dtype) if x.is_floating_point() else y


def _lr_factor(step: int, cfg: SAEConfig) -> float:
    steps = cfg.steps
    warm = min(1.0, (step + 1) / cfg.lr_warmup_steps) if cfg.lr_warmup_steps else 1.0
    decay_start = int(steps * (1 - cfg.lr_decay_fraction))
    decay = (steps - step) / (steps - decay_start) if step >= decay_start and steps > decay_start else 1.0
    return warm * decay


def _as_source(source, cfg: SAEConfig) -> ActivationSource:
    if isinstance(source, ActivationSource):
        return source
    if isinstance(source, torch.Tensor):
        check_tensor(source, "source", "(n, d_in), (B, T, D) or (B, C, H, W) activations", ndim=(2, 3, 4))
        if not source.is_floating_point():
            raise TypeError(f"source must hold floating-point activations, got {source.dtype}")
        return ActivationSource.from_activations(source, seed=cfg.seed)
    raise TypeError(
        f"source must be an ActivationSource or a tensor of activations, got {type(source).__name__}"
    )


def _decode_train(sae: SAE, cfg: SAEConfig, x: torch.Tensor, ranks: Ranks | None = None):
    """``(x_hat, pre, fired (d_sae,) bool, n_active, f_for_penalty)`` for this process's tokens ``x``, with
    autograd; ``n_active``: the number of nonzero latent activations (a float). With ``ranks``, BatchTopK
    keeps the ``k * B`` largest activations of the global batch."""
    if cfg.architecture == "topk":
        pre = sae.pre_acts(x)  # (B, d_sae)
        values, indices = pre.topk(cfg.k, dim=-1, sorted=False)  # (B, k)
        values = values.relu()
        x_hat = F.embedding_bag(indices, sae.W_dec, per_sample_weights=values, mode="sum") + sae.b_dec
        fired = torch.zeros(cfg.d_sae, dtype=torch.bool)
        fired[indices[values > 0]] = True
        return x_hat, pre, fired, float((values > 0).sum()), values
    if cfg.architecture == "batchtopk" and ranks is not None:
        f, pre = batchtopk_train(sae, x, ranks)
    else:
        f, pre = sae.encode_train(x)
    if cfg.architecture == "batchtopk":
        rows, cols = f.nonzero(as_tuple=True)
        offsets = torch.searchsorted(rows, torch.arange(x.shape[0], device=rows.device))
        x_hat = (
            F.embedding_bag(cols, sae.W_dec, offsets, per_sample_weights=f[rows, cols], mode="sum")
            + sae.b_dec
        )
    else:
        x_hat = f @ sae.W_dec + sae.b_dec
    active = f > 0
    return x_hat, pre, active.any(0), float(active.sum()), f


def _aux_loss(
    sae: SAE, cfg: SAEConfig, pre, residual, dead: torch.Tensor, spread
) -> tuple[torch.Tensor, int]:
    """AuxK: the dead latents' reconstruction of the residual, normalized by the batch's input spread."""
    n_dead = int(dead.sum())
    aux_k = cfg.effective_aux_k
    if aux_k == 0 or n_dead == 0:
        return pre.new_zeros(()), n_dead
    k = min(aux_k, n_dead)
    masked = pre.masked_fill(~dead, float("-inf"))
    values, indices = masked.topk(k, dim=-1, sorted=False)
    values = values.relu()
    e_hat = F.embedding_bag(indices, sae.W_dec, per_sample_weights=values, mode="sum")
    return min(n_dead / aux_k, 1.0) * (e_hat - residual).pow(2).sum() / spread, n_dead


def _relative_variance(x: torch.Tensor) -> float:
    """``sum ||x - mean(x)||^2 / sum ||x||^2`` over the rows of ``x (n, d)``: 0 when every row is the same
    vector, 1 for rows centred at the origin (computed without an ``(n, d)`` temporary)."""
    total = float(torch.linalg.vector_norm(x)) ** 2
    if total == 0:
        return 0.0
    return float(x.var(dim=0, correction=0).sum()) * x.shape[0] / total


class _TrainStep(nn.Module):
    """One step's loss on this process's tokens ``x`` (the loss whose gradient, averaged over the processes
    by DistributedDataParallel, is the gradient of the global batch's loss). A module of its own because DDP
    averages the gradients of what the wrapped module's forward computes, and the SAE's forward is
    inference. ``spread`` and ``n_tokens`` are the global batch's (this batch's on one process);
    ``since_fired`` is updated in place. Returns ``(loss, logged, dead)``: the loss to back-propagate, the
    global batch's ``loss``, ``fvu``, ``l0`` and ``aux`` as floats, and the dead-latent mask."""

    def __init__(self, sae: SAE, cfg: SAEConfig, ranks: Ranks | None):
        super().__init__()
        self.sae, self.cfg, self.ranks = sae, cfg, ranks

    def forward(self, x, spread, n_tokens: int, since_fired: torch.Tensor):
        sae, cfg, ranks = self.sae, self.cfg, self.ranks
        world = 1 if ranks is None else ranks.world
        # this process's share of a mean over the global batch, times world (DDP averages the gradients):
        # exactly 1.0 on one process
        weight = world * x.shape[0] / n_tokens
        x_hat, pre, fired, n_active, f = _decode_train(sae, cfg, x, ranks)
        error = (x_hat - x).pow(2).sum()
        # FVU; on several processes world * (this rank's error) / (the global batch's spread)
        loss = error / (spread / world)
        error_total = error.detach()
        if ranks is not None:  # latents fired anywhere, active count and error of the global batch
            counts = torch.tensor([n_active, float(error_total)], dtype=torch.float64)
            totals = ranks.sum(torch.cat([fired.double(), counts]))
            fired, n_active, error_total = totals[:-2] > 0, float(totals[-2]), totals[-1].to(error.dtype)
        since_fired += 1
        since_fired[fired] = 0
        dead = since_fired >= cfg.dead_steps
        aux = torch.zeros(())
        if cfg.architecture in ("topk", "batchtopk"):
            aux, _ = _aux_loss(sae, cfg, pre, (x - x_hat).detach(), dead, spread.detach())
            loss = loss + (cfg.aux_coefficient * world) * aux
        elif cfg.architecture == "relu":
            loss = loss + cfg.l1_coefficient * weight * f.abs().sum(-1).mean() / (spread / n_tokens).sqrt()
        else:  # jumprelu
            loss = loss + cfg.l0_coefficient * weight * sae.l0_surrogate(pre)
        if ranks is None:
            logged = {"loss": float(loss.detach()), "aux": float(aux.detach())}
        else:
            sums = ranks.sum(torch.tensor([float(loss.detach()), float(aux.detach())], dtype=torch.float64))
            logged = {"loss": float(sums[0]) / world, "aux": float(sums[1])}
        logged["fvu"] = float(error_total / spread)
        logged["l0"] = n_active / n_tokens
        return loss, logged, dead


def _first_batches_problem(first: list[torch.Tensor], cfg: SAEConfig, batch_text: str) -> str | None:
    """What makes the first batches unusable for initialization (None if nothing)."""
    if not first:
        return (
            f"source yielded fewer than {batch_text} tokens: nothing to train on "
            "(an empty source, or lower batch_size)"
        )
    if first[0].shape[1] != cfg.d_in:
        return (
            f"the source's activations have width {first[0].shape[1]}, but cfg.d_in = {cfg.d_in} "
            "(activation width mismatch)"
        )
    if not all(bool(torch.isfinite(b).all()) for b in first):
        return (
            f"source's activations contain NaN or inf (in the first {sum(b.shape[0] for b in first)} tokens): "
            "an SAE trained on them would have NaN parameters; drop or repair those tokens"
        )
    return None


CHECKPOINT_FORMAT = "icml_interp.train_sae checkpoint 1"


def _fingerprint(batch: torch.Tensor) -> str:
    """SHA-256 of a batch's float32 values (which batch of the source a checkpoint stopped after)."""
    return hashlib.sha256(batch.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()


def _checkpoint_path(path, name: str) -> Path | None:
    if path is None:
        return None
    check_type(path, name, (str, os.PathLike), "a str or path of a checkpoint file (or None)")
    if not str(path).strip() or Path(path).is_dir():
        raise ValueError(f"{name} must name a checkpoint file, got {str(path)!r}")
    return Path(path)


def _save_checkpoint(path: Path, state: dict) -> None:
    """``torch.save(state)`` to a temporary file beside ``path``, flushed, then renamed onto ``path``: a save
    that fails (full disk, interruption) leaves an earlier checkpoint at ``path`` as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load_checkpoint(path: Path, cfg: SAEConfig) -> dict:
    """The state :func:`train_sae` saved at ``path``, checked against ``cfg``."""
    if not path.is_file():
        raise ValueError(f"resume_from={str(path)!r} is not a file (a checkpoint written by train_sae)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip and torch errors alike: not a checkpoint
        raise ValueError(f"resume_from={str(path)!r} is not a readable train_sae checkpoint: {err}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"resume_from={str(path)!r} is not a train_sae checkpoint ({CHECKPOINT_FORMAT!r})")
    if state["cfg"] != cfg.to_dict():
        diff = sorted(k for k in state["cfg"] if state["cfg"][k] != cfg.to_dict().get(k))
        raise ValueError(
            f"resume_from={str(path)!r} was saved by a run with another cfg (fields {diff} differ): resume "
            "with the checkpoint's config"
        )
    return state


def train_sae(
    source,
    cfg: SAEConfig,
    *,
    progress: bool = True,
    log_every: int = 1,
    distributed: bool = False,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    resume_from: str | os.PathLike | None = None,
) -> tuple[SAE, TrainLog]:
    """Train an :class:`SAE` on ``source`` (an :class:`ActivationSource` or a tensor of activations).

    Runs ``cfg.steps`` steps of ``cfg.batch_size`` tokens (re-reading a re-iterable source as often as needed;
    a one-shot source ends training early, with a warning). Returns the SAE, in eval mode and in the caller's
    units (see :mod:`icml_interp.sae.model`), and a :class:`TrainLog`.

    ``distributed=True`` trains one SAE across the processes of ``torch.distributed``'s default process group
    (launched by ``torchrun``, ``init_process_group`` called first), wrapped in
    ``DistributedDataParallel``: each process reads its own ``source`` (its shard of the activations) and
    takes ``cfg.batch_size // world_size`` tokens per step, so that ``cfg.batch_size`` is the global batch.
    Every batch-wide quantity (the FVU's variance, the sparsity penalties' means, AuxK's normalization and
    dead latents, BatchTopK's top ``k * batch_size``, the initialization from the first batches) is
    reduced over the global batch, so training equals one process's on the concatenated batches (rank 0's
    rows first) up to float rounding; every process returns the same SAE and log. See
    ``docs/sae-distributed.md``.

    Checked: ``cfg`` is valid (re-checked, in case it was edited after construction); ``source``'s
    activations are finite (``ValueError`` otherwise) and the first batches do not all repeat one vector
    (constant activations: ``ValueError``, the FVU loss is undefined); a later batch of identical tokens is
    skipped with a warning; a non-finite loss raises ``ValueError`` (lower ``cfg.lr``). Finite activations
    therefore never give NaN parameters silently. ``distributed=True`` without an initialized process group,
    or with a ``batch_size`` the world size does not divide, raises ``ValueError``; with it, a bad batch on
    any process raises on every process.

    ``checkpoint`` and ``checkpoint_every``: write the training state to the file ``checkpoint`` after every
    ``checkpoint_every`` steps (atomically: a failed save keeps the earlier file). ``resume_from``: continue
    the run a checkpoint file recorded, with the same ``cfg`` (checked) and the same ``source`` (re-read from
    its start, the consumed batches skipped; checked on the last of them): the result equals the
    uninterrupted run's bit for bit. Both need one process (``distributed=False``).
    """
    check_type(cfg, "cfg", SAEConfig, "an SAEConfig")
    SAEConfig.from_dict(cfg.to_dict())  # __post_init__'s checks, also for a config edited after construction
    check_int(log_every, "log_every", minimum=1)
    check_bool(progress, "progress")
    check_bool(distributed, "distributed")
    ckpt_path = _checkpoint_path(checkpoint, "checkpoint")
    resume_path = _checkpoint_path(resume_from, "resume_from")
    check_int(checkpoint_every, "checkpoint_every", minimum=0)
    if (ckpt_path is None) != (checkpoint_every == 0):
        raise ValueError(
            "checkpoint and checkpoint_every go together: pass a file path and a number of steps >= 1, got "
            f"checkpoint={checkpoint!r}, checkpoint_every={checkpoint_every}"
        )
    if distributed and (ckpt_path is not None or resume_path is not None):
        raise ValueError("checkpoint and resume_from need distributed=False (one process)")
    resumed = None if resume_path is None else _load_checkpoint(resume_path, cfg)
    ranks = Ranks.joined(cfg.batch_size) if distributed else None
    world = 1 if ranks is None else ranks.world
    # ---- initialization from the first batches (also used for training)
    first: list[torch.Tensor] = []
    read_error = None
    try:
        src = _as_source(source, cfg)
        batches = src.batches(cfg.batch_size // world, cycle=True)
        while sum(b.shape[0] for b in first) * world < min(INIT_TOKENS, cfg.total_tokens):
            first.append(next(batches))
    except StopIteration:
        pass
    except ValueError as err:
        if ranks is None:
            raise
        # this rank's source is unusable (an empty shard, every token dropped): raised on every rank below,
        # where raising here alone would leave the other ranks waiting in the next collective
        read_error = str(err)
    if ranks is None:
        problem = _first_batches_problem(first, cfg, f"batch_size={cfg.batch_size}")
        if problem is not None:
            raise ValueError(problem)
    else:
        batch_text = f"batch_size // world_size = {cfg.batch_size // world}"
        ranks.raise_if_any(read_error or _first_batches_problem(first, cfg, batch_text))
        first = first[: ranks.min_int(len(first))]  # the first batches every rank has
    init = torch.cat(first)
    if ranks is None:
        relative_variance = _relative_variance(init)
    else:
        stats = ranks.spread(init, cfg.d_in)
        assert stats is not None  # every rank has its first batches
        relative_variance = float(stats[1]) / stats[2] if stats[2] > 0 else 0.0
    if relative_variance <= MIN_RELATIVE_VARIANCE:
        raise ValueError(
            f"source's activations have zero variance: the first {init.shape[0] * world} tokens are all the "
            "same vector (up to float32 rounding), so there is nothing for an SAE to learn and its FVU loss "
            "(error / variance) is undefined; check the hook point and the inputs (constant activations?), or "
            "shuffle the source if only its beginning is constant"
        )
    sae = SAE(cfg)
    scale = 1.0
    if cfg.normalize_activations == "expected_average_only_in":
        norms = init.norm(dim=1) if ranks is None else ranks.interleave(init.norm(dim=1), len(first))
        mean_norm = float(norms.mean())
        if not math.isfinite(mean_norm) or mean_norm == 0:
            raise ValueError(
                f"cannot normalize source's activations: their mean norm is {mean_norm} "
                "(normalize_activations='expected_average_only_in' divides by it); rescale them first"
            )
        scale = math.sqrt(cfg.d_in) / mean_norm
        if ranks is not None:
            scale = ranks.broadcast_float(scale)
    with torch.no_grad():
        if cfg.b_dec_init != "zeros":
            if ranks is None:
                head = init[:4096]
            else:  # the first 4096 tokens of the global batches, in one process's order
                n_head = min(len(first), -(-4096 // cfg.batch_size))
                head = ranks.interleave(torch.cat(first[:n_head]), n_head)[:4096]
            sample = head * scale
            if cfg.b_dec_init == "geometric_median":
                sae.b_dec.copy_(geometric_median(sample))
            else:
                sae.b_dec.copy_(sample.mean(0))
    sae.train()
    step_loss = _TrainStep(sae, cfg, ranks)
    # DDP broadcasts rank 0's parameters (equal on every rank already: same seed, same data) and averages
    # the gradients; it also broadcasts the BatchTopK threshold buffer before each forward (batchtopk_train
    # keeps it equal on every rank anyway)
    model = step_loss if ranks is None else DistributedDataParallel(step_loss)

    opt = torch.optim.Adam(sae.parameters(), lr=cfg.effective_lr, betas=(0.9, 0.999))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg))
    since_fired = torch.zeros(cfg.d_sae, dtype=torch.long)
    died = torch.zeros(cfg.d_sae, dtype=torch.bool)  # dead at some step (the dead_steps rule)
    revived = torch.zeros(cfg.d_sae, dtype=torch.bool)  # fired again after being dead
    log = TrainLog(scaling_factor=scale)
    steps = cfg.steps
    step = skipped = consumed = replay = 0  # consumed: batches read from the source (replay: to skip)
    prior_seconds, expected_fingerprint = 0.0, ""
    if resumed is not None:
        sae.load_state_dict(resumed["sae"])
        opt.load_state_dict(resumed["optimizer"])
        sched.load_state_dict(resumed["scheduler"])
        since_fired, died, revived = resumed["since_fired"], resumed["died"], resumed["revived"]
        log = TrainLog(**resumed["log"])
        scale, prior_seconds = resumed["scale"], log.seconds
        step, skipped, replay = resumed["step"], resumed["skipped"], resumed["consumed"]
        expected_fingerprint = resumed["fingerprint"]

    def stream():
        yield from first
        if ranks is None:
            yield from batches
            return
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except ValueError as err:  # raised on every rank in the next collective
                yield f"source raised ValueError: {err}"
                return
            yield batch
        yield None  # this rank's source ran out: the others must learn it in the next collective

    shown = progress and (ranks is None or ranks.rank == 0)
    bar = tqdm(
        total=steps, initial=step, disable=not shown, desc=f"train {cfg.architecture} SAE", unit="step"
    )
    start = time.perf_counter()
    for batch in stream():
        if step >= steps:
            break
        consumed += 1
        if consumed <= replay:  # resuming: this batch was trained on (or skipped) before the checkpoint
            if consumed == replay:
                if _fingerprint(batch) != expected_fingerprint:
                    raise ValueError(
                        f"source is not the one resume_from={str(resume_path)!r} was trained on: its batch "
                        f"{consumed} differs from the checkpoint's (pass the same activations or inputs, "
                        "seed, buffer_tokens and shuffle)"
                    )
                start = time.perf_counter()  # the log's seconds count training, not the replay
            continue
        bad_batch = None
        if isinstance(batch, str):  # distributed: this rank's source failed
            bad_batch, batch = batch, torch.zeros(0, cfg.d_in)
        elif batch is not None and not bool(torch.isfinite(batch).all()):
            bad_batch = (
                f"source's activations contain NaN or inf (in the batch for step {step}): an SAE trained on "
                "them would have NaN parameters; drop or repair those tokens"
            )
        if ranks is None:
            if bad_batch is not None:
                raise ValueError(bad_batch)
            x = batch * scale
            spread = (x - x.mean(0)).pow(2).sum()
            n_tokens = x.shape[0]
            identical = float(spread) <= MIN_RELATIVE_VARIANCE * float(torch.linalg.vector_norm(x)) ** 2
        else:
            x = None if batch is None else batch * scale
            stats = ranks.spread(x, cfg.d_in, bad_batch)
            if stats is None:  # some rank's source ran out: every rank stops here
                break
            n_tokens, spread, sq_norm = stats
            identical = float(spread) <= MIN_RELATIVE_VARIANCE * sq_norm
        if identical:
            # every token of the batch is the same vector: the FVU would be 0 / 0 or a ratio of rounding errors
            skipped += 1
            if skipped >= steps:
                raise ValueError(
                    f"source yielded {skipped} batches whose batch_size={cfg.batch_size} tokens are all the "
                    "same vector (zero variance, FVU undefined); shuffle the source or raise batch_size"
                )
            continue
        dead_before = since_fired >= cfg.dead_steps
        loss, logged, dead = model(x, spread, n_tokens, since_fired)
        revived |= dead_before & (since_fired == 0)  # since_fired is 0 where a latent fired in this step
        died |= dead
        if not math.isfinite(logged["loss"]):
            raise ValueError(
                f"training diverged at step {step}: the loss is {logged['loss']} on finite activations; "
                f"lower cfg.lr (the learning rate was {opt.param_groups[0]['lr']:g})"
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sae.remove_parallel_gradient()
        opt.step()
        sched.step()
        sae.normalize_decoder()
        if cfg.architecture == "jumprelu":
            with torch.no_grad():
                sae.threshold.clamp_(min=1e-6)
        if step % log_every == 0 or step == steps - 1:
            log.step.append(step)
            log.tokens.append((step + 1) * cfg.batch_size)
            log.loss.append(logged["loss"])
            log.fvu.append(logged["fvu"])
            log.l0.append(logged["l0"])
            log.dead_fraction.append(float(dead.double().mean()))
            log.aux_loss.append(logged["aux"])
            log.lr.append(opt.param_groups[0]["lr"])
        if shown and step % 10 == 0:
            bar.set_postfix(
                fvu=f"{logged['fvu']:.3f}",
                l0=f"{logged['l0']:.1f}",
                dead=f"{float(dead.double().mean()):.3f}",
            )
        bar.update(1)
        step += 1
        if ckpt_path is not None and step % checkpoint_every == 0:
            log.seconds = prior_seconds + time.perf_counter() - start
            _save_checkpoint(
                ckpt_path,
                {
                    "format": CHECKPOINT_FORMAT,
                    "cfg": cfg.to_dict(),
                    "sae": sae.state_dict(),
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                    "step": step,
                    "skipped": skipped,
                    "consumed": consumed,
                    "fingerprint": _fingerprint(batch),
                    "since_fired": since_fired,
                    "died": died,
                    "revived": revived,
                    "scale": scale,
                    "log": log.as_dict(),
                },
            )
    bar.close()
    if consumed < replay and step < steps:
        raise ValueError(
            f"source ran out after {consumed} batches, before the {replay} that resume_from="
            f"{str(resume_path)!r} was trained on: pass the same source (a re-iterable one, read from its start)"
        )
    log.seconds = prior_seconds + time.perf_counter() - start
    log.died, log.revived = died.nonzero().flatten().tolist(), revived.nonzero().flatten().tolist()
    log.tokens_per_second = step * cfg.batch_size / log.seconds if log.seconds > 0 else float("nan")
    if skipped:
        warnings.warn(
            f"skipped {skipped} batches of source whose {cfg.batch_size} tokens were all the same vector "
            "(zero variance: the FVU loss is undefined on them); shuffle the source or raise batch_size",
            RuntimeWarning,
            stacklevel=2,
        )
    if step == 0:
        raise ValueError(
            "source yielded no batch with any variance between its tokens: nothing was trained "
            f"({skipped} batches of identical tokens skipped)"
        )
    if step < steps:
        warnings.warn(
            f"the source ran out after {step} of {steps} steps ({step * cfg.batch_size} tokens)",
            RuntimeWarning,
            stacklevel=2,
        )
    bad = [name for name, p in sae.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:  # a backstop: the checks above should make this unreachable from finite activations
        raise ValueError(
            f"training produced non-finite parameters {bad} from finite activations; lower cfg.lr "
            f"(was {cfg.effective_lr:g})"
        )
    sae.fold_input_scale(float(scale))
    sae.info.update(
        {
            "scaling_factor": scale,
            "steps": step,
            "tokens_seen": step * cfg.batch_size,
            "final_fvu": log.fvu[-1],
        }
    )
    # where it was trained, in SAELens' metadata (saved to cfg.json): HookedSAETransformer.add_sae attaches
    # an SAE at its hook_name and silently skips one without
    for key, value in (("hook_name", src.hook_name), ("model_name", src.model_name)):
        if value is not None:
            sae.info.setdefault(key, value)
    return sae.eval(), log


def auxk_ablation(source, cfg: SAEConfig, eval_activations: torch.Tensor, *, progress: bool = True) -> dict:
    """Train the same TopK/BatchTopK SAE (same seed, data order and steps) with ``cfg``'s AuxK and with AuxK
    off, and report both dead-latent fractions on ``eval_activations``: ``{"auxk": metrics, "no_auxk":
    metrics}`` with the keys of :func:`~icml_interp.sae.metrics.evaluate_sae` plus ``train_dead_fraction``
    (latents dead at the end of training by the ``dead_steps`` rule). ``progress``: each training's tqdm bar."""
    from dataclasses import replace

    from icml_interp.sae.metrics import evaluate_sae, token_batches

    check_type(cfg, "cfg", SAEConfig, "an SAEConfig")
    check_bool(progress, "progress")
    check_type(eval_activations, "eval_activations", torch.Tensor, "a tensor of activations")
    token_batches(eval_activations, None, 1, cfg.d_in, "eval_activations")  # checked before training
    if cfg.architecture not in ("topk", "batchtopk") or cfg.effective_aux_k == 0:
        raise ValueError(
            "cfg must be a topk or batchtopk config with AuxK on (aux_k > 0 and aux_coefficient > 0), got "
            f"architecture={cfg.architecture!r}, aux_k={cfg.effective_aux_k}, aux_coefficient={cfg.aux_coefficient}"
        )
    out = {}
    for label, run_cfg in (("auxk", cfg), ("no_auxk", replace(cfg, aux_coefficient=0.0))):
        sae, log = train_sae(source, run_cfg, progress=progress)
        # the SAE is trained on the CPU: evaluate it there
        metrics = evaluate_sae(sae, eval_activations.cpu())
        out[label] = {**metrics, "train_dead_fraction": log.dead_fraction[-1]}
    return out
