"""Training and evaluation of a :class:`~icml_theory.recursive.model.RecursiveModel`: TRM's deep supervision with
the halting head, DIS's corruption-path targets, the stablemax loss, fixed-step inference and evaluations
counted per example.

TRM (``method="trm"``), per batch, as in the paper's pseudo-code: up to ``supervision_steps`` steps, each an
optimizer update of ``CE(logits, solution) + 0.5 * BCE(q, prediction exactly right)``; an example halts when its
halting logit is positive, after a minimum number of steps that is 1, or with probability ``halt_exploration``
uniform in ``[2, supervision_steps]``. Halted examples leave the batch (the official code refills its batch
carry with new examples instead; the updates each example receives are the same).

DIS (``method="dis"``): every step is supervised toward the next frame of a corruption path from the input to
the solution (:func:`corruption_path`); its input is the model's own previous prediction (the puzzle at the
first step) plus a timestep embedding; always ``supervision_steps`` steps, the halting head unused.

DIS with guidance (``method="dis-cfg"``, our reading of the paper's classifier-free-guidance / policy-improvement
view, whose text we did not have): each step runs a reference pass (mode 0), trained toward the previous frame,
and a conditional pass (mode 1), trained toward the next frame; predictions use the guided logits
``l_ref + w * (l_cond - l_ref)`` with ``w = config.guidance``, so the update follows the advantage
``l_cond - l_ref`` of the improved target over the current one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from icml_theory.recursive.model import Carry, RecursiveModel, count_evaluations
from icml_theory.validation import (
    check_choice,
    check_int,
    check_real,
    check_seed,
    refuse_float16_for_adam,
)


def check_tokens(value, name: str, vocab_size: int, seq_len: int) -> torch.Tensor:
    """An integer tensor or array of shape (batch, seq_len), batch >= 1, every entry in ``[0, vocab_size)``."""
    if isinstance(value, np.ndarray):
        if not np.issubdtype(value.dtype, np.integer):
            raise TypeError(f"{name} must hold integer tokens, got dtype {value.dtype}")
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array of tokens, got {type(value).__name__}")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer tokens, got a {value.dtype} tensor")
    if value.ndim != 2 or value.shape[0] == 0 or value.shape[1] != seq_len:
        raise ValueError(f"{name} must have shape (batch >= 1, {seq_len}), got {tuple(value.shape)}")
    if value.numel() and (int(value.min()) < 0 or int(value.max()) >= vocab_size):
        raise ValueError(
            f"{name} must hold tokens in [0, {vocab_size}), got values in [{int(value.min())}, {int(value.max())}]"
        )
    return value.long()


def _check_pair(model: RecursiveModel, inputs, labels) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(model, RecursiveModel):
        raise TypeError(f"model must be a RecursiveModel, got {type(model).__name__}")
    cfg = model.config
    device = next(model.parameters()).device
    x = check_tokens(inputs, "inputs", cfg.vocab_size, cfg.seq_len).to(device)
    y = check_tokens(labels, "labels", cfg.vocab_size, cfg.seq_len).to(device)
    if y.shape != x.shape:
        raise ValueError(f"labels must have the shape of inputs {tuple(x.shape)}, got {tuple(y.shape)}")
    return x, y


def _check_logits(logits, labels) -> None:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating torch.Tensor (..., vocab), got {type(logits).__name__}")
    if logits.ndim < 2 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have shape (..., vocab), got {tuple(logits.shape)}")
    if not torch.isfinite(logits.detach()).all():
        raise ValueError("logits must be finite, got NaN or inf")
    if (
        not isinstance(labels, torch.Tensor)
        or labels.is_floating_point()
        or labels.is_complex()
        or labels.dtype == torch.bool
    ):
        raise TypeError(
            f"labels must be an integer torch.Tensor, got {getattr(labels, 'dtype', type(labels).__name__)}"
        )
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels must have shape {tuple(logits.shape[:-1])} (logits without vocab), got {tuple(labels.shape)}"
        )
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= logits.shape[-1]):
        raise ValueError(
            f"labels must be in [0, {logits.shape[-1]}), got values in [{int(labels.min())}, {int(labels.max())}]"
        )


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy under stablemax, ``p_i = s(l_i) / sum_j s(l_j)`` with ``s(l) = l + 1`` for ``l >= 0`` and
    ``1 / (1 - l)`` below (TRM's loss; no exponentials, so no softmax collapse). Per position, float64."""
    _check_logits(logits, labels)
    return _stablemax(logits, labels)


def _stablemax(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    z = logits.double()
    s = torch.where(z >= 0, z + 1, 1 / (1 - z.clamp_max(0)))
    s = s / s.amax(-1, keepdim=True)  # the ratio is unchanged; the sum cannot overflow
    log_p = torch.log(s) - torch.log(s.sum(-1, keepdim=True))
    return -log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor, kind: str = "softmax") -> torch.Tensor:
    """Mean cross-entropy over the positions of each sequence, (batch,): ``kind`` ``"softmax"`` or ``"stablemax"``."""
    check_choice(kind, "kind", ("softmax", "stablemax"))
    _check_logits(logits, labels)
    if logits.ndim != 3:
        raise ValueError(f"logits must have shape (batch, seq_len, vocab), got {tuple(logits.shape)}")
    return _sequence_loss(logits, labels, kind)


def _sequence_loss(logits: torch.Tensor, labels: torch.Tensor, kind: str) -> torch.Tensor:
    """:func:`sequence_loss` without the checks (training's own logits; a non-finite loss raises in the update)."""
    if kind == "stablemax":
        per = _stablemax(logits, labels).to(logits.dtype)
    else:
        per = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    return per.mean(-1)


def corruption_path(start, end, steps: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Frames from ``start`` to ``end`` (token tensors of equal shape (batch, seq_len)): (batch, steps + 1, seq_len).

    The positions where the two differ are ranked at random per example; frame ``s`` takes ``end``'s token at the
    first ``floor(s * n_diff / steps)`` of them and ``start``'s elsewhere. Frame 0 is ``start``, frame ``steps``
    is ``end``, and the Hamming distance to ``end`` never increases along the path.
    """
    steps = check_int(steps, "steps", 1)
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.is_complex():
            raise TypeError(
                f"{name} must be an integer torch.Tensor of tokens, got {getattr(value, 'dtype', type(value).__name__)}"
            )
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if start.shape != end.shape or start.ndim != 2:
        raise ValueError(
            f"start and end must have the same shape (batch, seq_len), got {tuple(start.shape)} and {tuple(end.shape)}"
        )
    diff = start != end
    noise = torch.rand(start.shape, generator=generator).to(start.device)
    # rank of each differing position in a random order (non-differing positions sort last)
    order = torch.where(diff, noise, torch.full_like(noise, 2.0)).argsort(-1)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(start.shape[1], device=start.device).expand_as(order))
    n_diff = diff.sum(-1, keepdim=True)
    frames = [start]
    for s in range(1, steps + 1):
        take = diff & (rank < torch.div(s * n_diff, steps, rounding_mode="floor"))
        frames.append(torch.where(take, end, start))
    return torch.stack(frames, 1)


@dataclass
class BatchResult:
    """One training batch: mean loss over the updates, supervision steps taken per example (mean), network
    evaluations per example, and the exact accuracy of the batch's final predictions."""

    loss: float
    steps: float
    evaluations: float
    exact: float


class RecursiveTrainer:
    """Deep-supervision training of a :class:`RecursiveModel` with AdamW (plain torch: runs on CPU).

    Defaults follow DIS's official optimizer (lr 1e-4, weight decay 0.1, betas (0.9, 0.95)) except the
    learning rate, which small models on CPU budgets want higher; ``q_weight`` weighs TRM's halting loss.
    A model with float16 trainable parameters is refused (ValueError): AdamW's ``eps`` (1e-8) rounds to 0 in
    float16 and the first update turns weights to NaN; train in bfloat16, or in float32 under
    ``torch.autocast`` for float16 compute. ``fit`` and ``train_batch`` leave the model in train mode, as torch
    training loops do; :func:`predict` and :func:`evaluate` put back the mode they found.
    """

    def __init__(
        self,
        model: RecursiveModel,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        q_weight: float = 0.5,
        seed: int = 0,
    ) -> None:
        if not isinstance(model, RecursiveModel):
            raise TypeError(f"model must be a RecursiveModel, got {type(model).__name__}")
        refuse_float16_for_adam(model.parameters(), "AdamW")
        self.model = model
        self.q_weight = check_real(q_weight, "q_weight", "[0, inf)")
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise TypeError(f"betas must be a pair of numbers in [0, 1), got {betas!r}")
        betas = (check_real(betas[0], "betas", "[0, 1)"), check_real(betas[1], "betas", "[0, 1)"))
        self.optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=check_real(lr, "lr", "(0, inf)"),
            weight_decay=check_real(weight_decay, "weight_decay", "[0, inf)"),
            betas=betas,
        )
        self.generator = torch.Generator().manual_seed(check_seed(seed))

    def _update(self, loss: torch.Tensor) -> float:
        if not torch.isfinite(loss.detach()):  # diverged: refuse before the weights take the step
            raise ValueError(
                f"the training loss is not finite ({float(loss.detach())}); lower lr (now {self.optimizer.param_groups[0]['lr']:g})"
            )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return float(loss.detach())

    def train_batch(self, inputs, labels) -> BatchResult:
        """One batch through deep supervision (see the module docstring): one optimizer update per step."""
        x, y = _check_pair(self.model, inputs, labels)
        self.model.train()
        with count_evaluations(self.model) as counter:
            if self.model.config.method == "trm":
                losses, steps, exact = self._trm(x, y)
            else:
                losses, steps, exact = self._dis(x, y)
        return BatchResult(float(np.mean(losses)), steps, counter.per_example(len(x)), exact)

    def _trm(self, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], float, float]:
        cfg, model = self.model.config, self.model
        n = len(x)
        explore = torch.rand(n, generator=self.generator) < cfg.halt_exploration
        low = min(2, cfg.supervision_steps)
        random_min = torch.randint(low, cfg.supervision_steps + 1, (n,), generator=self.generator)
        min_steps = torch.where(explore, random_min, torch.ones_like(random_min)).to(x.device)
        active = torch.arange(n, device=x.device)
        carry = model.initial_carry(n)
        losses, taken, correct_at_halt = [], torch.zeros(n), torch.zeros(n, dtype=torch.bool)
        for step in range(cfg.supervision_steps):
            carry, logits, q = model(x[active], carry)
            correct = (logits.argmax(-1) == y[active]).all(-1)
            bce = F.binary_cross_entropy_with_logits(q, correct.to(q.dtype), reduction="none")
            loss = (_sequence_loss(logits, y[active], cfg.loss) + self.q_weight * bce).mean()
            losses.append(self._update(loss))
            halt = (q.detach() > 0) & (step + 1 >= min_steps[active])
            if step == cfg.supervision_steps - 1:
                halt = torch.ones_like(halt)
            taken[active[halt].cpu()] = step + 1
            correct_at_halt[active[halt].cpu()] = correct[halt].cpu()
            keep = ~halt
            active = active[keep]
            carry = (carry[0][keep], carry[1][keep])
            if len(active) == 0:
                break
        return losses, float(taken.mean()), float(correct_at_halt.float().mean())

    def _dis(self, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], float, float]:
        cfg, model = self.model.config, self.model
        path = corruption_path(x, y, cfg.supervision_steps, self.generator)
        tokens, carry, losses = x, model.initial_carry(len(x)), []
        cfg_mode = cfg.method == "dis-cfg"
        for step in range(cfg.supervision_steps):
            new_carry, logits, _ = model(tokens, carry, step, 1 if cfg_mode else None)
            loss = _sequence_loss(logits, path[:, step + 1], cfg.loss).mean()
            if cfg_mode:
                _, reference, _ = model(tokens, carry, step, 0)
                loss = loss + _sequence_loss(reference, path[:, step], cfg.loss).mean()
                logits = reference + cfg.guidance * (logits - reference)
            losses.append(self._update(loss))
            tokens, carry = logits.detach().argmax(-1), new_carry
        return losses, float(cfg.supervision_steps), float((tokens == y).all(-1).float().mean())

    def fit(self, inputs, labels, epochs: int = 1, batch_size: int = 64, augment=None) -> list[BatchResult]:
        """``epochs`` shuffled passes in batches of ``batch_size``; ``augment(inputs, labels, generator)`` (optional)
        maps each batch to an equivalent one (e.g. a Sudoku symmetry) before training on it."""
        x, y = _check_pair(self.model, inputs, labels)
        epochs = check_int(epochs, "epochs", 1)
        batch_size = check_int(batch_size, "batch_size", 1)
        if augment is not None and not callable(augment):
            raise TypeError(f"augment must be callable or None, got {type(augment).__name__}")
        history = []
        for _ in range(epochs):
            for idx in torch.randperm(len(x), generator=self.generator).split(batch_size):
                bx, by = x[idx.to(x.device)], y[idx.to(x.device)]
                if augment is not None:
                    bx, by = augment(bx, by, self.generator)
                history.append(self.train_batch(bx, by))
        return history


@torch.no_grad()
def predict(model: RecursiveModel, inputs, steps: int | None = None, batch_size: int = 256) -> torch.Tensor:
    """Fixed-step inference: the prediction after each of the first ``steps`` supervision steps (default all,
    no halting), as a (steps, batch, seq_len) tensor of tokens."""
    if not isinstance(model, RecursiveModel):
        raise TypeError(f"model must be a RecursiveModel, got {type(model).__name__}")
    cfg = model.config
    x = check_tokens(inputs, "inputs", cfg.vocab_size, cfg.seq_len).to(next(model.parameters()).device)
    steps = cfg.supervision_steps if steps is None else check_int(steps, "steps", 1, cfg.supervision_steps)
    batch_size = check_int(batch_size, "batch_size", 1)
    was_training = model.training
    model.eval()
    try:
        out = [_predict_batch(model, chunk, steps) for chunk in x.split(batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(out, 1)


def _predict_batch(model: RecursiveModel, x: torch.Tensor, steps: int) -> torch.Tensor:
    cfg = model.config
    carry: Carry = model.initial_carry(len(x))
    tokens, preds = x, []
    for step in range(steps):
        if cfg.method == "trm":
            carry, logits, _ = model(x, carry)
        elif cfg.method == "dis":
            carry, logits, _ = model(tokens, carry, step)
        else:
            new_carry, cond, _ = model(tokens, carry, step, 1)
            _, reference, _ = model(tokens, carry, step, 0)
            carry, logits = new_carry, reference + cfg.guidance * (cond - reference)
        tokens = logits.argmax(-1)
        preds.append(tokens)
    return torch.stack(preds)


@dataclass
class Evaluation:
    """Exact accuracy (whole sequence right) and token accuracy after each supervision step, with the network
    evaluations per example spent up to that step (counted by the hook, not computed from the config)."""

    exact: list[float]
    token: list[float]
    evaluations: list[float]

    def at_budget(self, evaluations: float) -> float | None:
        """Exact accuracy of the last step whose cumulative evaluations fit ``evaluations`` (None if none fits):
        the compute-matched comparison of two schedules."""
        budget = check_real(evaluations, "evaluations", "[0, inf]")
        fits = [a for a, e in zip(self.exact, self.evaluations, strict=True) if e <= budget]
        return fits[-1] if fits else None


def evaluate(
    model: RecursiveModel, inputs, labels, steps: int | None = None, batch_size: int = 256
) -> Evaluation:
    """Fixed-step evaluation of ``model`` on ``(inputs, labels)``: accuracies after every step up to ``steps``."""
    x, y = _check_pair(model, inputs, labels)
    with count_evaluations(model) as counter:
        preds = predict(model, x, steps, batch_size)
    per_step = counter.per_example(len(x)) / len(preds)
    right = preds == y
    return Evaluation(
        exact=right.all(-1).float().mean(-1).tolist(),
        token=right.float().mean((-1, -2)).tolist(),
        evaluations=[per_step * (s + 1) for s in range(len(preds))],
    )
