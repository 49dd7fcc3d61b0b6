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
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

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
    """Per-step training record (lists indexed by step) and run totals."""

    step: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    fvu: list[float] = field(default_factory=list)
    l0: list[float] = field(default_factory=list)
    dead_fraction: list[float] = field(default_factory=list)
    aux_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
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
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("TrainLog.plot needs matplotlib: pip install 'icml-interp[plot]'") from None
        fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
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


def _decode_train(sae: SAE, cfg: SAEConfig, x: torch.Tensor):
    """``(x_hat, pre, fired (d_sae,) bool, l0, f_for_penalty)`` for one batch, with autograd."""
    if cfg.architecture == "topk":
        pre = sae.pre_acts(x)  # (B, d_sae)
        values, indices = pre.topk(cfg.k, dim=-1, sorted=False)  # (B, k)
        values = values.relu()
        x_hat = F.embedding_bag(indices, sae.W_dec, per_sample_weights=values, mode="sum") + sae.b_dec
        fired = torch.zeros(cfg.d_sae, dtype=torch.bool)
        fired[indices[values > 0]] = True
        return x_hat, pre, fired, float((values > 0).sum()) / x.shape[0], values
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
    return x_hat, pre, active.any(0), float(active.sum()) / x.shape[0], f


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


def train_sae(source, cfg: SAEConfig, *, progress: bool = True, log_every: int = 1) -> tuple[SAE, TrainLog]:
    """Train an :class:`SAE` on ``source`` (an :class:`ActivationSource` or a tensor of activations).

    Runs ``cfg.steps`` steps of ``cfg.batch_size`` tokens (re-reading a re-iterable source as often as needed;
    a one-shot source ends training early, with a warning). Returns the SAE, in eval mode and in the caller's
    units (see :mod:`icml_interp.sae.model`), and a :class:`TrainLog`.

    Checked: ``cfg`` is valid (re-checked, in case it was edited after construction); ``source``'s
    activations are finite (``ValueError`` otherwise) and the first batches do not all repeat one vector
    (constant activations: ``ValueError``, the FVU loss is undefined); a later batch of identical tokens is
    skipped with a warning; a non-finite loss raises ``ValueError`` (lower ``cfg.lr``). Finite activations
    therefore never give NaN parameters silently.
    """
    check_type(cfg, "cfg", SAEConfig, "an SAEConfig")
    SAEConfig.from_dict(cfg.to_dict())  # __post_init__'s checks, also for a config edited after construction
    check_int(log_every, "log_every", minimum=1)
    check_bool(progress, "progress")
    src = _as_source(source, cfg)
    batches = src.batches(cfg.batch_size, cycle=True)

    # ---- initialization from the first batches (also used for training)
    first: list[torch.Tensor] = []
    try:
        while sum(b.shape[0] for b in first) < min(INIT_TOKENS, cfg.total_tokens):
            first.append(next(batches))
    except StopIteration:
        pass
    if not first:
        raise ValueError(
            f"source yielded fewer than batch_size={cfg.batch_size} tokens: nothing to train on "
            "(an empty source, or lower batch_size)"
        )
    if first[0].shape[1] != cfg.d_in:
        raise ValueError(
            f"the source's activations have width {first[0].shape[1]}, but cfg.d_in = {cfg.d_in} "
            "(activation width mismatch)"
        )
    init = torch.cat(first)
    if not bool(torch.isfinite(init).all()):
        raise ValueError(
            f"source's activations contain NaN or inf (in the first {init.shape[0]} tokens): an SAE trained "
            "on them would have NaN parameters; drop or repair those tokens"
        )
    if _relative_variance(init) <= MIN_RELATIVE_VARIANCE:
        raise ValueError(
            f"source's activations have zero variance: the first {init.shape[0]} tokens are all the same "
            "vector (up to float32 rounding), so there is nothing for an SAE to learn and its FVU loss "
            "(error / variance) is undefined; check the hook point and the inputs (constant activations?), or "
            "shuffle the source if only its beginning is constant"
        )
    sae = SAE(cfg)
    scale = 1.0
    if cfg.normalize_activations == "expected_average_only_in":
        mean_norm = float(init.norm(dim=1).mean())
        if not math.isfinite(mean_norm) or mean_norm == 0:
            raise ValueError(
                f"cannot normalize source's activations: their mean norm is {mean_norm} "
                "(normalize_activations='expected_average_only_in' divides by it); rescale them first"
            )
        scale = math.sqrt(cfg.d_in) / mean_norm
    with torch.no_grad():
        sample = init[:4096] * scale
        if cfg.b_dec_init == "geometric_median":
            sae.b_dec.copy_(geometric_median(sample))
        elif cfg.b_dec_init == "mean":
            sae.b_dec.copy_(sample.mean(0))
    sae.train()

    opt = torch.optim.Adam(sae.parameters(), lr=cfg.effective_lr, betas=(0.9, 0.999))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg))
    since_fired = torch.zeros(cfg.d_sae, dtype=torch.long)
    log = TrainLog(scaling_factor=scale)
    steps = cfg.steps

    def stream():
        yield from first
        yield from batches

    bar = tqdm(total=steps, disable=not progress, desc=f"train {cfg.architecture} SAE", unit="step")
    start = time.perf_counter()
    step = skipped = 0
    for batch in stream():
        if step >= steps:
            break
        if not bool(torch.isfinite(batch).all()):
            raise ValueError(
                f"source's activations contain NaN or inf (in the batch for step {step}): an SAE trained on "
                "them would have NaN parameters; drop or repair those tokens"
            )
        x = batch * scale
        spread = (x - x.mean(0)).pow(2).sum()
        if float(spread) <= MIN_RELATIVE_VARIANCE * float(torch.linalg.vector_norm(x)) ** 2:
            # every token of the batch is the same vector: the FVU would be 0 / 0 or a ratio of rounding errors
            skipped += 1
            if skipped >= steps:
                raise ValueError(
                    f"source yielded {skipped} batches whose batch_size={cfg.batch_size} tokens are all the "
                    "same vector (zero variance, FVU undefined); shuffle the source or raise batch_size"
                )
            continue
        x_hat, pre, fired, l0, f = _decode_train(sae, cfg, x)
        fvu = (x_hat - x).pow(2).sum() / spread
        loss = fvu
        since_fired += 1
        since_fired[fired] = 0
        dead = since_fired >= cfg.dead_steps
        aux = torch.zeros(())
        if cfg.architecture in ("topk", "batchtopk"):
            aux, _ = _aux_loss(sae, cfg, pre, (x - x_hat).detach(), dead, spread.detach())
            loss = loss + cfg.aux_coefficient * aux
        elif cfg.architecture == "relu":
            loss = loss + cfg.l1_coefficient * f.abs().sum(-1).mean() / (spread / x.shape[0]).sqrt()
        else:  # jumprelu
            loss = loss + cfg.l0_coefficient * sae.l0_surrogate(pre)
        if not bool(torch.isfinite(loss.detach())):
            raise ValueError(
                f"training diverged at step {step}: the loss is {float(loss.detach())} on finite activations; "
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
            log.loss.append(float(loss.detach()))
            log.fvu.append(float(fvu.detach()))
            log.l0.append(l0)
            log.dead_fraction.append(float(dead.double().mean()))
            log.aux_loss.append(float(aux.detach()))
            log.lr.append(opt.param_groups[0]["lr"])
        if progress and step % 10 == 0:
            bar.set_postfix(
                fvu=f"{float(fvu.detach()):.3f}", l0=f"{l0:.1f}", dead=f"{float(dead.double().mean()):.3f}"
            )
        bar.update(1)
        step += 1
    bar.close()
    log.seconds = time.perf_counter() - start
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
        out[label] = {**evaluate_sae(sae, eval_activations), "train_dead_fraction": log.dead_fraction[-1]}
    return out
