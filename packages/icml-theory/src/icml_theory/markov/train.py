"""Training the attention-only transformer on a mixture-of-lags chain, with full logging.

:func:`train` runs plain SGD (the time of the gradient-flow ODE is ``lr * steps``) or Adam on fresh samples
of the chain at every step (online) or on a fixed training set (the early-stopping experiment). Every
``log_every`` steps it records the mean training loss since the last record and, with ``full_logging``,
the loss on a held-out evaluation set and the attention mass of each head on each lag there (through the
model's ``blocks.0.attn.hook_pattern``). Only positions whose every lag lies inside the sequence count in
the loss, so the losses compare with the chain's Bayes losses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from icml_theory.markov.chain import MixtureOfLagsChain
from icml_theory.markov.model import AttentionOnlyTransformer, lag_mass
from icml_theory.validation import check_bool, check_choice, check_int, check_real, check_seed

PATTERN = "blocks.0.attn.hook_pattern"


@dataclass
class TrainingLog:
    """What :func:`train` recorded: one row per ``log_every`` steps."""

    steps: np.ndarray  # (n_logs,) the step count at each record
    train_loss: np.ndarray  # (n_logs,) mean training loss (nats) over the steps since the previous record
    eval_loss: np.ndarray | None = None  # (n_logs,) loss on the evaluation set (full logging)
    mass: np.ndarray | None = (
        None  # (n_logs, heads, context) attention mass per head and lag (column j: lag j+1); float32 for a
        # half-precision model
    )
    seconds: float = 0.0
    config: dict = field(default_factory=dict)

    def lag_mass(self, lags) -> np.ndarray:
        """The attention mass on the given lags: ``(n_logs, heads, len(lags))``."""
        if self.mass is None:
            raise ValueError("this log has no attention masses: train with full_logging=True")
        return self.mass[:, :, [lag - 1 for lag in lags]]


def _check_data(data, name: str, chain: MixtureOfLagsChain, context: int) -> torch.Tensor:
    # a tensor is read where it lives (numpy cannot read a CUDA tensor); the checked copy is on the CPU
    x = torch.as_tensor(data if isinstance(data, torch.Tensor) else np.asarray(data), dtype=torch.int64).cpu()
    if x.ndim != 2 or x.shape[1] != context + 1 or x.shape[0] < 1:
        raise ValueError(
            f"{name} must be an integer array of shape (n, context + 1 = {context + 1}), got {tuple(x.shape)}"
        )
    if int(x.min()) < 0 or int(x.max()) >= chain.n_states:
        raise ValueError(f"{name} must hold tokens in [0, {chain.n_states})")
    return x


def _scored(logits: torch.Tensor, sequences: torch.Tensor, order: int) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` (for ``sequences[:, :-1]``) on the tokens at positions >= ``order``."""
    logits = logits[:, order - 1 :]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), sequences[:, order:].reshape(-1)
    )


def sequence_loss(model: AttentionOnlyTransformer, sequences: torch.Tensor, order: int) -> torch.Tensor:
    """Mean cross-entropy (nats) of the predictions of tokens at positions >= ``order``."""
    return _scored(model(sequences[:, :-1]), sequences, order)


def train(
    model: AttentionOnlyTransformer,
    chain: MixtureOfLagsChain,
    steps: int,
    lr: float = 1.0,
    batch_size: int = 64,
    optimizer: str = "sgd",
    log_every: int = 50,
    seed: int = 0,
    train_data=None,
    eval_data=None,
    n_eval: int = 1024,
    full_logging: bool = True,
) -> TrainingLog:
    """Train ``model`` on ``chain`` for ``steps`` steps; see the module docstring."""
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    if not isinstance(chain, MixtureOfLagsChain):
        raise TypeError(f"chain must be a MixtureOfLagsChain, got {type(chain).__name__}")
    if model.n_states != chain.n_states:
        raise ValueError(f"model.n_states ({model.n_states}) must equal chain.n_states ({chain.n_states})")
    if model.context <= chain.order - 1:
        raise ValueError(
            f"model.context ({model.context}) must exceed the chain's order - 1 ({chain.order - 1})"
        )
    steps = check_int(steps, "steps", minimum=1)
    lr = check_real(lr, "lr", "(0, inf)")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    check_choice(optimizer, "optimizer", ("sgd", "adam"))
    log_every = check_int(log_every, "log_every", minimum=1)
    rng = np.random.default_rng(check_seed(seed))
    full_logging = check_bool(full_logging, "full_logging")
    length = model.context + 1
    device = model.attn.W_Q.device  # batches and the evaluation set go to the model's device
    fixed = None if train_data is None else _check_data(train_data, "train_data", chain, model.context)
    fixed = None if fixed is None else fixed.to(device)
    evaluation = None
    if full_logging:
        if eval_data is None:
            eval_data = chain.sample(check_int(n_eval, "n_eval", minimum=1), length, rng)
        evaluation = _check_data(eval_data, "eval_data", chain, model.context).to(device)
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=lr)
    records: dict[str, list] = {"steps": [], "train": [], "eval": [], "mass": []}
    pool, used, running, count = None, 0, 0.0, 0
    start = time.perf_counter()
    for step in range(1, steps + 1):
        if fixed is not None:
            batch = fixed[torch.as_tensor(rng.integers(0, fixed.shape[0], size=batch_size), device=device)]
        else:
            if pool is None or used + batch_size > pool.shape[0]:
                pool, used = torch.as_tensor(chain.sample(batch_size * 256, length, rng), device=device), 0
            batch, used = pool[used : used + batch_size], used + batch_size
        loss = sequence_loss(model, batch, chain.order)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running, count = running + float(loss.detach()), count + 1
        if step % log_every == 0 or step == steps:
            records["steps"].append(step)
            records["train"].append(running / count)
            running, count = 0.0, 0
            if evaluation is not None:
                with torch.no_grad():
                    logits, cache = model.run_with_cache(evaluation[:, :-1], PATTERN)
                    records["eval"].append(float(_scored(logits, evaluation, chain.order)))
                    mass = lag_mass(cache[PATTERN], chain.order - 1)
                    # numpy has no bfloat16: half-precision masses are logged in float32
                    wide = torch.promote_types(mass.dtype, torch.float32)
                    records["mass"].append(mass.to(wide).cpu().numpy())
    seconds = time.perf_counter() - start
    config = {
        "steps": steps, "lr": lr, "batch_size": batch_size, "optimizer": optimizer, "log_every": log_every,
        "seed": seed, "heads": model.heads, "context": model.context, "init_scale": model.init_scale,
        "fixed_train_set": None if fixed is None else int(fixed.shape[0]),
    }  # fmt: skip
    return TrainingLog(
        steps=np.asarray(records["steps"]),
        train_loss=np.asarray(records["train"]),
        eval_loss=np.asarray(records["eval"]) if full_logging else None,
        mass=np.stack(records["mass"]) if full_logging else None,
        seconds=seconds,
        config=config,
    )
